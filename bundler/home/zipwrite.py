"""One pass of ``home backup`` writing its zip (04 §5.1): the database snapshot, then the
walk of ``files/`` and ``skills/`` in order, each file copied from the base when unchanged
(:mod:`bundler.home.reuse`) or read and compressed afresh (:mod:`bundler.home.deflate`), and
``backup.json`` last, once every digest is known.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import stat
import time
import zipfile
import zlib
from collections import deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import xxhash

from bundler import __version__
from bundler.errors import ChangedMeanwhile, UnsuitablePath, os_failure
from bundler.fs.copytree import digest_fd
from bundler.fs.durable import start_writeback
from bundler.fs.interrupts import settled, wait_for
from bundler.fs.safefs import SkipCounts, open_dir_nofollow, walk
from bundler.fs.tally import tally
from bundler.fs.threads import Pool
from bundler.home.deflate import (
    DEFAULT_COMPRESSION,
    LEVELS,
    SAMPLE,
    Packed,
    deflate_engine,
    deflate_large,
    pack,
    store_as_is,
    workers,
)
from bundler.home.homes import HomeResolution
from bundler.home.reuse import (
    ZIP64_FROM,
    Base,
    Candidate,
    CopyJob,
    close_zip,
    copy_raw,
    copy_run,
    end_entry,
    source_matches,
    start_entry,
)
from bundler.home.reuse_index import Known, stat_key
from bundler.home.zipcheck import (
    DATABASE,
    FORMAT,
    MANIFEST,
    MAX_ENTRY_SIZE,
    MAX_MTIME_NS,
    STORE_ABOVE_RATIO,
    TREES,
    path_problem,
)
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase
from bundler.rules.units import human_size

_PARALLEL_MAX = 16 << 20
"""Files up to this size are read whole and compressed on a worker thread; larger ones are
streamed through the main thread."""
_IN_FLIGHT = 64 << 20
"""At most this many bytes read but not yet written: what the parallel entries cost in memory."""
_QUEUED = 256
_BATCH_FILES = 32
_BATCH = 1 << 20
"""A worker is handed small files in batches of up to :data:`_BATCH_FILES` files or this many
bytes."""
_WRITEBACK = 8 << 20
"""Each time this many more bytes of the zip have reached the kernel, their writing to disk is
started (:func:`~bundler.fs.durable.start_writeback`): the disk writes the zip while the rest is
made, and the flush before it is published waits for little."""
_MIN_DATE = (1980, 1, 1, 0, 0, 0)
_MAX_DATE = (2107, 12, 31, 23, 59, 58)


class StoreInstead(Exception):
    """An entry compressed beyond STORE_ABOVE_RATIO: write the zip again with it stored."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass
class Plan:
    """What one pass writes: chosen entries and what they are stored as."""

    resolution: HomeResolution
    home_fd: int
    snapshot: Path
    """Where the store's snapshot is taken (unused while :attr:`copy_database`)."""
    progress: Progress | None = None
    force_stored: set[str] = field(default_factory=set)
    base: Base | None = None
    level: int = LEVELS[DEFAULT_COMPRESSION]
    pool: Pool | None = None
    known: dict[str, Known] = field(default_factory=dict)
    """The home's index (:mod:`bundler.home.reuse_index`): files not read when unchanged."""
    made: dict[str, Known] = field(default_factory=dict)
    """What this pass made of each file it could tell was stable while read: the next index."""
    trusted: set[str] = field(default_factory=set)
    """Entries whose copied bytes hashed to bytes a backup's read-back already checked."""
    asked: tuple[str, tuple[Candidate, Known]] | None = None
    """The walk's last file left unopened and :meth:`unchanged`'s answer, asked once."""
    store: os.stat_result | None = None
    """The store's stat the next index records: read quiet and settled (else None, never
    recorded), or, while :attr:`copy_database`, the stat the index recorded."""
    database_read_as: str = ""
    """How the store was read (``quiet``, ``leftover``, ``live``: :mod:`bundler.fs.snapshot`),
    or ``unchanged``: the index says it is unchanged since the base's snapshot (:meth:`unchanged`
    of ``chat.db`` and :attr:`store`), which is copied (:attr:`copy_database`)."""

    @property
    def copy_database(self) -> bool:
        """No snapshot is taken: the base's entry for the unchanged store is copied."""
        return self.database_read_as == UNCHANGED

    def unchanged(self, relpath: str, st: os.stat_result) -> tuple[Candidate, Known] | None:
        """The base's entry and the index's record for a file the index says is unchanged
        (restic's rule: size, times, inode and device as when its entry was made) and whose
        entry the base holds as it was made (digest, CRC, method, sizes); else None."""
        known = self.known.get(relpath)
        if known is None or self.base is None or known.stat != stat_key(st):
            return None
        base = self.base
        found = base.database() if relpath == DATABASE else base.candidate(relpath, st)
        if found is None:
            return None
        record = found.record
        if (record.digest, record.crc, record.method, record.packed) != (
            known.digest,
            known.crc,
            known.method,
            known.packed,
        ):
            return None
        return found, known


