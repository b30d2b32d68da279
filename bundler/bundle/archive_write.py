"""Writing a bundle folder as one deterministic tar file (issue 16, bundle-format-1 "archive form").

The same bundle always gives the same bytes, whoever owns it and whenever it was touched: the
members come in one fixed order (:func:`bundle_members`), every header carries uid/gid 0, empty
owner names and mtime 0, folders are 0755 and files keep only their permission bits. Headers are
plain ustar; a pax extended header is added only for a member whose name does not fit ustar
(longer than 100 bytes or not ASCII), which is what :data:`tarfile.PAX_FORMAT` does.

Every member is reached through descriptors, never following a link, and file contents are
streamed in chunks: an archive of a huge bundle costs no more memory than one of a small one.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Iterable
from contextlib import ExitStack
from typing import BinaryIO

from bundler.errors import InvalidInput
from bundler.fs import safefs
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress

ARCHIVE_DIR_MODE = 0o755
"""The mode every folder has in an archive: the bundle's own folders are private (0700) while it
is staged, which says nothing a reader of the archive needs."""

FILE_MODE_BITS = 0o777
"""A file keeps its permission bits; setuid, setgid and sticky never travel (02 §1)."""

COPY_CHUNK = 1 << 20

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY

_SKIP_REASONS = {
    safefs.SkipKind.SYMLINK: "a symbolic link",
    safefs.SkipKind.SPECIAL: "a socket, FIFO or device",
    safefs.SkipKind.HARD_LINK: "a hard link",
    safefs.SkipKind.REPLACED: "replaced while it was being read",
    safefs.SkipKind.VANISHED: "vanished while it was being read",
    safefs.SkipKind.OTHER_DEVICE: "on another device",
    safefs.SkipKind.BAD_NAME: "a name with control characters or invalid UTF-8",
}


def _refuse_skip(kind: safefs.SkipKind, path: str) -> None:
    raise InvalidInput(
        f"{path} is {_SKIP_REASONS[kind]}: a bundle holds only files and folders; "
        "run 'bundler bundle verify' on it",
        path=path,
    )


def bundle_members(root_fd: int) -> list[str]:
    """Every folder and regular file below ``root_fd``, relative POSIX names, in archive order.

    The order is the checksum order (02 §9.2: each folder's names sorted by their bytes, a
    folder before its contents) with one change: the files at the root come first, so a reader
    streaming the archive meets ``zeroclaw-agent.toml`` before any workspace file. Raises
    :class:`InvalidInput` for anything a bundle cannot hold (a link, a device, a bad name).
    """
    root_files: list[str] = []
    rest: list[str] = []
    for entry in safefs.walk(root_fd, on_skip=_refuse_skip):
        (root_files if entry.kind == "file" and entry.depth == 1 else rest).append(entry.rel)
    return root_files + rest


def _header(name: str, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
        info.mode = ARCHIVE_DIR_MODE
        info.size = 0
    else:
        info.type = tarfile.REGTYPE
        info.mode = stat.S_IMODE(st.st_mode) & FILE_MODE_BITS
        info.size = st.st_size
    return info


def _open_member(root_fd: int, name: str) -> int:
    """A descriptor on the member ``name`` (a folder or a single-link regular file), no-follow."""
    parent, _, leaf = name.rpartition("/")
    with ExitStack() as stack:
        parent_fd = root_fd
        if parent:
            parent_fd = safefs.open_beneath(root_fd, parent)
            stack.callback(os.close, parent_fd)
        lst = os.stat(leaf, dir_fd=parent_fd, follow_symlinks=False)
        if stat.S_ISDIR(lst.st_mode):
            return safefs.open_dir_nofollow(parent_fd, leaf, lst)
        if not stat.S_ISREG(lst.st_mode):
            _refuse_skip(
                safefs.SkipKind.SYMLINK if stat.S_ISLNK(lst.st_mode) else safefs.SkipKind.SPECIAL,
                escape_display(name),
            )
        fd = os.open(leaf, _FILE_FLAGS, dir_fd=parent_fd)
        st = os.fstat(fd)
        if not safefs.same_object(st, lst) or st.st_nlink > 1:
            os.close(fd)
            _refuse_skip(
                safefs.SkipKind.REPLACED if st.st_nlink == 1 else safefs.SkipKind.HARD_LINK,
                escape_display(name),
            )
        return fd
    raise AssertionError("unreachable")  # pragma: no cover


def _copy_exactly(fd: int, size: int, out: BinaryIO, name: str) -> None:
    left = size
    while left:
        chunk = os.read(fd, min(left, COPY_CHUNK))
        if not chunk:
            raise _changed(name)
        out.write(chunk)
        left -= len(chunk)


def write_tar(
    root_fd: int, names: Iterable[str], out: BinaryIO, progress: Progress | None = None
) -> None:
    """Write the members ``names`` of the bundle below ``root_fd`` to ``out`` as one tar stream.

    ``names`` are relative POSIX names as :func:`bundle_members` gives them, in the order they
    are to be written. The stream ends with the end-of-archive blocks, padded to tar's 10240-byte
    record; ``out`` (a buffered stream: each ``write`` takes all it is given) is neither
    flushed to disk nor closed. A member that is a link, a device, a
    hard link or changes size while it is read raises :class:`InvalidInput`; a read error raises
    ``OSError``.

    Headers are :meth:`tarfile.TarInfo.tobuf`'s; the data is copied here in large chunks, as
    :class:`tarfile.TarFile` would write it but without its small-block buffering.
    ``progress`` is told of each member written (its data bytes).
    """
    offset = 0
    for name in names:
        fd = _open_member(root_fd, name)
        try:
            st = os.fstat(fd)
            info = _header(name, st)
            header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            out.write(header)
            offset += len(header)
            if info.type == tarfile.DIRTYPE:
                if progress is not None:
                    progress(1, 0)
                continue
            _copy_exactly(fd, info.size, out, name)
            if os.read(fd, 1) or os.fstat(fd).st_size != st.st_size:
                raise _changed(name)
            pad = -info.size % tarfile.BLOCKSIZE
            out.write(bytes(pad))
            offset += info.size + pad
            if progress is not None:
                progress(1, info.size)
        finally:
            os.close(fd)
    end = 2 * tarfile.BLOCKSIZE
    out.write(bytes(end + -(offset + end) % tarfile.RECORDSIZE))


def _changed(name: str) -> InvalidInput:
    shown = escape_display(name)
    return InvalidInput(
        f"{shown} changed size while it was being archived: stop what writes to the bundle and "
        "try again",
        path=shown,
    )
