"""backup.json parsing (zipindex.parse_index): the fast item check agrees with jsonschema."""

from __future__ import annotations

import functools
import json
import sys
import time
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundler.errors import InvalidInput
from bundler.home import zipindex
from bundler.home.zipcheck import all_plain, path_problem
from bundler.home.zipindex import parse_index
from bundler.rules import schema

VALID_DIGEST = "0123456789abcdef" * 2

field_values = st.one_of(
    st.integers(min_value=-5, max_value=2**37),
    st.booleans(),
    st.none(),
    st.sampled_from([VALID_DIGEST, VALID_DIGEST.upper(), "", "files/a", "x" * 33]),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
)
entries = st.dictionaries(
    st.sampled_from(["path", "size", "xxh3_128", "mtime_ns", "mode", "extra"]),
    field_values,
    max_size=5,
)


def base(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "format": 1,
        "tool": "bundler test",
        "created_at": "2026-01-01T00:00:00Z",
        "agent": None,
        "entries": [{"path": "chat.db", "size": 10, "xxh3_128": VALID_DIGEST}],
        "folders": ["files"],
    }
    document.update(overrides)
    return document


@functools.cache
def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema.load("backup.schema.json"))


def jsonschema_accepts(document: dict[str, Any]) -> bool:
    return next(iter(validator().iter_errors(document)), None) is None


def parse_agrees_with_jsonschema(document: dict[str, Any]) -> tuple[bool, bool]:
    """Whether ``parse_index`` accepts ``document``, and whether jsonschema does. The rules
    beyond the schema (allowed paths, duplicates, a newer format) may refuse a schema-valid
    index, but never with the schema's words."""
    expected = jsonschema_accepts(document)
    try:
        parse_index(json.dumps(document).encode())
    except InvalidInput as err:
        if expected:
            assert "breaks the schema" not in err.message and "unknown key" not in err.message
        return False, expected
    return True, expected


@settings(max_examples=300, deadline=None)
@given(extra=st.lists(entries, max_size=3), folders=st.lists(field_values, max_size=3))
def test_fast_item_check_agrees_with_jsonschema(
    extra: list[dict[str, Any]], folders: list[Any]
) -> None:
    document = base()
    document["entries"] = document["entries"] + extra
    document["folders"] = folders
    accepted, expected = parse_agrees_with_jsonschema(document)
    if accepted:
        assert expected


top_values = st.one_of(
    field_values,
    st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.5Z", "2026-01-01 00:00:00"]),
    st.text(max_size=3),
    st.just("x" * 1001),
)


@settings(max_examples=150, deadline=None)
@given(
    changes=st.dictionaries(
        st.sampled_from(["format", "tool", "created_at", "agent", "extra"]), top_values, max_size=3
    ),
    dropped=st.sets(st.sampled_from(["format", "tool", "created_at", "agent", "folders"])),
)
def test_top_level_check_without_jsonschema_agrees_with_it(
    changes: dict[str, Any], dropped: set[str]
) -> None:
    document = base(**changes)
    for key in dropped:
        del document[key]
    accepted, expected = parse_agrees_with_jsonschema(document)
    assert accepted == expected or (not accepted and document.get("format", 1) != 1)


def test_valid_index_parses() -> None:
    index = parse_index(json.dumps(base(agent="demo")).encode())
    assert index.agent == "demo" and index.files["chat.db"].size == 10
    assert index.folders == ("files",)


@pytest.mark.parametrize("bounded", [True, False])
def test_integers_parse_alike_and_none_longer_than_20_digits_is_taken(
    bounded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the interpreter bounds the digits it converts, json converts the integers itself;
    elsewhere each goes through the length check first. Either way the index parses the same,
    and an integer of 21 digits or more is refused, a million-digit one at once."""
    entries = [
        {"path": "chat.db", "size": 10, "xxh3_128": VALID_DIGEST},
        {"path": "files/a.txt", "size": 7, "xxh3_128": VALID_DIGEST, "mtime_ns": 10**18},
    ]
    plain = parse_index(json.dumps(base(entries=entries)).encode())
    monkeypatch.setattr(zipindex, "_digits_bounded", lambda: bounded)
    name = "files/a, " + "1" * 25
    named = [*entries, {"path": name, "size": 3, "xxh3_128": VALID_DIGEST}]
    digits = parse_index(json.dumps(base(entries=named)).encode())
    assert {path: digits.files[path] for path in plain.files} == plain.files
    assert digits.files[name].size == 3
    for number in ("9" * 21, "-" + "9" * 21, "1" + "0" * 29, "7" * 1_000_000):
        too_long = json.dumps(base(entries=entries)).replace("1000000000000000000", number)
        started = time.monotonic()
        with pytest.raises(InvalidInput):
            parse_index(too_long.encode())
        assert time.monotonic() - started < 5


def test_this_interpreter_bounds_the_digits_it_converts() -> None:
    """Every Python bundler supports bounds them (3.10.7 on), unless a program lifts it."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    assert zipindex._digits_bounded() == (0 < limit <= 5000)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("chat.db", None),
        ("backup.json", None),
        ("files/a/b.txt", None),
        ("skills/s/SKILL.md", None),
        ("files", "is not backup.json"),
        ("/files/a", "absolute"),
        ("files/../a", ".."),
        ("files\\a", "backslash"),
        ("files//a", "empty"),
        ("files/a\x07", "control"),
        ("files/" + "x" * 256, "longer than 255"),
        ("other/a", "is not backup.json"),
    ],
)
def test_path_problem(path: str, problem: str | None) -> None:
    answer = path_problem(path)
    if problem is None:
        assert answer is None
    else:
        assert answer is not None and problem in answer


