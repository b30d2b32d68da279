"""``bundler home backup`` and ``home verify-backup`` (04 §5.1, §5.2).

A backup is one zip: ``chat.db`` (a consistent snapshot, see :mod:`bundler.fs.snapshot`), the
regular files and folders of ``files/`` and ``skills/`` read with the no-follow walker of
:mod:`bundler.fs.safefs`, and ``backup.json`` (written last, once every digest is known).

Publishing is crash-safe: the zip is written ``0600`` under a hidden temporary name in the
target folder, verified as ``verify-backup`` would, fsynced, then *linked* to its final name
(``link`` never replaces an existing file; where links are unsupported ``renameat2`` with
``RENAME_NOREPLACE``), and the folder is fsynced. A crash leaves at most a hidden ``.backup-*``
file, never a truncated zip under the final name; ``bundler recover --home`` removes it.

The home is only read: the database is never written (see :mod:`bundler.fs.snapshot`), and the
only new entry in the home is the zip in ``backups/`` (plus transient hidden files there).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import xxhash

from bundler import __version__
from bundler.errors import (
    ChangedMeanwhile,
    DestinationExists,
    InvalidInput,
    Malformed,
    NotFound,
    UnsuitablePath,
    UsageError,
    os_failure,
)
from bundler.fs import durable
from bundler.fs.copytree import digest_fd
from bundler.fs.digest import read_into
from bundler.fs.interrupts import commit_reached, handed_over, signals_deferred, wait_for
from bundler.fs.safefs import SkipCounts, open_dir_nofollow, rmtree_at, walk
from bundler.fs.scratch import CHECK_PREFIX, clear_dead_scratch, scratch_folder, temp_root
from bundler.fs.snapshot import (
    ROLLBACK_VERSIONS,
    SNAPSHOT_PREFIX,
    check_snapshot,
    integrity_ok,
    journal_versions,
    snapshot_database,
)
from bundler.fs.tally import tally
from bundler.home.homes import HomeResolution, home_busy, lock_home, open_home_dir, resolve_home
from bundler.home.reuse import (
    ZIP64_FROM,
    Base,
    BaseUnusable,
    copy_raw,
    end_entry,
    newest_backup,
    open_base,
    source_matches,
    start_entry,
)
from bundler.home.zipcheck import (
    DATABASE,
    FORMAT,
    MANIFEST,
    MAX_ENTRY_SIZE,
    MAX_MTIME_NS,
    STORE_ABOVE_RATIO,
    TREES,
    BackupIndex,
    check_local_header,
    match_index,
    open_zip,
    path_problem,
    read_index,
    stream_entry,
)
from bundler.rules import hints
from bundler.rules.actions import step
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase
from bundler.rules.units import human_size

BACKUPS = "backups"
TEMP_PREFIX = ".backup-"
_SAMPLE = 4 << 10
LEVELS = {"fast": 1, "default": 6, "best": 9, "none": 0}
"""``--compression``: the deflate level of each name (``none``: every entry stored). Measured on
chat-like text, level 1 takes a quarter of level 6's time for 39 % more bytes and level 9 three
times its time for 2 % fewer; with unchanged entries copied from the base (04 §5.1.1) a file is
compressed once but its bytes are kept by every backup, so the default is 6."""
DEFAULT_COMPRESSION = "default"
_PARALLEL_MAX = 16 << 20
"""Files up to this size are read whole and compressed on a worker thread; larger ones are
streamed through the main thread."""
_IN_FLIGHT = 64 << 20
"""At most this many bytes read but not yet written: what the parallel entries cost in memory."""
_QUEUED = 256
_BLOCK = 1 << 20
"""A file larger than :data:`_PARALLEL_MAX` is deflated in blocks of this size."""
_WINDOW = 32 << 10
_BLOCKS_AHEAD = 8
# Below this sample ratio deflate gains too little to pay for itself (random or compressed data)
_INCOMPRESSIBLE = 1.02
_MIN_DATE = (1980, 1, 1, 0, 0, 0)
_MAX_DATE = (2107, 12, 31, 23, 59, 58)


@dataclass(frozen=True)
class BackupReport:
    """A finished backup: the zip, its file entries (``chat.db`` included) and their bytes.

    ``skipped`` counts what the walker did not carry (links, special files, hard links...);
    ``database_read_as`` says how the store was read (``quiet``, ``leftover`` or ``live``).
    """

    path: Path
    entries: int
    bytes: int
    skipped: SkipCounts
    database_read_as: str
    warnings: list[str] = field(default_factory=list)
    base: Path | None = None
    reused: int = 0

    def as_json(self) -> dict[str, Any]:
        """The ``home backup --json`` payload (without ``ok``)."""
        return {
            "backup": str(self.path),
            "entries": self.entries,
            "bytes": self.bytes,
            "base": None if self.base is None else str(self.base),
            "reused": self.reused,
            "skipped": self.skipped.as_json(),
            "skipped_paths": self.skipped.paths,
        }


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify-backup`` found in a sound backup."""

    path: Path
    format: int
    created_at: str
    agent: str | None
    entries: int
    bytes: int

    def as_json(self) -> dict[str, Any]:
        """The ``home verify-backup --json`` payload (without ``ok``)."""
        return {
            "backup": str(self.path),
            "format": self.format,
            "created_at": self.created_at,
            "agent": self.agent,
            "entries": self.entries,
            "bytes": self.bytes,
        }


