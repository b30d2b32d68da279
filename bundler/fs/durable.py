"""Durability primitives: what is on disk when each returns.

* :func:`fsync_dir` — the folder's entries (names created, renamed, removed) are durable.
* :func:`write_synced` / :func:`create_synced` — a new file's bytes (and with the second its
  name) are durable; a failure leaves no file behind.
* :func:`atomic_write` — the new bytes are durable under a temporary name, then the rename is
  durable: a crash leaves either the old file whole or the new file whole, never a mix.
* :func:`replace_unsynced` — nothing is made durable: the rename is atomic, so a reader finds the
  old file whole or the new one whole, but after a crash the file may be either, or empty. For
  caches, whose loss or staleness costs time and nothing else.
* :func:`renameat2` — Linux's ``renameat2`` through ctypes (``os`` lacks it), raising ``OSError``
  with the real errno so callers can fall back where the filesystem does not support a flag.
* :func:`syncfs` — flushes a whole filesystem and, on Linux >= 5.8, reports write-back errors.
* :func:`start_writeback` — nothing: it starts writing a file's range early, the flush to come
  still decides what is durable.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import string
from typing import Any

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

# renameat2 flags are refused with these where a filesystem or sandbox lacks support (02 §8.3)
UNSUPPORTED_ERRNOS = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM})

_TOKEN_ALPHABET = string.ascii_letters + string.digits


@functools.cache
def _libc() -> Any:
    """The already-loaded C library (find_library would start an ldconfig child on every run),
    with ctypes imported on first use: commands that never rename or flush (verify) skip it."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


# bytes below this are used, so each of the 62 letters is equally likely
_TOKEN_LIMIT = 256 - 256 % len(_TOKEN_ALPHABET)


def random_token(length: int = 12) -> str:
    """``length`` random ``[A-Za-z0-9]`` characters (staging folder tokens).

    Drawn from ``os.urandom`` as ``secrets`` does, without its import (hashlib, OpenSSL),
    which every command's start-up would pay.
    """
    letters: list[str] = []
    while len(letters) < length:
        letters += [
            _TOKEN_ALPHABET[b % len(_TOKEN_ALPHABET)]
            for b in os.urandom(2 * length)
            if b < _TOKEN_LIMIT
        ]
    return "".join(letters[:length])


def renameat2(src_dir_fd: int, src: str, dst_dir_fd: int, dst: str, flags: int) -> None:
    """``renameat2(2)``; raises OSError (ENOSYS where libc has no such function)."""
    func = getattr(_libc(), "renameat2", None)
    if func is None:
        # the text may reach a user: it says what is missing, not which call
        raise OSError(errno.ENOSYS, "this system cannot rename atomically")
    import ctypes  # loaded by _libc already

    result = func(src_dir_fd, os.fsencode(src), dst_dir_fd, os.fsencode(dst), ctypes.c_uint(flags))
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), src, None, dst)


def _kernel_reports_syncfs_errors() -> bool:
    try:
        major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


# os.uname, not platform: platform's import is a start-up cost of every command
SYNCFS_REPORTS_ERRORS = os.uname().sysname == "Linux" and _kernel_reports_syncfs_errors()


def syncfs(fd: int) -> None:
    """``syncfs(2)`` on the filesystem holding ``fd``; raises OSError on failure."""
    func = getattr(_libc(), "syncfs", None)
    if func is None:
        raise OSError(errno.ENOSYS, "this system cannot flush a whole filesystem")
    if func(fd) != 0:
        import ctypes  # loaded by _libc already

        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of dirty pages, do not wait


def start_writeback(fd: int, offset: int = 0, length: int = 0) -> None:
    """Ask the kernel to start writing ``length`` bytes of ``fd`` from ``offset`` (0: to the
    end) to disk now, without waiting (``sync_file_range(2)`` with ``SYNC_FILE_RANGE_WRITE``).

    A hint only, and it makes nothing durable: the flush that follows does. A file written
    in one long stream, or many files written one after another, and flushed at the end then
    find most of their bytes on disk already, the writes having overlapped the work done
    meanwhile. Where the call is missing or fails, nothing happens and the flush does all the
    work, as it would have.
    """
    call = _sync_file_range()
    if call is not None:
        call(fd, offset, length, SYNC_FILE_RANGE_WRITE)


