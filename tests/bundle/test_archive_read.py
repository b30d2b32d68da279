"""The archive reader: hostile input, refused before anything of it is written.

The corpus is ``tests/support/hostile_archives.py``; the CLI side (one error line, exit 3, nothing
left behind) is in ``tests/cli/test_archive_cli.py``.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import BinaryIO, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import bundlefactory as bf
from support import hostile_archives
from support.kit import tree_snapshot

from bundler.bundle.archive_read import ArchiveLimits, list_tar, read_tar
from bundler.bundle.archive_write import archive_form, header_checksum
from bundler.bundle.manifest import CHECKSUMS_NAME, checksums_by_path
from bundler.bundle.tar_header import _NO_DEVICES, _STANDARD_NUMBERS, _plain_header, parse_header
from bundler.errors import InvalidInput
from bundler.fs.durable import open_dir


def unpack(
    data: bytes,
    dest: Path,
    limits: ArchiveLimits | None = None,
    digests: dict[str, tuple[int, str]] | None = None,
) -> list[str]:
    dest.mkdir(mode=0o700)
    fd = open_dir(dest, follow=False)
    try:
        return read_tar(
            io.BytesIO(data), fd, limits or ArchiveLimits(), name="b.tar", digests=digests
        )
    finally:
        os.close(fd)


def test_folder_to_tar_to_folder_is_byte_for_byte(exported: Path, tmp_path: Path) -> None:
    names = unpack(bf.pack_bytes(exported), tmp_path / "out")
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(exported)
    assert sorted(names) == sorted(tree_snapshot(exported))


def test_the_unpacked_folder_packs_to_the_same_bytes(exported: Path, tmp_path: Path) -> None:
    data = bf.pack_bytes(exported)
    unpack(data, tmp_path / "out")
    assert bf.pack_bytes(tmp_path / "out") == data


@pytest.mark.parametrize("fmt", ["gnu", "pax", "ustar"])
def test_an_archive_gnu_tar_made_of_the_bundle_is_read(
    exported: Path, tmp_path: Path, fmt: str
) -> None:
    archive = tmp_path / "gnu.tar"
    tops = sorted(p.name for p in exported.iterdir())
    subprocess.run(
        ["tar", f"--format={fmt}", "-C", str(exported), "-cf", str(archive), *tops], check=True
    )
    unpack(archive.read_bytes(), tmp_path / "out")
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(exported)


def test_long_and_non_ascii_names_round_trip(exported: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    deep = copy / "workspace" / ("d" * 90) / ("e" * 90)
    deep.mkdir(parents=True)
    deep.chmod(0o700)
    deep.parent.chmod(0o700)  # a bundle's folders are 0700 (02 §1)
    (deep / ("f" * 200)).write_bytes(b"long")
    (copy / "workspace" / "日本語.md").write_bytes(b"jp")
    bf.reseal(copy)
    unpack(bf.pack_bytes(copy), tmp_path / "out")
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(copy)


def _corpus() -> list[str]:
    return list(hostile_archives.CASE_NAMES)


def test_the_corpus_has_every_named_case(exported: Path) -> None:
    assert sorted(c.name for c in hostile_archives.cases(exported)) == sorted(_corpus())


@pytest.mark.parametrize("case_name", _corpus())
def test_hostile_archive_is_refused_with_one_line_naming_it(
    exported: Path, tmp_path: Path, case_name: str
) -> None:
    case = next(c for c in hostile_archives.cases(exported) if c.name == case_name)
    with pytest.raises(InvalidInput) as caught:
        unpack(case.data, tmp_path / "out", case.limits)
    message = str(caught.value)
    assert message.startswith("b.tar ") or message.startswith("b.tar: member ")
    assert "\n" not in message
    assert case.fragment in message
    assert caught.value.code == 3


def test_limits_are_checked_before_the_member_is_written(exported: Path, tmp_path: Path) -> None:
    case = next(c for c in hostile_archives.cases(exported) if c.name == "huge_declared_size")
    with pytest.raises(InvalidInput):
        unpack(case.data, tmp_path / "out")
    assert not (tmp_path / "out" / "workspace" / "huge").exists()
    members = hostile_archives.bundle_member_list(exported)
    with pytest.raises(InvalidInput):
        unpack(bf.pack_bytes(exported), tmp_path / "out2", ArchiveLimits(max_members=2))
    written = [p for p in (tmp_path / "out2").rglob("*")]
    assert len(written) == 2 and len(members) > 2


def test_an_archive_padded_with_bytes_that_are_not_zeros_is_refused_before_its_end(
    exported: Path, tmp_path: Path
) -> None:
    """Bytes after a member's data that no reader looks at would let two different archives
    verify as one bundle: the padding must be zeros, as every tar program writes it, and the
    member after it is never made."""
    case = next(c for c in hostile_archives.cases(exported) if c.name == "padding_not_zero")
    sound = bf.pack_bytes(exported)
    assert len(case.data) == len(sound) and case.data != sound
    dest = tmp_path / "out"
    with pytest.raises(InvalidInput, match="padded with bytes that are not zeros") as caught:
        unpack(case.data, dest)
    after = hostile_archives.bundle_member_list(exported)
    dirty = [n for n, _d in after].index(caught.value.path)
    assert all(not (dest / n).exists() for n, _d in after[dirty + 1 :])


def test_a_member_unpacked_over_a_planted_symlink_never_follows_it(
    exported: Path, tmp_path: Path
) -> None:
    # the staging folder is ours and empty, but if something planted a link in it mid-way the
    # O_EXCL|O_NOFOLLOW creation refuses rather than writing through it
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "workspace").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    fd = open_dir(dest, follow=False)
    try:
        with pytest.raises(InvalidInput):
            read_tar(io.BytesIO(bf.pack_bytes(exported)), fd, ArchiveLimits(), name="b.tar")
    finally:
        os.close(fd)
    assert list((tmp_path / "elsewhere").iterdir()) == []


# --------------------------------------------------------------------------- the header fast path


def _headers_of(data: bytes) -> list[bytes]:
    """Every non-zero 512-byte block of an archive that is a header (walked by sizes)."""
    blocks, pos = [], 0
    while pos + 512 <= len(data):
        block = data[pos : pos + 512]
        if block == bytes(512):
            break
        blocks.append(block)
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        pos += 512 + info.size + (-info.size % 512)
    return blocks


def _as_tarfile_reads(block: bytes) -> tuple[str, bytes, int, int] | str:
    try:
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.HeaderError as err:
        return type(err).__name__
    return (info.name, info.type, info.size, info.mode)


def _as_we_read(block: bytes) -> tuple[str, bytes, int, int] | str:
    try:
        return tuple(parse_header(block))  # type: ignore[return-value]
    except tarfile.HeaderError as err:
        return type(err).__name__


def _fix_checksum(block: bytearray) -> None:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)


def test_the_header_fast_path_reads_every_corpus_header_as_tarfile_does(exported: Path) -> None:
    """The fast path must accept exactly what frombuf accepts, with the same fields."""
    seen = 0
    for case in hostile_archives.cases(exported):
        for block in _headers_of_lenient(case.data):
            assert _as_we_read(block) == _as_tarfile_reads(block), case.name
            seen += 1
    for block in _headers_of(bf.pack_bytes(exported)):
        assert _plain_header(block) is not None  # bundler's own headers take the fast path
        # ... its quickest branch: tarfile's layout, device numbers left empty
        assert _STANDARD_NUMBERS.match(block, 100, 157) and block[329:345] in _NO_DEVICES
        assert _as_we_read(block) == _as_tarfile_reads(block)
    assert seen > 100


def test_a_header_read_in_archive_form_is_what_the_general_parse_reads(exported: Path) -> None:
    """The reader takes a bundle archive's own headers by archive_form, without the general
    parse: of every corpus header and every header of a packed bundle it must give what
    parse_header gives (tarfile's reading), and take the headers bundler writes."""
    taken = 0
    blocks = [
        block
        for case in hostile_archives.cases(exported)
        for block in _headers_of_lenient(case.data)
    ]
    own = _headers_of(bf.pack_bytes(exported))
    for block in blocks + own:
        form = archive_form(block)
        if form is None:
            assert block not in own
            continue
        kind = tarfile.DIRTYPE if form.is_dir else tarfile.REGTYPE
        assert _as_we_read(block) == (form.name, kind, form.size, form.mode)
        taken += 1
    assert taken >= len(own) > 10


def test_a_header_is_read_in_archive_form_in_place_at_any_offset(exported: Path) -> None:
    """The reader asks archive_form of the header where it lies in the chunk it read: the same
    answer as of the block alone, and none for a block the chunk cuts short."""
    blocks = [
        block
        for case in hostile_archives.cases(exported)
        for block in _headers_of_lenient(case.data)
    ] + _headers_of(bf.pack_bytes(exported))
    for index, block in enumerate(blocks):
        lead = bytes([index % 256]) * (index % 700)
        assert archive_form(lead + block + b"\xff" * 3, len(lead)) == archive_form(block)
        assert archive_form(lead + block[:-1], len(lead)) is None


class _Trickle:
    """An archive given at most ``step`` bytes a read, as a socket may give it: every header and
    member then straddles the reader's chunks."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data = data
        self._at = 0
        self._step = step

    def read(self, size: int) -> bytes:
        piece = self._data[self._at : self._at + min(size, self._step)]
        self._at += len(piece)
        return piece


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(step=st.integers(1, 3000))
def test_an_archive_read_a_few_bytes_at_a_time_lists_the_same_members(
    exported: Path, step: int
) -> None:
    packed = bf.pack_bytes(exported)
    # and one with a header another tar program might write (an owner's name), which the
    # listing records as not in archive form
    named = next(
        m for m in list_tar(io.BytesIO(packed), ArchiveLimits(), digests={}) if not m.is_dir
    )
    owned = bytearray(packed)
    block = bytearray(owned[named.header_at : named.header_at + 512])
    block[265:272] = b"someone"
    _fix_checksum(block)
    owned[named.header_at : named.header_at + 512] = block
    for data in (packed, bytes(owned)):
        whole: dict[str, tuple[int, str]] = {}
        listed = list_tar(io.BytesIO(data), ArchiveLimits(), digests=whole)
        trickled: dict[str, tuple[int, str]] = {}
        stream = cast(BinaryIO, _Trickle(data, step))
        assert list_tar(stream, ArchiveLimits(), digests=trickled) == listed
        assert trickled == whole
    assert sum(not member.archive_form for member in listed) == 1


@pytest.mark.parametrize("step", [1, 511, 513, 4096])
def test_a_hostile_archive_read_a_few_bytes_at_a_time_is_refused_alike(
    exported: Path, tmp_path: Path, step: int
) -> None:
    for index, case in enumerate(hostile_archives.cases(exported)):
        refusals = []
        for stream in (io.BytesIO(case.data), _Trickle(case.data, step)):
            dest = tmp_path / f"{index}-{len(refusals)}"
            dest.mkdir(mode=0o700)
            fd = open_dir(dest, follow=False)
            try:
                read_tar(cast(BinaryIO, stream), fd, case.limits, name="b.tar")
            except InvalidInput as exc:
                refusals.append(str(exc))
            finally:
                os.close(fd)
        assert len(refusals) == 2 and refusals[0] == refusals[1], case.name


def _headers_of_lenient(data: bytes) -> list[bytes]:
    # hostile archives may lie about sizes: every 512-byte block that is not all zeros
    return [
        data[pos : pos + 512]
        for pos in range(0, len(data) - 511, 512)
        if data[pos : pos + 512] != bytes(512)
    ]


_FIELD_BYTES = st.sampled_from(list(b"01234567 \0\x80\xff+-_x8\n\t\x1c") + [0xE9])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(
        [
            hostile_archives.header("workspace/a.md", size=5),
            hostile_archives.header("workspace/d/", kind=b"5", mode=0o755),
            hostile_archives.header("plain", kind=b"\0", size=1 << 33),
            hostile_archives.header("x/", kind=b"\0"),
            hostile_archives.header("n", prefix=b"some/prefix"),
            hostile_archives.header("L", kind=b"L", size=20, prefix=b"p"),
            hostile_archives.header("s", kind=b"S", size=10),
        ]
    ),
    edits=st.lists(st.tuples(st.integers(0, 511), _FIELD_BYTES), max_size=6),
    fix=st.booleans(),
)
def test_the_header_fast_path_agrees_with_tarfile_on_edited_headers(
    base: bytes, edits: list[tuple[int, int]], fix: bool
) -> None:
    """Number fields with signs, underscores, spaces, base-256, odd checksums: the same answer."""
    block = bytearray(base)
    for pos, value in edits:
        block[pos] = value
    if fix:
        _fix_checksum(block)
    if bytes(block) == bytes(512):
        return
    assert _as_we_read(bytes(block)) == _as_tarfile_reads(bytes(block))


# --------------------------------------------------------------------------- what it records


def test_the_digests_recorded_are_those_of_checksums_xxh3(exported: Path, tmp_path: Path) -> None:
    """Each file's XXH3-128, taken from the bytes as they are written, is the bundle's own."""
    dest = tmp_path / "out"
    dest.mkdir(mode=0o700)
    fd = open_dir(dest, follow=False)
    digests: dict[str, tuple[int, str]] = {}
    try:
        read_tar(io.BytesIO(bf.pack_bytes(exported)), fd, ArchiveLimits(), digests=digests)
    finally:
        os.close(fd)
    listed = checksums_by_path((exported / CHECKSUMS_NAME).read_bytes())
    assert listed and {rel: digests[rel][1] for rel in listed} == listed
    files = {p.relative_to(dest).as_posix(): p for p in dest.rglob("*") if p.is_file()}
    assert set(digests) == set(files)
    assert all(digests[rel][0] == path.stat().st_size for rel, path in files.items())


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o000])
def test_files_get_their_carried_mode_whatever_the_umask(
    exported: Path, tmp_path: Path, umask: int
) -> None:
    """A file created with its own mode where the umask allows, fchmod where it would not."""
    members = [
        hostile_archives.member("workspace", None),
        hostile_archives.member("workspace/a.sh", b"#!/bin/sh\n", mode=0o755),
        hostile_archives.member("workspace/b.md", b"b", mode=0o644),
        hostile_archives.member("workspace/c.txt", b"c", mode=0o666),
        hostile_archives.member("workspace/d.txt", b"d", mode=0o400),
    ]
    old = os.umask(umask)
    try:
        unpack(hostile_archives.end(b"".join(members)), tmp_path / "out")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out" / "workspace").iterdir()}
    assert modes == {"a.sh": 0o755, "b.md": 0o644, "c.txt": 0o666, "d.txt": 0o400}


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=512, max_size=512) | st.sampled_from([b"\xff" * 512, bytes(512)]))
def test_the_header_checksum_is_the_exact_unsigned_sum_for_any_block(block: bytes) -> None:
    """The checksum's sum is taken from two Adler-32s: exact, never only modulo 65521; the
    checksum field counts as eight spaces."""
    assert header_checksum(block) == sum(block[:148]) + 8 * ord(" ") + sum(block[156:])
