"""Local headers checked many at a time (zipcheck.check_local_headers): each is held to its
directory record exactly as when read alone, the first failure in the zip's order is the one
named, a header longer than the bytes read with it is read again whole, and headers lying close
together cost one read."""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.faultinject import ptrace_unavailable, trace_log

from bundler.errors import InvalidInput
from bundler.home.zipcheck import (
    LOCAL_HEADER,
    _local_problem,
    _plainly_agrees,
    check_local_header,
    check_local_header_in,
    check_local_headers,
)

_CRC_AT = 14
_NAME_AT = 30


def _zip(path: Path, count: int, extra_for: int = -1) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(path, "w") as archive:
        for number in range(count):
            info = zipfile.ZipInfo(f"files/n{number:04d}.txt", (2026, 12, 7, 6, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            if number == extra_for:
                # a private extra field (id 0xCAFE) far longer than the room read per header
                info.extra = b"\xfe\xca" + (2000).to_bytes(2, "little") + b"x" * 2000
            archive.writestr(info, f"line {number}\n" * (number % 50 + 1))
    with zipfile.ZipFile(path) as archive:
        return archive.infolist()


def _patch(path: Path, at: int, byte: int) -> None:
    with open(path, "r+b") as sink:
        sink.seek(at)
        sink.write(bytes([byte]))


def _failure(check: Callable[[], object]) -> str:
    with pytest.raises(InvalidInput) as raised:
        check()
    return raised.value.message


def test_sound_headers_pass(tmp_path: Path) -> None:
    path = tmp_path / "sound.zip"
    infos = _zip(path, 300, extra_for=150)
    fd = os.open(path, os.O_RDONLY)
    try:
        check_local_headers(fd, infos)
    finally:
        os.close(fd)


@pytest.mark.parametrize(("field", "offset"), [("crc", _CRC_AT), ("name", _NAME_AT + 8)])
def test_each_header_read_with_others_is_held_to_what_it_is_held_to_alone(
    tmp_path: Path, field: str, offset: int
) -> None:
    path = tmp_path / f"{field}.zip"
    infos = _zip(path, 300)
    target = infos[123]
    _patch(path, target.header_offset + offset, 0x7E)
    fd = os.open(path, os.O_RDONLY)
    try:
        alone = _failure(lambda: check_local_header(fd, target))
        together = _failure(lambda: check_local_headers(fd, infos))
    finally:
        os.close(fd)
    assert together == alone
    assert "files/n0123.txt" in together


def test_the_first_failure_in_the_zips_order_is_named(tmp_path: Path) -> None:
    path = tmp_path / "two.zip"
    infos = _zip(path, 300)
    for number in (40, 260):
        _patch(path, infos[number].header_offset + _CRC_AT, 0x7E)
    fd = os.open(path, os.O_RDONLY)
    try:
        message = _failure(lambda: check_local_headers(fd, list(reversed(infos))))
    finally:
        os.close(fd)
    assert "files/n0040.txt" in message


def test_a_header_longer_than_the_room_read_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "long.zip"
    infos = _zip(path, 300, extra_for=150)
    target = infos[150]
    _patch(path, target.header_offset + _NAME_AT + 8, 0x7E)
    fd = os.open(path, os.O_RDONLY)
    try:
        message = _failure(lambda: check_local_headers(fd, infos))
    finally:
        os.close(fd)
    assert "files/n0150.txt" in message


@pytest.mark.skipif(ptrace_unavailable() is not None, reason=str(ptrace_unavailable()))
def test_headers_lying_close_together_take_one_read(tmp_path: Path) -> None:
    path = tmp_path / "many.zip"
    infos = _zip(path, 300)
    assert infos[-1].header_offset < 64 << 10  # well within one span
    script = (
        "import os, sys, zipfile\n"
        "from bundler.home.zipcheck import check_local_headers\n"
        "infos = zipfile.ZipFile(sys.argv[1]).infolist()\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "print('checking', flush=True)\n"
        "check_local_headers(fd, infos)\n"
    )
    done, log = trace_log([sys.executable, "-c", script, str(path)], ["pread64", "write"])
    assert done.returncode == 0, done.stderr
    after = log[log.index("checking") :]
    reads = [line for line in after.splitlines() if "pread64(" in line and "many.zip" in line]
    assert len(reads) == 1, reads


_SOUND = zipfile.ZipInfo("files/notes/é.md", (2026, 12, 7, 6, 0, 0))


@settings(max_examples=400, deadline=None)
@given(
    flips=st.lists(st.tuples(st.integers(0, 29 + 12), st.integers(1, 255)), max_size=3),
    utf8=st.booleans(),
    method=st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
)
def test_the_fast_header_check_accepts_only_what_the_full_check_accepts(
    flips: list[tuple[int, int]], utf8: bool, method: int
) -> None:
    """A header whose bytes were changed here and there is accepted by the one-comparison check
    only when the field-by-field check finds nothing wrong with it either."""
    info = zipfile.ZipInfo("files/notes/e.md" if not utf8 else _SOUND.filename, _SOUND.date_time)
    info.compress_type = method
    info.CRC, info.compress_size, info.file_size = 0x1234ABCD, 100, 300 if method else 100
    info.flag_bits = 0x800 if utf8 else 0
    header = bytearray(info.FileHeader(False))
    for at, mask in flips:
        header[at % len(header)] ^= mask
    raw = bytes(header)
    # the signature is the caller's to check, before either
    if raw[:4] == b"PK\x03\x04" and _plainly_agrees(raw, LOCAL_HEADER.unpack_from(raw), info):
        name_len = int.from_bytes(raw[26:28], "little")
        extra_len = int.from_bytes(raw[28:30], "little")
        assert check_local_header_in(raw, info) == 30 + name_len + extra_len
        assert _local_problem(raw[:30], raw[30:], info) is None
        assert raw[30 : 30 + name_len] == info.filename.encode()
    if not flips:
        assert _plainly_agrees(raw, LOCAL_HEADER.unpack_from(raw), info)
    # the same header further into a read of many: the same answer
    fields = LOCAL_HEADER.unpack_from(raw)
    assert _plainly_agrees(b"PK" * 20 + raw, fields, info, 40) == _plainly_agrees(raw, fields, info)
