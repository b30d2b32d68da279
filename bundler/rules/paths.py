"""Config paths (01 §6), written the way ZeroClaw writes them and its ``config set`` reads them.

* Segments are joined by ``.``; a segment that is not ``[A-Za-z0-9_-]+`` is written as a TOML
  basic string (``skill_bundles."research tools"``).
* A list position is written ``[N]`` (``fallback[0]``), as ZeroClaw does. ``.N`` is still read,
  because users type it.
* The key of a map whose values are plain values (a secret map such as ``extra_headers``, or
  ``pricing``) is the whole rest of the path, written raw: ``extra_headers.X-Org.Id``.
  ZeroClaw's ``config set`` has no quoting; it strips the map's own path and takes what is left
  as the key, so this is the only form of a dotted key that pastes into it. The quoted form
  bundler wrote before (``extra_headers."X-Org.Id"``) is still read: a rest that starts with
  ``"`` is read as quoted segments. A key that itself starts with ``"``, is empty or holds a
  control character is written quoted, so that every path reads back as itself and prints on
  one line.

Which segment is a list position or such a key is the config schema's to say, so both
directions walk it alongside the path (``config=False`` for a document without a schema, such as
``agent.yaml``: there only ``int`` segments are positions). Mapping ``-`` to ``_`` in field names
stays the schema's job (:func:`bundler.rules.schema.resolve`).
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bundler.errors import UsageError
from bundler.rules import schema

Segment = str | int
"""A path segment: a name or key, or (``int``) a list position."""

_BARE_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_POSITION = re.compile(r"\[([0-9]+)\]")
_DIGITS = re.compile(r"[0-9]+")
_ESCAPES = {'"': '"', "\\": "\\", "b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_ESCAPE_OUT = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def format_segment(segment: str) -> str:
    """One segment as a TOML key: bare when it can be, else a basic string."""
    if _BARE_SEGMENT.fullmatch(segment):
        return segment
    return _quoted(segment)


def _quoted(segment: str) -> str:
    out = ['"']
    for ch in segment:
        if ch in _ESCAPE_OUT:
            out.append(_ESCAPE_OUT[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _raw_key_ok(key: str) -> bool:
    """A value-map key that can be written raw and still reads back as itself."""
    return (
        key != ""
        and not key.startswith('"')
        and all(ord(ch) >= 0x20 and ord(ch) != 0x7F for ch in key)
    )


def _root(config: bool) -> schema.Node | None:
    return schema.config_schema() if config else None


def _below(node: schema.Node | None, segment: str) -> schema.Node | None:
    return schema.child(node, schema.field_name(node, segment))


def format_path(segments: Sequence[Segment], *, config: bool = True) -> str:
    """The config path naming ``segments`` (see the module's rules); :func:`parse_path` reverses
    it exactly for ``str`` segments."""
    node = _root(config)
    out: list[str] = []
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        if isinstance(segment, int) or (
            schema.is_position_list(node) and _DIGITS.fullmatch(segment)
        ):
            out.append(f"[{segment}]")
        else:
            if out:
                out.append(".")
            if schema.is_value_map(node):
                # the rest is the key: raw when it ends the path, else quoted so it stops
                raw = index == last and _raw_key_ok(segment)
                out.append(segment if raw else _quoted(segment))
            else:
                out.append(format_segment(segment))
        node = _below(node, str(segment))
    return "".join(out)


def parse_path(path: str, *, config: bool = True) -> list[str]:
    """Split a config path into its segments (a position ``[N]`` or ``.N`` is the segment
    ``"N"``); see the module's rules.

    Raises :class:`UsageError` naming the path when it is malformed.
    """
    node = _root(config)
    segments: list[str] = []
    i, n = 0, len(path)
    while True:
        if i < n and path[i] != '"' and schema.is_value_map(node):
            segments.append(path[i:])  # ZeroClaw's rule: the rest of the path is the key
            return segments
        if i < n and path[i] == '"':
            segment, i = _parse_quoted(path, i)
        else:
            match = _BARE_SEGMENT.match(path, i)
            if match is None:
                raise UsageError(f"bad config path {format_segment(path)}: expected a name at {i}")
            segment, i = match.group(), match.end()
        segments.append(segment)
        node = _below(node, segment)
        while position := _POSITION.match(path, i):
            if node is not None and not schema.is_position_list(node):
                raise UsageError(
                    f"bad config path {format_segment(path)}: {format_segment(path[:i])} "
                    "has no positions [N] (its entries are addressed by name)"
                )
            segments.append(position.group(1))
            node = _below(node, position.group(1))
            i = position.end()
        if i == n:
            return segments
        if path[i] != ".":
            raise UsageError(f"bad config path {format_segment(path)}: expected . at {i}")
        i += 1


def _parse_quoted(path: str, start: int) -> tuple[str, int]:
    out: list[str] = []
    i = start + 1
    while i < len(path):
        ch = path[i]
        if ch == '"':
            return "".join(out), i + 1
        if ch == "\\":
            code = path[i + 1 : i + 2]
            if code in _ESCAPES:
                out.append(_ESCAPES[code])
                i += 2
                continue
            width = {"u": 4, "U": 8}.get(code)
            digits = path[i + 2 : i + 2 + width] if width else ""
            if (
                width
                and len(digits) == width
                and all(c in "0123456789abcdefABCDEF" for c in digits)
            ):
                try:
                    out.append(chr(int(digits, 16)))
                except ValueError:
                    pass
                else:
                    i += 2 + width
                    continue
            raise UsageError(f"bad config path: bad escape in quoted segment at {i}")
        out.append(ch)
        i += 1
    raise UsageError("bad config path: unterminated quoted segment")