def default_backup_name(now: datetime, attempt: int = 1) -> str:
    """``backup-YYYYMMDD-HHMMSS.zip`` in UTC; ``-2``, ``-3``... for later attempts (04 §5.1)."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"backup-{stamp}.zip" if attempt == 1 else f"backup-{stamp}-{attempt}.zip"


# --- verify (5.2) ----------------------------------------------------------------------------


def check_contents(
    archive: zipfile.ZipFile,
    *,
    check_database: bool,
    scratch: Path | None = None,
    progress: Progress | None = None,
) -> tuple[BackupIndex, list[zipfile.ZipInfo]]:
    """Check every digest of an opened backup and (optionally) the database's integrity.

    The database is checked from a private temporary copy in ``scratch`` (else the system's
    temporary folder), opened ``mode=ro&immutable=1`` with ``trusted_schema=OFF``. Returns the
    index and the file entries; raises :class:`InvalidInput` naming the entry at fault.
    ``progress`` sees one phase, ``checking``, with the index's files and sizes as totals.
    """
    index = read_index(archive)
    files = match_index(index, archive.infolist())
    for info in archive.infolist():
        if info.filename.endswith("/"):
            # folders hold no data to stream; their local headers are checked all the same
            check_local_header(archive, info)
    sizes = [index.files[info.filename].size for info in files]
    with phase(progress, "checking", len(files), sum(sizes)):
        for info in files:
            listed = index.files[info.filename]
            if info.filename == DATABASE and check_database:
                _check_database(archive, info, listed.size, listed.xxh3_128, scratch)
            else:
                stream_entry(archive, info, listed.size, listed.xxh3_128, _discard)
            if progress is not None:
                progress(1, listed.size)
    return index, files


def _discard(_chunk: bytes) -> None:
    return None


def _check_database(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, digest: str, scratch: Path | None
) -> None:
    parent = scratch if scratch is not None else Path(temp_root())
    parent_fd = durable.open_dir(parent, follow=True)
    try:
        # a kill leaves the copy behind, unlocked: the next check removes it
        clear_dead_scratch(parent_fd, CHECK_PREFIX)
        with scratch_folder(parent_fd, CHECK_PREFIX, where=str(parent)) as (name, folder_fd):
            _check_database_copy(archive, info, size, digest, parent / name, folder_fd)
    finally:
        os.close(parent_fd)


def _check_database_copy(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    size: int,
    digest: str,
    folder: Path,
    folder_fd: int,
) -> None:
    """Stream the backup's chat.db into ``folder`` and check it as a backup's (one
    snapshot in rollback-journal mode, passing integrity_check)."""
    copy = folder / DATABASE
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(DATABASE, flags, 0o600, dir_fd=folder_fd)
    with os.fdopen(fd, "wb") as sink:
        stream_entry(archive, info, size, digest, sink.write)
    # what a backup holds (backup-format.md); an empty file opens as an empty database
    if journal_versions(copy) != ROLLBACK_VERSIONS:
        raise Malformed(
            "backup entry chat.db: not a SQLite database in rollback-journal mode, which is "
            "what a backup holds (an empty file, or a header saying WAL)",
            path=DATABASE,
        )
    if not integrity_ok(copy):
        raise Malformed(
            "backup entry chat.db: fails PRAGMA integrity_check (not a sound SQLite database)",
            path=DATABASE,
        )


def verify_backup(path: Path, *, progress: Progress | None = None) -> VerifyReport:
    """Check a backup zip completely, changing nothing (04 §5.2).

    Every entry allowed (:func:`bundler.home.zipcheck.path_problem` and the directory rules), every
    digest matching ``backup.json``, ``backup.json`` valid with a known ``format``, the database
    passing ``integrity_check``. Raises :class:`InvalidInput` (exit 3) naming the entry at
    fault, :class:`Refused` when the file cannot be opened. ``progress``: as
    :func:`check_contents`.
    """
    try:
        with open_zip(path) as archive:
            index, files = check_contents(archive, check_database=True, progress=progress)
    except OSError as exc:
        shown = escape_display(str(path))
        raise os_failure(
            f"cannot read {shown} ({os.strerror(exc.errno or errno.EIO)})", exc, path=shown
        ) from exc
    total = sum(info.file_size for info in files)
    return VerifyReport(path, index.format, index.created_at, index.agent, len(files), total)


# --- backup (5.1) ----------------------------------------------------------------------------


class _StoreInstead(Exception):
    """An entry compressed beyond STORE_ABOVE_RATIO: write the zip again with it stored."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass
