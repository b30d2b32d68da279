"""One tar header block and one pax extended header, parsed exactly as :mod:`tarfile` would,
and faster where the header is laid out as tar programs write it."""

from __future__ import annotations

import re
import tarfile
from typing import NamedTuple

from bundler.bundle.archive_write import header_checksum
from bundler.rules.names import escape_display

_PAX_RECORD = re.compile(rb"([1-9][0-9]{0,19}) ")


# an octal number field as tar programs write it: digits, maybe spaces around, then NUL or the end
_OCTAL = re.compile(rb" *([0-7]*) *(?:\0|\Z)")


_BASE256 = (0o200, 0o377)


# (start, end) of the number fields frombuf parses: mode, uid, gid, size, mtime, chksum, devmajor,
# devminor; any of them malformed makes frombuf refuse the header, so the fast path checks all
_NUMBER_FIELDS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156),
                  (329, 337), (337, 345))  # fmt: skip


# mode, uid, gid, size, mtime, chksum and the type as tarfile and GNU tar write them
_STANDARD_NUMBERS = re.compile(
    rb"([0-7]{7})\0[0-7]{7}\0[0-7]{7}\0([0-7]{11})\0[0-7]{11}\0([0-7]{6})\0 .", re.DOTALL
)


# the device numbers of a file or folder: octal zeros (GNU tar, older tarfile) or left empty
# (tarfile since 3.11.4, and bundle archives)
_NO_DEVICES = (b"0000000\0" * 2, bytes(16))


class Header(NamedTuple):
    """What the reader uses of one 512-byte header, as :meth:`tarfile.TarInfo.frombuf` gives it."""

    name: str
    type: bytes
    size: int
    mode: int


def parse_header(block: bytes) -> Header:
    """The name, type, size and mode of a 512-byte tar header that is not all zeros.

    Raises :class:`tarfile.HeaderError` exactly where :meth:`tarfile.TarInfo.frombuf` does, and
    gives what it gives: a header with only octal number fields and the unsigned checksum (what
    tar programs write) is read here without building a ``TarInfo`` (a quarter of the reader's
    time per member on a bundle of small files); any other goes to ``frombuf`` itself.
    """
    fast = _plain_header(block)
    if fast is not None:
        return fast
    info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    return Header(info.name, info.type, info.size, info.mode)


def _plain_header(block: bytes) -> Header | None:
    standard = _STANDARD_NUMBERS.match(block, 100, 157)
    if standard is not None and block[329:345] in _NO_DEVICES:
        # the layout tarfile and GNU tar write: every number field octal digits and a NUL
        chksum = int(standard.group(3), 8)
        if chksum == header_checksum(block):
            return _named(
                block, block[156:157], int(standard.group(2), 8), int(standard.group(1), 8)
            )
    return _any_plain_header(block)


def _any_plain_header(block: bytes) -> Header | None:
    numbers = []
    for start, end in _NUMBER_FIELDS:
        if block[start] in _BASE256:
            return None
        match = _OCTAL.match(block, start, end)
        if match is None:
            return None
        numbers.append(int(match.group(1) or b"0", 8))
    mode, _uid, _gid, size, _mtime, chksum = numbers[:6]
    if chksum != header_checksum(block):
        return None  # perhaps the signed checksum some old tars wrote: frombuf decides
    return _named(block, block[156:157], size, mode)


def _named(block: bytes, kind: bytes, size: int, mode: int) -> Header | None:
    """The header with its name as frombuf makes it; None for an old GNU sparse header."""
    if kind == tarfile.GNUTYPE_SPARSE:
        return None
    name = _nts(block[0:100])
    prefix = _nts(block[345:500]) if block[345] else ""
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        kind = tarfile.DIRTYPE
    if kind == tarfile.DIRTYPE:
        name = name.rstrip("/")
    if prefix and kind not in tarfile.GNU_TYPES:
        name = prefix + "/" + name
    return Header(name, kind, size, mode)


def _nts(field: bytes) -> str:
    end = field.find(0)
    return (field if end < 0 else field[:end]).decode("utf-8", "surrogateescape")


def parse_pax(data: bytes) -> dict[str, bytes]:
    """The records of a pax extended header, strictly: ``"<len> <key>=<value>\\n"`` each, the
    length counting the whole record, no key twice. Raises ``ValueError`` naming the fault."""
    records: dict[str, bytes] = {}
    pos = 0
    while pos < len(data):
        match = _PAX_RECORD.match(data, pos)
        if match is None:
            raise ValueError("a record does not start with its length")
        end = pos + int(match.group(1))
        if end > len(data) or end <= match.end() or data[end - 1 : end] != b"\n":
            raise ValueError("a record's length does not match its content")
        key, sep, value = data[match.end() : end - 1].partition(b"=")
        if not sep or not key:
            raise ValueError("a record has no key=value")
        try:
            text_key = key.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("a record's key is not UTF-8") from None
        if text_key in records:
            raise ValueError(f"the record {escape_display(text_key)} appears twice")
        records[text_key] = value
        pos = end
    return records
