"""Copying a walked tree (02 §7): ``O_EXCL`` writes, XXH3-128 digests, durability.

The source side is :func:`bundler.fs.safefs.walk`, so everything it skips or refuses applies here.
The destination side is created through folder descriptors too: folders 0700, files with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (a planted name or link in the destination fails the copy
instead of being written through), then given the source's permission bits less setuid,
setgid and sticky, and its access and modification times (ns).

Bytes move with ``copy_file_range`` (falling back to read+write through one reused buffer),
then the copy is read back from the page cache for its XXH3-128 digest and for ``observer``
(the exporter's secret sweep), so digest and sweep describe exactly the bytes that travel even
when the source changes during the copy. Measured on the reference tree (tools/bench_copy.py
``--parts method``), this beat read+write-and-hash in one pass for small and large files.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Literal

import xxhash

from bundler.errors import Refused, os_failure
from bundler.fs import durable
from bundler.fs.digest import BUFFER_SIZE as BUFFER_SIZE
from bundler.fs.digest import Observer as Observer
from bundler.fs.digest import digest_fd as digest_fd
from bundler.fs.digest import failure, read_failure
from bundler.fs.safefs import Entry, Exclude, OnSkip, walk

CFR_CHUNK = 1 << 30
LIVE_STORE_MAGIC = b"SQLite format 3\x00"
# A database with one of these beside it is being written by a server (02 §3 `workspace/<path>`).
LIVE_STORE_MARKERS = ("-wal", "-journal")
# Sidecars of a skipped live store are skipped with it: alone they are a torn store.
LIVE_STORE_SIDECARS = ("-wal", "-journal", "-shm")

# O_RDWR: the copy is read back for its digest (see _Copier._digest_written)
_CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MODE_BITS = 0o777  # setuid, setgid and sticky never travel
_CFR_UNSUPPORTED = frozenset(
    {errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF, errno.ETXTBSY}
)

DurableMethod = Literal["auto", "syncfs", "fsync"]


@dataclass(frozen=True)
class CopiedFile:
    """One copied regular file: its path (with prefix), byte count and XXH3-128 hex digest."""

    relpath: str
    size: int
    xxh3_128: str


def _write_failure(relpath: str, exc: OSError) -> Refused:
    return failure("write", relpath, exc)


def _copy_failure(relpath: str, exc: OSError) -> Refused:
    # One system call reads the source and writes the copy: the errno says which failed.
    return failure("copy", relpath, exc)


def _has_live_marker(parent_fd: int, name: str, relpath: str) -> bool:
    for suffix in LIVE_STORE_MARKERS:
        try:
            os.stat(name + suffix, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            # a store whose sidecar cannot be examined may be live: never guess it is quiet
            raise read_failure(relpath + suffix, exc) from exc
        return True
    return False


class _Copier:
    """State of one :func:`copy_tree` call: destination folder stack, buffer, live stores."""

    def __init__(self, dst_dir_fd: int, options: CopyOptions) -> None:
        self.dst_stack = [dst_dir_fd]  # dst_stack[d - 1] holds entries of depth d
        self.buf = bytearray(BUFFER_SIZE)
        self.view = memoryview(self.buf)
        self.observer = options.observer
        self.on_live_store = options.on_live_store
        self.dir_mode = options.dir_mode
        self.use_cfr = options.use_copy_file_range and hasattr(os, "copy_file_range")
        self.live_stores: set[str] = set()

    def close(self) -> None:
        self.truncate(1)

    def truncate(self, length: int) -> None:
        while len(self.dst_stack) > length:
            os.close(self.dst_stack.pop())

    def make_dir(self, entry: Entry) -> None:
        self.truncate(entry.depth)
        parent = self.dst_stack[-1]
        try:
            os.mkdir(entry.name, self.dir_mode, dir_fd=parent)
            fd = os.open(
                entry.name,
                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=parent,
            )
        except OSError as exc:
            raise _write_failure(entry.relpath, exc) from exc
        self.dst_stack.append(fd)

    def copy_file(self, entry: Entry) -> CopiedFile | None:
        self.truncate(entry.depth)
        relpath = entry.relpath
        if self.on_live_store is not None and self._is_live_store(entry):
            self.on_live_store(relpath)
            return None
        try:
            dst = os.open(entry.name, _CREATE_FLAGS, 0o600, dir_fd=self.dst_stack[-1])
        except OSError as exc:
            raise _write_failure(relpath, exc) from exc
        try:
            try:
                written = self._transfer(entry.fd, dst, entry.stat.st_size, relpath)
            except OSError as exc:
                raise _copy_failure(relpath, exc) from exc
            size, digest = self._digest_written(dst, written, relpath)
            src = entry.stat
            try:
                os.fchmod(dst, stat.S_IMODE(src.st_mode) & _MODE_BITS)
                os.utime(dst, ns=(src.st_atime_ns, src.st_mtime_ns))
            except OSError as exc:
                raise _write_failure(relpath, exc) from exc
        finally:
            os.close(dst)
        return CopiedFile(relpath, size, digest)

    def _is_live_store(self, entry: Entry) -> bool:
        """A live SQLite store or a sidecar of one (02 §3 ``workspace/<path>``)."""
        relpath = entry.relpath
        for suffix in LIVE_STORE_SIDECARS:
            if relpath.endswith(suffix) and relpath[: -len(suffix)] in self.live_stores:
                return True
        if entry.stat.st_size < len(LIVE_STORE_MAGIC):
            return False
        try:
            head = os.pread(entry.fd, len(LIVE_STORE_MAGIC), 0)
        except OSError as exc:
            raise read_failure(relpath, exc) from exc
        if head == LIVE_STORE_MAGIC and _has_live_marker(entry.parent_fd, entry.name, relpath):
            self.live_stores.add(relpath)
            return True
        return False

    def _transfer(self, src: int, dst: int, expected: int, relpath: str) -> int:
        """Move the source's bytes into ``dst``; the byte count.

        ``copy_file_range`` keeps the data in the kernel; it measured faster than read+write on
        both small and large files (tools/bench_copy.py). Where the kernel or filesystem pair
        refuses it (EXDEV across filesystems on Linux >= 5.19, ENOSYS...), read+write is used.
        A call that reaches the size fstat gave ends the copy without one more call to see EOF.
        """
        written = 0
        if self.use_cfr:
            try:
                while True:
                    count = os.copy_file_range(src, dst, CFR_CHUNK)
                    written += count
                    if not count or (written == expected and count < CFR_CHUNK):
                        return written
            except OSError as exc:
                if written or exc.errno not in _CFR_UNSUPPORTED:
                    raise
                self.use_cfr = False
        while True:
            count = os.readv(src, [self.buf])
            durable.write_all(dst, self.view[:count])
            written += count
            if not count or (written == expected and count < BUFFER_SIZE):
                return written

    def _digest_written(self, dst: int, written: int, relpath: str) -> tuple[int, str]:
        """Hash (and show the observer) the bytes as they are in the copy, not the source.

        Reading the copy back (from the page cache) guarantees that the digest and the secret
        sweep describe exactly the bytes that travel, even if the source changes meanwhile.
        """
        hasher = xxhash.xxh3_128()
        observer = self.observer
        offset = 0
        while offset < written:
            try:
                count = os.preadv(dst, [self.buf], offset)
            except OSError as exc:
                raise read_failure(relpath, exc) from exc
            if not count:
                break
            chunk = self.view[:count]
            hasher.update(chunk)
            if observer is not None:
                observer(relpath, chunk)
            offset += count
        return offset, hasher.hexdigest()


@dataclass(frozen=True)
class CopyOptions:
    """How :func:`copy_tree` copies: what it reports, skips, shows and how it writes.

    ``prefix`` is prepended to every reported path (``"workspace/"``). ``exclude``, ``on_skip``
    and ``on_non_portable`` are passed to :func:`bundler.fs.safefs.walk`. With ``on_live_store``
    set, a file starting with ``SQLite format 3\\0`` that has a ``-wal`` or ``-journal`` beside
    it is not copied but reported there, and so are that store's sidecars. ``on_folder(relpath)``
    is called for every folder before it is created (a folder's name travels even when it is
    empty: the exporter sweeps it). ``observer`` sees every chunk of every copied file (the
    secret sweep), in order, read back from the copy so that it sees exactly the bytes that
    travel. Folders are created ``dir_mode``.
    ``use_copy_file_range=False`` forces the read+write path (benchmarks and tests; it is also
    the automatic fallback).
    """

    prefix: str = ""
    exclude: Exclude | None = None
    on_skip: OnSkip | None = None
    on_non_portable: Callable[[str], None] | None = None
    on_live_store: Callable[[str], None] | None = None
    on_folder: Callable[[str], None] | None = None
    observer: Observer | None = None
    dir_mode: int = 0o700
    use_copy_file_range: bool = True


def copy_tree(
    src_root_fd: int, dst_dir_fd: int, options: CopyOptions | None = None
) -> Generator[CopiedFile, None, None]:
    """Copy the tree below ``src_root_fd`` into the existing folder ``dst_dir_fd``.

    Yields one :class:`CopiedFile` per copied regular file, in checksum order (02 §9.2), each
    after its bytes and metadata are written (not yet durable: call :func:`make_durable`).
    ``options`` (:class:`CopyOptions`) says how; None copies with its defaults.

    Raises :class:`Refused` for whatever the walk refuses and for write failures (ENOSPC, EIO,
    a name already present in the destination). Neither root descriptor is closed.
    """
    chosen = options or CopyOptions()
    copier = _Copier(dst_dir_fd, chosen)
    try:
        for entry in walk(
            src_root_fd,
            prefix=chosen.prefix,
            exclude=chosen.exclude,
            on_skip=chosen.on_skip,
            on_non_portable=chosen.on_non_portable,
        ):
            if entry.kind == "dir":
                if chosen.on_folder is not None:
                    chosen.on_folder(entry.relpath)
                copier.make_dir(entry)
                continue
            copied = copier.copy_file(entry)
            if copied is not None:
                yield copied
    finally:
        copier.close()


def make_durable(root_fd: int, *, method: DurableMethod = "auto") -> str:
    """Make everything written below the open folder ``root_fd`` durable; returns the method.

    ``auto`` uses one ``syncfs`` where the kernel reports write-back errors through it
    (Linux >= 5.8), else fsyncs every file and folder below the root and the root itself.
    The root's own name in its parent is the caller's to make durable (it renames it anyway).
    Failures raise :class:`Refused` (naming the file in ``fsync`` mode).
    """
    chosen = method
    if chosen == "auto":
        chosen = "syncfs" if durable.SYNCFS_REPORTS_ERRORS else "fsync"
    current = "."
    try:
        if chosen == "syncfs":
            durable.syncfs(root_fd)
        else:
            for entry in walk(root_fd):
                current = entry.relpath
                os.fsync(entry.fd)
            current = "."
            os.fsync(root_fd)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        where = "the copy" if current == "." else current
        raise os_failure(
            f"could not make {where} durable ({reason}): check the disk and try again",
            exc,
            path=current,
        ) from exc
    return chosen
