"""``bundler home backups`` and ``home prune``: the backups of a folder, and removing those a
retention policy does not keep (04 §5.4).

Only what a backup made is listed or removed: a regular file with a default backup name
(``backup-YYYYMMDD-HHMMSS[-N].zip``) whose directory and ``backup.json`` pass the reader's
checks, or an encrypted one (``….zip.age``, 04 §5.6) whose age header and length are those of a
file ``home backup --encrypt-to`` writes (:func:`bundler.home.backup_age.header_problem`: no key
is needed to list or prune; its time is the one in its name). Anything else in the folder is
left alone, with a warning for a backup-named file that cannot be read. Each removal is one
``unlink`` of a file identified when it was read (same device and inode), so a kill at any
point leaves every kept backup as it was, and at worst some of the removed ones still there;
the folder is fsynced once they are gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bundler.errors import BundlerError, UsageError, os_failure
from bundler.fs import durable
from bundler.fs.age import AskPassphrase
from bundler.home.backup_age import AGE_SUFFIX, header_problem, load_identities
from bundler.home.homes import resolve_home
from bundler.home.publish import BACKUPS
from bundler.home.reuse import backup_order
from bundler.home.verify import verify_backup, verify_encrypted
from bundler.home.zipcheck import open_zip
from bundler.home.zipindex import read_index
from bundler.rules.names import escape_display
from bundler.rules.retention import Policy, kept_by


@dataclass(frozen=True)
class Listed:
    """One backup of the folder: when it was taken, its bytes and files (``None``: encrypted,
    not opened), and whether a full check passed (``None``: not checked)."""

    path: Path
    created_at: str
    size: int
    files: int | None
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

    def as_json(self) -> dict[str, Any]:
        """The ``home backups --json`` payload (without ``ok``)."""
        return {"folder": str(self.folder), "backups": [item.as_json() for item in self.backups]}


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


def list_backups(
    folder: Path,
    *,
    verify: bool = False,
    age_identities: Sequence[Path] = (),
    age_passphrase: AskPassphrase | None = None,
) -> Listing:
    """The backups this tool made in ``folder``, oldest first (04 §5.4); ``verify`` runs the
    full check of ``verify-backup`` on each, an encrypted one only with ``age_identities``
    (loaded once; without them it stays unchecked, with a warning). Raises :class:`Refused`
    for a folder that cannot be read."""
    identities = load_identities(age_identities, age_passphrase) if age_identities else []
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
        if name.endswith(AGE_SUFFIX):
            item = _encrypted(path, name, warnings)
            if item is not None:
                found.append(_verified(item, identities, warnings) if verify else item)
            continue
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


def _encrypted(path: Path, name: str, warnings: list[str]) -> Listed | None:
    """The encrypted backup ``path`` as listed without its key, or None: not a regular file
    (skipped), or not what ``home backup --encrypt-to`` writes (a warning)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            warnings.append(f"{escape_display(name)} cannot be read ({exc.strerror})")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        problem = header_problem(fd, st.st_size)
    except OSError as exc:
        problem = str(exc.strerror)
    finally:
        os.close(fd)
    order = backup_order(name)
    if problem is not None or order is None:
        warnings.append(f"{escape_display(name)} is not a backup this tool reads ({problem})")
        return None
    day, clock, _n = order
    taken = f"{day[:4]}-{day[4:6]}-{day[6:]}T{clock[:2]}:{clock[2:4]}:{clock[4:]}Z"
    try:
        datetime.strptime(taken, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        warnings.append(f"{escape_display(name)} is not a backup this tool reads (its name's time)")
        return None
    return Listed(path, taken, st.st_size, None, True, None, (st.st_dev, st.st_ino))


def _verified(item: Listed, identities: Sequence[Any], warnings: list[str]) -> Listed:
    """``item`` with the full check's outcome: the identities open it and it is sound; left
    unchecked (``None``) without identities."""
    if not identities:
        warnings.append(
            f"{escape_display(item.path.name)} is encrypted: give --age-identity to verify it"
        )
        return item
    try:
        report = verify_encrypted(item.path, identities)
    except BundlerError:
        return replace(item, verified=False)
    return replace(item, verified=True, files=report.entries)


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
