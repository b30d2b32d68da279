"""Name rules, pure: portable names (02 §7.3), portable aliases (01 §3), display escaping (05 §3).

Every reader and writer of the project asks these functions; no other module spells a name rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

PORTABLE_ALIAS_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")

_FORBIDDEN_CHARS = frozenset('/\\:<>"|?*')
_SUPERSCRIPT_DIGITS = "¹²³"
_RESERVED_DEVICE_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{stem}{digit}" for stem in ("COM", "LPT") for digit in "0123456789" + _SUPERSCRIPT_DIGITS}
)
_BIDI_CONTROLS = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))


# C0, DEL and C1: one compiled class, because readers test a million names in a big tree
CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f]")


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return code <= 0x1F or 0x7F <= code <= 0x9F


def has_control_chars(name: str) -> bool:
    """True when ``name`` holds a C0, DEL or C1 control character."""
    return CONTROL_CHARS.search(name) is not None


def is_text(value: str) -> bool:
    """Whether UTF-8 can encode ``value``: it holds no lone surrogate, which is how Python hands
    over the bytes of an argument or an environment variable that are not UTF-8 (and what a
    JSON ``\\ud800`` escape makes)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode_name(raw: bytes) -> str | None:
    """The name as text when it is valid UTF-8 without control characters, else None.

    Such names cannot be written into a manifest, ``checksums.xxh3`` or JSON
    (02 §7.2 ``bad_names``).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if has_control_chars(text) else text


def non_portable_reason(name: str) -> str | None:
    """Why ``name`` is not a portable file name (02 §7.3), or None when it is portable."""
    encoded = name.encode("utf-8", "surrogatepass")
    if not 1 <= len(encoded) <= 255:
        return "must be 1 to 255 bytes of UTF-8"
    if name in (".", ".."):
        return "is . or .."
    if has_control_chars(name):
        return "contains a control character"
    bad = sorted(_FORBIDDEN_CHARS.intersection(name))
    if bad:
        return f"contains {' '.join(bad)}"
    if name != name.strip(" "):
        return "has a leading or trailing space"
    if name.endswith("."):
        return "ends with a dot"
    stem = name.split(".", 1)[0]
    if stem.upper() in _RESERVED_DEVICE_NAMES:
        return f"{stem} is a reserved Windows device name"
    return None


# Names this plain pass every rule but the reserved stems at a regex's cost: readers ask for
# every one of a million names in a big tree (06 P3).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,60}(?:\.[A-Za-z0-9_-]{1,60}){0,3}")  # <= 243 bytes


def is_portable_name(name: str) -> bool:
    """True when ``name`` is a portable file name (02 §7.3)."""
    if _PLAIN_NAME.fullmatch(name):
        return name.split(".", 1)[0].upper() not in _RESERVED_DEVICE_NAMES
    return non_portable_reason(name) is None


def non_portable_alias_reason(alias: str) -> str | None:
    """Why ``alias`` is not a portable alias (01 §3), or None when it is one.

    A portable alias matches :data:`PORTABLE_ALIAS_RE` and is a portable name, so it is never a
    reserved Windows device name in any case (``con``, ``NUL``, ``Lpt1``): such an alias matches
    the pattern but would name a device, not a folder, on Windows.
    """
    if PORTABLE_ALIAS_RE.fullmatch(alias) is None:
        return f"must match {PORTABLE_ALIAS_RE.pattern}"
    return non_portable_reason(alias)


def is_portable_alias(alias: str) -> bool:
    """True when an alias may become a folder name anywhere (01 §3)."""
    return non_portable_alias_reason(alias) is None


_SKILL_ALIAS_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def non_portable_skill_alias_reason(alias: str) -> str | None:
    """Why a skill-bundle alias cannot travel with its content (:func:`is_portable_skill_alias`),
    or None when it can."""
    if is_portable_skill_alias(alias):
        return None
    if ".." in alias and alias != "..":
        return "holds .."
    return non_portable_reason(alias) or f"must match {_SKILL_ALIAS_RE.pattern}"


def is_portable_skill_alias(alias: str) -> bool:
    """True when a skill-bundle alias may travel with its content (its folder name).

    As ZeroClaw's exporter decides it: a ``.`` inside is ordinary (``research.tools``), but the
    alias must still be a portable folder name, so a Windows device name (``con``) or a trailing
    dot (``notes.``) is not, and neither is anything holding ``..``, a slash or a backslash.
    Such an alias stays in the config without content (reported ``host_specific``).
    """
    return (
        _SKILL_ALIAS_RE.fullmatch(alias) is not None
        and ".." not in alias
        and is_portable_name(alias)
    )


def safe_relative_path(path: str) -> str | None:
    """The normalised form of a relative ``/``-separated path of portable components, else None.

    ``.`` components are dropped; ``..``, an absolute path, a backslash or an empty result is
    refused. Used for identity paths (02 §7.3) and for every path read from a bundle or zip.
    """
    if not path or path.startswith("/") or "\\" in path:
        return None
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or any(part == ".." or not is_portable_name(part) for part in parts):
        return None
    return "/".join(parts)


def escape_display(text: str) -> str:
    """``text`` with control and bidirectional characters escaped, safe to print (05 §3)."""
    out: list[str] = []
    for ch in text:
        code = ord(ch)
        if _is_control(ch):
            out.append(f"\\x{code:02x}")
        elif code in _BIDI_CONTROLS:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean X?"`` for the candidate closest to a mistyped ``word`` (difflib's
    ratio of at least 0.6), or ``""`` when none is close; ``X`` is escaped for display.

    Only names the user could have meant are passed in (aliases of the install, paths of the
    schema or the config, a bundle's required secret paths), never values.
    """
    import difflib  # only for a mistyped name: no start-up pays for it

    close = difflib.get_close_matches(word, [c for c in candidates if c != word], n=1)
    return f"; did you mean {escape_display(close[0])}?" if close else ""
