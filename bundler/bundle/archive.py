"""``bundle pack`` and ``bundle unpack``, and reading an archive where a bundle folder is expected.

Both commands publish like an export (02 §8, :mod:`bundler.bundle.publish`): a record and a
staging entry beside the destination, flushed, then swapped in, so a crash leaves the old state
or the new one, and ``bundler recover DEST`` clears what it leaves. ``pack`` stages a file (the
archive), ``unpack`` a folder (the bundle, verified before it is published).

An archive given to ``bundle verify``, ``bundle inspect`` or ``agents import`` is first unpacked
by :func:`unpacked` into a private, locked scratch folder (:mod:`bundler.fs.scratch`), which is
removed however the command ends; the usual folder path then runs on it.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from bundler.bundle.archive_read import ArchiveLimits, Digests, list_tar, read_tar
from bundler.bundle.archive_replay import replay_tar
from bundler.bundle.archive_write import archive_order, write_tar
from bundler.bundle.publish import Staging, admit, stage_build_publish
from bundler.bundle.recover import clear_abandoned_or_warn
from bundler.bundle.verify import verify_bundle
from bundler.bundle.verify_report import VerifyReport, unsound
from bundler.errors import NotABundle, NotFound, environment_failure, os_failure
from bundler.fs.direct import WORTHWHILE, SequentialWriter
from bundler.fs.durable import open_dir
from bundler.fs.scratch import ARCHIVE_PREFIX, clear_dead_scratch, scratch_folder, temp_root
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase

SCRATCH_PREFIX = ARCHIVE_PREFIX
"""A private folder in the temporary folder where ``bundle verify|inspect`` unpack an archive;
named, with who makes it, in :mod:`bundler.fs.scratch`."""

ARCHIVE_SUFFIXES = (".tar",)
"""An ``--out`` of ``agents export`` ending so names an archive, not a bundle folder."""

# blocking: an archive may be a pipe, read as it streams ('bundle verify <(curl …)')
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY


@dataclass
class ArchiveReport:
    """What ``pack`` or ``unpack`` published: the destination, its members, the swap used."""

    source: str
    destination: str
    members: int
    publish_method: str
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        """The ``--json`` payload."""
        return {
            "source": self.source,
            "destination": self.destination,
            "members": self.members,
            "publish_method": self.publish_method,
            "warnings": [str(w) for w in self.warnings],
        }


def looks_like_archive(fd: int) -> bool:
    """True when the open file ``fd`` starts with a tar header (for ``pack --force``, which
    replaces an archive but never another kind of file)."""
    block = os.pread(fd, tarfile.BLOCKSIZE, 0)
    try:
        tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def _open_archive(archive: Path) -> BinaryIO:
    shown = escape_display(str(archive))
    try:
        fd = os.open(archive, _READ_FLAGS)
    except FileNotFoundError:
        raise NotFound(f"{shown}: no such archive", path=str(archive)) from None
    except OSError as err:
        raise os_failure(f"cannot read {shown} ({err.strerror})", err, path=str(archive)) from None
    return os.fdopen(fd, "rb", buffering=1 << 20)


def _read_into(
    stream: BinaryIO,
    archive: Path,
    dest_fd: int,
    limits: ArchiveLimits | None,
    digests: Digests | None = None,
    progress: Progress | None = None,
) -> list[str]:
    """Unpack ``stream`` (the open ``archive``) into the empty folder ``dest_fd``.

    A regular file that fits well in memory is listed first (every rule, nothing written) and
    then made by its listing on one thread per processor (:func:`replay_tar`), reading it again
    from the page cache: on a bundle of many small files, making the files is most of the time,
    and the kernel does it without Python's lock. Anything else (a pipe, a very large file) is
    read once, as it streams (:func:`read_tar`). ``progress`` sees the archive's bytes read,
    then the files made.
    """
    limits = limits or ArchiveLimits()
    name = str(archive)
    source = stream if progress is None else cast(BinaryIO, _Counted(stream, progress))
    st = os.fstat(stream.fileno())
    size = st.st_size if stat.S_ISREG(st.st_mode) else None
    try:
        if size is None or not _listed_first(size):
            with phase(progress, "unpacking", None, size):
                return read_tar(source, dest_fd, limits, name=name, digests=digests)
        base = stream.tell()
        with phase(progress, "reading", None, size):
            members = list_tar(source, limits, name=name)
        files = [member for member in members if not member.is_dir]
        with phase(progress, "unpacking", len(files), sum(member.size for member in files)):
            return replay_tar(
                stream.fileno(),
                dest_fd,
                members,
                base=base,
                name=name,
                digests=digests,
                progress=progress,
            )
    except OSError as err:
        if err.errno is None:
            raise
        shown = escape_display(str(archive))
        failed = environment_failure("unpack", shown, err)
        if failed is not None:  # too few descriptors, no memory: its hint says what to do
            raise failed from None
        raise os_failure(
            f"cannot unpack {shown} ({err.strerror}); nothing was kept", err, path=str(archive)
        ) from None


_MEMORY_SHARE = 4
"""An archive is listed first only when it is at most this fraction of the memory: its second
reading then comes from the page cache, not the disk."""


def _listed_first(size: int) -> bool:
    """Whether a regular archive file of ``size`` bytes is listed first (see _read_into)."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # not known here: read it once
        return False
    return size <= memory // _MEMORY_SHARE


