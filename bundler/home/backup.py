"""``bundler home backup`` (04 §5.1).

A backup is one zip: ``chat.db`` (a consistent snapshot, see :mod:`bundler.fs.snapshot`, or the
base's when the index says the store is unchanged since, :mod:`bundler.home.reuse_index`), the
regular files and folders of ``files/`` and ``skills/`` read with the no-follow walker of
:mod:`bundler.fs.safefs`, and ``backup.json`` (written last, once every digest is known).

The zip is written by :mod:`bundler.home.zipwrite`, checked as :mod:`bundler.home.verify` checks
it, and published without ever replacing a file (:mod:`bundler.home.publish`).

An encrypted backup (``--encrypt-to``, 04 §5.6, :mod:`bundler.home.backup_age`) is the same zip,
built in a private folder of the home's ``backups/`` and published as ``NAME.zip.age``.

The home is only read: the database is never written (see :mod:`bundler.fs.snapshot`), and the
only new entry in the home is the zip in ``backups/`` (plus transient hidden files there). The
files' stats a next backup compares go to the user's cache (:mod:`bundler.home.reuse_index`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bundler.errors import (
    DestinationExists,
    InvalidInput,
    NotFound,
    Refused,
    UnsuitablePath,
    UsageError,
    os_failure,
)
from bundler.fs import durable
from bundler.fs.age import AskPassphrase, Recipient, parse_recipients
from bundler.fs.collector import collector_paused
from bundler.fs.interrupts import settled, wait_for
from bundler.fs.prefetch import read_metadata_ahead
from bundler.fs.safefs import MAX_DEPTH, SkipCounts
from bundler.fs.scratch import scratch_folder
from bundler.fs.snapshot import check_snapshot, quiet_store, snapshot_database
from bundler.fs.threads import Pool
from bundler.home.backup_age import (
    AGE_SUFFIX,
    decrypt_into,
    encrypt_into,
    is_encrypted,
    load_identities,
)
from bundler.home.deflate import DEFAULT_COMPRESSION, LEVELS
from bundler.home.homes import HomeResolution, home_busy, lock_home, open_home_dir, resolve_home
from bundler.home.publish import (
    BACKUPS,
    TEMP_PREFIX,
    leftover_backups,
    leftover_backups_in,
    publish_name,
    run_locked,
    temp_file,
)
from bundler.home.reuse import Base, BaseUnusable, newest_backup, open_base, pin_of
from bundler.home.reuse_index import (
    EMPTY,
    Known,
    load_index,
    save_index,
    settled_before,
    stat_key,
)
from bundler.home.verify import check_contents
from bundler.home.zipcheck import DATABASE, TREES, open_zip
from bundler.home.zipwrite import UNCHANGED, Plan, StoreInstead, write_zip
from bundler.rules import hints
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase

_PRIVATE_BASE = "base.zip"

_WRITE_BUFFER = 1 << 20
"""The zip's write buffer: small entries, one after another, reach the file in few writes."""