@functools.cache
def _sync_file_range() -> Any:
    func = getattr(_libc(), "sync_file_range", None)
    if func is not None:
        import ctypes  # loaded by _libc already

        func.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    return func


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` to ``fd``: ``write(2)`` may take fewer bytes than offered."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_all_at(fd: int, data: bytes | bytearray | memoryview, at: int) -> None:
    """Write every byte of ``data`` to ``fd`` at offset ``at``, leaving the file's position
    alone: ``pwrite(2)`` may take fewer bytes than offered."""
    view = memoryview(data)
    while view:
        count = os.pwrite(fd, view, at)
        view, at = view[count:], at + count


def fsync_dir(dir_fd: int) -> None:
    """Make the entries of an open folder durable."""
    os.fsync(dir_fd)


def open_dir(
    path: str | os.PathLike[str], *, dir_fd: int | None = None, follow: bool = False
) -> int:
    """Open a folder read-only; with ``follow=False`` a symbolic link is refused (ELOOP/ENOTDIR)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    return os.open(path, flags, dir_fd=dir_fd)


def locked_by_another(fd: int) -> bool:
    """True while another open file description holds an exclusive ``flock`` on ``fd``'s file.

    The probe takes a shared lock without waiting and drops it with the descriptor, so it never
    blocks a live owner; the caller closes ``fd``. This is how recovery tells a running
    operation (its staging record or folder locked) from a dead one.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


def held_by_another(name: str | os.PathLike[str], *, dir_fd: int | None = None) -> bool:
    """True while another process holds an exclusive ``flock`` on the file or folder ``name``
    (opened no-follow and without blocking, so neither a link nor a FIFO can mislead or stall
    the probe); False when there is nothing there to open. How a run tells a live owner's
    staging, record or temporary from a dead one's."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return False
    try:
        return locked_by_another(fd)
    finally:
        os.close(fd)


def lock_now(fd: int, *, shared: bool = False) -> bool:
    """Take an exclusive (or ``shared``) ``flock`` on ``fd``'s file without waiting, held until
    the descriptor closes; False when another open file description holds one that excludes
    it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def temporary_name(name: str) -> str:
    """A hidden, unguessable sibling name for building ``name`` before it is put in place."""
    return f".{name}.tmp-{random_token()}"


def write_synced(
    dir_fd: int, name: str, data: bytes, *, mode: int = 0o600, truncate: bool = False
) -> os.stat_result:
    """Create ``name`` in ``dir_fd`` holding ``data``; when it returns, the bytes are durable.
    Returns the file's status (for :func:`remove_if_same`).

    The file is created 0600 with ``O_EXCL`` (``truncate=True``: an existing regular file is
    reused, for names that belong to the caller alone), never through a symbolic link, and gets
    ``mode`` only once its bytes are written. On a failure (a full disk, an fsync's EIO) the
    file is removed: left torn under its own name it would be refused by the next run as
    existing, under a temporary one it would be litter. The folder entry itself is not yet
    durable: the caller renames or links the file into place and then fsyncs the folder (or
    calls :func:`create_synced`).
    """
    return _write_new(dir_fd, name, data, mode=mode, truncate=truncate, sync=True)


def _write_new(
    dir_fd: int, name: str, data: bytes, *, mode: int, truncate: bool, sync: bool
) -> os.stat_result:
    """:func:`write_synced`, the bytes flushed only with ``sync``."""
    exclusive = os.O_TRUNC if truncate else os.O_EXCL
    flags = os.O_WRONLY | os.O_CREAT | exclusive | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        written = os.fstat(fd)
        write_all(fd, data)
        os.fchmod(fd, mode)
        if sync:
            os.fsync(fd)
        return written
    except BaseException:
        with contextlib.suppress(OSError):
            remove_if_same(dir_fd, name, os.fstat(fd))
        raise
    finally:
        os.close(fd)


def create_synced(dir_fd: int, name: str, data: bytes, *, mode: int = 0o600) -> None:
    """Create ``name`` in ``dir_fd`` holding ``data``, never replacing a file; when it returns
    the bytes and the folder entry are durable. A failure leaves no file (``FileExistsError``
    when ``name`` exists, which is left alone)."""
    written = write_synced(dir_fd, name, data, mode=mode)
    try:
        fsync_dir(dir_fd)
    except BaseException:
        # the command reports that it failed: the file it says it did not make must not stay
        with contextlib.suppress(OSError):
            remove_if_same(dir_fd, name, written)
        raise


def remove_if_same(dir_fd: int, name: str, written: os.stat_result) -> None:
    """Unlink ``name`` if it is still the file ``written`` describes (device and inode): a
    file someone else put under the name meanwhile is not this run's to remove."""
    now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if (now.st_dev, now.st_ino) == (written.st_dev, written.st_ino):
        os.unlink(name, dir_fd=dir_fd)


def atomic_write(dir_fd: int, name: str, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``name`` in the folder ``dir_fd`` with ``data``, durably and atomically.

    Writes ``.<name>.tmp-<token>`` (created 0600, O_EXCL), fsyncs it, gives it ``mode``, renames it
    over ``name`` and fsyncs the folder. On any failure the temporary file is removed and the old
    file is untouched.
    """
    _replace(dir_fd, name, data, mode=mode, sync=True)


def replace_unsynced(dir_fd: int, name: str, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``name`` in the folder ``dir_fd`` with ``data`` atomically, flushing nothing.

    Writes ``.<name>.tmp-<token>`` (created 0600, O_EXCL, never through a link), gives it
    ``mode`` and renames it over ``name``; on any failure the temporary file is removed and the
    old file is untouched. A crash may leave the old file, the new one, or one that is empty or
    short: the caller reads what it finds as a cache, checking it whole.
    """
    _replace(dir_fd, name, data, mode=mode, sync=False)


def _replace(dir_fd: int, name: str, data: bytes, *, mode: int, sync: bool) -> None:
    """:func:`atomic_write`, or with ``sync`` false :func:`replace_unsynced`."""
    tmp = temporary_name(name)
    try:
        _write_new(dir_fd, tmp, data, mode=mode, truncate=False, sync=sync)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    if sync:
        fsync_dir(dir_fd)