def _zip_time(mtime_ns: int) -> tuple[int, int, int, int, int, int]:
    return _zip_time_of(mtime_ns // 1_000_000_000)


@functools.lru_cache(maxsize=4096)
def _zip_time_of(second: int) -> tuple[int, int, int, int, int, int]:
    """The zip time of a second since the epoch; kept, as files are written in bursts: most
    of a tree's files share their second with others, and the conversion costs more than the
    rest of an entry's header."""
    t = time.gmtime(second)
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


UNCHANGED = "unchanged"
""":attr:`Plan.database_read_as` of a store whose entry is copied from the base."""

Finish = Callable[["Packed | None"], None]
_COPIED = -1
"""The slot of a queued entry copied from the base unread (it joins the run being gathered)."""


class _Batch:
    """Files read whole and handed to one worker together: one hand-over, one wait and one
    future for many small files, where a file each cost more than compressing a small one."""

    def __init__(self) -> None:
        self.jobs: list[bytes] = []
        self.nbytes = 0
        self.future: futures.Future[list[Packed]] | None = None
        self.results: list[Packed] | None = None


def _pack_all(jobs: list[bytes], level: int) -> list[Packed]:
    """What a worker does with a batch: each file packed alone, as :func:`pack` packs one."""
    return [pack(data, level) for data in jobs]


class _InOrder:
    """Entries written in walk order while their reading is done here and their compression on
    worker threads (zlib releases the GIL), small files in batches: each file is packed alone,
    so the zip is the same whatever the thread count and however the files were batched."""

    def __init__(
        self,
        archive: zipfile.ZipFile,
        plan: Plan,
        pool: Pool | None,
        progress: Progress | None,
    ) -> None:
        self.archive = archive
        self.plan = plan
        self.pool = pool
        self.progress = progress
        self.entries: list[dict[str, Any]] = []
        self.queue: deque[tuple[_Batch | None, int, Finish, int]] = deque()
        self.in_flight = 0
        self.batch: _Batch | None = None
        self.run: list[CopyJob] = []
        self.written = 0
        """How far the zip's file was handed to the disk (:data:`_WRITEBACK`)."""

    def folder(self, info: zipfile.ZipInfo) -> None:
        """A folder entry, after every entry before it."""
        self._push(None, 0, lambda _packed: self.archive.writestr(info, b""), 0)

    def file(self, relpath: str, fd: int, st: os.stat_result) -> None:
        """A file entry, after every entry before it; ``fd`` is read before this returns (-1:
        a file the walk left unopened, unchanged by the index, :meth:`Plan.unchanged`)."""
        plan = self.plan
        if fd < 0:
            self._unchanged(relpath, st)
            return
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
        stable = stat_key(os.fstat(fd)) == stat_key(st)
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        # unchanged: the size, XXH3-128 and CRC-32 of the source are those of the base's entry
        if candidate is not None and not (
            size == candidate.record.size
            and digest == candidate.record.digest
            and zlib.crc32(data) == candidate.record.crc
        ):
            candidate = None
        batch, slot = None, 0
        if candidate is None:
            batch = self.batch = self.batch or _Batch()
            slot = len(batch.jobs)
            batch.jobs.append(data)
            batch.nbytes += len(data)

        def finish(packed: Packed | None) -> None:
            if packed is None and base is not None and candidate is not None:
                raw = copy_raw(self.archive, base, candidate, info)
            else:
                assert packed is not None
                payload = packed.payload
                sink = start_entry(
                    self.archive, info, packed.method, packed.crc, size, len(payload)
                )
                sink.write(payload)
                end_entry(self.archive, info)
                raw = xxhash.xxh3_128_hexdigest(payload)
            if stable:
                _remember(plan, relpath, st, digest, info, raw)
            self._record(_listing(relpath, size, digest, st))

        self._push(batch, slot, finish, len(data))
        if batch is not None and (len(batch.jobs) >= _BATCH_FILES or batch.nbytes >= _BATCH):
            self._submit()

    def _unchanged(self, relpath: str, st: os.stat_result) -> None:
        """Queue the base's entry for a file the index says is unchanged, copied without
        reading the file; its bytes must hash to those the index recorded."""
        plan = self.plan
        # not _check_entry: its name and size are those of an entry of the base, which passed
        # the directory's checks restore makes (zipcheck.check_infos) when it was read back
        of_store = relpath == DATABASE
        asked, plan.asked = plan.asked, None
        # what the walk asked of this file (the stat it was given), answered once
        found = asked[1] if asked is not None and asked[0] == relpath else None
        found = found or plan.unchanged(relpath, st)
        assert found is not None and plan.base is not None
        candidate, known = found
        # the store's entry is its snapshot's: made now, private (as a snapshot is made)
        info = _zipinfo(relpath, None if of_store else st, folder=False)

        def finish(_packed: Packed | None) -> None:
            # copied with its neighbours once an entry of another kind is due (copy_run)
            self.run.append((candidate, info, known.raw))
            # the bytes are those a backup's read-back inflated and checked (their CRC and
            # digest): the same bytes inflate the same, so this one's read-back skips them
            plan.trusted.add(relpath)
            plan.made[relpath] = known
            self._record(_listing(relpath, candidate.record.size, known.digest, st))

        if self.queue:  # after the entries still being compressed
            self._push(None, _COPIED, finish, 0)
        else:
            finish(None)

    def drain(self) -> None:
        """Write every queued entry."""
        while self.queue:
            self._write_oldest()
        self._copy_run()

    def _copy_run(self) -> None:
        """Copy the entries gathered from the base, in order."""
        if self.run:
            assert self.plan.base is not None
            copy_run(self.archive, self.plan.base, self.run)
            self.run.clear()

    def _submit(self) -> None:
        """Hand the open batch to a worker."""
        batch, self.batch = self.batch, None
        if batch is None:
            return
        assert self.pool is not None
        batch.future = self.pool.submit(_pack_all, batch.jobs, self.plan.level)

    def _push(self, batch: _Batch | None, slot: int, finish: Finish, nbytes: int) -> None:
        self.queue.append((batch, slot, finish, nbytes))
        self.in_flight += nbytes
        # an entry that waits for no worker is written as soon as it is the oldest
        while self.queue and (
            self.in_flight > _IN_FLIGHT or len(self.queue) > _QUEUED or self.queue[0][0] is None
        ):
            self._write_oldest()

    def _write_oldest(self) -> None:
        batch, slot, finish, nbytes = self.queue.popleft()
        if slot != _COPIED:
            self._copy_run()
        packed = None
        if batch is not None:
            if batch.future is None:  # the open batch: its first entry is due now
                self._submit()
            if batch.results is None:
                done = batch.future
                assert done is not None
                wait_for(settled(done))
                batch.results = done.result()
            packed = batch.results[slot]
        finish(packed)
        self.in_flight -= nbytes

    def _record(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)
        if self.archive.start_dir - self.written >= _WRITEBACK:
            self._start_writeback()
        if self.progress is not None:
            self.progress(1, entry["size"])

    def _start_writeback(self) -> None:
        """Start writing to disk what the zip's file holds past :attr:`written`."""
        assert self.archive.fp is not None
        fd = self.archive.fp.fileno()
        # what reached the kernel (the file's own offset): the write buffer holds the rest
        reached = os.lseek(fd, 0, os.SEEK_CUR)
        if reached > self.written:
            start_writeback(fd, self.written, reached - self.written)
            self.written = reached


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


def _remember(
    plan: Plan, relpath: str, st: os.stat_result, digest: str, info: zipfile.ZipInfo, raw: str
) -> None:
    """Record for the next index what this pass made of a file whose stat did not move while
    it was read (the database's snapshot under the store's stat, when :attr:`Plan.store` is
    one to record)."""
    if relpath == DATABASE:
        if plan.store is None:
            return
        st = plan.store
    known = Known(stat_key(st), digest, info.CRC, info.compress_type, info.compress_size, raw)
    plan.made[relpath] = known


def _add_file(
    archive: zipfile.ZipFile, relpath: str, fd: int, st: os.stat_result, plan: Plan
) -> dict[str, Any]:
    _check_entry(relpath, st)
    info = _zipinfo(relpath, st, folder=False)
    reused = _reuse(archive, relpath, fd, st, info, plan.base)
    if reused is not None:
        size, digest, raw = reused
        if stat_key(os.fstat(fd)) == stat_key(st):
            _remember(plan, relpath, st, digest, info, raw)
        return _listing(relpath, size, digest, st)
    stored = relpath in plan.force_stored or plan.level == 0 or store_as_is(os.pread(fd, SAMPLE, 0))
    if not stored:
        size, digest, raw = deflate_large(archive, relpath, fd, st, info, plan.pool, plan.level)
        if size > STORE_ABOVE_RATIO * max(1, info.compress_size):
            raise StoreInstead(relpath)
        if stat_key(os.fstat(fd)) == stat_key(st):
            _remember(plan, relpath, st, digest, info, raw)
        return _listing(relpath, size, digest, st)
    info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    # where zipfile reads the level of a ZipInfo it writes (not in its type stubs)
    setattr(info, "_compresslevel", plan.level)  # noqa: B010
    try:
        with archive.open(info, "w", force_zip64=st.st_size >= ZIP64_FROM) as sink:

            def forward(_relpath: str, chunk: memoryview) -> None:
                sink.write(chunk)

            size, digest = digest_fd(fd, relpath=relpath, observer=forward)
        if stored and stat_key(os.fstat(fd)) == stat_key(st):
            # stored: the entry's bytes are the file's, whose XXH3-128 is its digest
            _remember(plan, relpath, st, digest, info, digest)
    except RuntimeError as exc:  # zipfile: an entry grew past 2 GiB without zip64
        raise ChangedMeanwhile(
            f"{escape_display(relpath)} grew while it was read ({exc}): try again",
            path=escape_display(relpath),
        ) from None
    if not stored and size > STORE_ABOVE_RATIO * max(1, info.compress_size):
        raise StoreInstead(relpath)
    return _listing(relpath, size, digest, st)


def _reuse(
    archive: zipfile.ZipFile,
    relpath: str,
    fd: int,
    st: os.stat_result,
    info: zipfile.ZipInfo,
    base: Base | None,
) -> tuple[int, str, str] | None:
    """Copy the base's entry for an unchanged source (:mod:`bundler.home.reuse`): its (size,
    digest, XXH3-128 of the bytes copied), or None with ``fd`` back at its start for a fresh
    entry."""
    candidate = base.candidate(relpath, st) if base is not None else None
    if base is None or candidate is None:
        return None
    matched = source_matches(fd, relpath, candidate)
    if matched is None:
        os.lseek(fd, 0, os.SEEK_SET)
        return None
    return (*matched, copy_raw(archive, base, candidate, info))


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


def write_zip(archive: zipfile.ZipFile, plan: Plan, skipped: SkipCounts) -> tuple[int, int]:
    """Write every entry of ``plan`` into ``archive``, ``backup.json`` last, and close it (its
    directory written, :func:`~bundler.home.reuse.close_zip`): the count of file entries and
    their bytes. ``skipped`` counts what the walk did not carry."""
    # the deflate engine is loaded here, before any worker needs it: an import that runs out of
    # memory in a worker thread fails as CPython's SystemError, not as a MemoryError
    deflate_engine()
    if plan.progress is None:
        return _write_entries(archive, plan, skipped, None)
    files, nbytes = tally([plan.resolution.home / tree for tree in TREES])
    files += 1
    if plan.copy_database:  # the base's snapshot of the unchanged store
        copied = plan.base.database() if plan.base is not None else None
        nbytes += 0 if copied is None else copied.record.size
    else:
        with contextlib.suppress(OSError):
            nbytes += os.lstat(plan.snapshot).st_size
    with phase(plan.progress, "backing up", files, nbytes):
        return _write_entries(archive, plan, skipped, plan.progress)


def _unopened(plan: Plan, prefix: str, rel: str, lst: os.stat_result) -> bool:
    """Whether the walk leaves a file unopened: the index says it is unchanged."""
    relpath = prefix + rel
    found = plan.unchanged(relpath, lst)
    if found is None:
        return False
    plan.asked = (relpath, found)
    return True


def _write_trees(writer: _InOrder, plan: Plan, skipped: SkipCounts) -> list[str]:
    """Queue the database and every entry of the trees in order; the folders, listed."""
    folders: list[str] = []
    if plan.copy_database:
        assert plan.store is not None
        writer.file(DATABASE, -1, plan.store)
    else:
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
            unopened = functools.partial(_unopened, plan, f"{tree}/")
            for entry in walk(root, prefix=f"{tree}/", on_skip=skipped.record, unopened=unopened):
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
    archive: zipfile.ZipFile, plan: Plan, skipped: SkipCounts, progress: Progress | None
) -> tuple[int, int]:
    plan.made.clear()
    plan.trusted.clear()
    threads = workers()
    pool = Pool(threads, name="bundler-deflate") if threads else None
    plan.pool = pool
    try:
        writer = _InOrder(archive, plan, pool, progress)
        folders = _write_trees(writer, plan, skipped)
        writer.drain()
    finally:
        plan.pool = None
        if pool is not None:
            pool.shutdown(cancel_pending=True)
    entries = writer.entries
    head = {
        "format": FORMAT,
        "tool": f"bundler {__version__}",
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "agent": plan.resolution.agent,
    }
    data = _index_json(head, entries, folders)
    manifest = _zipinfo(MANIFEST, None, folder=False)
    # by the entries' engine and level: zipfile's own deflate (zlib 6) took longer over a large
    # home's listing than ISA-L over the ten files a second backup compresses
    packed = pack(data, plan.level)
    sink = start_entry(archive, manifest, packed.method, packed.crc, len(data), len(packed.payload))
    sink.write(packed.payload)
    end_entry(archive, manifest)
    close_zip(archive)
    return len(entries), sum(int(item["size"]) for item in entries)


