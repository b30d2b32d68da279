"""``bundler home backup`` (04 §5.1).

A backup is one zip: ``chat.db`` (a consistent snapshot, see :mod:`bundler.fs.snapshot`), the
regular files and folders of ``files/`` and ``skills/`` read with the no-follow walker of
:mod:`bundler.fs.safefs`, and ``backup.json`` (written last, once every digest is known).

The zip is written by :mod:`bundler.home.zipwrite`, checked as :mod:`bundler.home.verify` checks
it, and published without ever replacing a file (:mod:`bundler.home.publish`).

The home is only read: the database is never written (see :mod:`bundler.fs.snapshot`), and the
only new entry in the home is the zip in ``backups/`` (plus transient hidden files there).
"""

from __future__ import annotations

import contextlib
import errno
import os
import zipfile
from collections.abc import Mapping
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.errors import (
    DestinationExists,
    InvalidInput,
    NotFound,
    UnsuitablePath,
    UsageError,
    os_failure,
)
from bundler.fs import durable
from bundler.fs.interrupts import signals_deferred, wait_for
from bundler.fs.safefs import SkipCounts
from bundler.fs.snapshot import check_snapshot, snapshot_database
from bundler.home.deflate import DEFAULT_COMPRESSION, LEVELS
from bundler.home.homes import HomeResolution, home_busy, lock_home, open_home_dir, resolve_home
from bundler.home.publish import BACKUPS, leftover_backups, publish_name, run_locked, temp_file
from bundler.home.reuse import BaseUnusable, newest_backup, open_base
from bundler.home.verify import check_contents
from bundler.home.zipcheck import TREES, open_zip
from bundler.home.zipwrite import Plan, StoreInstead, write_zip
from bundler.rules import hints
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress


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
        temp_file(target_fd, token, ".db") as db_name,
        temp_file(target_fd, token, ".zip") as zip_name,
        run_locked(target_fd, zip_name),
        open_base(base_path, warnings) if base_path else contextlib.nullcontext() as base,
    ):
        info = snapshot_database(
            resolution.database, folder / db_name, method="vacuum", check=False
        )
        # SQLite releases the GIL: the integrity check runs on the second core while we zip
        with ThreadPoolExecutor(max_workers=1) as pool:
            with signals_deferred():  # its worker, started here, keeps them blocked
                checked = pool.submit(check_snapshot, resolution.database, folder / db_name)
            plan = Plan(resolution, home_fd, folder / db_name, progress, base=base, level=level)
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
        final = publish_name(target_fd, zip_name, requested)
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
    plan: Plan, target_fd: int, zip_name: str, warnings: list[str]
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
                entries, total = write_zip(archive, plan, skipped)
            os.fsync(fd)
        except StoreInstead as again:
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
