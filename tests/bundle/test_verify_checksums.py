"""The fast road of the one ``checksums.xxh3`` parser agrees with its line-by-line road."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundler.bundle.checksum_check import read_checksums
from bundler.bundle.manifest import _checksums_by_line, checksum_sort_key
from bundler.bundle.manifest import _checksums_fast as _parse_checksums_fast
from bundler.errors import InvalidInput

DIGEST = "0123456789abcdef" * 2
components = st.sampled_from(
    ["a", "b", "a-b", "é", "e", ".", "..", "", "...", ".x", "a b", "a  ", "x\u202e"]
)
paths = st.lists(components, min_size=1, max_size=4).map("/".join)
digests = st.sampled_from([DIGEST, DIGEST.upper(), DIGEST[:31], "g" * 32])


def reference(raw: bytes) -> dict[str, str] | None:
    try:
        return _checksums_by_line(raw)
    except InvalidInput:
        return None


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(digests, paths), max_size=6), st.booleans(), st.booleans())
def test_fast_reader_never_accepts_what_the_reference_refuses(
    lines: list[tuple[str, str]], ordered: bool, final_newline: bool
) -> None:
    if ordered:
        lines = sorted(lines, key=lambda line: checksum_sort_key(line[1]))
    text = "\n".join(f"{digest}  {path}" for digest, path in lines)
    raw = (text + ("\n" if final_newline and lines else "")).encode("utf-8")
    fast = _parse_checksums_fast(raw)
    expected = reference(raw)
    if fast is not None:
        assert fast == expected
        assert list(fast) == list(expected or {})
    listed, problem = read_checksums(raw)
    assert listed == expected
    assert (problem is None) == (expected is not None)


@pytest.mark.parametrize(
    "paths",
    [
        ["config.toml", "skills/b/s/SKILL.md", "workspace/a/c", "workspace/a-b"],
        ["a/..x", "a/.hidden"],
        ["a  /b", "a.../c"],  # two spaces before a slash, dots that are no "." or ".."
    ],
)
def test_fast_reader_takes_canonical_files(paths: list[str]) -> None:
    raw = "".join(f"{DIGEST}  {path}\n" for path in paths).encode()
    assert _parse_checksums_fast(raw) == {path: DIGEST for path in paths}
