"""``bundler home backups`` and ``home prune``: the backups of a folder, and removing those a
retention policy does not keep (04 §5.4).

Only what a backup made is listed or removed: a regular file with a default backup name
(``backup-YYYYMMDD-HHMMSS[-N].zip``) whose directory and ``backup.json`` pass the reader's
checks. Anything else in the folder is left alone, with a warning for a backup-named file that
cannot be read. Each removal is one ``unlink`` of a file identified when it was read (same
device and inode), so a kill at any point leaves every kept backup as it was, and at worst some
of the removed ones still there; the folder is fsynced once they are gone.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bundler.errors import BundlerError, UsageError, os_failure
from bundler.fs import durable
from bundler.home.homes import resolve_home
from bundler.home.publish import BACKUPS
from bundler.home.reuse import backup_order
from bundler.home.verify import verify_backup
from bundler.home.zipcheck import open_zip, read_index
from bundler.rules.names import escape_display
from bundler.rules.retention import Policy, kept_by


@dataclass(frozen=True)
class Listed:
    """One backup of the folder: when it was taken, its bytes and files, and whether a full
    check passed (``None``: not checked)."""

    path: Path
    created_at: str
    size: int
    files: int
    encrypted: bool
    verified: bool | None
    identity: tuple[int, int] = field(repr=False)

    def taken(self) -> datetime:
        """``created_at`` as a UTC time."""
        return datetime.strptime(self.created_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)

    def as_json(self) -> dict[str, Any]:
        """One backup of ``home backups --json``."""
        return {
            "backup": str(self.path),
            "created_at": self.created_at,
            "bytes": self.size,
            "files": self.files,
            "encrypted": self.encrypted,
            "verified": self.verified,
        }


@dataclass(frozen=True)
class Listing:
    """The backups of ``folder``, oldest first, and what was left out."""

    folder: Path
    backups: list[Listed]
    warnings: list[str]


@dataclass(frozen=True)
class PruneReport:
    """What ``home prune`` kept (with the rules keeping each) and removed, or would remove."""

    folder: Path
    kept: list[tuple[Listed, list[str]]]
    removed: list[Listed]
    dry_run: bool
    warnings: list[str]

    def as_json(self) -> dict[str, Any]:
        """The ``home prune --json`` payload (without ``ok``)."""
        return {
            "folder": str(self.folder),
            "dry_run": self.dry_run,
            "kept": [{**item.as_json(), "kept_by": why} for item, why in self.kept],
            "removed": [item.as_json() for item in self.removed],
        }


def backups_folder(
    project: Path, to: Path | None, environ: Mapping[str, str] | None = None
) -> Path:
    """``to``, else the home's ``backups/``: where ``home backup`` puts its zips."""
    if to is not None:
        return Path(os.path.abspath(to))
    return resolve_home(project, environ=environ).home / BACKUPS


def list_backups(folder: Path, *, verify: bool = False) -> Listing:
    """The backups this tool made in ``folder``, oldest first (04 §5.4); ``verify`` runs the
    full check of ``verify-backup`` on each. Raises :class:`Refused` for a folder that cannot
    be read."""
    shown = escape_display(str(folder))
    try:
        names = os.listdir(folder)
    except OSError as exc:
        raise os_failure(
            f"cannot list {shown} ({os.strerror(exc.errno or 0)})", exc, path=shown
        ) from None
    found: list[Listed] = []
    warnings: list[str] = []
    for name in sorted(names, key=lambda n: backup_order(n) or ("", "", 0)):
        if backup_order(name) is None:
            continue
        path = folder / name
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            with open_zip(path) as archive:
                index = read_index(archive)
        except (BundlerError, OSError) as exc:
            reason = exc.message if isinstance(exc, BundlerError) else str(exc.strerror)
            warnings.append(f"{escape_display(name)} is not a backup this tool reads ({reason})")
            continue
        verified = None
        if verify:
            try:
                verify_backup(path)
                verified = True
            except BundlerError:
                verified = False
        found.append(
            Listed(
                path,
                index.created_at,
                st.st_size,
                len(index.files),
                False,
                verified,
                (st.st_dev, st.st_ino),
            )
        )
    return Listing(folder, found, warnings)


def prune_backups(folder: Path, policy: Policy, *, dry_run: bool) -> PruneReport:
    """Remove the backups of ``folder`` ``policy`` does not keep (restic's ``forget`` rules,
    :mod:`bundler.rules.retention`); never the newest, never a file this tool did not make.
    ``dry_run``: change nothing, report what would go. Raises :class:`UsageError` for a policy
    keeping nothing."""
    if policy.empty():
        raise UsageError(
            "name what to keep: --keep-last, --keep-daily, --keep-weekly or --keep-monthly"
        )
    listing = list_backups(folder)
    items = listing.backups
    keep = kept_by(items, Listed.taken, policy)
    kept = [(item, keep[i]) for i, item in enumerate(items) if i in keep]
    doomed = [item for i, item in enumerate(items) if i not in keep]
    warnings = list(listing.warnings)
    removed: list[Listed] = []
    if dry_run or not doomed:
        return PruneReport(folder, kept, doomed, dry_run, warnings)
    fd = durable.open_dir(folder, follow=True)
    try:
        for item in doomed:
            name = item.path.name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) != item.identity:
                warnings.append(f"{escape_display(name)} was replaced meanwhile: left alone")
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
            removed.append(item)
        durable.fsync_dir(fd)
    finally:
        os.close(fd)
    return PruneReport(folder, kept, removed, dry_run, warnings)
