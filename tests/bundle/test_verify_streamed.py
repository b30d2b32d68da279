"""Verify reads ``checksums.xxh3`` as a stream beside the walk and holds nothing per file: the
findings are those of comparing two whole tables, and its memory does not grow with the number
of files (06 P4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import bundlefactory as bf
from support.kit import run_cli_peak
from support.verify_kit import spread

from bundler.bundle.manifest import _checksums_by_line, checksum_sort_key, iter_checksums
from bundler.bundle.verify import verify_bundle
from bundler.errors import InvalidInput

DIGEST = "0123456789abcdef" * 2
components = st.sampled_from(["a", "b", "a-b", "é", "", "..", "a b", "x\u202e", "\udcff"])
paths = st.lists(components, min_size=1, max_size=3).map("/".join)


def outcome(read: object) -> tuple[list[tuple[str, str]] | None, str]:
    """(path, digest) pairs, or None and the fault's message."""
    try:
        if callable(read):
            return list(read().items()), ""
        return [(path, digest) for _key, path, digest in read], ""  # type: ignore[attr-defined]
    except InvalidInput as exc:
        return None, exc.message


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([DIGEST, DIGEST[:31]]), paths), max_size=8),
    st.booleans(),
    st.sampled_from([b"", b"\n", b"x", b"\xff\n"]),
    st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=6),
)
def test_checksums_read_in_pieces_give_what_the_whole_file_gives(
    lines: list[tuple[str, str]], ordered: bool, tail: bytes, cuts: list[int]
) -> None:
    """However the bytes are cut, the same lines, or the same fault: not UTF-8 anywhere first,
    then a last line without a newline, then the first line at fault."""
    if ordered:
        lines = sorted(lines, key=lambda line: checksum_sort_key(line[1]))
    raw = b"".join(
        f"{digest}  {path}\n".encode("utf-8", "surrogateescape") for digest, path in lines
    )
    raw += tail
    pieces: list[bytes] = []
    start = 0
    while start < len(raw):
        size = cuts[len(pieces) % len(cuts)]
        pieces.append(raw[start : start + size])
        start += size
    assert outcome(iter_checksums(pieces)) == outcome(lambda: _checksums_by_line(raw))


def test_findings_over_checksums_of_many_blocks_are_those_of_the_whole_tables(
    tmp_path: Path,
) -> None:
    """A checksums file of many 64 KiB blocks, a file missing, one unlisted and one changed,
    each in a different block: every file not listed or not matching in walk order, then every
    listed path not found in the file's order."""
    bundle = bf.build_bundle(tmp_path / "bundle")
    spread(bundle, 3000)
    assert (bundle / "checksums.xxh3").stat().st_size > 4 * (1 << 16)
    suffix = "x" * 40
    changed = f"workspace/spread-05/file-000005-{suffix}.txt"
    gone = f"workspace/spread-20/file-001220-{suffix}.txt"
    extra = f"workspace/spread-31/extra-{suffix}.txt"
    (bundle / changed).write_bytes(b"other\n")
    (bundle / gone).unlink()
    (bundle / extra).write_bytes(b"extra\n")
    report = verify_bundle(bundle)
    checksum_findings = [str(p) for p in report.errors if "checksums.xxh3" in p.message]
    assert checksum_findings == [
        f"{changed}: content does not match its digest in checksums.xxh3",
        f"{extra}: not listed in checksums.xxh3",
        f"{gone}: listed in checksums.xxh3 but not a regular file of the bundle",
    ]


def _peak_verify_mib(bundle: Path) -> float:
    """The peak resident memory of ``bundler bundle verify BUNDLE``, a process of its own."""
    proc, peak = run_cli_peak(["--quiet", "bundle", "verify", str(bundle)])
    assert proc.returncode == 0, proc.stderr
    return peak


@pytest.mark.parametrize("files", [20_000])
def test_verify_memory_does_not_grow_with_the_number_of_files(tmp_path: Path, files: int) -> None:
    """Ten times the files, the same peak memory within a few MiB (a table of every file cost
    about 0.7 KiB a file: 13 MiB more at 20,000 than at 2,000)."""
    small, large = tmp_path / "small", tmp_path / "large"
    bf.build_bundle(small)
    spread(small, files // 10)
    bf.build_bundle(large)
    spread(large, files)
    baseline = min(_peak_verify_mib(small) for _ in range(2))
    grown = min(_peak_verify_mib(large) for _ in range(2))
    assert grown - baseline < 4.0, (baseline, grown)
