"""``bundler home verify-backup`` (04 §5.2): a backup zip checked completely, changing nothing.

Every entry allowed, every digest matching ``backup.json``, and the database passing SQLite's
``integrity_check`` from a private copy. ``home backup`` checks the zip it wrote with
:func:`check_contents` before publishing it; ``home restore`` checks the structure
(:func:`check_structure`) before it extracts, and the contents as it extracts them
(:mod:`bundler.home.extract`). An
encrypted backup (``NAME.zip.age``, 04 §5.6) is checked as the zip it decrypts to, in a private
folder beside it (:func:`bundler.home.backup_age.decrypted_copy`).
"""

from __future__ import annotations

import errno
import io
import os
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.errors import InvalidInput, Malformed, os_failure
from bundler.fs import durable
from bundler.fs.age import AskPassphrase
from bundler.fs.interrupts import settled, wait_for
from bundler.fs.scratch import CHECK_PREFIX, clear_dead_scratch, scratch_folder, temp_root
from bundler.fs.snapshot import ROLLBACK_VERSIONS, integrity_ok, journal_versions
from bundler.fs.threads import Pool
from bundler.home.backup_age import decrypted_copy, identities_for, renamed
from bundler.home.deflate import batch_full, workers
from bundler.home.zipcheck import DATABASE, check_local_headers, open_zip, stream_entry
from bundler.home.zipindex import BackupIndex, match_index, read_index
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify-backup`` found in a sound backup."""

    path: Path
    format: int
    created_at: str
    agent: str | None
    entries: int
    bytes: int
    encrypted: bool = False

    def as_json(self) -> dict[str, Any]:
        """The ``home verify-backup --json`` payload (without ``ok``)."""
        return {
            "backup": str(self.path),
            "format": self.format,
            "created_at": self.created_at,
            "agent": self.agent,
            "entries": self.entries,
            "bytes": self.bytes,
            "encrypted": self.encrypted,
        }


def check_contents(
    archive: zipfile.ZipFile,
    *,
    check_database: bool,
    scratch: Path | None = None,
    progress: Progress | None = None,
    trusted: frozenset[str] = frozenset(),
) -> tuple[BackupIndex, list[zipfile.ZipInfo]]:
    """Check every digest of an opened backup and (optionally) the database's integrity.

    The database is checked from a private temporary copy in ``scratch`` (else the system's
    temporary folder), opened ``mode=ro&immutable=1`` with ``trusted_schema=OFF``. Returns the
    index and the file entries; raises :class:`InvalidInput` naming the entry at fault.
    ``progress`` sees one phase, ``checking``, with the index's files and sizes as totals.
    ``trusted`` names entries whose bytes are not inflated: a backup's, copied from its base
    and hashing to bytes that were checked (:mod:`bundler.home.reuse_index`); their local
    headers are checked all the same.
    """
    index, files = check_structure(archive)
    every = files

    def check_trusted() -> None:
        check_local_headers(archive, [info for info in every if info.filename in trusted])

    if trusted:
        files = [info for info in files if info.filename not in trusted]
    sizes = [index.files[info.filename].size for info in files]
    with phase(progress, "checking", len(files), sum(sizes)):
        if workers() and isinstance(archive.fp, io.BufferedReader):
            # the trusted entries' headers are checked here while the workers inflate
            _check_in_parallel(
                archive, index, files, check_database, scratch, progress, check_trusted
            )
        else:
            check_trusted()
            for info in files:
                listed = index.files[info.filename]
                if info.filename == DATABASE and check_database:
                    _check_database(archive, info, listed.size, listed.xxh3_128, scratch)
                else:
                    stream_entry(archive, info, listed.size, listed.xxh3_128, _discard)
                if progress is not None:
                    progress(1, listed.size)
    return index, every


def check_structure(archive: zipfile.ZipFile) -> tuple[BackupIndex, list[zipfile.ZipInfo]]:
    """Every check of an opened backup but its contents: ``backup.json`` read and matched with
    the directory, the folders' local headers; the index and the file entries, whose bytes the
    caller checks (:func:`check_contents`, or a restore as it writes them)."""
    index = read_index(archive)
    files = match_index(index, archive.infolist())
    # folders hold no data to stream; their local headers are checked all the same
    check_local_headers(
        archive, [info for info in archive.infolist() if info.filename.endswith("/")]
    )
    return index, files


Job = tuple[zipfile.ZipInfo, int, str]


def _check_batch(fd: int, jobs: list[Job]) -> InvalidInput | None:
    """What a worker does: check each entry of a batch in order; the first failure, or None."""
    for info, size, digest in jobs:
        try:
            stream_entry(fd, info, size, digest, _discard)
        except InvalidInput as exc:
            return exc
    return None


def _check_in_parallel(
    archive: zipfile.ZipFile,
    index: BackupIndex,
    files: list[zipfile.ZipInfo],
    check_database: bool,
    scratch: Path | None,
    progress: Progress | None,
    meanwhile: Callable[[], None] = lambda: None,
) -> None:
    """Check the entries on one worker thread per core (inflate and XXH3 release the GIL),
    each reading with ``pread``, the database's integrity here meanwhile; failures are raised
    in the zip's order, so the entry named is the one a check in order would name.
    ``meanwhile`` runs here once the workers have their entries, before any failure of
    theirs is raised."""
    assert archive.fp is not None
    fd = archive.fp.fileno()
    steps: list[list[Job]] = []  # an empty step: the database, checked on this thread
    packed = 0
    for info in files:
        listed = index.files[info.filename]
        if info.filename == DATABASE and check_database:
            steps.append([])
        else:
            if not steps or not steps[-1] or batch_full(len(steps[-1]), packed):
                steps.append([])
                packed = 0
            steps[-1].append((info, listed.size, listed.xxh3_128))
            packed += info.compress_size
    pool = Pool(workers(), name="bundler-check")
    try:
        pending = [pool.submit(_check_batch, fd, jobs) if jobs else None for jobs in steps]
        meanwhile()
        for jobs, future in zip(steps, pending, strict=True):
            if future is None:
                info = archive.getinfo(DATABASE)
                listed = index.files[DATABASE]
                _check_database(archive, info, listed.size, listed.xxh3_128, scratch)
                done: list[Job] = [(info, listed.size, listed.xxh3_128)]
            else:
                wait_for(settled(future))
                failed = future.result()
                if failed is not None:
                    raise failed
                done = jobs
            if progress is not None:
                for _info, size, _digest in done:
                    progress(1, size)
    finally:
        pool.shutdown(cancel_pending=True)


def _discard(_chunk: bytes) -> None:
    return None


def _check_database(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, digest: str, scratch: Path | None
) -> None:
    parent = scratch if scratch is not None else Path(temp_root())
    parent_fd = durable.open_dir(parent, follow=True)
    try:
        # a kill leaves the copy behind, unlocked: the next check removes it
        clear_dead_scratch(parent_fd, CHECK_PREFIX)
        with scratch_folder(parent_fd, CHECK_PREFIX, where=str(parent)) as (name, folder_fd):
            _check_database_copy(archive, info, size, digest, parent / name, folder_fd)
    finally:
        os.close(parent_fd)


def _check_database_copy(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    size: int,
    digest: str,
    folder: Path,
    folder_fd: int,
) -> None:
    """Stream the backup's chat.db into ``folder`` and check it as a backup's (one
    snapshot in rollback-journal mode, passing integrity_check)."""
    copy = folder / DATABASE
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(DATABASE, flags, 0o600, dir_fd=folder_fd)
    with os.fdopen(fd, "wb") as sink:
        stream_entry(archive, info, size, digest, sink.write)
    check_database_file(copy)


def check_database_file(copy: Path) -> None:
    """Refuse (:class:`Malformed`) a backup's database, written out at ``copy``, that is not
    what a backup holds: one snapshot in rollback-journal mode, passing integrity_check."""
    # what a backup holds (backup-format.md); an empty file opens as an empty database
    if journal_versions(copy) != ROLLBACK_VERSIONS:
        raise Malformed(
            "backup entry chat.db: not a SQLite database in rollback-journal mode, which is "
            "what a backup holds (an empty file, or a header saying WAL)",
            path=DATABASE,
        )
    if not integrity_ok(copy):
        raise Malformed(
            "backup entry chat.db: fails PRAGMA integrity_check (not a sound SQLite database)",
            path=DATABASE,
        )


def verify_backup(
    path: Path,
    *,
    progress: Progress | None = None,
    age_identities: Sequence[Path] = (),
    age_passphrase: AskPassphrase | None = None,
) -> VerifyReport:
    """Check a backup zip completely, changing nothing (04 §5.2).

    Every entry allowed (:func:`bundler.home.zipcheck.path_problem` and the directory rules), every
    digest matching ``backup.json``, ``backup.json`` valid with a known ``format``, the database
    passing ``integrity_check``. Raises :class:`InvalidInput` (exit 3) naming the entry at
    fault, :class:`Refused` when the file cannot be opened. ``progress``: as
    :func:`check_contents`. An encrypted backup (``NAME.zip.age``, 04 §5.6) is opened with
    ``age_identities`` (``age_passphrase`` asks for a protected SSH key's) and decrypted into a
    private folder beside it (:func:`bundler.home.backup_age.decrypted_copy`), which is removed.
    """
    identities = identities_for(path, age_identities, age_passphrase)
    if identities is None:
        return _verify_zip(path, path, None, progress)
    return verify_encrypted(path, identities, progress=progress)


def verify_encrypted(
    path: Path, identities: Sequence[Any], *, progress: Progress | None = None
) -> VerifyReport:
    """:func:`verify_backup` of the encrypted backup ``path`` with identities already loaded
    (:func:`bundler.home.backup_age.load_identities`)."""
    try:
        with decrypted_copy(path, identities, progress) as (plain, scratch):
            return _verify_zip(plain, path, scratch, progress)
    except OSError as exc:
        shown = escape_display(str(path))
        raise os_failure(
            f"cannot decrypt {shown} ({os.strerror(exc.errno or errno.EIO)})", exc, path=shown
        ) from exc


def _verify_zip(
    path: Path, shown_as: Path, scratch: Path | None, progress: Progress | None
) -> VerifyReport:
    """:func:`verify_backup` of the zip ``path``, reported as ``shown_as`` (the encrypted file
    it was decrypted from), the database checked in ``scratch``."""
    try:
        with open_zip(path) as archive:
            index, files = check_contents(
                archive, check_database=True, scratch=scratch, progress=progress
            )
    except InvalidInput as exc:
        if path == shown_as:
            raise
        raise renamed(exc, path, shown_as) from None
    except OSError as exc:
        shown = escape_display(str(shown_as))
        raise os_failure(
            f"cannot read {shown} ({os.strerror(exc.errno or errno.EIO)})", exc, path=shown
        ) from exc
    total = sum(info.file_size for info in files)
    return VerifyReport(
        shown_as,
        index.format,
        index.created_at,
        index.agent,
        len(files),
        total,
        encrypted=path != shown_as,
    )
