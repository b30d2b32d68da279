"""backup.json's entries are written as json's encoder writes them (backup-format.md), whichever
way the writer spells them: the zip is the same for the same home."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bundler.home.zipwrite import _entry_json, _index_json

ENCODE = json.JSONEncoder(ensure_ascii=False).encode

listings = st.fixed_dictionaries(
    {
        "path": st.text(min_size=1, max_size=40),
        "size": st.integers(min_value=0, max_value=2**63),
        "xxh3_128": st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    },
    optional={"mtime_ns": st.integers(min_value=0, max_value=2**63)},
)
others = st.dictionaries(
    st.sampled_from(["path", "size", "xxh3_128", "mtime_ns", "mode"]),
    st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(), st.floats()),
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(entry=st.one_of(listings, others))
def test_an_entry_is_spelled_as_json_encodes_it(entry: dict[str, Any]) -> None:
    assert _entry_json(entry, ENCODE) == ENCODE(entry)


def test_the_index_is_json_with_one_entry_a_line() -> None:
    entries = [
        {"path": 'files/a "quoted"\\name\u00e9\u2028', "size": 3, "xxh3_128": "0" * 32},
        {"path": "files/b", "size": 0, "xxh3_128": "f" * 32, "mtime_ns": 10**18},
    ]
    head = {"format": 1, "tool": "t", "created_at": "2026-12-06T00:00:00Z", "agent": None}
    text = _index_json(head, entries, ["files"]).decode()
    assert json.loads(text) == {**head, "entries": entries, "folders": ["files"]}
    lines = text.split("\n")
    assert lines[1:3] == [ENCODE(entries[0]) + ",", ENCODE(entries[1])]
