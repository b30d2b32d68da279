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

The file is JSON of columns, one per field: the paths a list of strings, each column of
numbers the base64 of 64-bit little-endian integers (signed; inode and device unsigned), each
column of digests the base64 of their 16-byte values end to end. A column is so made, read and
checked whole by C code (its length, its range), never a number at a time, and the rows are
made only when a file is asked for.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import json
import os
import sys
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import xxhash

from bundler.fs import durable
from bundler.fs.privatedir import make_private, user_cache_folder
from bundler.fs.smallfile import NotSmallFile, read_small_file

_FORMAT = 3
_LIMIT = 1 << 30
_MAX_NUMBER = (1 << 63) - 1
"""No number the index holds is larger: a size or offset past it is no file's."""

StatKey = tuple[int, int, int, int, int]


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
        return dict(
            zip(self.paths, map(Record._make, zip(*self.columns, strict=True)), strict=True)
        )

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


def _pack_numbers(name: str, column: Iterable[int]) -> str:
    """``column`` as the base64 of 64-bit little-endian integers (OverflowError past them)."""
    packed = array("Q" if name in _UNSIGNED else "q", column)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _pack_digests(column: Iterable[str]) -> str:
    """Hex digests of 16 bytes as the base64 of their bytes, end to end (ValueError for one
    that is not)."""
    digests = list(column)
    if digests and set(map(len, digests)) != {2 * _DIGEST_BYTES}:  # it would shift the rest
        raise ValueError("a digest that is not of 16 bytes")
    return base64.b64encode(bytes.fromhex("".join(digests))).decode("ascii")


def _decoded(text: Any, length: int) -> bytes | None:
    if type(text) is not str:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == length else None


def _numbers(name: str, text: Any, count: int, low: int) -> list[int] | None:
    """The column ``name`` of ``count`` integers packed by :func:`_pack_numbers`, each at least
    ``low``, or None."""
    raw = _decoded(text, 8 * count)
    if raw is None:
        return None
    packed = array("Q" if name in _UNSIGNED else "q")
    packed.frombytes(raw)
    if sys.byteorder == "big":
        packed.byteswap()
    column = packed.tolist()  # min runs faster over a list's ints than an array's
    return None if column and min(column) < low else column


def _hexes(text: Any, count: int) -> list[str] | None:
    """The column of ``count`` digests packed by :func:`_pack_digests`, in hex, or None."""
    raw = _decoded(text, _DIGEST_BYTES * count)
    if raw is None:
        return None
    hexed = raw.hex()
    width = 2 * _DIGEST_BYTES
    return [hexed[at : at + width] for at in range(0, len(hexed), width)]


def _columns(
    table: Any, ints: tuple[str, ...], hexes: tuple[str, ...], lowest: Mapping[str, int]
) -> list[Any] | None:
    """The path column, then the others in the order asked, each checked; None if any fails."""
    if type(table) is not dict or set(table) != {"path", *ints, *hexes}:
        return None
    paths = table["path"]
    if type(paths) is not list or (paths and set(map(type, paths)) != {str}):
        return None
    count = len(paths)
    if len(set(paths)) != count:
        return None
    columns: list[Any] = [paths]
    for name in ints:
        numbers = _numbers(name, table[name], count, lowest.get(name, 0))
        if numbers is None:
            return None
        columns.append(numbers)
    for name in hexes:
        digests = _hexes(table[name], count)
        if digests is None:
            return None
        columns.append(digests)
    return columns


def _known(table: Any) -> dict[str, Known] | None:
    columns = _columns(table, _KNOWN_INTS, _KNOWN_HEXES, _KNOWN_LOWEST)
    if columns is None:
        return None
    paths, size, mtime, ctime, inode, device, crc, method, packed, digest, raw = columns
    stats = zip(size, mtime, ctime, inode, device, strict=True)
    made = map(Known._make, zip(stats, digest, crc, method, packed, raw, strict=True))
    return dict(zip(paths, made, strict=True))


def _pin(document: Any) -> Pin | None:
    if type(document) is not dict or set(document) != {
        "path",
        "size",
        "directory_at",
        "directory_xxh3",
        "entries",
    }:
        return None
    path, size, at, digest = (
        document[key] for key in ("path", "size", "directory_at", "directory_xxh3")
    )
    if (
        type(path) is not str
        or not all(type(n) is int and 0 <= n <= _MAX_NUMBER for n in (size, at))
        or type(digest) is not str
        or len(digest) != 2 * _DIGEST_BYTES
    ):
        return None
    columns = _columns(document["entries"], _RECORD_INTS, _RECORD_HEXES, {"mtime_ns": NO_MTIME})
    if columns is None or at > size:
        return None
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
        document = json.loads(data)
    except (OSError, NotSmallFile, ValueError, RecursionError):
        return EMPTY
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        return EMPTY
    if document.get("home") != os.path.realpath(home):
        return EMPTY
    known = _known(document.get("files"))
    if known is None:
        return EMPTY
    return Index(known, _pin(document.get("backup")))


def _as_columns(
    paths: list[str], ints: tuple[str, ...], hexes: tuple[str, ...], columns: Iterable[Any]
) -> dict[str, Any]:
    """The columns ``path``, ``ints`` (:func:`_pack_numbers`) and ``hexes``
    (:func:`_pack_digests`), in that order in ``columns``: what :func:`_columns` reads."""
    table: dict[str, Any] = {"path": paths}
    for name, column in zip((*ints, *hexes), columns, strict=True):
        table[name] = _pack_digests(column) if name in hexes else _pack_numbers(name, column)
    return table


def save_index(home: Path, known: dict[str, Known], pin: Pin | None = None) -> None:
    """Replace the index of ``home`` with ``known`` and ``pin`` (0600, atomically: a crash
    leaves the old one or the new one; its folders made 0700, never below another user's).
    Quiet: without it the next backup reads every file, as before."""
    names = _KNOWN_INTS + _KNOWN_HEXES
    rows = [
        (*item.stat, item.crc, item.method, item.packed, item.digest, item.raw)
        for item in known.values()
    ]
    columns = zip(*rows, strict=True) if rows else [[] for _name in names]
    try:
        document: dict[str, Any] = {
            "format": _FORMAT,
            "home": os.path.realpath(home),
            "files": _as_columns(list(known), _KNOWN_INTS, _KNOWN_HEXES, columns),
        }
        if pin is not None:
            document["backup"] = {
                "path": pin.path,
                "size": pin.size,
                "directory_at": pin.directory_at,
                "directory_xxh3": pin.directory_xxh3,
                "entries": _as_columns(
                    pin.records.paths, _RECORD_INTS, _RECORD_HEXES, pin.records.columns
                ),
            }
    except (OverflowError, ValueError):  # a number past 64 bits: no file system's
        return
    data = json.dumps(document, separators=(",", ":")).encode()
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
