"""Publishing a bundle folder so that no crash or failure loses the old one or shows a partial one.

The protocol of 02 §8, in the order it runs:

1. :func:`admit` — resolve ``--out`` (symlinks in the parent resolved, the final component never
   followed), refuse overlaps with protected source trees, classify the destination (vacant,
   empty, bundle) and hold the parent folder open. Nothing is created before admission passes.
2. :meth:`Admission.stage` — write and fsync ``.zeroclaw-export-<token>.target`` (the record that
   ties the leftovers to this destination), then create the staging folder
   ``.zeroclaw-export-<token>`` (0700). The record exists before the folder, so a crash never
   leaves a staging folder that recovery cannot attribute.
3. The caller builds the bundle inside :attr:`Staging.fd`, then calls :meth:`Staging.flush`.
4. :meth:`Staging.publish` — re-check the destination, swap with ``RENAME_NOREPLACE`` /
   ``RENAME_EXCHANGE`` (two plain renames where the kernel or filesystem refuses the flags),
   rename a replaced bundle to ``.zeroclaw-export-old-<token>`` and remove it, fsync the parent,
   remove the record. Failures after the swap are returned as warnings: the publication cannot
   be undone.
5. :meth:`Staging.abort` — on any failure before the swap: staging removed, record removed,
   destination untouched.

:mod:`bundler.bundle.recover` repairs and lists what a crash left
(02 §8.5). Every step is idempotent, so recovery can itself be interrupted and run again.

All names below the parent are reached through the held parent descriptor, never re-resolved
from a path string, so a parent renamed or replaced by a symlink mid-export cannot redirect us.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TypeVar

from bundler.bundle.leftovers import (
    encode_record,
    labelled,
    record_name,
    retired_name,
    split_out,
    staging_name,
)
from bundler.bundle.manifest import MANIFEST_NAME
from bundler.errors import (
    BundlerError,
    ChangedMeanwhile,
    DestinationExists,
    Interrupted,
    NotFound,
    Refused,
    UnsuitablePath,
    environment_hint,
    os_failure,
)
from bundler.fs.copytree import make_durable
from bundler.fs.durable import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    UNSUPPORTED_ERRNOS,
    fsync_dir,
    open_dir,
    random_token,
    renameat2,
)
from bundler.fs.interrupts import commit_reached, signals_deferred
from bundler.fs.safefs import open_dir_nofollow, rmtree_at
from bundler.fs.threads import Thread, start_thread
from bundler.rules import hints
from bundler.rules.names import escape_display

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ARCHIVE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# reading an existing archive destination: O_NONBLOCK, so a FIFO swapped in never blocks us
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NEW_FILE = "choose a new file name"
_T = TypeVar("_T")


class DestKind(str, Enum):
    """What the destination was when it was admitted (02 §8.1 step 3)."""

    VACANT = "vacant"
    EMPTY = "empty"
    BUNDLE = "bundle"
    ARCHIVE = "archive"
    """A bundle archive file: replaced like a bundle, with ``--force``."""


ArchiveCheck = Callable[[int], bool]
"""Given a descriptor open on an existing regular file, True when it is a bundle archive."""


class PublishMethod(str, Enum):
    """How the bundle reached its destination; ``--json`` reports it as ``publish_method``."""

    NOREPLACE = "renameat2-noreplace"
    EXCHANGE = "renameat2-exchange"
    RENAME = "rename"
    FALLBACK = "rename-fallback"


@dataclass(frozen=True)
class PublishOutcome:
    """The result of a swap: the method used and what went wrong after the commit point."""

    method: PublishMethod
    warnings: list[str] = field(default_factory=list)


_REPLACED = (DestKind.BUNDLE, DestKind.ARCHIVE)


def paths_overlap(a: str, b: str) -> bool:
    """True when absolute normalised paths ``a`` and ``b`` are equal or one contains the other."""
    pa, pb = Path(a).parts, Path(b).parts
    shorter = min(len(pa), len(pb))
    return pa[:shorter] == pb[:shorter]


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` (a folder tree, a file or a link) below ``dir_fd`` without following links.

    A missing ``name`` is not an error (recovery is idempotent). The bundle manifest, when
    present at the top, goes first, so a half-removed bundle can never pass for a complete one.
    """
    try:
        fd = open_dir_nofollow(dir_fd, name)
    except OSError as err:
        if err.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            raise
    else:
        try:
            unlink_missing_ok(fd, MANIFEST_NAME)
        finally:
            os.close(fd)
    rmtree_at(dir_fd, name)


