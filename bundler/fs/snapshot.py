"""Consistent SQLite snapshots that never change the source (04 §5.1, 02 §10).

A store is read one of three ways, chosen from what lies beside it:

* **quiet** (no ``-wal``, ``-shm`` or ``-journal``): opened ``mode=ro&immutable=1`` through a URI,
  so SQLite takes no lock and creates no sidecar; afterwards the file is re-checked (inode, size,
  mtime, ctime, and still no sidecar). A change means a server started meanwhile: the snapshot is
  taken again through the live path.
* **leftover** (sidecars, but no process holds a SQLite lock on the store or its ``-shm``): even a
  ``mode=ro`` connection would write the ``-shm`` (SQLite maps it read-write and stores read marks
  in it) or create one, so the store and its sidecars are copied byte for byte into a private
  folder, identity-checked before and after, and the snapshot is taken from that copy. The
  source's bytes, modes and mtimes stay exactly as they were.
* **live** (a process holds a lock): a ``mode=ro`` connection on the store itself. It reads one
  consistent transaction (the WAL folded in); being read-only it can never checkpoint, truncate or
  delete the WAL, and it is never the last writer of anything.

The snapshot is made with ``VACUUM INTO`` (backups) or the online backup API in one step
(format-2 exports), into a file created ``0600`` beforehand, and must pass ``PRAGMA
integrity_check``. Every connection runs with ``trusted_schema=OFF`` so a hostile schema cannot
run SQL functions while it is read.

Caveat (POSIX record locks): closing any descriptor of a file drops *this process's* locks on it.
The lock probe below opens the store, so it must not run in a process that itself holds an open
SQLite connection to that store.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import sqlite3
import stat
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from bundler.errors import (
    CannotAccess,
    Damaged,
    EnvironmentFailure,
    NotFound,
    UnsuitablePath,
    os_failure,
)

Method = Literal["vacuum", "backup"]
Path_kind = Literal["quiet", "leftover", "live"]

SIDECARS = ("-wal", "-shm", "-journal")
"""Suffixes of the files SQLite keeps beside a database (04 §1.1)."""

# SQLite's unix VFS lock bytes: PENDING, RESERVED and the SHARED range of the database file, and
# the lock slots (incl. the "DMS" byte every open WAL connection holds) of the -shm file.
_DB_LOCK_START, _DB_LOCK_LEN = 0x40000000, 512
_SHM_LOCK_START, _SHM_LOCK_LEN = 120, 16


def _flock_fields() -> list[tuple[str, Any]]:
    """The fields of ``struct flock`` in this platform's order (``fcntl(2)``).

    Linux's ``F_OFD_*`` commands always take 64-bit offsets (``struct flock64``, which is
    ``struct flock`` wherever ``off_t`` has 64 bits); the BSDs and macOS put the offsets first,
    and FreeBSD adds ``l_sysid``.
    """
    if sys.platform == "darwin" or "bsd" in sys.platform:
        fields: list[tuple[str, Any]] = [
            ("l_start", ctypes.c_int64),
            ("l_len", ctypes.c_int64),
            ("l_pid", ctypes.c_int),
            ("l_type", ctypes.c_short),
            ("l_whence", ctypes.c_short),
        ]
        if sys.platform.startswith("freebsd"):
            fields.append(("l_sysid", ctypes.c_int))
        return fields
    return [
        ("l_type", ctypes.c_short),
        ("l_whence", ctypes.c_short),
        ("l_start", ctypes.c_int64),
        ("l_len", ctypes.c_int64),
        ("l_pid", ctypes.c_int),
    ]


class _Flock(ctypes.Structure):
    """``struct flock`` as this platform lays it out, padding included (ctypes aligns it).

    The probe must *ask* who holds a lock without taking one (taking one would get in SQLite's
    way, needs a writable descriptor for a write lock, and closing it would drop this process's
    own locks), which only ``F_GETLK``/``F_OFD_GETLK`` do, and those take the struct itself:
    ``fcntl.lockf``/``fcntl.flock`` cannot answer the question.
    """

    _fields_: ClassVar[list[tuple[str, Any]]] = _flock_fields()


# F_OFD_GETLK also reports traditional locks held by this very process (unlike F_GETLK, the
# fallback where the platform has no OFD locks)
_F_GETLK: int = getattr(fcntl, "F_OFD_GETLK", fcntl.F_GETLK)

_ATTEMPTS = 3
SNAPSHOT_PREFIX = ".bundler-snap-"
"""Prefix of the private folder a leftover-store snapshot copies into (beside ``dest``)."""


@dataclass(frozen=True)
class SnapshotInfo:
    """What :func:`snapshot_database` made.

    ``read_as``: which of the three paths of the module docstring produced it; ``retried``: the
    quiet or leftover read was redone because the store changed meanwhile; ``size``: bytes of
    ``dest``; ``quiet_stat``: the store's ``lstat`` when it was read quiet (the same before and
    after the read, no sidecar either time), else None.
    """

    dest: Path
    method: Method
    read_as: Path_kind
    retried: bool
    size: int
    quiet_stat: os.stat_result | None = None


def sidecars_present(database: Path) -> list[str]:
    """The sidecar suffixes (``-wal``, ``-shm``, ``-journal``) that exist beside ``database``."""
    found = []
    for suffix in SIDECARS:
        with contextlib.suppress(FileNotFoundError):
            os.lstat(f"{database}{suffix}")
            found.append(suffix)
    return found


def lock_holder(path: str, start: int, length: int) -> tuple[int, int, int] | None:
    """The first lock some process holds on the byte range of ``path``, as the kernel reports
    it: ``(pid, start, length)`` (pid -1 for an OFD lock), or None when the range is free.

    Nothing is locked: the kernel is asked which lock would conflict with a write lock.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        query = _Flock(l_type=fcntl.F_WRLCK, l_whence=os.SEEK_SET, l_start=start, l_len=length)
        answer = _Flock.from_buffer_copy(fcntl.fcntl(fd, _F_GETLK, bytes(query)))
    finally:
        os.close(fd)
    if answer.l_type == fcntl.F_UNLCK:
        return None
    return int(answer.l_pid), int(answer.l_start), int(answer.l_len)


