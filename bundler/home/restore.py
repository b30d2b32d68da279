"""``bundler home restore`` and ``bundler recover --home`` (04 §5.3).

Order of work, so that nothing changes before every check has passed and a crash at any point
leaves a home that ``recover --home`` turns into the old state or the new one, whole:

1. **Check** (changes nothing): the zip's structure as ``verify-backup`` checks it (every
   directory and local-header rule, ``backup.json`` read and matched with the directory), the
   free space, the busy refusal.
2. **Stage**: create ``<home>/.restore-<token>/`` (0700) holding ``journal.toml``
   (``state = "extracting"``), extract into it, each entry inflated once and its size, CRC and
   digest checked as it is written (:mod:`bundler.home.extract`), check the extracted database
   (rollback-journal mode, integrity_check), make it durable. Whatever fails here discards the
   staging folder, which holds nothing of the home's: nothing outside it was written, so a
   zip refused at this step changes the home no more than one refused at step 1.
3. **Swap**: a list of renames, recorded in the journal (``state = "swapping"``, with ``step``
   rewritten and fsynced before each rename; folders fsynced after each):

   a. the previous ``*.before-restore`` set into ``<staging>/previous/`` (kept until the end);
   b. the current ``chat.db`` (and its sidecars, ``chat.db.before-restore-wal`` etc.),
      ``files`` and ``skills`` to ``*.before-restore``;
   c. the staged ``chat.db``, ``files`` and ``skills`` into place.

4. **Commit**: ``state = "committed"``; then the journal is removed and the staging folder
   (with the previous before-restore set) deleted.

An encrypted backup (04 §5.6) cannot be checked before it is decrypted, and is decrypted only
into the staging folder: its identities are tried on its first chunk (changing nothing), then
step 2 comes first, the check runs on ``<staging>/backup.zip`` (the database's copy in the
staging too), and the zip is unlinked once extracted; a check that fails there discards the
staging folder as a failed extraction does.

The journal, the swap's moves and recovery from a crash (``recover --home``) are
:mod:`bundler.home.restore_journal`'s.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.errors import (
    DestinationExists,
    InvalidInput,
    Locked,
    NoSpace,
    RecoveryNeeded,
    UnsuitablePath,
    os_failure,
)
from bundler.fs import durable
from bundler.fs.age import AskPassphrase
from bundler.fs.copytree import make_durable
from bundler.fs.interrupts import commit_reached, signals_deferred
from bundler.fs.safefs import open_dir_nofollow, rmtree_at
from bundler.fs.snapshot import SIDECARS
from bundler.home.backup_age import PLAIN_NAME, decrypt_into, identities_for, renamed
from bundler.home.extract import CREATE_NEW, extract
from bundler.home.homes import (
    README_NAME,
    HomeResolution,
    home_busy,
    home_problem,
    init_home,
    lock_home,
    looks_like_data_home,
    resolve_home,
    tree_size,
    user_home,
)
from bundler.home.publish import leftover_backups
from bundler.home.restore_journal import (
    PREVIOUS,
    STAGING_PREFIX,
    Journal,
    current_items,
    discard_staging,
    exists_at,
    finish_staging,
    held_nothing,
    plan_moves,
    read_journal,
    rename_move,
    undo_moves,
)
from bundler.home.verify import check_database_file, check_structure
from bundler.home.zipcheck import DATABASE, TREES, open_zip
from bundler.home.zipindex import BackupIndex
from bundler.rules import hints
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase
from bundler.rules.units import human_size


@dataclass(frozen=True)
class RestoreReport:
    """A finished restore: the home, files restored (``chat.db`` included) and their bytes.

    ``kept``: the ``*.before-restore`` names now holding what was there before;
    ``created_home``: the home did not exist and was created as a first start does;
    ``warnings``: failures after the commit point (the restore stands; ``recover`` tidies up).
    """

    home: Path
    entries: int
    bytes: int
    kept: list[str] = field(default_factory=list)
    created_home: bool = False
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The ``home restore --json`` payload (without ``ok``)."""
        return {
            "home": str(self.home),
            "entries": self.entries,
            "bytes": self.bytes,
            "kept": self.kept,
            "created_home": self.created_home,
        }


# --- target ----------------------------------------------------------------------------------