@dataclass(frozen=True)
class BackupReport:
    """A finished backup: the zip, its file entries (``chat.db`` included) and their bytes.

    ``skipped`` counts what the walker did not carry (links, special files, hard links...);
    ``database_read_as`` says how the store was read (``quiet``, ``leftover`` or ``live``), or
    ``unchanged`` when its entry is the base's snapshot, copied.
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
    encrypt_to: Sequence[str] = (),
    age_identities: Sequence[Path] = (),
    age_passphrase: AskPassphrase | None = None,
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
    (:data:`LEVELS`); a copied entry keeps the base's. ``encrypt_to`` (``--encrypt-to``:
    public keys, or ``@FILE`` of them, :mod:`bundler.fs.age`) writes ``NAME.zip.age`` instead,
    the zip encrypted to them (04 §5.6, :mod:`bundler.home.backup_age`); ``progress`` then sees
    an ``encrypting`` phase too. ``age_identities`` (with ``encrypt_to`` only) open an encrypted
    base, decrypted privately; without them an encrypted base is not used.
    """
    if compression not in LEVELS:
        raise UsageError(
            f"--compression {escape_display(compression)}: choose one of {', '.join(LEVELS)}"
        )
    recipients: list[Recipient] = []
    if encrypt_to:
        recipients = parse_recipients(encrypt_to, "--encrypt-to")
    elif age_identities:
        raise UsageError(
            "--age-identity goes with --encrypt-to: it opens an encrypted base of an encrypted "
            "backup"
        )
    identities = load_identities(age_identities, age_passphrase) if age_identities else []
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
        if requested is not None and bool(recipients) != requested.endswith(AGE_SUFFIX):
            # the name says what the file is: age -d for one, unzip for the other
            raise UsageError(
                f"--to {escape_display(requested)}: an encrypted backup's name ends with "
                f"{AGE_SUFFIX} (NAME.zip.age), a plain one's does not; encrypt with "
                "--encrypt-to",
                path=escape_display(requested),
            )
        # a --to folder outside the home keeps what a run killed while writing there left
        elsewhere = os.path.realpath(folder) != os.path.realpath(home / BACKUPS)
        stale_there = leftover_backups_in(folder) if elsewhere else []
        target_fd = _open_target(folder, create=requested is None)
        try:
            base_path = _base_path(folder, requested, base, full)
            with collector_paused():  # its tables live until it ends (fs.collector)
                if recipients:
                    report = _backup_encrypted(
                        resolution,
                        home_fd,
                        _Destination(folder, target_fd, requested),
                        progress,
                        base_path,
                        LEVELS[compression],
                        recipients,
                        identities,
                    )
                else:
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
            report.warnings.extend(
                hints.Hinted(
                    f"{', '.join(escape_display(n) for n in names)} in "
                    f"{escape_display(str(folder))}: left by an interrupted backup",
                    hints.command("recover", str(folder)),
                )
                for names in stale_there
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
    publish: Callable[[str], Path] | None = None,
) -> BackupReport:
    """Write, check and publish one backup zip in ``target_fd`` (the folder ``folder``);
    ``publish`` instead gives the checked temporary zip's name to a publisher of its own,
    which returns the published file's path."""
    token = durable.random_token()
    warnings: list[str] = []
    with (
        # the walk's stats find the inodes cached, read meanwhile on the second core
        read_metadata_ahead(home_fd, TREES, MAX_DEPTH),
        temp_file(target_fd, token, ".db") as db_name,
        temp_file(target_fd, token, ".zip") as zip_name,
        run_locked(target_fd, zip_name),
        contextlib.ExitStack() as base_stack,
        Pool(2, name="bundler-backup") as pool,
    ):
        index = load_index(resolution.home) if base_path is not None else EMPTY
        known = index.known

        def opened() -> Base | None:
            """The base, opened and checked (until the end)."""
            if base_path is None:
                return None
            return base_stack.enter_context(open_base(base_path, warnings, index))

        # SQLite releases the GIL: the base is opened on the second core while the snapshot is
        # taken here, and the snapshot's integrity check runs there while this thread zips
        opening = pool.submit(opened)
        plan = Plan(resolution, home_fd, folder / db_name, progress, level=level)
        unchanged = plan.store = _unchanged_store(resolution.database, known)
        if unchanged is None:
            _snapshot_store(plan)
        wait_for(settled(opening))
        plan.base = opening.result()
        plan.known = known if plan.base is not None else {}
        if unchanged is not None:
            if plan.unchanged(DATABASE, unchanged) is None:  # not the base the index knew
                _snapshot_store(plan)
            else:
                plan.database_read_as = UNCHANGED
        checked = None
        if not plan.copy_database:
            checked = pool.submit(check_snapshot, resolution.database, plan.snapshot)
        entries, total, skipped, flushed = _write_until_done(
            plan, target_fd, zip_name, warnings, pool
        )
        if checked is not None:
            wait_for(settled(checked))
            checked.result()
        # the snapshot passed integrity_check and the digests tie the zip's copy to it; the
        # digests are the sources', so a copied entry is checked against its source too
        while True:
            try:
                with open_zip(folder / zip_name) as archive:
                    trusted = frozenset(plan.trusted)
                    listing, every = check_contents(
                        archive, check_database=False, progress=progress, trusted=trusted
                    )
                    # a later backup takes this zip's checked directory at its word: only a
                    # plain zip published under its own name is pinned
                    assert archive.fp is not None
                    pin = pin_of(archive.fp, every, listing.files) if publish is None else None
                break
            except InvalidInput as exc:
                if plan.base is None or not plan.base.reused:
                    raise
                shown = escape_display(str(plan.base.path))
                warnings.append(f"{shown} is not used as the base: {exc.message}")
                plan.base = None
                _flushed(flushed)  # before the file it flushes is written again
                entries, total, skipped, flushed = _write_until_done(
                    plan, target_fd, zip_name, warnings, pool
                )
        _flushed(flushed)
        if publish is None:
            published = folder / publish_name(target_fd, zip_name, requested)
        else:
            published = publish(zip_name)
        # after the commit point: the next backup of this home reads only what changed since
        if pin is not None:
            pin = replace(pin, path=os.path.realpath(published))
        save_index(resolution.home, plan.made, pin)
        used = plan.base
        report = BackupReport(
            published,
            entries,
            total,
            skipped,
            plan.database_read_as,
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


@dataclass(frozen=True)
class _Destination:
    """Where a backup is published: the folder, open, and the name asked for (None: the
    default timestamped name)."""

    folder: Path
    fd: int
    requested: str | None


def _backup_encrypted(
    resolution: HomeResolution,
    home_fd: int,
    dest: _Destination,
    progress: Progress | None,
    base_path: Path | None,
    level: int,
    recipients: Sequence[Recipient],
    identities: Sequence[Any],
) -> BackupReport:
    """The backup zip built, checked and encrypted to ``recipients`` as ``NAME.zip.age`` in the
    destination (04 §5.6). The zip and the snapshot are written only inside a locked 0700
    scratch folder ``.backup-<token>/`` of the home's ``backups/`` (the home holds those bytes
    in clear already; a dead one is what ``recover --home`` removes), then streamed through age
    into the hidden ``.backup-<token>.zip.age`` beside the destination, fsynced, read back
    (header and length), and linked to its name as a plain backup is. The scratch folder goes
    when the backup ends however it ends; only a kill leaves it.

    An encrypted base is decrypted into the scratch folder with ``identities`` and used from
    there (04 §5.1.1); without them, or when they do not open it, the backup is full, with a
    warning."""
    staging_parent = resolution.home / BACKUPS
    try:
        parent_fd = _open_target(staging_parent, create=True)
    except Refused as exc:
        shown = escape_display(str(staging_parent))
        raise exc.restated(
            f"cannot use {shown}: an encrypted backup builds its zip there, inside the home, "
            "before encrypting it wherever --to says; make the home writable",
            path=shown,
        ) from None
    try:
        with scratch_folder(
            parent_fd,
            TEMP_PREFIX,
            where=str(staging_parent),
            durable=True,
            fix=hints.command("recover", "--home", str(resolution.home)),
        ) as (work, work_fd):
            token = work[len(TEMP_PREFIX) :]

            def publish(zip_name: str) -> Path:
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                src = os.open(zip_name, flags, dir_fd=work_fd)
                try:
                    with (
                        temp_file(dest.fd, token, f".zip{AGE_SUFFIX}") as temp,
                        run_locked(dest.fd, temp),
                    ):
                        dst = os.open(
                            temp, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dest.fd
                        )
                        try:
                            size = os.fstat(src).st_size
                            with phase(progress, "encrypting", 1, size):
                                encrypt_into(src, dst, recipients, progress)
                        finally:
                            os.close(dst)
                        suffix = f".zip{AGE_SUFFIX}"
                        return dest.folder / publish_name(dest.fd, temp, dest.requested, suffix)
                finally:
                    os.close(src)

            notes: list[str] = []
            private_base = base_path
            if base_path is not None and identities and is_encrypted(base_path):
                name = _decrypt_base(base_path, identities, work_fd, notes, progress)
                private_base = None if name is None else staging_parent / work / name
            report = _backup_into(
                resolution,
                home_fd,
                staging_parent / work,
                work_fd,
                None,
                progress,
                private_base,
                level,
                publish=publish,
            )
            if private_base is not None and private_base != base_path:
                shown = escape_display(str(base_path))
                report.warnings[:] = [w.replace(str(private_base), shown) for w in report.warnings]
                if report.base == private_base:
                    report = replace(report, base=base_path)
            report.warnings[:0] = notes
    finally:
        os.close(parent_fd)
    try:
        durable.fsync_dir(dest.fd)
    except OSError as exc:  # after the commit point: a warning, the backup stands
        report.warnings.append(
            f"the backup is published, but its name was not flushed ({exc.strerror}); "
            "a power loss may undo it"
        )
    return report


def _decrypt_base(
    base: Path,
    identities: Sequence[Any],
    work_fd: int,
    notes: list[str],
    progress: Progress | None,
) -> str | None:
    """The encrypted ``base`` decrypted into the scratch folder ``work_fd`` as ``base.zip``
    (its name there), or None with a note in ``notes`` when ``identities`` do not open it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(_PRIVATE_BASE, flags, 0o600, dir_fd=work_fd)
    try:
        decrypt_into(base, fd, identities, progress)
    except (InvalidInput, Refused) as exc:
        notes.append(f"{escape_display(str(base))} is not used as the base: {exc.message}")
        return None
    finally:
        os.close(fd)
    return _PRIVATE_BASE


def _unchanged_store(database: Path, known: Mapping[str, Known]) -> os.stat_result | None:
    """The store's stat when it is quiet and the index recorded exactly that stat for it (its
    snapshot in the base is then its content: no new snapshot is needed), else None."""
    recorded = known.get(DATABASE)
    if recorded is None:
        return None
    now = quiet_store(database)
    return now if now is not None and stat_key(now) == recorded.stat else None


def _snapshot_store(plan: Plan) -> None:
    """Take the store's snapshot (its integrity is the caller's to check), and keep the
    store's stat for the next index when it was read quiet and had settled."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(plan.snapshot)  # from a snapshot taken before the base was dropped
    started = time.time_ns()
    info = snapshot_database(plan.resolution.database, plan.snapshot, method="vacuum", check=False)
    seen = info.quiet_stat
    plan.store = seen if seen is not None and settled_before(seen, started) else None
    plan.database_read_as = info.read_as