@settings(max_examples=200, deadline=None)
@given(
    path=st.lists(
        st.sampled_from(
            ["files", "skills", "/", ".", "..", "a", "\\", "\x07", "\x85", "é", "x" * 40]
        ),
        max_size=8,
    ).map("".join),
    folder=st.booleans(),
)
def test_the_common_case_of_path_problem_agrees_with_every_rule(path: str, folder: bool) -> None:
    from bundler.home.zipcheck import _path_problem

    assert path_problem(path, folder=folder) == _path_problem(path, folder)


def test_folder_paths_allow_the_tree_roots() -> None:
    assert path_problem("files", folder=True) is None
    assert path_problem("skills/s1", folder=True) is None
    assert path_problem("chat.db", folder=True) is not None


def test_a_100000_entry_index_is_checked_quickly() -> None:
    import time

    items = [{"path": f"files/f{i}", "size": i, "xxh3_128": VALID_DIGEST} for i in range(100_000)]
    document = base(entries=[*base()["entries"], *items])
    start = time.perf_counter()
    index = parse_index(json.dumps(document).encode())
    assert len(index.files) == 100_001
    assert time.perf_counter() - start < 20


def test_control_char_regex_equals_the_names_rule() -> None:
    from bundler.rules.names import CONTROL_CHARS, has_control_chars

    for code in range(0x3000):
        assert bool(CONTROL_CHARS.search(chr(code))) == has_control_chars(chr(code)), hex(code)


def _flat_rules() -> list[dict[str, Any]]:
    """Every flat schema of backup.json the fast checks read: its entries' fields, its folders,
    its top level's."""
    root = schema.load("backup.schema.json")
    fields = list(root["properties"]["entries"]["items"]["properties"].values())
    tops = [rules for key, rules in root["properties"].items() if key not in ("entries",)]
    every = [*fields, root["properties"]["folders"]["items"], *tops]
    return [rules for rules in every if zipindex._flat(rules) is not None]


@settings(max_examples=300, deadline=None)
@given(rules=st.sampled_from(_flat_rules()), column=st.lists(field_values, max_size=6))
def test_a_column_is_accepted_exactly_when_each_of_its_values_is(
    rules: dict[str, Any], column: list[Any]
) -> None:
    """The check of a whole column says what the check of each value says, never more: the
    column check is a faster spelling of the same rules."""
    each = all(map(zipindex._accepting(rules), column))
    assert zipindex._accepting_all(rules)(column) == each
    if each:
        single = jsonschema.Draft202012Validator(rules)
        assert all(single.is_valid(value) for value in column)


_entry_paths = st.one_of(
    st.sampled_from(["chat.db", "backup.json", "files/a", "files/a/b", "skills/s/SKILL.md"]),
    st.sampled_from(["files/../x", "/files/a", "files//a", "files/a\\b", "files/a\x01", "x/a"]),
    st.text(alphabet="ab/.é\x7f", min_size=1, max_size=8).map(lambda tail: "files/" + tail),
    st.just("files/" + "c" * 70),
)
_listed_entries = st.lists(
    st.fixed_dictionaries(
        {
            "path": _entry_paths,
            "size": st.integers(min_value=-1, max_value=2**36 + 1),
            "xxh3_128": st.just(VALID_DIGEST),
        },
        optional={
            "mtime_ns": st.one_of(st.none(), st.integers(min_value=-1, max_value=2**63)),
            "mode": st.integers(min_value=-1, max_value=0o10000),
        },
    ),
    max_size=6,
)


@settings(max_examples=400, deadline=None)
@given(entries=_listed_entries)
def test_the_listing_checked_at_once_says_what_the_check_of_each_entry_says(
    entries: list[dict[str, Any]],
) -> None:
    """The check of the whole listing's columns finds it good only when the check of every
    entry in turn does, and then makes the same files."""
    try:
        one_by_one: dict[str, Any] | None = zipindex._listed_one_by_one(entries)
    except InvalidInput:
        one_by_one = None
    at_once = zipindex._listed_at_once(entries)
    assert at_once is None or at_once == one_by_one
    if all_plain([e["path"] for e in entries if e["path"] != "chat.db"]):
        assert all(path_problem(e["path"]) is None for e in entries if e["path"] != "chat.db")