def _target(project: Path, home: Path | None, environ: Mapping[str, str] | None) -> HomeResolution:
    if home is None:
        resolution = resolve_home(project, environ=environ)
        if resolution.database != resolution.home / DATABASE:
            shown = escape_display(str(resolution.database))
            raise UnsuitablePath(
                f"the database is {shown} (BXAGENTS_DB), outside the home: restore with "
                "--home DIR or unset BXAGENTS_DB",
                path=shown,
            )
        return resolution
    env = os.environ if environ is None else environ
    target = Path(os.path.abspath(home))
    problem = home_problem(target, user_home(env))
    if problem is not None:
        shown = escape_display(str(target))
        raise UnsuitablePath(f"--home {shown}: {problem}; name a data home", path=shown)
    return HomeResolution(target, 0, "--home", target / DATABASE)


def _busy(home: Path) -> list[str]:
    return [
        f"{DATABASE}{suffix}"
        for suffix in SIDECARS
        if os.path.lexists(home / f"{DATABASE}{suffix}")
    ]


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def restore_home(
    project: Path,
    zip_path: Path,
    *,
    home: Path | None = None,
    force: bool = False,
    environ: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    age_identities: Sequence[Path] = (),
    age_passphrase: AskPassphrase | None = None,
) -> RestoreReport:
    """Restore a backup zip into the data home of ``project`` (or into ``home``) (04 §5.3).

    Every check passes before anything of the home changes: a hostile or damaged zip raises
    :class:`InvalidInput` (exit 3) naming the entry, its contents refused as they are
    extracted into the restore's private staging folder, which is then discarded; a database
    that looks in use (a ``-wal``, ``-shm`` or ``-journal`` beside it) raises :class:`Refused`
    (exit 1) unless ``force``. What was there is kept as ``*.before-restore`` for one restore.
    ``progress`` sees one phase, ``restoring`` its files, totals from the zip's index.

    An encrypted backup (``NAME.zip.age``, 04 §5.6) needs ``age_identities``
    (``age_passphrase`` asks for a protected SSH key's): they are tried on its first chunk
    before anything changes, then it is decrypted into the restore's own staging folder and
    checked there (a ``decrypting`` phase first), so no plain byte of it is written elsewhere.
    """
    resolution = _target(project, home, environ)
    identities = identities_for(zip_path, age_identities, age_passphrase)
    try:
        if identities is not None:
            return _restore_encrypted(resolution, zip_path, identities, force, progress)
        return _restore(resolution, zip_path, force, progress)
    except OSError as exc:
        shown = escape_display(str(resolution.home))
        raise os_failure(
            hints.Hinted(
                f"restore into {shown} failed ({os.strerror(exc.errno or errno.EIO)}); nothing "
                "was swapped (if in doubt, check with recover)",
                hints.command("recover", "--home", str(resolution.home)),
            ),
            exc,
            path=shown,
        ) from exc


def _restore(
    resolution: HomeResolution, zip_path: Path, force: bool, progress: Progress | None
) -> RestoreReport:
    target = resolution.home
    with open_zip(zip_path) as archive:
        # sizes from the checked directory: a zip that cannot fit is refused before it is read
        declared = sum(info.file_size for info in archive.infolist())
        probe = _nearest_existing(target)
        probe_fd = durable.open_dir(probe if probe.is_dir() else probe.parent, follow=True)
        try:
            check_free_space(declared, probe_fd, escape_display(str(probe)))
        finally:
            os.close(probe_fd)
        index, files = check_structure(archive)
        total = sum(info.file_size for info in files)
        _refuse_in_use(target, force)

        def fill(staging_fd: int, _staging: str) -> None:
            _extract_all(archive, index, files, staging_fd, progress)

        kept, created, warnings = _in_home(resolution, fill)
    return RestoreReport(target, len(files), total, kept, created, warnings)


def _refuse_in_use(target: Path, force: bool) -> None:
    """Without ``force``: refuse a home whose database looks open, or a folder that is not a
    data home (:func:`_refuse_foreign`)."""
    busy = _busy(target)
    if busy and not force:
        raise Locked(
            f"{escape_display(str(target / busy[0]))} exists: chat.db looks open by a server "
            "or chat; stop it and try again (or restore with --force)",
            path=escape_display(str(target / busy[0])),
        )
    if not force:
        _refuse_foreign(target)


