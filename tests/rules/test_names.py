"""The portable-name rule (02 §7.3), portable aliases (01 §3) and display escaping (05 §3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundler.rules.names import (
    decode_name,
    escape_display,
    is_portable_alias,
    is_portable_name,
    non_portable_alias_reason,
    non_portable_reason,
    safe_relative_path,
)


@pytest.mark.parametrize(
    "name",
    ["notes.md", "persona", "a b", "日本語.txt", "x" * 255, ".hidden", "COM10", "conx", "com"],
)
def test_portable_names_are_accepted(name: str) -> None:
    assert is_portable_name(name), non_portable_reason(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "a/b",
        "a\\b",
        "a:b",
        "a<b",
        "a>b",
        'a"b',
        "a|b",
        "a?b",
        "a*b",
        " lead",
        "trail ",
        "dot.",
        "tab\tname",
        "nl\nname",
        "del\x7f",
        "c1\x85",
        "é" * 128,  # 256 bytes of UTF-8
    ],
)
def test_non_portable_names_are_refused(name: str) -> None:
    assert not is_portable_name(name)


@pytest.mark.parametrize(
    "stem",
    [
        "CON",
        "con",
        "Prn",
        "aux",
        "NUL",
        "CONIN$",
        "conout$",
        "COM0",
        "com9",
        "LPT1",
        "lpt9",
        "COM¹",
        "LPT²",
        "com³",
    ],
)
def test_reserved_windows_device_names_are_refused_with_any_extension(stem: str) -> None:
    assert not is_portable_name(stem)
    assert not is_portable_name(f"{stem}.txt")
    assert not is_portable_name(f"{stem}.tar.gz")


def test_reserved_name_rule_looks_only_before_the_first_dot() -> None:
    assert is_portable_name("notes.con")
    assert is_portable_name("console.txt")


@pytest.mark.parametrize("alias", ["researcher", "a", "_x", "9lives", "a-b_c", "x" * 64])
def test_portable_aliases(alias: str) -> None:
    assert is_portable_alias(alias)


@pytest.mark.parametrize("alias", ["", "-lead", "a.b", "a b", "x" * 65, "con", "LPT1", "é"])
def test_non_portable_aliases(alias: str) -> None:
    assert not is_portable_alias(alias)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("persona/aieos.json", "persona/aieos.json"),
        ("./persona//aieos.json", "persona/aieos.json"),
        ("/etc/passwd", None),
        ("../x", None),
        ("a/../b", None),
        ("a\\b", None),
        ("con/x.json", None),
        ("", None),
        (".", None),
    ],
)
def test_safe_relative_path(path: str, expected: str | None) -> None:
    assert safe_relative_path(path) == expected


def test_decode_name_refuses_invalid_utf8_and_control_characters() -> None:
    assert decode_name(b"ok.txt") == "ok.txt"
    assert decode_name(b"\xff\xfe") is None
    assert decode_name(b"bell\x07") is None


def test_escape_display_escapes_c0_del_c1_and_bidi_controls() -> None:
    assert escape_display("a\x1bb\x7fc\x9bd") == "a\\x1bb\\x7fc\\x9bd"
    assert escape_display("evil\u202egnp.exe") == "evil\\u202egnp.exe"
    assert escape_display("\u2066x\u2069") == "\\u2066x\\u2069"
    assert escape_display("plain ü") == "plain ü"


@given(st.text())
def test_escaped_text_holds_no_control_or_bidi_character(text: str) -> None:
    escaped = escape_display(text)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in escaped)
    assert not any(0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069 for c in escaped)


@given(st.text(min_size=1))
def test_a_portable_name_never_holds_a_separator_or_control(name: str) -> None:
    if is_portable_name(name):
        assert "/" not in name and "\\" not in name and name not in (".", "..")
        assert decode_name(name.encode("utf-8", "surrogatepass")) == name


_STEMS = st.sampled_from(["con", "CON", "Com1", "lpt9", "nul", "aux", "prn", "conx", "com", "-"])
_PLAIN_PARTS = st.one_of(_STEMS, st.text("aZ09_-", min_size=1, max_size=62))


@given(st.lists(_PLAIN_PARTS, min_size=1, max_size=5).map(".".join))
def test_plain_name_shortcut_agrees_with_the_full_rule(name: str) -> None:
    # is_portable_name skips the full rule for plain ASCII names; the reserved stems still count
    assert is_portable_name(name) == (non_portable_reason(name) is None)


# --- the portable-alias rule, exhaustively (01 §3, 02 §7.3) -----------------------------------

# The spec's list, spelled out here independently of names.py
_SPEC_RESERVED = {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"} | {
    f"{stem}{digit}" for stem in ("COM", "LPT") for digit in "0123456789¹²³"
}
_ALIAS_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"


def _spec_says_portable_alias(alias: str) -> bool:
    import re

    return (
        re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}", alias) is not None
        and alias.upper() not in _SPEC_RESERVED
    )


def _any_case(draw: st.DrawFn, word: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(ch.upper() if flip else ch.lower() for ch, flip in zip(word, flips, strict=True))


@st.composite
def _reserved_in_any_case(draw: st.DrawFn) -> str:
    return _any_case(draw, draw(st.sampled_from(sorted(_SPEC_RESERVED))))


@pytest.mark.parametrize(
    "alias", ["con", "nul", "lpt1", "CON", "Nul", "lPt1", "aux", "prn", "com0", "LPT9"]
)
def test_reserved_windows_device_names_are_not_portable_aliases(alias: str) -> None:
    assert not is_portable_alias(alias)
    assert non_portable_alias_reason(alias) == f"{alias} is a reserved Windows device name"


@given(_reserved_in_any_case())
def test_a_reserved_device_name_in_any_case_is_never_a_portable_alias(alias: str) -> None:
    assert not is_portable_alias(alias)
    assert not is_portable_name(alias)
    assert non_portable_alias_reason(alias) is not None


@given(_reserved_in_any_case(), st.text(alphabet=_ALIAS_CHARS + ".", min_size=1, max_size=10))
def test_a_reserved_device_name_with_any_extension_is_never_a_portable_name(
    stem: str, ext: str
) -> None:
    assert not is_portable_name(f"{stem}.{ext}")
    assert not is_portable_alias(f"{stem}.{ext}")


@given(_reserved_in_any_case(), st.text(alphabet=_ALIAS_CHARS, min_size=1, max_size=8))
def test_a_reserved_name_is_only_reserved_as_the_whole_stem(stem: str, tail: str) -> None:
    longer = stem + tail
    assert is_portable_alias(longer) == _spec_says_portable_alias(longer)


@given(st.text(alphabet=_ALIAS_CHARS, min_size=0, max_size=70))
def test_portable_alias_rule_matches_the_spec_over_alias_characters(alias: str) -> None:
    assert is_portable_alias(alias) == _spec_says_portable_alias(alias)
    assert (non_portable_alias_reason(alias) is None) == is_portable_alias(alias)


@given(st.text(max_size=70))
def test_portable_alias_rule_matches_the_spec_over_any_text(alias: str) -> None:
    assert is_portable_alias(alias) == _spec_says_portable_alias(alias)


@given(st.text(alphabet=_ALIAS_CHARS, min_size=1, max_size=64))
def test_every_portable_alias_is_a_portable_name(alias: str) -> None:
    if is_portable_alias(alias):
        assert is_portable_name(alias)


def test_every_short_alias_over_a_reduced_alphabet_follows_the_spec() -> None:
    """Every string of up to 4 characters over the letters of the reserved names, and more."""
    import itertools

    alphabet = "conulptaxirCONULPTAXIR019_-.$¹"
    for size in range(5):
        for chars in itertools.product(alphabet, repeat=size):
            alias = "".join(chars)
            assert is_portable_alias(alias) == _spec_says_portable_alias(alias), alias