def _refuse_other_files(stream: BinaryIO, archive: Path) -> None:
    """A file that does not even start like a tar archive is refused before anything is made
    for it (:func:`read_tar` would refuse it too, but only once a folder exists to read into)."""
    peek = getattr(stream, "peek", None)
    try:
        head = peek(tarfile.BLOCKSIZE)[: tarfile.BLOCKSIZE] if peek is not None else b""
    except OSError as err:  # a file that stats as regular and cannot be read (/proc/self/mem)
        shown = escape_display(str(archive))
        raise os_failure(f"cannot read {shown} ({err.strerror})", err, path=str(archive)) from None
    if len(head) < tarfile.BLOCKSIZE or head == bytes(tarfile.BLOCKSIZE):
        return
    try:
        tarfile.TarInfo.frombuf(head, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        shown = escape_display(str(archive))
        raise NotABundle(f"{shown} is not a tar archive", path=shown) from None


def unpack_into(
    archive: Path,
    dest_fd: int,
    limits: ArchiveLimits | None = None,
    progress: Progress | None = None,
    digests: Digests | None = None,
) -> list[str]:
    """Read ``archive`` into the empty folder ``dest_fd`` (:func:`_read_into`); the member
    names. ``digests`` is :func:`read_tar`'s."""
    with _open_archive(archive) as stream:
        return _read_into(stream, archive, dest_fd, limits, digests, progress)


class _Counted(io.RawIOBase):
    """A read-only stream reporting each read's byte count to ``progress``."""

    def __init__(self, stream: BinaryIO, progress: Progress) -> None:
        super().__init__()
        self._stream = stream
        self._progress = progress

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._progress(0, len(data))
        return data


def pack_bundle(
    bundle: Path,
    out: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
    known_digests: Mapping[str, tuple[int, str]] | None = None,
) -> ArchiveReport:
    """``bundle pack DIR FILE``: verify the bundle folder, then publish its archive at ``out``.

    A bundle that fails verification is :class:`InvalidInput` (nothing is written); an existing
    ``out`` is replaced only with ``force`` and only when it is itself a tar archive.
    ``progress`` sees the verification, then a ``packing`` phase. ``known_digests`` is
    :func:`verify_bundle`'s, for a folder bundler has just unpacked into private scratch.
    """
    report = verify_bundle(bundle, progress=progress, known_digests=known_digests, per_file=True)
    if not report.ok:
        raise unsound(report, str(bundle))
    source_fd = open_dir(bundle, follow=True)
    try:
        cleared = clear_abandoned_or_warn(out)
        admission = admit(
            out, force=force, protected=[bundle], archive_check=looks_like_archive, label=""
        )
        names: list[str] = []

        def build(staging: Staging) -> None:
            names.extend(_write_archive(source_fd, report, staging.fd, progress))

        with admission:
            outcome = stage_build_publish(admission, build)
            destination = admission.dest_path
    finally:
        os.close(source_fd)
    return ArchiveReport(
        source=str(report.path),
        destination=destination,
        members=len(names),
        publish_method=outcome.method.value,
        warnings=[*cleared, *outcome.warnings],
    )


def _write_archive(
    source_fd: int, report: VerifyReport, dest_fd: int, progress: Progress | None
) -> list[str]:
    """Write the archive of the verified bundle folder ``source_fd`` into the empty file
    ``dest_fd``; the member names, in the order written."""
    names = archive_order(report.entries)  # what was verified: no second walk
    total = sum(report.sizes.values())
    with phase(progress, "packing", len(names), total):
        if total < WORTHWHILE:
            with os.fdopen(os.dup(dest_fd), "wb", buffering=1 << 20) as stream:
                write_tar(source_fd, names, stream, progress)
            return names
        # nothing reads the archive back: past the page cache (bundler.fs.direct)
        with SequentialWriter(dest_fd, 0) as sink:
            write_tar(source_fd, names, cast(BinaryIO, sink), progress)
            sink.finish()
    return names


def pack_staged(bundle: Staging, archive: Staging, progress: Progress | None = None) -> int:
    """Verify the bundle built in the staging folder ``bundle`` and write its archive into the
    staging file ``archive`` (``agents export --out FILE.tar``: both beside the archive's
    destination, which every message names); the number of members.

    A bundle verify refuses is :class:`InvalidInput`, so the export publishes nothing a reader
    would refuse.
    """
    shown = archive.admission.dest_path
    folder = Path(bundle.admission.parent_path) / bundle.name
    report = verify_bundle(folder, progress=progress, per_file=True)
    if not report.ok:
        raise unsound(report, shown)
    return len(_write_archive(bundle.fd, report, archive.fd, progress))


def unpack_archive(
    archive: Path,
    out: Path,
    *,
    force: bool = False,
    limits: ArchiveLimits | None = None,
    progress: Progress | None = None,
) -> ArchiveReport:
    """``bundle unpack FILE DIR``: unpack into a staging folder beside ``out``, verify it, then
    publish it as export does (``out`` vacant, an empty folder, or a bundle with ``force``).

    A hostile or damaged archive, or one that does not hold a sound bundle, is
    :class:`InvalidInput`; nothing is published and the staging folder is removed.
    """
    cleared = clear_abandoned_or_warn(out)
    admission = admit(out, force=force, protected=[], label="")
    names: list[str] = []

    def build(staging: Staging) -> None:
        # the staging folder is private and only this reader wrote it: verify from its digests
        digests: Digests = {}
        names.extend(unpack_into(archive, staging.fd, limits, progress, digests))
        report = verify_bundle(
            Path(staging.admission.parent_path) / staging.name,
            progress=progress,
            known_digests=digests,
        )
        if not report.ok:
            raise unsound(report, str(archive))

    with admission:
        outcome = stage_build_publish(admission, build)
        destination = admission.dest_path
    return ArchiveReport(
        source=os.path.abspath(archive),
        destination=destination,
        members=len(names),
        publish_method=outcome.method.value,
        warnings=[*cleared, *outcome.warnings],
    )


@contextlib.contextmanager
def unpacked(
    archive: Path, *, parent: Path | None = None, prefix: str = SCRATCH_PREFIX, fix: str = ""
) -> Iterator[Path]:
    """Unpack ``archive`` into a private scratch folder ``<prefix><token>/`` in ``parent`` (the
    temporary folder by default) and yield the bundle's path; the folder is removed on exit
    (where that fails, a warning naming ``fix`` is noted: see :mod:`bundler.fs.scratch`).

    Scratch folders of this user that dead runs left there are removed first.
    """
    where = str(parent) if parent is not None else temp_root()
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(_open_archive(archive))
        _refuse_other_files(stream, archive)
        try:
            parent_fd = open_dir(where, follow=True)
            stack.callback(os.close, parent_fd)
            clear_dead_scratch(parent_fd, prefix)
            name, fd = stack.enter_context(
                scratch_folder(parent_fd, prefix, where=where, durable=parent is not None, fix=fix)
            )
            os.mkdir("bundle", 0o700, dir_fd=fd)
            bundle_fd = open_dir("bundle", dir_fd=fd)
            stack.callback(os.close, bundle_fd)
        except OSError as err:
            raise os_failure(
                f"cannot unpack {escape_display(str(archive))} in {escape_display(where)} "
                f"({err.strerror})",
                err,
                path=where,
            ) from None
        _read_into(stream, archive, bundle_fd, None)
        yield Path(where) / name / "bundle"