def _in_home(
    resolution: HomeResolution, fill: Callable[[int, str], None]
) -> tuple[list[str], bool, list[str]]:
    """Create the home when absent, lock it, stage with ``fill`` and swap
    (:func:`_stage_and_swap`); returns the kept names, whether the home was created, and the
    warnings."""
    target = resolution.home
    created = not os.path.lexists(target)
    if created:
        init_home(resolution)
    home_fd = durable.open_dir(target, follow=True)
    try:
        if not lock_home(home_fd):
            raise home_busy(target)
        swap = _Swap(home_fd, target, [])
        try:
            if created:
                # first start made empty files/ and skills/; the restored ones replace them
                for tree in TREES:
                    with contextlib.suppress(OSError):
                        os.rmdir(tree, dir_fd=home_fd)
            _clear_interrupted(home_fd, target, swap.warnings)
            kept = _stage_and_swap(swap, fill)
        except BaseException:
            # refused before its commit: the home it made goes too, as it was (told by the
            # flag the commit sets, not by where the exception came from: an interrupt can
            # be delivered just after a restore that stands)
            if created and not swap.committed:
                _remove_created_home(target)
            raise
    finally:
        os.close(home_fd)
    return kept, created, swap.warnings


def _restore_encrypted(
    resolution: HomeResolution,
    sealed: Path,
    identities: Sequence[Any],
    force: bool,
    progress: Progress | None,
) -> RestoreReport:
    """Restore the encrypted backup ``sealed``: decrypted into ``backup.zip`` of the staging
    folder (0700, locked, its journal saying ``extracting``: what a crash leaves there is
    removed by ``recover --home`` and by the next restore), its structure checked there,
    extracted beside it (each entry checked as it is written), and unlinked before the swap
    begins. A check that fails removes the staging folder, and the home when this
    restore created it: nothing else was written."""
    target = resolution.home
    probe = _nearest_existing(target)
    probe_fd = durable.open_dir(probe if probe.is_dir() else probe.parent, follow=True)
    try:
        # the decrypted zip is about as large as the file, and is held beside what it restores
        check_free_space(os.stat(sealed).st_size, probe_fd, escape_display(str(probe)))
    finally:
        os.close(probe_fd)
    _refuse_in_use(target, force)
    counted: list[int] = []

    def fill(staging_fd: int, staging: str) -> None:
        fd = os.open(PLAIN_NAME, CREATE_NEW, 0o600, dir_fd=staging_fd)
        try:
            decrypt_into(sealed, fd, identities, progress)
        finally:
            os.close(fd)
        plain = target / staging / PLAIN_NAME
        try:
            with open_zip(plain) as archive:
                declared = sum(info.file_size for info in archive.infolist())
                check_free_space(declared, staging_fd, escape_display(str(target)))
                index, files = check_structure(archive)
                # the open zip is read through its descriptor: the name goes now, the bytes
                # when it is closed
                os.unlink(PLAIN_NAME, dir_fd=staging_fd)
                _extract_all(archive, index, files, staging_fd, progress)
        except InvalidInput as exc:
            raise renamed(exc, plain, sealed) from None
        counted.extend((len(files), sum(index.files[i.filename].size for i in files)))

    kept, created, warnings = _in_home(resolution, fill)
    return RestoreReport(target, counted[0], counted[1], kept, created, warnings)


def check_free_space(total: int, dir_fd: int, where: str) -> None:
    """Refuse (exit 1) when ``total`` bytes do not fit in the filesystem of ``dir_fd``."""
    vfs = os.fstatvfs(dir_fd)
    free = vfs.f_bavail * vfs.f_frsize
    if total > free:
        raise NoSpace(
            f"the backup needs {human_size(total)} but {where} has {human_size(free)} free: free "
            "some space",
            path=where,
        )


def _remove_created_home(home: Path) -> None:
    """Remove the home this restore created (while it still holds the home's lock: no other
    restore can be using it), without following links; quietly, since the refusal that called
    it is what the user must see."""
    with contextlib.suppress(OSError):
        parent_fd = durable.open_dir(home.parent, follow=True)
        try:
            rmtree_at(parent_fd, home.name)
            durable.fsync_dir(parent_fd)
        finally:
            os.close(parent_fd)