def _write_until_done(
    plan: Plan, target_fd: int, zip_name: str, warnings: list[str], flusher: Pool
) -> tuple[int, int, SkipCounts, Future[None]]:
    """Write the zip; again with an entry stored when it compressed beyond the margin, and
    again without the base when it could not give an entry's bytes. The zip's flush to disk
    runs on a ``flusher`` thread while this one reads the zip back: its future is returned,
    and :func:`_flushed` before the zip is published or written again."""
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        if plan.copy_database and plan.base is None:  # the store's copy went with the base
            _snapshot_store(plan)
            check_snapshot(plan.resolution.database, plan.snapshot)
        skipped = SkipCounts()
        fd = os.open(zip_name, flags, 0o600, dir_fd=target_fd)
        if plan.base is not None:
            plan.base.reused = 0
        try:
            with (
                os.fdopen(os.dup(fd), "w+b", buffering=_WRITE_BUFFER) as raw,
                zipfile.ZipFile(raw, "w", allowZip64=True) as archive,
            ):
                entries, total = write_zip(archive, plan, skipped)
            flush = _Flush(os.dup(fd))
            try:
                flushed = flusher.submit(flush.run)
            except BaseException:
                flush.drop()  # no thread may have taken it
                raise
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
        return entries, total, skipped, flushed


class _Flush:
    """The zip's flush to disk, on a thread (``fsync`` releases the GIL): the descriptor it is
    handed is closed exactly once, by the thread once flushed, or by :meth:`drop` when no
    thread took it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def _take(self) -> int:
        with self._lock:
            fd, self._fd = self._fd, -1
        return fd

    def run(self) -> None:
        fd = self._take()
        if fd >= 0:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def drop(self) -> None:
        fd = self._take()
        if fd >= 0:
            os.close(fd)


def _flushed(flush: Future[None]) -> None:
    """Wait for the zip's flush; raise what it raised."""
    wait_for(settled(flush))
    flush.result()
