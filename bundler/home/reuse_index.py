"""The private index of what each backed-up file was when its entry was made (04 §5.1.1).

restic's rule: a file whose size, modification and change times, inode and device all equal
what they were when its entry was made has not changed, and is not read again. A change of
content moves the change time (``ctime``, which no program can set back), so the rule misses
only what a clock set back and a file rewritten within one tick would hide, as restic does.

The database is held to more: its five numbers are recorded only when it was read quiet (no
sidecar before or after, the same numbers both times, :func:`bundler.fs.snapshot.quiet_store`)
and had settled before the read (:func:`settled_before`), and it is unchanged only while it is
still quiet. A live agent writes its store continually; a change in the tick the store was read
in would otherwise hide behind equal times, and a new snapshot costs far more than a file read.

The index is the user's, not the home's (a backup only reads the home, 04 §5.1): one file per
home in the user's cache folder, ``backup-index/<XXH3-128 of the home's real path>.json``
(0600, replaced atomically after each backup is published, and not flushed: a crash may leave
the old index, the new one or a damaged one, and a damaged one is ignored). It names the home,
and per file of ``files/`` and ``skills/`` (and ``chat.db``, the store) those five numbers and
the entry that was made for the file's bytes (for the store, its snapshot's): its digest, CRC,
method, compressed size and the XXH3-128 of its compressed bytes. A base entry is copied for an
unchanged file only when all of them match it, and its bytes are
hashed as they are copied: equal to the bytes a backup's read-back inflated and checked, so they
are not inflated again (see :mod:`bundler.home.zipwrite`). The backup's format does not change:
a backup never needs the index, and one that is missing, damaged, of another home or from
another version is simply ignored, as is a cache folder that cannot be written.

The index also pins the backup it was made with, when that is a plain zip (:class:`Pin`): its
real path, its length, the XXH3-128 of its bytes from the central directory to the end, and each
file entry as the read-back found it in that directory and ``backup.json`` (:class:`Record`). A
next backup whose base is that file, with that length and those directory bytes, has the very
directory the read-back checked, and so parses neither it nor its ``backup.json`` again
(:mod:`bundler.home.reuse`); every byte it copies is still checked as it passes. A base of
another length or other directory bytes is read whole, as any other.

The file is one line of JSON, then the tables it announces, in bytes: per table (the files,
then the pinned backup's entries) its paths in UTF-8 joined by NUL (which no path holds), each
column of numbers as 64-bit little-endian integers (signed; inode and device unsigned), each
column of digests as their 16-byte values, end to end. The line gives each table's count of
rows, the length of its paths and the XXH3-128 of its bytes: a table cut short or changed is
not read (the files' table gone, the index is empty; the pin's, the pin is dropped). A table is
so read, checked and written whole by C code (its digest, its range, its paths' uniqueness),
never a number or a path at a time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import xxhash

from bundler.fs import durable
from bundler.fs.privatedir import make_private, user_cache_folder
from bundler.fs.smallfile import NotSmallFile, read_small_file

_FORMAT = 4
_LIMIT = 1 << 30
_HEAD_LIMIT = 1 << 16
"""The first line, the JSON that announces the tables, is no longer (a home's path and a few
numbers)."""
_MAX_NUMBER = (1 << 63) - 1
"""No number the index holds is larger: a size or offset past it is no file's."""

StatKey = tuple[int, int, int, int, int]
_Row = TypeVar("_Row", bound=tuple[Any, ...])


