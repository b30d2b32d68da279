"""Entries copied from one read of the base (reuse.copy_run): those whose local header the new
zip takes unchanged and that lie end to end in the base reach the zip as one slice; an entry
whose header is written anew, a file deleted since the base, a changed file and an entry too
large for the read each break the slice, and the zip holds every entry where its directory
says, with its bytes."""

from __future__ import annotations

import io
import os
import random
import zipfile
from pathlib import Path

import xxhash

from bundler.home.reuse import Base, Candidate, CopyJob, close_zip, copy_run
from bundler.home.reuse_index import NO_MTIME, Record, Records
from bundler.home.zipcheck import check_local_headers, dos_stamp

_WHEN = (2026, 12, 7, 9, 30, 0)


def _base(path: Path, sizes: list[int], rewritten: set[int]) -> dict[str, bytes]:
    """A base zip of files ``files/fNN`` (random bytes, some deflated), those in
    ``rewritten`` with a local header the new zip writes otherwise (a private extra field,
    id 0xCAFE); each file's content by name."""
    made = random.Random(7)
    contents: dict[str, bytes] = {}
    with zipfile.ZipFile(path, "w") as archive:
        for number, size in enumerate(sizes):
            name = f"files/f{number:02}"
            data = made.randbytes(size // 2) + b"text " * (size // 10)
            info = zipfile.ZipInfo(name, _WHEN)
            info.compress_type = zipfile.ZIP_DEFLATED if number % 2 else zipfile.ZIP_STORED
            if number in rewritten:
                info.extra = b"\xfe\xca\x04\x00" + b"note"
            archive.writestr(info, data)
            contents[name] = data
    return contents


def _records(infos: list[zipfile.ZipInfo]) -> Records:
    rows = [
        Record(
            info.header_offset,
            info.file_size,
            dos_stamp(info.date_time)[1] << 16 | dos_stamp(info.date_time)[0],
            info.flag_bits,
            info.CRC,
            info.compress_type,
            info.compress_size,
            NO_MTIME,
            "0" * 32,
        )
        for info in infos
    ]
    return Records([info.filename for info in infos], tuple(map(list, zip(*rows, strict=True))))


def _raw(path: Path, info: zipfile.ZipInfo) -> bytes:
    with open(path, "rb") as fp:
        fp.seek(info.header_offset + 26)
        name_len, extra_len = (int.from_bytes(fp.read(2), "little") for _ in range(2))
        fp.seek(info.header_offset + 30 + name_len + extra_len)
        return fp.read(info.compress_size)


def test_a_run_mixing_unchanged_and_rewritten_headers_and_gaps_copies_every_entry(
    tmp_path: Path,
) -> None:
    sizes = [3000, 500, 7000, 64, 2 << 20, 900, 1200, 40, 5000, 300, 800, 20]
    path = tmp_path / "base.zip"
    contents = _base(path, sizes, rewritten={2, 6, 7})
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        data_end = archive.start_dir
    records = _records(infos)
    changed = {3}  # written by the caller, between two runs
    deleted = {1, 9}  # gone from the home: the run goes on past their bytes
    fd = os.open(path, os.O_RDONLY)
    try:
        base = Base(path, fd, records, data_end)
        sink = io.BytesIO()
        archive = zipfile.ZipFile(sink, "w")
        jobs: list[CopyJob] = []
        for number, info in enumerate(infos):
            if number in deleted:
                del contents[info.filename]
                continue
            if number in changed:
                copy_run(archive, base, jobs)
                jobs.clear()
                archive.writestr(info.filename, contents[info.filename])
                continue
            record = records.get(info.filename)
            assert record is not None
            new = zipfile.ZipInfo(info.filename, _WHEN)
            expect = xxhash.xxh3_128_hexdigest(_raw(path, info))
            jobs.append((Candidate(info.filename, record), new, expect))
        copy_run(archive, base, jobs)
        close_zip(archive)
    finally:
        os.close(fd)
    assert base.reused == len(sizes) - len(changed) - len(deleted)
    written = tmp_path / "new.zip"
    written.write_bytes(sink.getvalue())
    with zipfile.ZipFile(written) as copy:
        assert copy.testzip() is None
        assert {name: copy.read(name) for name in copy.namelist()} == contents
        copied = copy.infolist()
    check = os.open(written, os.O_RDONLY)
    try:
        check_local_headers(check, copied)
    finally:
        os.close(check)
    # the entries follow one another with nothing between them
    ends = [info.header_offset for info in copied[1:]]
    assert all(
        info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size == end
        for info, end in zip(copied, ends, strict=False)
    )
