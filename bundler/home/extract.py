"""Writing a backup's folders and files into a restore's staging folder (04 §5.3.2), each
file's size and digest checked as it streams, its mode and time set as the backup lists them.

This is the restore's one pass over the zip's contents: an entry is inflated once, into the
staging folder, hashed as it is written; an entry that disagrees with ``backup.json`` (its
CRC, size or digest) raises :class:`InvalidInput`, and the caller discards the staging folder,
which nothing outside the restore has seen. Entries are written on one worker thread per core
(inflate, XXH3 and ``write`` release the GIL), each reading the zip with ``pread``.

A backup lists the files of a folder one after another (the walk's order), so one open
descriptor of that folder serves them all: creating a file costs one ``openat``, not one for
each folder above it.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import zipfile

from bundler.errors import InvalidInput, Unsupported
from bundler.fs import durable
from bundler.fs.interrupts import settled, wait_for
from bundler.fs.safefs import open_dir_nofollow
from bundler.fs.threads import Pool
from bundler.home.deflate import batch_full, workers
from bundler.home.zipcheck import TREES, stream_entry
from bundler.home.zipindex import BackupIndex, Listed
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress

# a file a restore makes: new, never through a link
CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def restored_mode(info: zipfile.ZipInfo) -> int:
    """Permission bits for an extracted entry: never setuid, setgid, sticky or group/other write.

    The owner keeps read and write (and search on folders) so the restored home stays usable.
    """
    bits = (info.external_attr >> 16) & 0o777
    if info.filename.endswith("/"):
        return ((bits or 0o700) & 0o755) | 0o700
    return ((bits or 0o600) & 0o755) | 0o600


def extract(
    archive: zipfile.ZipFile,
    index: BackupIndex,
    files: list[zipfile.ZipInfo],
    staging_fd: int,
    progress: Progress | None,
) -> None:
    """Write every folder and file of the zip below ``staging_fd``, checking each file's size
    and digest against ``index`` as it is written (:class:`InvalidInput` at the first that
    disagrees, in the zip's order)."""
    for tree in TREES:
        os.mkdir(tree, 0o700, dir_fd=staging_fd)
    for info in archive.infolist():
        # the trees' own entries too: their recorded mode, as every folder's (04 §5.3)
        if info.filename.endswith("/"):
            parent_fd, name = _parent(staging_fd, info.filename[:-1])
            try:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=parent_fd)
                os.chmod(name, restored_mode(info), dir_fd=parent_fd, follow_symlinks=False)
            finally:
                os.close(parent_fd)
    fp = archive.fp
    if not workers() or not isinstance(fp, io.BufferedReader):
        jobs = [(info, index.files[info.filename]) for info in files]
        _write_batch(archive, staging_fd, jobs, progress)
        return
    _write_in_parallel(fp.fileno(), index, files, staging_fd, progress)


Job = tuple[zipfile.ZipInfo, Listed]


def _write_in_parallel(
    fd: int,
    index: BackupIndex,
    files: list[zipfile.ZipInfo],
    staging_fd: int,
    progress: Progress | None,
) -> None:
    """Write the files on one worker per core; a failure is raised in the zip's order (the
    entry named is the one a pass in order would name), the batches after it cancelled."""
    batches: list[list[Job]] = []
    packed = 0
    for info in files:
        if not batches or batch_full(len(batches[-1]), packed):
            batches.append([])
            packed = 0
        batches[-1].append((info, index.files[info.filename]))
        packed += info.compress_size
    pool = Pool(workers(), name="bundler-restore")
    try:
        pending = [pool.submit(_write_batch, fd, staging_fd, jobs) for jobs in batches]
        for jobs, future in zip(batches, pending, strict=True):
            wait_for(settled(future))
            future.result()
            if progress is not None:
                for _info, listed in jobs:
                    progress(1, listed.size)
    finally:
        pool.shutdown(cancel_pending=True)


def _write_batch(
    archive: zipfile.ZipFile | int,
    staging_fd: int,
    jobs: list[Job],
    progress: Progress | None = None,
) -> None:
    """Write each file of ``jobs`` in order; the files of a folder follow one another in a
    backup, so its descriptor serves them all."""
    folder, parent_fd = "", -1
    try:
        for info, listed in jobs:
            if info.filename.rpartition("/")[0] != folder or parent_fd < 0:
                if parent_fd >= 0:
                    fd, parent_fd = parent_fd, -1
                    os.close(fd)
                parent_fd, _name = _parent(staging_fd, info.filename)
                folder = info.filename.rpartition("/")[0]
            _extract_file(archive, listed, info, parent_fd)
            if progress is not None:
                progress(1, listed.size)
    finally:
        if parent_fd >= 0:
            os.close(parent_fd)


def _extract_file(
    archive: zipfile.ZipFile | int, listed: Listed, info: zipfile.ZipInfo, parent_fd: int
) -> None:
    """Write one file of the zip into the open folder ``parent_fd``, checking its digest."""
    fd = os.open(info.filename.rpartition("/")[2], CREATE_NEW, 0o600, dir_fd=parent_fd)
    try:
        sink = functools.partial(durable.write_all, fd)
        stream_entry(archive, info, listed.size, listed.xxh3_128, sink)
        os.fchmod(fd, restored_mode(info))
        if listed.mtime_ns is not None:
            try:
                os.utime(fd, ns=(listed.mtime_ns, listed.mtime_ns))
            except OverflowError:
                # parse_index bounds it to 64 bits; a 32-bit time_t holds less
                raise _invalid_time(info.filename) from None
    finally:
        os.close(fd)


def _invalid_time(name: str) -> InvalidInput:
    shown = escape_display(name)
    return Unsupported(f"backup entry {shown}: has an mtime_ns this system cannot set", path=shown)


def _parent(root_fd: int, rel: str) -> tuple[int, str]:
    """The folder holding ``rel`` below ``root_fd`` (created 0700 where missing), no-follow."""
    parts = rel.split("/")
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            child = open_dir_nofollow(fd, part)
            fd, parent = child, fd
            os.close(parent)
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]