def stat_key(st: os.stat_result) -> StatKey:
    """What restic's rule compares: size, mtime and ctime (ns), inode, device."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


SETTLED_NS = 2_000_000_000
"""How long before a read the database must have last changed for its stat to be recorded:
the coarsest file-system clock (FAT's two seconds) plus the lag of the kernel's coarse clock."""


def settled_before(st: os.stat_result, read_at_ns: int) -> bool:
    """Whether a store last changed at least :data:`SETTLED_NS` before ``read_at_ns`` (the
    wall clock when its read began). A store written during the tick its stat was taken in
    could be written again in that tick with no time moving; one that settled before the read
    cannot be, so any later write moves its times past the recorded ones (racy git's rule)."""
    return max(st.st_mtime_ns, st.st_ctime_ns) + SETTLED_NS <= read_at_ns


class Known(NamedTuple):
    """A file as its entry was made: its stat key, and the entry (digest of the file's bytes,
    CRC-32, zip method, compressed size, XXH3-128 of the compressed bytes)."""

    stat: StatKey
    digest: str
    crc: int
    method: int
    packed: int
    raw: str


class Record(NamedTuple):
    """An entry of the pinned backup as its directory record and ``backup.json`` say it: its
    local header's offset, size, DOS time and date (``date << 16 | time``), flags, CRC-32,
    method, compressed size, listed ``mtime_ns`` (:data:`NO_MTIME`: none listed) and
    digest."""

    offset: int
    size: int
    stamp: int
    flags: int
    crc: int
    method: int
    packed: int
    mtime_ns: int
    digest: str


NO_MTIME = -1
""":attr:`Record.mtime_ns` of an entry ``backup.json`` lists without a time."""

_RECORD_INTS = Record._fields[:-1]
_RECORD_HEXES = Record._fields[-1:]


@dataclass(frozen=True)
class Records:
    """A backup's file entries as its directory and ``backup.json`` say them: ``paths``, and
    for each field of :class:`Record` a column, in the same order (columns: the entries of
    many files are read, checked and written by C code; the rows are made when first asked)."""

    paths: list[str]
    columns: tuple[list[Any], ...]

    @functools.cached_property
    def _rows(self) -> dict[str, Record]:
        # made once, all together: zip's C loop does the transposing
        return dict(zip(self.paths, _rows_of(Record, self.columns), strict=True))

    def get(self, relpath: str) -> Record | None:
        """The entry for ``relpath``, or None."""
        return self._rows.get(relpath)


@dataclass(frozen=True)
class Pin:
    """The backup an index was made with (a plain zip): its real path, its length, where its
    central directory begins and the XXH3-128 of its bytes from there to the end, and its file
    entries as its read-back found them."""

    path: str
    size: int
    directory_at: int
    directory_xxh3: str
    records: Records


@dataclass(frozen=True)
class Index:
    """A home's index: its files as their entries were made, and the backup they were made in
    (None when that was not a plain zip, or is not known)."""

    known: dict[str, Known]
    pin: Pin | None = None


EMPTY = Index({})

_KNOWN_INTS = ("size", "mtime_ns", "ctime_ns", "inode", "device", "crc", "method", "packed")
_KNOWN_HEXES = ("digest", "raw")
_UNSIGNED = frozenset({"inode", "device"})
"""Columns of 64-bit unsigned integers (a file system may number inodes past 2**63); every
other is signed."""
_KNOWN_LOWEST = {"mtime_ns": -(1 << 63), "ctime_ns": -(1 << 63)}
"""The least value of a column of files where it is not 0: a file's times may lie before 1970."""
_DIGEST_BYTES = 16


def _rows_of(kind: type[_Row], columns: Iterable[Iterable[Any]]) -> Iterable[_Row]:
    """The rows of ``columns`` as ``kind``, each made by the tuple constructor itself: the C
    loops of ``map`` and ``zip`` do all of it, where ``kind._make`` is a Python call a row."""
    return map(tuple.__new__, repeat(kind), zip(*columns, strict=True))


def _pack_numbers(name: str, column: Iterable[int]) -> bytes:
    """``column`` as 64-bit little-endian integers (OverflowError past them)."""
    packed = array("Q" if name in _UNSIGNED else "q", column)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _pack_digests(column: Iterable[str]) -> bytes:
    """Hex digests of 16 bytes as their bytes, end to end (ValueError for one that is not)."""
    digests = list(column)
    if digests and set(map(len, digests)) != {2 * _DIGEST_BYTES}:  # it would shift the rest
        raise ValueError("a digest that is not of 16 bytes")
    return bytes.fromhex("".join(digests))


def _numbers(name: str, raw: memoryview, low: int) -> list[int] | None:
    """A column packed by :func:`_pack_numbers`, each number at least ``low``, or None."""
    packed = array("Q" if name in _UNSIGNED else "q")
    packed.frombytes(raw)
    if sys.byteorder == "big":
        packed.byteswap()
    column = packed.tolist()  # min runs faster over a list's ints than an array's
    return None if column and min(column) < low else column


def _hexes(raw: memoryview) -> list[str]:
    """A column packed by :func:`_pack_digests`, in hex."""
    hexed = raw.hex()
    width = 2 * _DIGEST_BYTES
    return [hexed[at : at + width] for at in range(0, len(hexed), width)]


def _paths(raw: memoryview, count: int) -> list[str] | None:
    """The ``count`` distinct paths of a table, or None."""
    if count == 0:
        return [] if not raw else None
    try:
        paths = str(raw, "utf-8").split("\0")
    except UnicodeDecodeError:
        return None
    return paths if len(paths) == count and len(set(paths)) == count else None


def _columns_of_table(
    shape: Any,
    body: memoryview,
    ints: Sequence[str],
    hexes: Sequence[str],
    lowest: Mapping[str, int],
) -> tuple[list[Any], int] | None:
    """A table of ``body`` as the header's ``shape`` announces it: its path column, then the
    others in the order asked, each checked, and the bytes it took; None if any fails."""
    if type(shape) is not dict or set(shape) != {"count", "names", "xxh3"}:
        return None
    count, names = shape["count"], shape["names"]
    if not all(type(n) is int and 0 <= n <= _MAX_NUMBER for n in (count, names)):
        return None
    widths = [8] * len(ints) + [_DIGEST_BYTES] * len(hexes)
    size = names + count * sum(widths)
    # a table cut short, or with a byte changed, would shift or alter every number after it
    if size > len(body) or xxhash.xxh3_128_hexdigest(body[:size]) != shape["xxh3"]:
        return None
    paths = _paths(body[:names], count)
    if paths is None:
        return None
    columns: list[Any] = [paths]
    at = names
    for name in ints:
        numbers = _numbers(name, body[at : at + 8 * count], lowest.get(name, 0))
        if numbers is None:
            return None
        columns.append(numbers)
        at += 8 * count
    for _name in hexes:
        columns.append(_hexes(body[at : at + _DIGEST_BYTES * count]))
        at += _DIGEST_BYTES * count
    return columns, size


def _known(columns: list[Any]) -> dict[str, Known]:
    paths, size, mtime, ctime, inode, device, crc, method, packed, digest, raw = columns
    stats = zip(size, mtime, ctime, inode, device, strict=True)
    return dict(zip(paths, _rows_of(Known, (stats, digest, crc, method, packed, raw)), strict=True))


def _pin(shape: Any, body: memoryview) -> Pin | None:
    """The pin the header's ``shape`` announces, whose table is the whole of ``body``."""
    if type(shape) is not dict or set(shape) != {
        "path",
        "size",
        "directory_at",
        "directory_xxh3",
        "entries",
    }:
        return None
    path, size, at, digest = (
        shape[key] for key in ("path", "size", "directory_at", "directory_xxh3")
    )
    if (
        type(path) is not str
        or not all(type(n) is int and 0 <= n <= _MAX_NUMBER for n in (size, at))
        or type(digest) is not str
        or len(digest) != 2 * _DIGEST_BYTES
        or at > size
    ):
        return None
    table = _columns_of_table(
        shape["entries"], body, _RECORD_INTS, _RECORD_HEXES, {"mtime_ns": NO_MTIME}
    )
    if table is None or table[1] != len(body):
        return None
    columns = table[0]
    return Pin(path, size, at, digest, Records(columns[0], tuple(columns[1:])))


def index_path(home: Path) -> Path:
    """Where the index of ``home`` lives (not created)."""
    key = xxhash.xxh3_128_hexdigest(os.fsencode(os.path.realpath(home)))
    return user_cache_folder() / "backup-index" / f"{key}.json"


def load_index(home: Path) -> Index:
    """The index of ``home``; empty when it is missing or not one this version wrote whole for
    this home (never an error: without it every file is read, as before). A pin that is not
    whole is dropped alone: the files are still known."""
    path = index_path(home)
    try:
        data = read_small_file(path, _LIMIT, follow=False)
    except (OSError, NotSmallFile):
        return EMPTY
    head_ends = data.find(b"\n", 0, _HEAD_LIMIT)
    if head_ends < 0:
        return EMPTY
    try:
        head = json.loads(data[:head_ends])
    except (ValueError, RecursionError):
        return EMPTY
    if type(head) is not dict or set(head) != {"format", "home", "files", "backup"}:
        return EMPTY
    if head["format"] != _FORMAT or head["home"] != os.path.realpath(home):
        return EMPTY
    body = memoryview(data)[head_ends + 1 :]
    files = _columns_of_table(head["files"], body, _KNOWN_INTS, _KNOWN_HEXES, _KNOWN_LOWEST)
    if files is None:
        return EMPTY
    columns, size = files
    pin = None if head["backup"] is None else _pin(head["backup"], body[size:])
    return Index(_known(columns), pin)


def _pack_table(
    paths: list[str], ints: Sequence[str], hexes: Sequence[str], columns: Iterable[Any]
) -> tuple[dict[str, Any], list[bytes]]:
    """A table's shape for the header, and its bytes: ``paths``, then ``columns``, the columns
    ``ints`` (:func:`_pack_numbers`) and ``hexes`` (:func:`_pack_digests`) in that order (what
    :func:`_columns_of_table` reads). ValueError for a path that cannot be written so."""
    names = "\0".join(paths).encode("utf-8")
    if names.count(b"\0") != max(0, len(paths) - 1):  # a NUL in a path would split it
        raise ValueError("a path with a NUL character")
    parts = [names]
    for name, column in zip((*ints, *hexes), columns, strict=True):
        parts.append(_pack_digests(column) if name in hexes else _pack_numbers(name, column))
    digest = xxhash.xxh3_128()
    for part in parts:
        digest.update(part)
    return {"count": len(paths), "names": len(names), "xxh3": digest.hexdigest()}, parts


def save_index(home: Path, known: dict[str, Known], pin: Pin | None = None) -> None:
    """Replace the index of ``home`` with ``known`` and ``pin`` (0600, atomically: a crash
    leaves the old one or the new one; its folders made 0700, never below another user's).
    Quiet: without it the next backup reads every file, as before."""
    names = _KNOWN_INTS + _KNOWN_HEXES
    columns: list[Iterable[Any]] = [[] for _name in names]
    if known:
        stats, digest, crc, method, packed, raw = zip(*known.values(), strict=True)
        columns = [*zip(*stats, strict=True), crc, method, packed, digest, raw]
    try:
        files, parts = _pack_table(list(known), _KNOWN_INTS, _KNOWN_HEXES, columns)
        backup: dict[str, Any] | None = None
        if pin is not None:
            records = pin.records
            entries, pinned = _pack_table(
                records.paths, _RECORD_INTS, _RECORD_HEXES, records.columns
            )
            parts += pinned
            backup = {
                "path": pin.path,
                "size": pin.size,
                "directory_at": pin.directory_at,
                "directory_xxh3": pin.directory_xxh3,
                "entries": entries,
            }
        head = {
            "format": _FORMAT,
            "home": os.path.realpath(home),
            "files": files,
            "backup": backup,
        }
        line = json.dumps(head, separators=(",", ":")).encode("utf-8") + b"\n"
    except (OverflowError, ValueError):  # a number past 64 bits, a path no file system gives
        return
    if len(line) > _HEAD_LIMIT:
        return
    data = b"".join([line, *parts])
    path = index_path(home)
    with contextlib.suppress(OSError):
        make_private(path.parent)
        folder = durable.open_dir(path.parent, follow=False)
        try:
            if os.fstat(folder).st_uid == os.geteuid():
                # a cache: one lost to a crash, or left short, costs the next backup time
                durable.replace_unsynced(folder, path.name, data)
        finally:
            os.close(folder)