class _Plan:
    """What one pass writes: chosen entries and what they are stored as."""

    resolution: HomeResolution
    home_fd: int
    snapshot: Path
    progress: Progress | None = None
    force_stored: set[str] = field(default_factory=set)
    base: Base | None = None
    level: int = LEVELS[DEFAULT_COMPRESSION]
    pool: ThreadPoolExecutor | None = None


def _zip_time(mtime_ns: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(mtime_ns // 1_000_000_000)
    parts = (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)
    # zip dates cover 1980-2107; backup.json carries the exact mtime anyway
    return min(max(parts, _MIN_DATE), _MAX_DATE)


def _zipinfo(name: str, st: os.stat_result | None, folder: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, _zip_time(st.st_mtime_ns) if st else _zip_time(time.time_ns()))
    info.create_system = 3  # unix: external_attr carries the mode
    if folder:
        bits = stat.S_IMODE(st.st_mode) & 0o777 if st else 0o700
        info.external_attr = ((stat.S_IFDIR | bits) << 16) | 0x10
    else:
        bits = stat.S_IMODE(st.st_mode) & 0o777 if st else 0o600
        info.external_attr = (stat.S_IFREG | bits) << 16
    info.flag_bits |= 0x800  # names are UTF-8 (the walker admits nothing else)
    return info


def _store(head: bytes) -> bool:
    """Whether an entry starting with ``head`` is stored: a sample that already compresses
    beyond the margin, or hardly at all (random or compressed data), is stored as it is."""
    sample = head[:_SAMPLE]
    if not sample:
        return True
    ratio = len(sample) / max(1, len(zlib.compress(sample, 1)))
    return ratio > STORE_ABOVE_RATIO / 2 or ratio < _INCOMPRESSIBLE


@dataclass(frozen=True)
class _Packed:
    """A file's data as it goes into the zip, by ``method``, with the CRC-32 of the
    uncompressed bytes."""

    method: int
    crc: int
    payload: bytes


def _pack(data: bytes, level: int) -> _Packed:
    """What a worker thread does for one file read whole: its bytes stored or deflated at
    ``level`` (0: stored), with their CRC."""
    crc = zlib.crc32(data)
    if level and not _store(data[:_SAMPLE]):
        # block by block as a large file is, so that the bytes never depend on the path taken
        blocks = range(0, max(1, len(data)), _BLOCK)
        payload = b"".join(
            _deflate_block(
                data[at : at + _BLOCK],
                data[max(0, at - _WINDOW) : at],
                at + _BLOCK >= len(data),
                level,
            )
            for at in blocks
        )
        if len(data) <= STORE_ABOVE_RATIO * max(1, len(payload)):
            return _Packed(zipfile.ZIP_DEFLATED, crc, payload)
    return _Packed(zipfile.ZIP_STORED, crc, data)


Finish = Callable[["_Packed | None"], None]


class _InOrder:
    """Entries written in walk order while their reading is done here and their compression on
    worker threads (zlib releases the GIL): the zip is the same whatever the thread count."""

    def __init__(
        self,
        archive: zipfile.ZipFile,
        plan: _Plan,
        pool: ThreadPoolExecutor | None,
        progress: Progress | None,
    ) -> None:
        self.archive = archive
        self.plan = plan
        self.pool = pool
        self.progress = progress
        self.entries: list[dict[str, Any]] = []
        self.queue: deque[tuple[futures.Future[_Packed] | None, Finish, int]] = deque()
        self.in_flight = 0

    def folder(self, info: zipfile.ZipInfo) -> None:
        """A folder entry, after every entry before it."""
        self._push(None, lambda _packed: self.archive.writestr(info, b""), 0)

    def file(self, relpath: str, fd: int, st: os.stat_result) -> None:
        """A file entry, after every entry before it; ``fd`` is read before this returns."""
        plan = self.plan
        if self.pool is None or st.st_size > _PARALLEL_MAX or relpath in plan.force_stored:
            self.drain()
            self._record(_add_file(self.archive, relpath, fd, st, plan))
            return
        _check_entry(relpath, st)
        info = _zipinfo(relpath, st, folder=False)
        base = plan.base
        candidate = base.candidate(relpath, st) if base is not None else None
        chunks: list[bytes] = []

        def collect(_relpath: str, chunk: memoryview) -> None:
            chunks.append(bytes(chunk))

        size, digest = digest_fd(fd, relpath=relpath, observer=collect, expected=st.st_size)
        data = b"".join(chunks)
        future: futures.Future[_Packed] | None = None
        # unchanged: the size, XXH3-128 and CRC-32 of the source are those of the base's entry
        if candidate is not None and not (
            size == candidate.listed.size
            and digest == candidate.listed.xxh3_128
            and zlib.crc32(data) == candidate.info.CRC
        ):
            candidate = None
        if candidate is None:
            with handed_over():  # a worker started by this submit keeps the signals blocked
                future = self.pool.submit(_pack, data, plan.level)

        def finish(packed: _Packed | None) -> None:
            if packed is None and base is not None and candidate is not None:
                copy_raw(self.archive, base, candidate.info, info)
            else:
                assert packed is not None
                payload = packed.payload
                sink = start_entry(
                    self.archive, info, packed.method, packed.crc, size, len(payload)
                )
                sink.write(payload)
                end_entry(self.archive, info)
            self._record(_listing(relpath, size, digest, st))

        self._push(future, finish, len(data))

    def drain(self) -> None:
        """Write every queued entry."""
        while self.queue:
            self._write_oldest()

    def _push(self, future: futures.Future[_Packed] | None, finish: Finish, nbytes: int) -> None:
        self.queue.append((future, finish, nbytes))
        self.in_flight += nbytes
        while self.queue and (self.in_flight > _IN_FLIGHT or len(self.queue) > _QUEUED):
            self._write_oldest()

    def _write_oldest(self) -> None:
        future, finish, nbytes = self.queue.popleft()
        packed = None
        if future is not None:
            done = future
            wait_for(lambda timeout: not futures.wait([done], timeout).not_done)
            packed = future.result()
        finish(packed)
        self.in_flight -= nbytes

    def _record(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)
        if self.progress is not None:
            self.progress(1, entry["size"])


def _workers() -> int:
    """Compression threads: one per core this process may use (none on a single core)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores if cores > 1 else 0


def _check_entry(relpath: str, st: os.stat_result) -> None:
    """Refuse a file restore would refuse (its name or its size)."""
    problem = path_problem(relpath)
    if problem:
        raise UnsuitablePath(
            f"{escape_display(relpath)} {problem}: restore would refuse it; rename or remove it",
            path=escape_display(relpath),
        )
    if st.st_size > MAX_ENTRY_SIZE:
        raise UnsuitablePath(
            f"{escape_display(relpath)} is larger than {human_size(MAX_ENTRY_SIZE)}: "
            "restore would refuse it",
            path=escape_display(relpath),
        )


def _add_file(
    archive: zipfile.ZipFile, relpath: str, fd: int, st: os.stat_result, plan: _Plan
) -> dict[str, Any]:
    _check_entry(relpath, st)
    info = _zipinfo(relpath, st, folder=False)
    reused = _reuse(archive, relpath, fd, st, info, plan.base)
    if reused is not None:
        return _listing(relpath, *reused, st)
    stored = relpath in plan.force_stored or plan.level == 0 or _store(os.pread(fd, _SAMPLE, 0))
    if not stored:
        size, digest = _deflate_large(archive, relpath, fd, st, info, plan)
        if size > STORE_ABOVE_RATIO * max(1, info.compress_size):
            raise _StoreInstead(relpath)
        return _listing(relpath, size, digest, st)
    info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    # where zipfile reads the level of a ZipInfo it writes (not in its type stubs)
    setattr(info, "_compresslevel", plan.level)  # noqa: B010
    try:
        with archive.open(info, "w", force_zip64=st.st_size >= ZIP64_FROM) as sink:

            def forward(_relpath: str, chunk: memoryview) -> None:
                sink.write(chunk)

            size, digest = digest_fd(fd, relpath=relpath, observer=forward)
    except RuntimeError as exc:  # zipfile: an entry grew past 2 GiB without zip64
        raise ChangedMeanwhile(
            f"{escape_display(relpath)} grew while it was read ({exc}): try again",
            path=escape_display(relpath),
        ) from None
    if not stored and size > STORE_ABOVE_RATIO * max(1, info.compress_size):
        raise _StoreInstead(relpath)
    return _listing(relpath, size, digest, st)


def _deflate_block(block: bytes, window: bytes, last: bool, level: int) -> bytes:
    """One block of a large entry deflated alone, primed with the 32 KiB before it (which an
    inflater has just produced, so a raw stream needs no dictionary marker) and ending on a
    byte boundary (a sync flush), the last block ending the stream: the blocks, joined, are
    one deflate stream, and the same one whatever thread made each."""
    if window:
        deflate = zlib.compressobj(level, zlib.DEFLATED, -15, zdict=window)
    else:
        deflate = zlib.compressobj(level, zlib.DEFLATED, -15)
    return deflate.compress(block) + deflate.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _deflate_large(
    archive: zipfile.ZipFile, relpath: str, fd: int, st: os.stat_result, info: zipfile.ZipInfo,
    plan: _Plan,
) -> tuple[int, str]:  # fmt: skip
    """Deflate a file too large to read whole in :data:`_BLOCK` blocks, on the workers when
    there are some, writing them in order; (size, digest). The local header is written again
    once the CRC and sizes are known, as zipfile does for a seekable zip."""
    zip64 = st.st_size >= ZIP64_FROM
    sink = start_entry(archive, info, zipfile.ZIP_DEFLATED, 0, 0, 0, zip64=zip64)
    hasher = xxhash.xxh3_128()
    crc = size = packed = 0
    pending: deque[futures.Future[bytes] | bytes] = deque()
    buffer = bytearray(_BLOCK)

    def read_block() -> bytes:
        filled = bytearray()
        while len(filled) < _BLOCK:
            count = read_into(fd, buffer, relpath)
            if not count:
                break
            filled += buffer[:count]
        return bytes(filled)

    def write_oldest() -> None:
        nonlocal packed
        done = pending.popleft()
        if not isinstance(done, bytes):
            job = done
            wait_for(lambda timeout: not futures.wait([job], timeout).not_done)
            done = job.result()
        sink.write(done)
        packed += len(done)

    window = b""
    block = read_block()
    while True:
        following = read_block() if len(block) == _BLOCK else b""
        last = not following
        hasher.update(block)
        crc = zlib.crc32(block, crc)
        size += len(block)
        if plan.pool is None:
            pending.append(_deflate_block(block, window, last, plan.level))
        else:
            with handed_over():
                pending.append(plan.pool.submit(_deflate_block, block, window, last, plan.level))
        window = block[-_WINDOW:]
        while len(pending) > _BLOCKS_AHEAD:
            write_oldest()
        if last:
            break
        block = following
    while pending:
        write_oldest()
    if not zip64 and max(size, packed) > zipfile.ZIP64_LIMIT:
        shown = escape_display(relpath)
        raise ChangedMeanwhile(f"{shown} grew past 4 GiB while it was read: try again", path=shown)
    end = sink.tell()
    info.CRC, info.file_size, info.compress_size = crc, size, packed
    sink.seek(info.header_offset)
    sink.write(info.FileHeader(zip64))
    sink.seek(end)
    end_entry(archive, info)
    return size, hasher.hexdigest()


def _reuse(
    archive: zipfile.ZipFile,
    relpath: str,
    fd: int,
    st: os.stat_result,
    info: zipfile.ZipInfo,
    base: Base | None,
) -> tuple[int, str] | None:
    """Copy the base's entry for an unchanged source (:mod:`bundler.home.reuse`): its (size,
    digest), or None with ``fd`` back at its start for a fresh entry."""
    candidate = base.candidate(relpath, st) if base is not None else None
    if base is None or candidate is None:
        return None
    matched = source_matches(fd, relpath, candidate)
    if matched is None:
        os.lseek(fd, 0, os.SEEK_SET)
        return None
    copy_raw(archive, base, candidate.info, info)
    return matched


def _listing(relpath: str, size: int, digest: str, st: os.stat_result) -> dict[str, Any]:
    """The ``backup.json`` entry of a file written whole."""
    entry: dict[str, Any] = {"path": relpath, "size": size, "xxh3_128": digest}
    if relpath != DATABASE and 0 <= st.st_mtime_ns <= MAX_MTIME_NS:
        # a time before 1970 or after 2262 is not carried (restore would refuse it): the file
        # is still backed up, and restored with the time of the restore
        entry["mtime_ns"] = st.st_mtime_ns
    return entry


def _open_tree(home_fd: int, name: str, home: Path) -> int | None:
    try:
        return open_dir_nofollow(home_fd, name)
    except FileNotFoundError:
        return None
    except OSError as exc:
        where = escape_display(str(home / name))
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsuitablePath(
                f"{where} is not a real folder (a symbolic link or a file): move it away",
                path=where,
            ) from None
        raise os_failure(
            f"cannot read {where} ({os.strerror(exc.errno or 0)})", exc, path=where
        ) from None


def _write_zip(archive: zipfile.ZipFile, plan: _Plan, skipped: SkipCounts) -> tuple[int, int]:
    if plan.progress is None:
        return _write_entries(archive, plan, skipped, None)
    files, nbytes = tally([plan.resolution.home / tree for tree in TREES])
    with contextlib.suppress(OSError):
        nbytes += os.lstat(plan.snapshot).st_size
        files += 1
    with phase(plan.progress, "backing up", files, nbytes):
        return _write_entries(archive, plan, skipped, plan.progress)


def _write_trees(writer: _InOrder, plan: _Plan, skipped: SkipCounts) -> list[str]:
    """Queue the database and every entry of the trees in order; the folders, listed."""
    folders: list[str] = []
    db_fd = os.open(plan.snapshot, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        writer.file(DATABASE, db_fd, os.fstat(db_fd))
    finally:
        os.close(db_fd)
    for tree in TREES:
        root = _open_tree(plan.home_fd, tree, plan.resolution.home)
        if root is None:
            continue
        try:
            folders.append(tree)
            writer.folder(_zipinfo(f"{tree}/", os.fstat(root), folder=True))
            for entry in walk(root, prefix=f"{tree}/", on_skip=skipped.record):
                if entry.kind == "dir":
                    problem = path_problem(entry.relpath, folder=True)
                    if problem:
                        shown = escape_display(entry.relpath)
                        raise UnsuitablePath(
                            f"{shown} {problem}: restore would refuse it", path=shown
                        )
                    folders.append(entry.relpath)
                    writer.folder(_zipinfo(f"{entry.relpath}/", entry.stat, True))
                else:
                    writer.file(entry.relpath, entry.fd, entry.stat)
        finally:
            os.close(root)
    return folders


def _write_entries(
    archive: zipfile.ZipFile, plan: _Plan, skipped: SkipCounts, progress: Progress | None
) -> tuple[int, int]:
    workers = _workers()
    pool = ThreadPoolExecutor(max_workers=workers) if workers else None
    plan.pool = pool
    try:
        writer = _InOrder(archive, plan, pool, progress)
        folders = _write_trees(writer, plan, skipped)
        writer.drain()
    finally:
        plan.pool = None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    entries = writer.entries
    index = {
        "format": FORMAT,
        "tool": f"bundler {__version__}",
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "agent": plan.resolution.agent,
        "entries": entries,
        "folders": folders,
    }
    data = json.dumps(index, ensure_ascii=False, indent=1).encode("utf-8")
    manifest = _zipinfo(MANIFEST, None, folder=False)
    manifest.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(manifest, data)
    return len(entries), sum(int(item["size"]) for item in entries)


@contextlib.contextmanager
def _temp_file(dir_fd: int, token: str, suffix: str) -> Iterator[str]:
    """The hidden name of a run's temporary in ``dir_fd`` (one ``token`` per run, so that its
    files are told apart from another run's together); removed on the way out unless
    renamed."""
    name = f"{TEMP_PREFIX}{token}{suffix}"
    try:
        yield name
    finally:
        # one that cannot be removed is named by the next backup (leftover_backups)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)


@contextlib.contextmanager
def _run_locked(dir_fd: int, zip_name: str) -> Iterator[None]:
    """Create the run's temporary zip at once and hold an exclusive ``flock`` on it for the
    whole run: what tells a running backup's temporaries from a dead one's
    (:func:`leftover_backups`). Rewriting the zip under its name keeps the inode, and so the
    lock."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(zip_name, flags, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _publish(dir_fd: int, temp: str, final: str) -> None:
    """Give ``temp`` the name ``final`` without ever replacing an existing file: the commit
    point of a backup."""
    with signals_deferred():  # the name and the record that the backup committed: one step
        try:
            os.link(temp, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                raise
            durable.renameat2(dir_fd, temp, dir_fd, final, durable.RENAME_NOREPLACE)
            commit_reached()
            return
        commit_reached()
    with contextlib.suppress(OSError):  # else the temporary's own clean-up removes it
        os.unlink(temp, dir_fd=dir_fd)


def _target(resolution: HomeResolution, to: Path | None) -> tuple[Path, str | None]:
    """The target folder and the requested final name (None: pick the default name).

    An existing folder as ``to`` receives a zip under the default timestamped name.
    """
    home = resolution.home
    if to is None:
        return home / BACKUPS, None
    to = Path(os.path.abspath(to))
    shown = escape_display(str(to))
    if os.path.isdir(to):
        folder = Path(os.path.realpath(to))
        _refuse_inside_trees(home, folder, shown)
        return folder, None
    if to.name in ("", ".", ".."):
        raise UnsuitablePath(f"--to {shown} must name a file", path=shown)
    if os.path.lexists(to):
        raise DestinationExists(
            f"{shown} exists; a backup never replaces a file: choose a new name", path=shown
        )
    parent = Path(os.path.realpath(to.parent))
    if not parent.is_dir():
        raise NotFound(f"the folder of {shown} does not exist: create it first", path=shown)
    _refuse_inside_trees(home, parent, shown)
    return parent, to.name


def _refuse_inside_trees(home: Path, folder: Path, shown: str) -> None:
    """Refuse a backup folder inside the home's ``files/`` or ``skills/`` (it would hold
    itself)."""
    for tree in TREES:
        real_tree = Path(os.path.realpath(home / tree))
        if folder == real_tree or real_tree in folder.parents:
            raise UnsuitablePath(
                f"{shown} is inside the home's {tree}/: a backup must not contain itself",
                path=shown,
            )


def _open_target(folder: Path, create: bool) -> int:
    """The folder the backup is written into, opened; ``create``: made first when absent (the
    home's ``backups/``). Failures are :class:`Refused` naming the folder."""
    shown = escape_display(str(folder))
    if create:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:  # a read-only home, a home the user may not write in
            raise os_failure(
                f"cannot create {shown} for the backup ({os.strerror(exc.errno or 0)}); back "
                "up elsewhere with --to FILE or --to DIR, or fix the permissions of its folder",
                exc,
                path=shown,
            ) from None
    try:
        return durable.open_dir(folder, follow=not create)
    except OSError as exc:
        raise os_failure(
            f"cannot use {shown} for the backup ({os.strerror(exc.errno or 0)})", exc, path=shown
        ) from None


def backup_home(
    project: Path,
    *,
    to: Path | None = None,
    environ: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    base: Path | None = None,
    full: bool = False,
    compression: str = DEFAULT_COMPRESSION,
) -> BackupReport:
    """Back up the data home of ``project`` to one verified zip (04 §5.1).

    ``to``: the zip to create (never replaced; refused inside ``files/`` or ``skills/``);
    default ``<home>/backups/backup-<UTC stamp>.zip``. Unchanged entries are copied from
    ``base`` (default: the newest backup of the target folder, none for ``--to FILE``; 04
    §5.1.1) unless ``full``; a base that fails its checks is not used, with a warning. Raises
    :class:`Refused` (exit 1) for a home without a database, an entry restore would refuse, an
    existing ``to``, and I/O failures; :class:`InvalidInput` for a bad ``Agent.yaml``.
    ``progress`` sees two phases: ``backing up`` (its totals counted first) and ``checking``
    the written zip. ``compression`` names the deflate level of entries compressed afresh
    (:data:`LEVELS`); a copied entry keeps the base's.
    """
    if compression not in LEVELS:
        raise UsageError(
            f"--compression {escape_display(compression)}: choose one of {', '.join(LEVELS)}"
        )
    resolution = resolve_home(project, environ=environ)
    home = resolution.home
    if not os.path.lexists(resolution.database):
        shown = escape_display(str(resolution.database))
        raise NotFound(
            f"{shown} does not exist: a home without a database is not backed up", path=shown
        )
    home_fd = open_home_dir(home)
    try:
        if not lock_home(home_fd, shared=True):
            raise home_busy(home)
        stale = leftover_backups(home)
        folder, requested = _target(resolution, to)
        target_fd = _open_target(folder, create=requested is None)
        try:
            base_path = _base_path(folder, requested, base, full)
            report = _backup_into(
                resolution,
                home_fd,
                folder,
                target_fd,
                requested,
                progress,
                base_path,
                LEVELS[compression],
            )
            # a backup cannot tell a dead run's temporaries from a live one's: it names them
            shown = escape_display(str(home))
            report.warnings.extend(
                hints.Hinted(
                    f"{', '.join(escape_display(n) for n in names)} in {shown}: left by an "
                    "interrupted backup",
                    hints.command("recover", "--home", str(home)),
                )
                for names in stale
            )
            return report
        except OSError as exc:
            shown = escape_display(str(folder))
            raise os_failure(
                f"backup failed ({os.strerror(exc.errno or errno.EIO)}) writing in {shown}; "
                "no backup was published",
                exc,
                path=shown,
            ) from exc
        finally:
            os.close(target_fd)
    finally:
        os.close(home_fd)


def _base_path(folder: Path, requested: str | None, base: Path | None, full: bool) -> Path | None:
    """The earlier backup to copy unchanged entries from (04 §5.1.1), or None."""
    if full:
        return None
    if base is None:
        # a zip named by --to FILE may sit among unrelated files: only a folder of backups
        return newest_backup(folder) if requested is None else None
    shown = escape_display(str(base))
    if not os.path.isfile(base):
        raise NotFound(f"--base {shown} is not an existing backup zip", path=shown)
    return Path(os.path.abspath(base))


def _backup_into(
    resolution: HomeResolution,
    home_fd: int,
    folder: Path,
    target_fd: int,
    requested: str | None,
    progress: Progress | None,
    base_path: Path | None,
    level: int,
) -> BackupReport:
    token = durable.random_token()
    warnings: list[str] = []
    with (
        _temp_file(target_fd, token, ".db") as db_name,
        _temp_file(target_fd, token, ".zip") as zip_name,
        _run_locked(target_fd, zip_name),
        open_base(base_path, warnings) if base_path else contextlib.nullcontext() as base,
    ):
        info = snapshot_database(
            resolution.database, folder / db_name, method="vacuum", check=False
        )
        # SQLite releases the GIL: the integrity check runs on the second core while we zip
        with ThreadPoolExecutor(max_workers=1) as pool:
            with signals_deferred():  # its worker, started here, keeps them blocked
                checked = pool.submit(check_snapshot, resolution.database, folder / db_name)
            plan = _Plan(resolution, home_fd, folder / db_name, progress, base=base, level=level)
            entries, total, skipped = _write_until_done(plan, target_fd, zip_name, warnings)
            wait_for(lambda timeout: not futures.wait([checked], timeout).not_done)
            checked.result()
        # the snapshot passed integrity_check and the digests tie the zip's copy to it; the
        # digests are the sources', so a copied entry is checked against its source too
        while True:
            try:
                with open_zip(folder / zip_name) as archive:
                    check_contents(archive, check_database=False, progress=progress)
                break
            except InvalidInput as exc:
                if plan.base is None or not plan.base.reused:
                    raise
                shown = escape_display(str(plan.base.path))
                warnings.append(f"{shown} is not used as the base: {exc.message}")
                plan.base = None
                entries, total, skipped = _write_until_done(plan, target_fd, zip_name, warnings)
        final = _publish_name(target_fd, zip_name, requested)
        used = plan.base
        report = BackupReport(
            folder / final,
            entries,
            total,
            skipped,
            info.read_as,
            warnings,
            base=None if used is None else used.path,
            reused=0 if used is None else used.reused,
        )
        try:
            durable.fsync_dir(target_fd)
        except OSError as exc:  # after the commit point: a warning, the backup stands
            report.warnings.append(
                f"the backup is published, but its name was not flushed ({exc.strerror}); "
                "a power loss may undo it"
            )
    return report


def _write_until_done(
    plan: _Plan, target_fd: int, zip_name: str, warnings: list[str]
) -> tuple[int, int, SkipCounts]:
    """Write the zip; again with an entry stored when it compressed beyond the margin, and
    again without the base when it could not give an entry's bytes."""
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        skipped = SkipCounts()
        fd = os.open(zip_name, flags, 0o600, dir_fd=target_fd)
        if plan.base is not None:
            plan.base.reused = 0
        try:
            with (
                os.fdopen(os.dup(fd), "w+b") as raw,
                zipfile.ZipFile(raw, "w", allowZip64=True) as archive,
            ):
                entries, total = _write_zip(archive, plan, skipped)
            os.fsync(fd)
        except _StoreInstead as again:
            plan.force_stored.add(again.name)
            continue
        except BaseUnusable as failed:
            assert plan.base is not None
            shown = escape_display(str(plan.base.path))
            warnings.append(f"{shown} is not used as the base: {failed.reason}")
            plan.base = None
            continue
        finally:
            os.close(fd)
        return entries, total, skipped


def _publish_name(target_fd: int, zip_name: str, requested: str | None) -> str:
    if requested is not None:
        try:
            _publish(target_fd, zip_name, requested)
        except FileExistsError:
            raise DestinationExists(
                f"{escape_display(requested)} appeared meanwhile; a backup never replaces a file",
                path=escape_display(requested),
            ) from None
        return requested
    now = datetime.now(timezone.utc)
    for attempt in range(1, 1000):
        name = default_backup_name(now, attempt)
        try:
            _publish(target_fd, zip_name, name)
        except FileExistsError:
            continue
        return name
    raise DestinationExists("too many backups with the same timestamp: try again in a second")


def leftover_backups(home: Path) -> list[list[str]]:
    """What interrupted backups left in ``<home>/backups``, grouped by run (the ``.db`` and the
    ``.zip`` of one token are one leftover); changes nothing. A running backup's temporaries
    are not leftovers: its zip is locked (:func:`_run_locked`), and while any backup runs a
    snapshot folder may be its own, so none is named then."""
    try:
        home_fd = durable.open_dir(home, follow=True)
    except OSError:
        return []
    try:
        fd = open_dir_nofollow(home_fd, BACKUPS)
    except OSError:
        return []
    finally:
        os.close(home_fd)
    try:
        runs: dict[str, list[str]] = {}
        snapshots: list[list[str]] = []
        for name in sorted(os.listdir(fd)):
            if name.startswith(TEMP_PREFIX):
                token = name[len(TEMP_PREFIX) :].split(".", 1)[0]
                runs.setdefault(token, []).append(f"{BACKUPS}/{name}")
            elif name.startswith(SNAPSHOT_PREFIX):
                snapshots.append([f"{BACKUPS}/{name}"])
        alive = {t for t in runs if durable.held_by_another(f"{TEMP_PREFIX}{t}.zip", dir_fd=fd)}
    finally:
        os.close(fd)
    dead = [names for token, names in runs.items() if token not in alive]
    return dead if alive else dead + snapshots


def remove_leftovers(home: Path, *, dry_run: bool) -> list[str]:
    """Remove what an interrupted backup left in ``<home>/backups`` (:func:`leftover_backups`:
    hidden ``.backup-*`` files and ``.bundler-snap-*`` folders, never a finished zip nor a
    running backup's)."""
    actions: list[str] = []
    leftovers = [path.split("/", 1)[1] for run in leftover_backups(home) for path in run]
    if not leftovers:
        return actions
    try:
        home_fd = durable.open_dir(home, follow=True)
    except OSError:
        return actions
    try:
        fd = open_dir_nofollow(home_fd, BACKUPS)
    except OSError:
        return actions
    finally:
        os.close(home_fd)
    try:
        for name in leftovers:
            shown = f"{BACKUPS}/{escape_display(name)}"
            actions.append(
                step(
                    "remove",
                    os.path.join(os.path.abspath(home), BACKUPS, name),
                    f"{shown} (interrupted backup)",
                    dry_run=dry_run,
                )
            )
            if not dry_run:
                rmtree_at(fd, name)
        if actions and not dry_run:
            durable.fsync_dir(fd)
    finally:
        os.close(fd)
    return actions