def unlink_missing_ok(dir_fd: int, name: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


@dataclass
class Admission:
    """An admitted destination: the parent folder held open, and what the destination was.

    Use as a context manager; the parent descriptor is closed on exit.
    """

    parent_fd: int
    parent_path: str
    name: str
    kind: DestKind
    identity: tuple[int, int] | None
    archive: bool = False
    """The destination is a file (a bundle archive), staged as a file, not a folder."""
    label: str = "--out"

    @property
    def dest_path(self) -> str:
        """The destination's absolute path (parent's symlinks resolved)."""
        return os.path.join(self.parent_path, self.name)

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the parent descriptor."""
        if self.parent_fd >= 0:
            fd, self.parent_fd = self.parent_fd, -1
            os.close(fd)

    def stage(self) -> Staging:
        """Create the record and the staging folder beside the destination (02 §8.2)."""
        return Staging.create(self)


def admit(
    out: str | os.PathLike[str],
    *,
    force: bool,
    protected: Sequence[str | os.PathLike[str]],
    archive_check: ArchiveCheck | None = None,
    label: str = "--out",
) -> Admission:
    """Admit ``out`` as an export destination, creating nothing (02 §8.1).

    ``protected`` lists the install root and every agent's workspace and skill folders; the
    destination may neither equal, contain nor lie inside any of them (compared by real path).
    With ``archive_check`` the destination is a file (an archive): vacant, or an existing regular
    file that ``archive_check`` accepts, replaced only with ``force``. ``label`` starts the
    messages (the option that named the destination; ``""`` for a positional argument).
    Raises UsageError for ``.``/``..`` and Refused for everything else that is not admitted,
    an ``OSError`` while examining the destination included (:func:`io_failure`).
    """
    parent_given, name = split_out(out, label)
    display = labelled(label, escape_display(os.fspath(out)))
    parent = os.path.realpath(parent_given)
    try:
        parent_fd = open_dir(parent, follow=False)
    except FileNotFoundError:
        raise NotFound(
            f"{display}: the parent folder {escape_display(parent_given)} does not exist; "
            "create it first",
            path=os.fspath(out),
        ) from None
    except OSError as err:
        raise os_failure(
            f"{display}: cannot open the parent folder: {err.strerror}", err, path=os.fspath(out)
        ) from None
    try:
        dest_real = os.path.join(parent, name)
        for source in protected:
            source_real = os.path.realpath(os.fspath(source))
            if paths_overlap(dest_real, source_real):
                raise UnsuitablePath(
                    f"{display} overlaps {escape_display(source_real)}, which the export "
                    "reads; "
                    "choose a folder outside the install and its agents' folders",
                    path=os.fspath(out),
                )
        if archive_check is None:
            kind, identity = _classify(
                parent_fd, name, force=force, display=display, raw=os.fspath(out)
            )
        else:
            kind, identity = _classify_file(
                parent_fd, name, force, archive_check, display=display, raw=os.fspath(out)
            )
    except OSError as err:  # a name too long for the filesystem, an unreadable entry, ...
        os.close(parent_fd)
        raise io_failure(os.fspath(out), "could not examine the destination", err) from err
    except BaseException:
        os.close(parent_fd)
        raise
    return Admission(
        parent_fd=parent_fd,
        parent_path=parent,
        name=name,
        kind=kind,
        identity=identity,
        archive=archive_check is not None,
        label=label,
    )


def _open_destination(
    parent_fd: int, name: str, *, folder: bool, display: str, raw: str
) -> tuple[os.stat_result, int] | None:
    """The existing destination opened without following a link, or None when it is vacant.

    One rule for both kinds (02 §8.1): a final symbolic link is refused (its target is not
    touched), so is anything that is not the kind wanted (a FIFO is never opened), and so is an
    entry replaced between the look and the open. The caller closes the descriptor.
    """
    noun, advice = ("folder", "choose an empty or new folder") if folder else ("file", _NEW_FILE)
    st = lstat_at(parent_fd, name)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise UnsuitablePath(
            f"{display} is a symbolic link; name a real {noun} (its target was not touched)",
            path=raw,
        )
    if not (stat.S_ISDIR if folder else stat.S_ISREG)(st.st_mode):
        raise UnsuitablePath(f"{display} exists and is not a {noun}; {advice}", path=raw)
    fd = os.open(name, DIR_FLAGS if folder else _FILE_FLAGS, dir_fd=parent_fd)
    try:
        if _identity(os.fstat(fd)) != _identity(st):
            raise ChangedMeanwhile(
                f"{display} changed while it was being checked; try again", path=raw
            )
    except BaseException:
        os.close(fd)
        raise
    return st, fd


def _classify_file(
    parent_fd: int, name: str, force: bool, check: ArchiveCheck, *, display: str, raw: str
) -> tuple[DestKind, tuple[int, int] | None]:
    opened = _open_destination(parent_fd, name, folder=False, display=display, raw=raw)
    if opened is None:
        return DestKind.VACANT, None
    st, fd = opened
    try:
        is_archive = check(fd)
    finally:
        os.close(fd)
    if not is_archive:
        raise DestinationExists(f"{display} is not a bundle archive; {_NEW_FILE}", path=raw)
    if not force:
        raise DestinationExists(
            f"{display} already holds a bundle archive; pass --force to replace it", path=raw
        )
    return DestKind.ARCHIVE, _identity(st)


def _classify(
    parent_fd: int, name: str, *, force: bool, display: str, raw: str
) -> tuple[DestKind, tuple[int, int] | None]:
    opened = _open_destination(parent_fd, name, folder=True, display=display, raw=raw)
    if opened is None:
        return DestKind.VACANT, None
    st, fd = opened
    try:
        with os.scandir(fd) as entries:
            names = {entry.name for entry in entries}
    finally:
        os.close(fd)
    if not names:
        return DestKind.EMPTY, _identity(st)
    if MANIFEST_NAME in names:
        if not force:
            raise DestinationExists(
                f"{display} already holds a bundle; pass --force to replace it", path=raw
            )
        return DestKind.BUNDLE, _identity(st)
    raise DestinationExists(f"{display} is not a bundle; choose an empty or new folder", path=raw)


class Staging:
    """A staging folder with its ``.target`` record, bound to an admitted destination."""

    def __init__(self, admission: Admission, token: str, fd: int, record_fd: int) -> None:
        self.admission = admission
        self.token = token
        self.fd = fd
        self._record_fd = record_fd
        self.published = False
        self.flushed = False
        self._stranded: str | None = None

    @property
    def name(self) -> str:
        """The staging folder's name in the parent."""
        return staging_name(self.token)

    @classmethod
    def create(cls, admission: Admission) -> Staging:
        """Write the record (fsynced), then create the staging folder (0700) and fsync the parent.

        The record is kept open with an exclusive ``flock`` for the export's lifetime, so
        ``recover`` can tell a live export's staging from a crashed one's and leave it alone.
        """
        parent = admission.parent_fd
        token = random_token()
        record = record_name(token)
        record_fd = os.open(
            record,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=parent,
        )
        fd = -1
        try:
            fcntl.flock(record_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            data = encode_record(admission.name)
            # one write: a kill can leave the file empty but never half a name
            if os.write(record_fd, data) != len(data):
                raise OSError(errno.EIO, "short write of the export record")
            os.fsync(record_fd)
            if admission.archive:
                fd = os.open(staging_name(token), _ARCHIVE_FLAGS, 0o600, dir_fd=parent)
            else:
                os.mkdir(staging_name(token), 0o700, dir_fd=parent)
                fd = os.open(staging_name(token), DIR_FLAGS, dir_fd=parent)
            fsync_dir(parent)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            _quietly(lambda: rmtree_at(parent, staging_name(token)))
            _quietly(lambda: os.unlink(record, dir_fd=parent))
            os.close(record_fd)
            raise
        return cls(admission, token, fd, record_fd)

    def flush(self) -> None:
        """Make the whole staged bundle durable, once (a second call, after a build that
        flushed during its check, does nothing); a failure aborts (never retried)."""
        if self.flushed:
            return
        if self.admission.archive:
            os.fsync(self.fd)
        else:
            make_durable(self.fd)
        self.flushed = True

    def flush_during(self, check: Callable[[], _T]) -> _T:
        """:meth:`flush` in a thread of its own while ``check()`` runs in this one; ``check``'s
        result, once both are done.

        For a check that only reads the staged bundle (its verification): the flush waits on
        the disk and the check on the processor, so the two overlap. When this returns, the
        staged bundle is durable exactly as after :meth:`flush`. It never returns before the
        flush is over, even on an interrupt, so the staging is never aborted (its descriptor
        closed) under it. An exception of ``check`` is raised rather than the flush's; the
        flush's is raised when ``check`` returned.
        """
        failed: list[BaseException] = []

        def flush() -> None:
            try:
                self.flush()
            except BaseException as exc:  # re-raised in the calling thread below
                failed.append(exc)

        thread = Thread(flush, name="bundler-flush")
        try:
            start_thread(thread)
            result = check()
        finally:
            with signals_deferred():  # not an interrupt either: the staging must outlive it
                thread.join()
        if failed:
            raise failed[0]
        return result

    def abort(self) -> list[str]:
        """Roll back before the swap: staging, then the record; returns what could not be removed.

        Signals are held so a second Ctrl-C cannot interrupt the cleanup halfway. The caller
        adds the command that clears what is left (``hints.command("recover", dest)``).
        """
        problems: list[str] = []
        with signals_deferred():
            self._close_fd()
            parent = self.admission.parent_fd
            if self._stranded is not None:
                # the staging name holds something that is not ours: never remove it
                self._release_record()
                return [self._stranded]
            retired = retired_name(self.token)
            if lstat_at(parent, retired) is not None:
                # the fallback moved the destination aside and could not move it back
                try:
                    rename_noreplace(parent, retired, self.admission.name)
                except OSError as err:
                    self._release_record()
                    return [f"the previous content is at {retired} ({err.strerror})"]
            try:
                remove_tree_at(parent, self.name)
            except OSError as err:
                problems.append(f"could not remove {self.name}: {err.strerror}")
            else:
                try:
                    fsync_dir(parent)
                    os.unlink(record_name(self.token), dir_fd=parent)
                except OSError as err:
                    problems.append(f"could not remove {record_name(self.token)}: {err.strerror}")
            self._release_record()
        return problems

    def _close_fd(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def _release_record(self) -> None:
        if self._record_fd >= 0:
            fd, self._record_fd = self._record_fd, -1
            os.close(fd)

    def _dest_refused(self, why: str) -> Refused:
        return ChangedMeanwhile(
            f"{labelled(self.admission.label, escape_display(self.admission.dest_path))} {why}; "
            "nothing was published",
            path=self.admission.dest_path,
        )

    def _recheck(self) -> None:
        """The destination must still be what was admitted (02 §8.3)."""
        adm = self.admission
        st = lstat_at(adm.parent_fd, adm.name)
        if adm.kind is DestKind.VACANT:
            if st is not None:
                raise self._dest_refused("appeared while the bundle was being built")
        elif (
            st is None
            or stat.S_IFMT(st.st_mode) != (stat.S_IFREG if adm.archive else stat.S_IFDIR)
            or _identity(st) != adm.identity
        ):
            raise self._dest_refused("was replaced while the bundle was being built")

    def publish(self) -> PublishOutcome:
        """Swap the staged bundle into place; after this returns the bundle is published.

        Raises (with the destination unchanged) when the swap itself fails or is refused; the
        caller then calls :meth:`abort`. Problems after the commit point come back as warnings.
        """
        adm = self.admission
        self._close_fd()
        # the swap is one step to an interrupt; from the commit on, one is only noted
        with signals_deferred():
            self._recheck()
            vacant = adm.kind is DestKind.VACANT
            method = self._swap_vacant() if vacant else self._swap_occupied()
            self.published = True
            commit_reached()
        outcome = PublishOutcome(method=method)
        self._after_swap(outcome.warnings)
        return outcome

    def _swap_vacant(self) -> PublishMethod:
        adm = self.admission
        try:
            renameat2(adm.parent_fd, self.name, adm.parent_fd, adm.name, RENAME_NOREPLACE)
            return PublishMethod.NOREPLACE
        except OSError as err:
            if err.errno == errno.EEXIST:
                raise self._dest_refused("appeared while the bundle was being built") from None
            if err.errno not in UNSUPPORTED_ERRNOS:
                raise
        # the kernel or filesystem lacks RENAME_NOREPLACE: check again, as close as we can get
        self._recheck()
        os.rename(self.name, adm.name, src_dir_fd=adm.parent_fd, dst_dir_fd=adm.parent_fd)
        return PublishMethod.RENAME

    def _swap_occupied(self) -> PublishMethod:
        adm = self.admission
        parent = adm.parent_fd
        try:
            renameat2(parent, self.name, parent, adm.name, RENAME_EXCHANGE)
        except OSError as err:
            if err.errno not in UNSUPPORTED_ERRNOS:
                raise
            return self._swap_fallback()
        # the object now under the staging name must be the one admitted, and an empty folder
        # must still be empty; otherwise put everything back and refuse
        st = lstat_at(parent, self.name)
        if st is None or _identity(st) != adm.identity:
            self._exchange_back()
            raise self._dest_refused("was replaced just before the swap")
        if adm.kind is DestKind.EMPTY:
            try:
                os.rmdir(self.name, dir_fd=parent)
            except OSError as err:
                self._exchange_back()
                if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise self._dest_refused(
                        "was written into while the bundle was being built"
                    ) from None
                raise
        return PublishMethod.EXCHANGE

    def _exchange_back(self) -> None:
        adm = self.admission
        try:
            renameat2(adm.parent_fd, self.name, adm.parent_fd, adm.name, RENAME_EXCHANGE)
        except OSError as err:
            # the new bundle stays published and what was at the destination sits under the
            # staging name: abort must not remove it
            self._stranded = (
                f"the destination's previous content could not be put back ({err.strerror}); "
                f"it is at {self.name}: inspect it before you recover"
            )
            raise

    def _swap_fallback(self) -> PublishMethod:
        """Two renames (02 §8.3): destination → retired, staging → destination, undo on failure."""
        adm = self.admission
        parent = adm.parent_fd
        retired = retired_name(self.token)
        self._recheck()
        if adm.kind is DestKind.EMPTY:
            try:
                os.rmdir(adm.name, dir_fd=parent)
            except OSError as err:
                if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise self._dest_refused(
                        "was written into while the bundle was being built"
                    ) from None
                raise
            os.rename(self.name, adm.name, src_dir_fd=parent, dst_dir_fd=parent)
            return PublishMethod.FALLBACK
        os.rename(adm.name, retired, src_dir_fd=parent, dst_dir_fd=parent)
        try:
            os.rename(self.name, adm.name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            os.rename(retired, adm.name, src_dir_fd=parent, dst_dir_fd=parent)
            raise
        return PublishMethod.FALLBACK

    def _after_swap(self, warnings: list[str]) -> None:
        """Past the commit point, in 02 §8.3's order: retire the old bundle, remove it, then
        flush the parent and remove the record.

        The old bundle is renamed to ``.zeroclaw-export-old-<token>`` before anything of it is
        removed, so that at every instant it is either whole under a name recovery knows or
        already being cleared. The parent is also flushed right after that rename (beyond the
        spec, which flushes once at the end): the publication is then durable before a slow
        removal of a large old bundle starts. Every failure here is a warning: the bundle is
        published and ``bundler recover`` clears what is left.
        """
        adm = self.admission
        parent = adm.parent_fd
        fix = hints.command("recover", adm.dest_path)
        retired = retired_name(self.token)
        if adm.kind in _REPLACED and lstat_at(parent, self.name) is not None:
            try:
                os.rename(self.name, retired, src_dir_fd=parent, dst_dir_fd=parent)
            except OSError as err:
                warnings.append(
                    hints.Hinted(f"the old bundle is left at {self.name} ({err.strerror})", fix)
                )
                self._flush_published(warnings)
                self._release_record()
                return
        self._flush_published(warnings)
        try:
            # EMPTY: the exchanged-out folder was removed by rmdir already; nothing is retired
            if adm.kind in _REPLACED:
                remove_tree_at(parent, retired)
            # the removal must be durable before the record that explains it goes
            fsync_dir(parent)
            os.unlink(record_name(self.token), dir_fd=parent)
        except OSError as err:
            warnings.append(
                hints.Hinted(
                    "the bundle is published but the previous one could not be fully removed "
                    f"({err.strerror})",
                    fix,
                )
            )
        finally:
            self._release_record()

    def _flush_published(self, warnings: list[str]) -> None:
        """fsync the parent after the swap; a failure is a warning (it cannot be undone)."""
        adm = self.admission
        try:
            fsync_dir(adm.parent_fd)
        except OSError as err:
            warnings.append(
                f"the bundle is published but {escape_display(adm.parent_path)} could not be "
                f"flushed ({err.strerror}); a power loss may undo it"
            )


def io_failure(dest: str, what: str, err: OSError) -> Refused:
    """A one-line error for an I/O failure before the swap: the destination is unchanged."""
    reason = err.strerror or str(err)
    # a full disk, too few descriptors or too little memory each has its own hint
    hint = environment_hint(err) or "check the disk and try again"
    return os_failure(
        f"{what} beside {escape_display(dest)} ({reason}); the destination is unchanged: {hint}",
        err,
        path=dest,
    )


def stage_build_publish(admission: Admission, build: Callable[[Staging], None]) -> PublishOutcome:
    """Steps 2 to 5 of the protocol for an admitted destination: stage, ``build(staging)``,
    flush, swap; on any failure before the swap, abort (an incomplete cleanup is added to the
    error with the ``recover`` command). I/O failures become :func:`io_failure` refusals."""
    staging: Staging | None = None
    try:
        # held from the record's creation until the staging is ours to abort: an interrupt in
        # between would leave both behind an exit that says it cleaned up
        with signals_deferred():
            try:
                staging = admission.stage()
            except OSError as err:
                raise io_failure(
                    admission.dest_path, "could not create the staging folder", err
                ) from err
        try:
            build(staging)
            staging.flush()
            return staging.publish()
        except OSError as err:
            raise io_failure(admission.dest_path, "could not write the bundle", err) from err
    except (BundlerError, Interrupted) as err:
        leftovers = [] if staging is None or staging.published else staging.abort()
        if leftovers:
            # a new error, not an edited one: an exception's args must say what it says
            message = hints.Hinted(
                f"{err.message} (cleanup incomplete: {'; '.join(leftovers)})",
                hints.command("recover", admission.dest_path),
            )
            if isinstance(err, Interrupted):
                raise Interrupted(message, signal_name=err.signal_name) from err
            raise err.restated(message) from err
        raise
    except BaseException:
        if staging is not None and not staging.published:
            staging.abort()
        raise


@contextmanager
def folder_beside(admission: Admission, warnings: list[str]) -> Iterator[Staging]:
    """A staging folder beside ``admission``'s destination that is never published, for what
    is built on the way to it (``agents export --out FILE.tar`` builds its bundle folder here,
    then packs it into the archive's own staging file).

    It is a staging folder like any other (02 §8.2): its own token, its record naming the
    destination, written and flushed first and locked while it lives. So a kill leaves nothing
    but what ``recover DEST`` clears (and ``doctor`` and the next export to DEST find), on the
    destination's disk, which the user is asked to free when it fills, rather than in a
    temporary folder they cannot see. It is removed, then its record, when the block ends
    however it ends; what could not be removed is added to ``warnings`` with the ``recover``
    command (the archive's outcome does not depend on it).
    """
    # the parent descriptor is shared, never closed here: ``admission`` owns it
    folder = replace(admission, kind=DestKind.VACANT, identity=None, archive=False)
    staging: Staging | None = None
    try:
        # an interrupt is delivered once the staging is ours to remove, never in between
        with signals_deferred():
            staging = Staging.create(folder)
        yield staging
    finally:
        left = staging.abort() if staging is not None else []
        if left:
            warnings.append(
                hints.Hinted(
                    f"could not remove the bundle folder built for "
                    f"{escape_display(admission.dest_path)} ({'; '.join(left)})",
                    hints.command("recover", admission.dest_path),
                )
            )


def _quietly(action: Callable[[], object]) -> None:
    with suppress(OSError):
        action()


def rename_noreplace(dir_fd: int, src: str, dst: str) -> None:
    try:
        renameat2(dir_fd, src, dir_fd, dst, RENAME_NOREPLACE)
    except OSError as err:
        if err.errno not in UNSUPPORTED_ERRNOS:
            raise
        if lstat_at(dir_fd, dst) is not None:
            raise
        os.rename(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def rename_exchange_works(path: Path) -> bool:
    """True when ``RENAME_EXCHANGE`` works on the filesystem holding ``path`` (for ``doctor``).

    Creates two empty folders inside a private temporary folder in ``path``, exchanges them,
    checks the exchange really happened, and removes everything.
    """
    fd = open_dir(path, follow=True)
    probe = f".bundler-doctor-{random_token()}"
    try:
        os.mkdir(probe, 0o700, dir_fd=fd)
        probe_fd = os.open(probe, DIR_FLAGS, dir_fd=fd)
        try:
            os.mkdir("a", 0o700, dir_fd=probe_fd)
            os.mkdir("b", 0o700, dir_fd=probe_fd)
            before = os.stat("a", dir_fd=probe_fd, follow_symlinks=False).st_ino
            try:
                renameat2(probe_fd, "a", probe_fd, "b", RENAME_EXCHANGE)
            except OSError as err:
                if err.errno in UNSUPPORTED_ERRNOS:
                    return False
                raise
            return os.stat("b", dir_fd=probe_fd, follow_symlinks=False).st_ino == before
        finally:
            os.close(probe_fd)
            remove_tree_at(fd, probe)
    finally:
        os.close(fd)