def _index_json(head: dict[str, Any], entries: list[dict[str, Any]], folders: list[str]) -> bytes:
    """``backup.json``: ``head``'s keys, then the entries one a line, as backup-format.md
    shows them, and the folders; made by json's C encoder (an indent would send every value
    through its Python one), an entry of :func:`_listing`'s usual keys spelled as it would
    spell it, without its per-call cost."""
    encode = json.JSONEncoder(ensure_ascii=False).encode
    lines = ",\n".join(_entry_json(entry, encode) for entry in entries)
    text = encode(head)[:-1] + f', "entries": [\n{lines}\n], "folders": {encode(folders)}' + "}\n"
    return text.encode("utf-8")


_LISTED = ("path", "size", "xxh3_128")
_LISTED_TIMED = (*_LISTED, "mtime_ns")
_quoted: Callable[[str], str] = json.encoder.encode_basestring
"""How json's encoder (``ensure_ascii=False``) writes a string: its C function where built."""


def _entry_json(entry: dict[str, Any], encode: Callable[[Any], str]) -> str:
    """``encode(entry)``, the same text: a path, size, digest and time written directly, any
    other entry by ``encode``."""
    keys = tuple(entry)
    if keys != _LISTED and keys != _LISTED_TIMED:
        return encode(entry)
    path, size, digest = entry["path"], entry["size"], entry["xxh3_128"]
    mtime = entry.get("mtime_ns")
    if (type(path), type(size), type(digest)) != (str, int, str) or (
        mtime is not None and type(mtime) is not int
    ):
        return encode(entry)
    text = f'{{"path": {_quoted(path)}, "size": {size}, "xxh3_128": {_quoted(digest)}'
    return text + ("}" if mtime is None else f', "mtime_ns": {mtime}}}')
