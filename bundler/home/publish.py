"""Where a backup's zip is written and how it gets its name (04 §5.1), and what an interrupted
backup leaves.

The zip is written ``0600`` under a hidden temporary name in the target folder, verified,
fsynced, then *linked* to its final name (``link`` never replaces an existing file; where links
are unsupported ``renameat2`` with ``RENAME_NOREPLACE``), and the folder is fsynced. A crash
leaves at most a hidden ``.backup-*`` file, never a truncated zip under the final name;
``bundler recover --home`` removes it from the home's ``backups/``, ``bundler recover DIR``
from a ``--to DIR`` (one rule for both: :func:`_dead_runs`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from bundler.errors import DestinationExists
from bundler.fs import durable
from bundler.fs.durable import held_by_another
from bundler.fs.interrupts import commit_reached, signals_deferred
from bundler.fs.safefs import open_dir_nofollow, rmtree_at
from bundler.fs.snapshot import SNAPSHOT_PREFIX
from bundler.rules.actions import step
from bundler.rules.names import escape_display

BACKUPS = "backups"
TEMP_PREFIX = ".backup-"


def default_backup_name(now: datetime, attempt: int = 1, suffix: str = ".zip") -> str:
    """``backup-YYYYMMDD-HHMMSS.zip`` in UTC; ``-2``, ``-3``... for later attempts (04 §5.1);
    ``suffix`` ``.zip.age`` for an encrypted backup (04 §5.6)."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"backup-{stamp}{suffix}" if attempt == 1 else f"backup-{stamp}-{attempt}{suffix}"


@contextlib.contextmanager
def temp_file(dir_fd: int, token: str, suffix: str) -> Iterator[str]:
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
def run_locked(dir_fd: int, zip_name: str) -> Iterator[None]:
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


def publish_name(target_fd: int, zip_name: str, requested: str | None, suffix: str = ".zip") -> str:
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
    twin = ".zip.age" if suffix == ".zip" else ".zip"
    for attempt in range(1, 1000):
        name = default_backup_name(now, attempt, suffix)
        # one time, one backup, encrypted or not: the folder's order (newest, retention)
        # never has to break a tie
        if _exists_at(target_fd, default_backup_name(now, attempt, twin)):
            continue
        try:
            _publish(target_fd, zip_name, name)
        except FileExistsError:
            continue
        return name
    raise DestinationExists("too many backups with the same timestamp: try again in a second")


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


# what a backup names its temporaries (:func:`temp_file`: ``durable.random_token()``, 12
# characters) and what SQLite may set beside the snapshot: nothing else is taken for one
_TEMP_NAME = re.compile(
    r"\.backup-([A-Za-z0-9]{12})(\.(?:db(?:-journal|-wal|-shm)?|zip|zip\.age))?"
)


def leftover_backups(home: Path) -> list[list[str]]:
    """What interrupted backups left in ``<home>/backups``, grouped by run (the ``.db`` and the
    ``.zip`` of one token are one leftover, and so are an encrypted backup's scratch folder
    ``.backup-<token>/`` and its ``.zip.age``); changes nothing. A running backup's temporaries
    are not leftovers: its zip is locked (:func:`run_locked`), and while any backup runs a
    snapshot folder may be its own, so none is named then."""
    fd = _open_backups(home)
    if fd is None:
        return []
    try:
        return [[f"{BACKUPS}/{name}" for name in run] for run in _dead_runs(fd, scratch=True)]
    finally:
        os.close(fd)


def leftover_backups_in(folder: Path) -> list[list[str]]:
    """What interrupted backups left in ``folder``, a ``--to DIR`` (or the folder of a ``--to
    FILE``) outside the home, grouped by run as :func:`leftover_backups` does, names relative
    to ``folder``; changes nothing. Only what a backup writes there is taken: a regular file
    named ``.backup-<token>.db|.zip|.zip.age`` whose run holds no lock, or a snapshot folder
    while no backup runs there (never a scratch folder: those are made in the home only)."""
    try:
        fd = durable.open_dir(folder, follow=True)
    except OSError:
        return []
    try:
        return _dead_runs(fd, scratch=False)
    finally:
        os.close(fd)


def _open_backups(home: Path) -> int | None:
    try:
        home_fd = durable.open_dir(home, follow=True)
    except OSError:
        return None
    try:
        return open_dir_nofollow(home_fd, BACKUPS)
    except OSError:
        return None
    finally:
        os.close(home_fd)


def _dead_runs(fd: int, *, scratch: bool) -> list[list[str]]:
    """The rule of :func:`leftover_backups`, for the folder ``fd``; ``scratch``: an encrypted
    backup's scratch folder ``.backup-<token>/`` may be there (the home's ``backups/``)."""
    runs: dict[str, list[str]] = {}
    snapshots: list[list[str]] = []
    for name in sorted(os.listdir(fd)):
        matched = _TEMP_NAME.fullmatch(name)
        if matched is not None:
            folder = matched.group(2) is None  # an encrypted backup's scratch folder
            wanted = stat.S_IFDIR if folder else stat.S_IFREG
            if (scratch or not folder) and _kind_at(fd, name) == wanted:
                runs.setdefault(matched.group(1), []).append(name)
        elif name.startswith(SNAPSHOT_PREFIX) and _kind_at(fd, name) == stat.S_IFDIR:
            snapshots.append([name])
    # an encrypted backup's run also locks its scratch folder and its .zip.age
    alive = {t for t, names in runs.items() if any(held_by_another(n, dir_fd=fd) for n in names)}
    dead = [names for token, names in runs.items() if token not in alive]
    return dead if alive else dead + snapshots


def _kind_at(dir_fd: int, name: str) -> int | None:
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return None


def remove_leftovers(home: Path, *, dry_run: bool) -> list[str]:
    """Remove what an interrupted backup left in ``<home>/backups`` (:func:`leftover_backups`:
    hidden ``.backup-*`` files and ``.bundler-snap-*`` folders, never a finished zip nor a
    running backup's)."""
    fd = _open_backups(home)
    if fd is None:
        return []
    try:
        where = os.path.join(os.path.abspath(home), BACKUPS)
        return _remove_runs(fd, where, f"{BACKUPS}/", _dead_runs(fd, scratch=True), dry_run)
    finally:
        os.close(fd)


def remove_leftovers_in(folder: Path, *, dry_run: bool) -> list[str]:
    """Remove what an interrupted backup left in ``folder`` (:func:`leftover_backups_in`),
    for ``bundler recover DIR``."""
    try:
        fd = durable.open_dir(folder, follow=True)
    except OSError:
        return []
    try:
        where = os.path.abspath(folder)
        return _remove_runs(fd, where, "", _dead_runs(fd, scratch=False), dry_run)
    finally:
        os.close(fd)


def _remove_runs(
    fd: int, where: str, shown_prefix: str, runs: list[list[str]], dry_run: bool
) -> list[str]:
    actions: list[str] = []
    for name in (name for run in runs for name in run):
        actions.append(
            step(
                "remove",
                os.path.join(where, name),
                f"{shown_prefix}{escape_display(name)} (interrupted backup)",
                dry_run=dry_run,
            )
        )
        if not dry_run:
            rmtree_at(fd, name)
    if actions and not dry_run:
        durable.fsync_dir(fd)
    return actions
