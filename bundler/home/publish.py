"""Where a backup's zip is written and how it gets its name (04 §5.1), and what an interrupted
backup leaves.

The zip is written ``0600`` under a hidden temporary name in the target folder, verified,
fsynced, then *linked* to its final name (``link`` never replaces an existing file; where links
are unsupported ``renameat2`` with ``RENAME_NOREPLACE``), and the folder is fsynced. A crash
leaves at most a hidden ``.backup-*`` file, never a truncated zip under the final name;
``bundler recover --home`` removes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from bundler.errors import DestinationExists
from bundler.fs import durable
from bundler.fs.interrupts import commit_reached, signals_deferred
from bundler.fs.safefs import open_dir_nofollow, rmtree_at
from bundler.fs.snapshot import SNAPSHOT_PREFIX
from bundler.rules.actions import step
from bundler.rules.names import escape_display

BACKUPS = "backups"
TEMP_PREFIX = ".backup-"


def default_backup_name(now: datetime, attempt: int = 1) -> str:
    """``backup-YYYYMMDD-HHMMSS.zip`` in UTC; ``-2``, ``-3``... for later attempts (04 §5.1)."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"backup-{stamp}.zip" if attempt == 1 else f"backup-{stamp}-{attempt}.zip"


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


def publish_name(target_fd: int, zip_name: str, requested: str | None) -> str:
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
    are not leftovers: its zip is locked (:func:`run_locked`), and while any backup runs a
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