def store_in_use(database: Path) -> bool:
    """True when a process holds a SQLite lock on ``database`` or its ``-shm`` (a server is on it).

    A connection that has read at least once holds such a lock for as long as it is open in WAL
    mode, and during every transaction in rollback mode.
    """
    return (
        lock_holder(str(database), _DB_LOCK_START, _DB_LOCK_LEN) is not None
        or lock_holder(f"{database}-shm", _SHM_LOCK_START, _SHM_LOCK_LEN) is not None
    )


def _uri(path: Path, **params: str) -> str:
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return f"file:{urllib.parse.quote(str(path))}?{query}"


@contextlib.contextmanager
def open_readonly(path: Path, *, immutable: bool) -> Iterator[sqlite3.Connection]:
    """A read-only connection with ``trusted_schema=OFF``; ``immutable`` creates no sidecar."""
    params = {"mode": "ro", "immutable": "1"} if immutable else {"mode": "ro"}
    conn = sqlite3.connect(
        _uri(path, **params), uri=True, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA trusted_schema=OFF")
        yield conn
    finally:
        conn.close()


def integrity_ok(path: Path) -> bool:
    """True when ``PRAGMA integrity_check`` of the file says ``ok`` (opened immutable).

    A file that is not SQLite or is corrupt answers False; a failure to open or read it (an
    I/O error, a missing file) raises ``OSError`` instead, so it is not mistaken for corruption.
    """
    try:
        with open_readonly(path, immutable=True) as conn:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.OperationalError as exc:
        raise OSError(errno.EIO, f"cannot read {path} ({exc})") from exc
    except sqlite3.DatabaseError:
        return False
    return rows == [("ok",)]


def _identity(path: str) -> tuple[int, int, int, int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return _identity_of(st)


def _identity_of(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def quiet_store(database: Path) -> os.stat_result | None:
    """The ``lstat`` of ``database`` when it is a regular file with no sidecar beside it (no
    process is using it, and its bytes are its whole content), else None."""
    try:
        st = os.lstat(database)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or sidecars_present(database):
        return None
    return st


def _state(database: Path) -> tuple[object, ...]:
    """Identity of the store and each sidecar: equal before and after means nothing changed."""
    return tuple(_identity(f"{database}{suffix}") for suffix in ("", *SIDECARS))


def _create_empty(dest: Path) -> None:
    # VACUUM INTO and the backup API accept an empty file; creating it first fixes its mode at 0600
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)


def _reset_dest(dest: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(dest)
    _create_empty(dest)


_HEADER_MAGIC = b"SQLite format 3\x00"
ROLLBACK_VERSIONS = b"\x01\x01"
"""Bytes 18 and 19 of a SQLite header in rollback-journal mode (file format write and read
version 1; WAL mode writes 2 and 2)."""


def journal_versions(path: Path) -> bytes | None:
    """Bytes 18-19 of the SQLite header of ``path``: ``b"\\x01\\x01"`` rollback journal,
    ``b"\\x02\\x02"`` WAL; None for a file without a SQLite header (empty, or not SQLite).

    A pure read of the bytes: SQLite is never asked, so nothing is created beside the file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        header = os.pread(fd, 20, 0)
    finally:
        os.close(fd)
    if len(header) < 20 or not header.startswith(_HEADER_MAGIC):
        return None
    return header[18:20]


def _to_rollback_journal(target: sqlite3.Connection) -> None:
    # The copy must open read-only anywhere: a WAL-mode store needs a writable folder for its
    # -shm (read-only media and other users cannot open it) and a read-only open where it can
    # write leaves -wal/-shm behind. Only the copy, never the source, is switched.
    mode = target.execute("PRAGMA journal_mode=DELETE").fetchone()
    if mode is None or str(mode[0]).lower() != "delete":
        raise sqlite3.DatabaseError("the snapshot cannot leave WAL mode")


def _copy_out(conn: sqlite3.Connection, dest: Path, method: Method) -> None:
    if method == "vacuum":
        conn.execute("VACUUM INTO ?", (str(dest),))
    else:
        target = sqlite3.connect(str(dest), isolation_level=None)
        try:
            # pages=-1: the whole store in one step, so it is one consistent read transaction
            conn.backup(target, pages=-1)
            # the backup API copies page 1 as it is: a WAL source gives a WAL-mode copy
            _to_rollback_journal(target)
        finally:
            target.close()
    if journal_versions(dest) not in (None, ROLLBACK_VERSIONS):
        # VACUUM INTO writes rollback mode in the SQLite versions we know; make sure of it
        target = sqlite3.connect(str(dest), isolation_level=None)
        try:
            _to_rollback_journal(target)
        finally:
            target.close()
    if journal_versions(dest) not in (None, ROLLBACK_VERSIONS):
        raise sqlite3.DatabaseError("the snapshot is not in rollback-journal mode")


def _check_source(source: Path, shown: str) -> None:
    try:
        st = os.lstat(source)
    except FileNotFoundError:
        raise NotFound(
            f"{shown} does not exist: there is no database to copy", path=shown
        ) from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsuitablePath(
            f"{shown} is a symbolic link: point to the real database file", path=shown
        )
    if not stat.S_ISREG(st.st_mode):
        raise UnsuitablePath(f"{shown} is not a regular file", path=shown)


def _read_quiet(source: Path, dest: Path, method: Method) -> os.stat_result | None:
    """Snapshot through ``immutable=1``: the store's stat, the same before and after; None when
    the store changed or a sidecar appeared."""
    seen = os.lstat(source)
    before = _state(source)
    if before[0] != _identity_of(seen) or any(part is not None for part in before[1:]):
        return None
    with open_readonly(source, immutable=True) as conn:
        _copy_out(conn, dest, method)
    return seen if _state(source) == before else None


def _copy_file(src: str, dst: str) -> None:
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", src)
        with os.fdopen(os.dup(fd), "rb") as reader, open(dst, "xb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
    finally:
        os.close(fd)


def _read_leftover(source: Path, dest: Path, method: Method) -> bool:
    """Snapshot from a private copy of the store and its sidecars; False when anything changed."""
    before = _state(source)
    if store_in_use(source):
        return False
    with tempfile.TemporaryDirectory(prefix=SNAPSHOT_PREFIX, dir=dest.parent) as private:
        copy = Path(private) / "db"
        for suffix in ("", "-wal", "-journal"):
            # the -shm is rebuilt from the WAL; a copy of it could only be stale
            if before[("", "-wal", "-shm", "-journal").index(suffix)] is not None:
                try:
                    _copy_file(f"{source}{suffix}", f"{copy}{suffix}")
                except FileNotFoundError:
                    return False
        if _state(source) != before or store_in_use(source):
            return False
        # a writable connection on the private copy folds the WAL in or rolls a hot journal back
        conn = sqlite3.connect(str(copy), isolation_level=None)
        try:
            conn.execute("PRAGMA trusted_schema=OFF")
            _copy_out(conn, dest, method)
        finally:
            conn.close()
    return True


def _read_live(source: Path, dest: Path, method: Method) -> None:
    with open_readonly(source, immutable=False) as conn:
        _copy_out(conn, dest, method)


def snapshot_database(
    source: Path, dest: Path, *, method: Method, check: bool = True, shown: str = ""
) -> SnapshotInfo:
    """Write a consistent, integrity-checked copy of the SQLite store ``source`` to ``dest``.

    ``dest`` must not exist; it is created ``0600``. ``method`` is ``"vacuum"`` (``VACUUM
    INTO``, compact) or ``"backup"`` (the online backup API in one step, page for page). The
    source, its sidecars and their modes and mtimes are never changed when no process is using
    the store; with a server attached only SQLite's own shared-memory read marks are touched.

    Raises :class:`Refused` for a missing store, a link, a store that cannot be read or is not
    SQLite, and a snapshot that fails ``integrity_check``; ``OSError`` (``ENOSPC``, ``EIO``,
    naming ``dest``) when the snapshot cannot be written; ``MemoryError`` when SQLite runs out
    of memory. ``dest`` is removed then. Messages name the store as ``shown`` (``source`` by
    default: a caller reading it through ``/proc/self/fd`` names the path the user knows).
    ``check=False`` leaves the integrity check to the caller (:func:`check_snapshot`), which
    may then run it alongside other work.
    """
    shown = shown or str(source)
    _check_source(source, shown)
    _create_empty(dest)
    try:
        info = _snapshot_into(source, dest, method, shown)
        if check:
            check_snapshot(source, dest)
        return info
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dest)
        raise


def check_snapshot(source: Path, dest: Path) -> None:
    """Raise :class:`Refused` naming ``source`` unless its snapshot ``dest`` passes the check."""
    if not integrity_ok(dest):
        raise Damaged(
            f"{source} fails PRAGMA integrity_check: repair the database before copying it",
            path=str(source),
        )


def _snapshot_into(source: Path, dest: Path, method: Method, shown: str) -> SnapshotInfo:
    retried = False
    try:
        for _ in range(_ATTEMPTS):
            if not sidecars_present(source):
                seen = _read_quiet(source, dest, method)
                if seen is not None:
                    size = os.path.getsize(dest)
                    return SnapshotInfo(dest, method, "quiet", retried, size, quiet_stat=seen)
            elif not store_in_use(source) and _read_leftover(source, dest, method):
                return SnapshotInfo(dest, method, "leftover", retried, os.path.getsize(dest))
            elif store_in_use(source):
                break
            retried = True
            _reset_dest(dest)
        _reset_dest(dest)
        _read_live(source, dest, method)
    except sqlite3.DatabaseError as exc:
        raise _failure(source, dest, shown, exc) from exc
    return SnapshotInfo(dest, method, "live", retried, os.path.getsize(dest))


# SQLite's primary result codes and the extended ones of a failed read (sqlite3.h)
_NOMEM, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 7, 10, 11, 13, 14, 26
_IOERR_READS = (266, 522)  # SQLITE_IOERR_READ, SQLITE_IOERR_SHORT_READ
# Python 3.10's exceptions carry no code, only SQLite's text for it (sqlite3_errstr)
_CODE_OF_TEXT = {
    "out of memory": _NOMEM,
    "disk I/O error": _IOERR,
    "database disk image is malformed": _CORRUPT,
    "database or disk is full": _FULL,
    "unable to open database file": _CANTOPEN,
    "file is not a database": _NOTADB,
}


def _sqlite_code(exc: sqlite3.Error) -> int:
    """The (extended) SQLite result code of ``exc``; 0 when it cannot be told."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11 and later
    if isinstance(code, int):
        return code
    return _CODE_OF_TEXT.get(str(exc), 0)


def _unreadable(source: Path) -> OSError | None:
    """Why the store's first page cannot be read by this process, or None when it can."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return exc
    try:
        os.pread(fd, 100, 0)
    except OSError as exc:
        return exc
    finally:
        os.close(fd)
    return None


def _failure(source: Path, dest: Path, shown: str, exc: sqlite3.Error) -> BaseException:
    """What a failed snapshot is blamed on. Only a store SQLite finds corrupt, or not a
    database at all, is the store's fault: a full disk, an I/O error while writing the copy or
    a permission the reader lacks used to be told "not a readable SQLite database: repair or
    remove it" of a sound store. SQLite does not say which file failed, so the store is read
    here again: one that reads is sound as far as can be told, and the failure is the copy's."""
    code = _sqlite_code(exc)
    primary = code & 0xFF
    if primary in (_CORRUPT, _NOTADB):
        return Damaged(
            f"{shown} is not a readable SQLite database ({exc}): repair or remove it", path=shown
        )
    if primary == _NOMEM:
        return MemoryError(f"SQLite ran out of memory copying {shown}")
    unreadable = _unreadable(source)
    if unreadable is not None:
        reason = unreadable.strerror or str(unreadable)
        return os_failure(
            f"cannot read {shown} ({reason}): make it readable and try again",
            unreadable,
            path=shown,
        )
    if code in _IOERR_READS:
        return EnvironmentFailure(
            f"cannot read {shown} ({exc}): check the disk and try again", path=shown
        )
    if primary == _FULL:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))
    if primary in (_IOERR, _CANTOPEN):
        return OSError(errno.EIO, f"{exc} writing the copy of {shown}", str(dest))
    return CannotAccess(f"cannot copy {shown} ({exc})", path=shown)