def _refuse_foreign(target: Path) -> None:
    """A restore moves what is there aside and deletes it at the next restore: never do that
    to a non-empty folder that is not a data home unless asked (``--force``)."""
    try:
        fd = durable.open_dir(target, follow=True)
    except (FileNotFoundError, NotADirectoryError):
        return  # absent: created as a first start; not a folder: init_home refuses it
    try:
        names = set(os.listdir(fd))
        head = b""
        with contextlib.suppress(OSError):
            readme = os.open(README_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            try:
                head = os.read(readme, 256)
            finally:
                os.close(readme)
    finally:
        os.close(fd)
    if names and not looks_like_data_home(names, head):
        shown = escape_display(str(target))
        raise DestinationExists(
            f"{shown} is not a data home (no chat.db, files/ with skills/, or README.md of one) "
            "and is not empty: a restore would move its contents aside and delete them at the "
            "next restore; name a data home or an empty folder (or restore with --force)",
            path=shown,
        )


def before_restore_copy(home: Path) -> tuple[list[str], int] | None:
    """The one ``*.before-restore`` set a restore keeps in ``home``: its names and total bytes
    (regular files only, links never followed); None when there is none. Reads only."""
    try:
        fd = durable.open_dir(home, follow=True)
    except OSError:
        return None
    try:
        kept = {name for _item, name in current_items()}
        names = sorted(name for name in os.listdir(fd) if name in kept)
        total = 0
        for name in names:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
            elif stat.S_ISDIR(st.st_mode):
                total += tree_size(fd, name)
    finally:
        os.close(fd)
    return (names, total) if names else None


def _clear_interrupted(home_fd: int, home: Path, warnings: list[str]) -> None:
    """Before a restore stages: a dead restore that never began its swap is removed (a warning
    says so); one that did, or a live one, refuses with what to do."""
    shown = escape_display(str(home))
    for name in sorted(os.listdir(home_fd)):
        if not name.startswith(STAGING_PREFIX):
            continue
        if durable.held_by_another(name, dir_fd=home_fd):
            raise home_busy(home)
        staging_fd = open_dir_nofollow(home_fd, name)
        try:
            journal = read_journal(staging_fd, name[len(STAGING_PREFIX) :])
            if journal is None or journal.state == "extracting":
                discard_staging(home_fd, name, staging_fd)
                warnings.append(
                    f"removed {shown}/{escape_display(name)}: left by an interrupted restore, "
                    f"{held_nothing(journal)}"
                )
                continue
        finally:
            os.close(staging_fd)
        raise RecoveryNeeded(
            hints.Hinted(
                f"an interrupted restore is in {shown}/{escape_display(name)}: recover it first",
                hints.command("recover", "--home", str(home)),
            ),
            path=shown,
        )


def home_leftovers(home: Path) -> list[str]:
    """One line per interrupted restore or backup of ``home`` whose process is gone, each
    naming ``bundler recover --home HOME``; changes nothing (for ``doctor``)."""
    try:
        home_fd = durable.open_dir(home, follow=True)
    except OSError:
        return []
    shown = escape_display(str(home))
    fix = hints.command("recover", "--home", str(home))
    try:
        if durable.locked_by_another(home_fd):
            return []  # a restore is running: what it has made is not left over
        lines: list[str] = [
            hints.Hinted(f"interrupted restore left {shown}/{escape_display(name)}", fix)
            for name in sorted(os.listdir(home_fd))
            if name.startswith(STAGING_PREFIX) and not durable.held_by_another(name, dir_fd=home_fd)
        ]
    finally:
        os.close(home_fd)
    lines += [
        hints.Hinted(
            f"interrupted backup left {', '.join(escape_display(n) for n in names)} in {shown}",
            fix,
        )
        for names in leftover_backups(home)
    ]
    return lines


@dataclass
class _Swap:
    """Where a restore swaps (the home, open), what it warns of, and whether it committed."""

    home_fd: int
    home: Path
    warnings: list[str]
    committed: bool = False


def _extract_all(
    archive: zipfile.ZipFile,
    index: BackupIndex,
    files: list[zipfile.ZipInfo],
    staging_fd: int,
    progress: Progress | None,
) -> None:
    """:func:`bundler.home.extract.extract` in a ``restoring`` phase with the index's totals."""
    total = sum(index.files[info.filename].size for info in files)
    with phase(progress, "restoring", len(files), total):
        extract(archive, index, files, staging_fd, progress)


def _stage_and_swap(swap: _Swap, fill: Callable[[int, str], None]) -> list[str]:
    """Make the staging folder, have ``fill`` (given its descriptor and name) write the
    restored ``chat.db``, ``files/`` and ``skills/`` into it, then swap them in."""
    home_fd, home, warnings = swap.home_fd, swap.home, swap.warnings
    # the home's folder as found: a restore refused while extracting puts its times back
    found = os.fstat(home_fd)
    token = durable.random_token()
    staging = f"{STAGING_PREFIX}{token}"
    journal = Journal(token)
    staging_fd = -1
    made = False
    try:
        with signals_deferred():  # an interrupt is taken once the folder is known to be ours
            os.mkdir(staging, 0o700, dir_fd=home_fd)
            made = True
        durable.fsync_dir(home_fd)
        staging_fd = open_dir_nofollow(home_fd, staging)
        # held until the descriptor closes: a later run can tell a live restore from a dead one
        fcntl.flock(staging_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:  # an interrupt too: the folder is empty, nothing to keep it for
        if staging_fd >= 0:
            os.close(staging_fd)
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(staging, dir_fd=home_fd)
        raise
    try:
        try:
            journal.write(staging_fd)
            fill(staging_fd, staging)
            check_database_file(home / staging / DATABASE)
            os.mkdir(PREVIOUS, 0o700, dir_fd=staging_fd)
            make_durable(staging_fd)
            items = current_items()
            present = {name for item in items for name in item if exists_at(home_fd, name)}
            journal.moves = plan_moves(token, present)
        except BaseException as exc:
            discard_staging(home_fd, staging, staging_fd)
            # the staging folder was the only change, and it is gone: the home is as found,
            # its folder's times too (the lock held on it keeps other restores and
            # recoveries out meanwhile)
            with contextlib.suppress(OSError):
                os.utime(home_fd, ns=(found.st_atime_ns, found.st_mtime_ns))
            if isinstance(exc, OSError):
                raise os_failure(
                    f"restore failed while extracting ({os.strerror(exc.errno or errno.EIO)}); "
                    "the home is unchanged",
                    exc,
                    path=escape_display(str(home)),
                ) from exc
            raise
        journal.state = "swapping"
        try:
            # to an interrupt the swap and its commit are one step: one that arrives meanwhile
            # is delivered once the restore stands, and is then a failure after the commit
            with signals_deferred():
                try:
                    for step, (src, dst) in enumerate(journal.moves):
                        journal.step = step
                        journal.write(staging_fd)
                        rename_move(home_fd, src, dst)
                except BaseException as exc:
                    _roll_back_after_failure(home_fd, staging, staging_fd, journal, home, exc)
                    raise
                # commit point: every move is done, the home holds the new state whole; from
                # here a failure is a warning and recover (which sees the last move done) only
                # tidies up
                swap.committed = True
                commit_reached()
                journal.state = "committed"
                journal.write(staging_fd)
            finish_staging(home_fd, staging, staging_fd)
        except OSError as exc:
            if not swap.committed:
                raise
            why = os.strerror(exc.errno or errno.EIO)
            warnings.append(
                hints.Hinted(
                    f"restored, but {staging} was not removed from {escape_display(str(home))} "
                    f"({why})",
                    hints.command("recover", "--home", str(home)),
                )
            )
    finally:
        os.close(staging_fd)
    return [kept for item, kept in current_items() if item in present]


def _roll_back_after_failure(
    home_fd: int, staging: str, staging_fd: int, journal: Journal, home: Path, exc: BaseException
) -> None:
    try:
        undo_moves(home_fd, journal.moves)
        finish_staging(home_fd, staging, staging_fd)
    except OSError:
        shown = escape_display(str(home))
        raise RecoveryNeeded(
            hints.Hinted(
                f"restore failed ({exc}) and could not be undone in {shown}",
                hints.command("recover", "--home", str(home)),
            ),
            path=shown,
        ) from exc
    if isinstance(exc, OSError):
        raise os_failure(
            f"restore failed ({os.strerror(exc.errno or errno.EIO)}); the home holds its "
            "previous state",
            exc,
            path=escape_display(str(home)),
        ) from exc
