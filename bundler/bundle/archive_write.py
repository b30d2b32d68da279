"""Writing a bundle folder as one deterministic tar file (bundle-format-1 "archive form").

The same bundle always gives the same bytes, whoever owns it and whenever it was touched: the
members come in one fixed order (:func:`bundle_members`), every header carries uid/gid 0, empty
owner names and mtime 0, folders are 0755 and files keep only their permission bits. Headers are
plain ustar; a pax extended header is added only for a member whose name does not fit ustar
(longer than 100 bytes or not ASCII), which is what :data:`tarfile.PAX_FORMAT` does.

Every member is reached through descriptors, never following a link, and file contents are
streamed in chunks: an archive of a huge bundle costs no more memory than one of a small one.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tarfile
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, BinaryIO, NamedTuple
from zlib import adler32

import xxhash

from bundler.bundle.sealed import SEALED_NAME
from bundler.errors import Hostile, InvalidInput, Tampered
from bundler.fs import safefs
from bundler.fs.durable import write_all
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress

if TYPE_CHECKING:
    from bundler.bundle.archive_listing import ListedMember

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
    raise Hostile(
        f"{path} is {_SKIP_REASONS[kind]}: a bundle holds only files and folders; "
        "run 'bundler bundle verify' on it",
        path=path,
    )


def bundle_members(root_fd: int) -> list[str]:
    """Every folder and regular file below ``root_fd``, relative POSIX names, in archive order
    (:func:`archive_order`). Raises :class:`InvalidInput` for anything a bundle cannot hold (a
    link, a device, a bad name).
    """
    return archive_order(bundle_entries(root_fd))


def bundle_entries(root_fd: int) -> list[tuple[str, bool]]:
    """Every folder and regular file below ``root_fd`` as (name, is a folder), in checksum order
    (02 §9.2: each folder's names sorted by their bytes, a folder before its contents). Raises
    as :func:`bundle_members` does."""
    return [(e.rel, e.kind == "dir") for e in safefs.walk(root_fd, on_skip=_refuse_skip)]


def archive_order(entries: Iterable[tuple[str, bool]]) -> list[str]:
    """The names of ``entries`` ((name, is a folder), in checksum order) in archive order: the
    checksum order with one change, the files at the root first, so a reader streaming the
    archive meets ``zeroclaw-agent.toml`` before any workspace file; a sealed ``secrets.age``
    comes last of them, after the manifest that names its sha256 (02 §12)."""
    root_files: list[str] = []
    sealed: list[str] = []
    rest: list[str] = []
    for name, is_dir in entries:
        if name == SEALED_NAME and not is_dir:
            sealed.append(name)
        else:
            (root_files if not is_dir and "/" not in name else rest).append(name)
    return root_files + sealed + rest


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


# The fixed fields of a plain ustar header as tarfile writes ours: after name (100), mode (8),
# uid and gid ("0000000\0" each), size (12) and mtime ("00000000000\0"), the checksum field
# (eight spaces while the sum is taken), the type flag, then an empty link name, the POSIX magic
# and version, empty owner names, empty device numbers and an empty prefix.
_UID_GID = b"0000000\0" * 2
_MTIME = b"00000000000\0"
_TAIL = bytes(100) + tarfile.POSIX_MAGIC + bytes(32 + 32 + 8 + 8 + 155 + 12)
_MAX_USTAR_SIZE = 8**11


def header_checksum(block: bytes) -> int:
    """The ustar checksum of a 512-byte header: the unsigned sum of its bytes, the checksum
    field (bytes 148-155) counted as eight spaces.

    Summed at C speed: the low half of an Adler-32 is 1 + the bytes' sum modulo 65521, and 256
    bytes sum to at most 65280, so each half's low Adler-32 word minus one is its exact sum.
    """
    whole = (adler32(block[:256]) & 0xFFFF) + (adler32(block[256:]) & 0xFFFF) - 2
    return whole - sum(block[148:156]) + 8 * ord(" ")


def header_bytes(name: str, st: os.stat_result) -> bytes:
    """The header(s) of one member, byte for byte what :meth:`tarfile.TarInfo.tobuf` gives in
    :data:`tarfile.PAX_FORMAT` for :func:`_header`'s fields.

    Nearly every bundle member has a short ASCII name, whose header is one ustar block built
    here directly: tarfile's general code is most of the cost of archiving many small files.
    Any other member (a long or non-ASCII name, a size beyond ustar's eleven octal digits) goes
    through tarfile itself, which adds the pax record.
    """
    is_dir = stat.S_ISDIR(st.st_mode)
    full = name + "/" if is_dir else name
    size = 0 if is_dir else st.st_size
    if len(full) > tarfile.LENGTH_NAME or not full.isascii() or size >= _MAX_USTAR_SIZE:
        return _header(name, st).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    mode = ARCHIVE_DIR_MODE if is_dir else stat.S_IMODE(st.st_mode) & FILE_MODE_BITS
    block = b"".join(
        (
            full.encode("ascii").ljust(tarfile.LENGTH_NAME, b"\0"),
            b"%07o\0" % mode,
            _UID_GID,
            b"%011o\0" % size,
            _MTIME,
            b"        ",
            tarfile.DIRTYPE if is_dir else tarfile.REGTYPE,
            _TAIL,
        )
    )
    checksum = b"%06o\0" % header_checksum(block)
    return block[:148] + checksum + block[155:]


# the fields after the name, from mode to the type flag, as header_bytes writes them
_FORM_FIELDS = re.compile(
    rb"([0-7]{7})\x00" + re.escape(_UID_GID) + rb"([0-7]{11})\x00" + re.escape(_MTIME)
    + rb"([0-7]{6})\x00 ([05])"
)  # fmt: skip


class FormMember(NamedTuple):
    """The member a one-block archive-form header is of (:func:`archive_form`)."""

    name: str
    is_dir: bool
    mode: int
    size: int


# what the checksum field (as eight spaces) and the bytes after the type flag add to the checksum
# of a header whose tail is _TAIL
_FIXED_SUM = 8 * ord(" ") + sum(_TAIL)


def archive_form(block: bytes, at: int = 0) -> FormMember | None:
    """The member whose header, byte for byte, :func:`header_bytes` makes the 512-byte block at
    ``at`` in ``block``, or None when no member's is. Read from the block alone, in place (the
    archive reader passes the chunk it read and the header's offset), with no general tar parse:
    the archive reader asks it of every header first, and bundle archives are made of these.

    The name is the one :meth:`tarfile.TarInfo.frombuf` reads from such a block, which strips a
    folder's trailing slashes: a folder's name ending in a slash after the one header_bytes adds
    is therefore not taken here (the general parse reads it, and the reader judges it)."""
    if not block.startswith(_TAIL, at + 157, at + 512):
        return None
    fields = _FORM_FIELDS.match(block, at + 100)
    if fields is None:
        return None
    # the checksum of header_checksum, with the tail known: the 148 bytes before the checksum
    # field sum to less than 65521, so their Adler-32's low word minus one is their exact sum
    head = block[at : at + 148]
    if int(fields[3], 8) != (adler32(head) & 0xFFFF) - 1 + block[at + 156] + _FIXED_SUM:
        return None
    end = head.find(0, 0, tarfile.LENGTH_NAME)
    if end < 0:
        end = tarfile.LENGTH_NAME
    elif head.count(0, end, tarfile.LENGTH_NAME) != tarfile.LENGTH_NAME - end:
        return None
    raw = head[:end]
    if not raw.isascii():
        return None
    mode, size = int(fields[1], 8), int(fields[2], 8)
    if fields[4] == tarfile.DIRTYPE:
        if mode != ARCHIVE_DIR_MODE or size or not raw.endswith(b"/") or raw.endswith(b"//"):
            return None
        return FormMember(raw[:-1].decode("ascii"), True, mode, 0)
    if mode & ~FILE_MODE_BITS:
        return None
    return FormMember(raw.decode("ascii"), False, mode, size)


class _Parents:
    """The folder holding the current member, opened no-follow from the root and kept open while
    members come from it: in archive order a folder's files follow one another, so each folder
    is walked down to once rather than once per file."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self.name = ""
        self.fd = root_fd

    def open(self, name: str) -> int:
        """A descriptor on the folder ``name`` (``""`` is the root); this object closes it."""
        if name != self.name:
            self.close()
            self.fd = safefs.open_beneath(self.root_fd, name) if name else self.root_fd
            self.name = name
        return self.fd

    def close(self) -> None:
        """Close the folder held, unless it is the root (the caller's)."""
        fd, self.name, self.fd = self.fd, "", self.root_fd
        if fd != self.root_fd:
            os.close(fd)


def _open_member(parents: _Parents, name: str) -> tuple[int, os.stat_result]:
    """A descriptor on the member ``name`` (a folder or a single-link regular file), no-follow,
    and its ``fstat``."""
    parent, _, leaf = name.rpartition("/")
    parent_fd = parents.open(parent)
    lst = os.stat(leaf, dir_fd=parent_fd, follow_symlinks=False)
    if stat.S_ISDIR(lst.st_mode):
        fd = safefs.open_dir_nofollow(parent_fd, leaf, lst)
        return fd, os.fstat(fd)
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
    return fd, st


def _copy_exactly(
    fd: int, size: int, out: BinaryIO, name: str, hasher: xxhash.xxh3_128 | None = None
) -> None:
    left = size
    while left:
        chunk = os.read(fd, min(left, COPY_CHUNK))
        if not chunk:
            raise _changed(name)
        out.write(chunk)
        if hasher is not None:
            hasher.update(chunk)
        left -= len(chunk)


def write_tar(
    root_fd: int,
    names: Iterable[str],
    out: BinaryIO,
    progress: Progress | None = None,
    digests: dict[str, str] | None = None,
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
    ``progress`` is told of each member written (its data bytes). ``digests``, when given,
    receives the XXH3-128 hex of each regular file's data as it was written, by its name: what
    the archive holds, for a caller that judges those bytes (push verifies the workspace so,
    reading it once).
    """
    parents = _Parents(root_fd)
    try:
        written = sum(_write_member(parents, name, out, progress, digests) for name in names)
    finally:
        parents.close()
    write_end(out, written)


def write_end(out: BinaryIO, written: int) -> None:
    """The end-of-archive blocks after ``written`` bytes of members, padded to tar's record."""
    end = 2 * tarfile.BLOCKSIZE
    out.write(bytes(end + -(written + end) % tarfile.RECORDSIZE))


def write_listed(
    blob_fd: int, members: Sequence[ListedMember], out: BinaryIO, progress: Progress | None = None
) -> int:
    """Write ``members``, listed from the archive open at ``blob_fd``
    (:func:`bundler.bundle.archive_read.list_tar`), to ``out`` as this module writes members:
    the bytes written.

    A member whose bytes in the archive are already a bundle archive's (``archive_form``; a
    layer bundler pushed has only such members) is copied as it is, and a run of them lying one
    after another in the archive is copied at once, inside the kernel. Any other has its header
    made anew from its name, mode and size, exactly as for a file of the bundle, and only its
    data copied.
    """
    written = 0
    index = 0
    while index < len(members):
        member = members[index]
        if member.archive_form:
            end = index + 1
            while (
                end < len(members)
                and members[end].archive_form
                and members[end].header_at == _member_end(members[end - 1])
            ):
                end += 1
            size = _member_end(members[end - 1]) - member.header_at
            out.flush()
            append_range(blob_fd, member.header_at, size, out.fileno())
            written += size
        else:
            end = index + 1
            header = header_bytes(member.name, listed_stat(member))
            out.write(header)
            _copy_range(blob_fd, member.data_at, member.size, out)
            pad = -member.size % tarfile.BLOCKSIZE
            out.write(bytes(pad))
            written += len(header) + member.size + pad
        if progress is not None:
            for done in members[index:end]:
                progress(1, done.size)
        index = end
    return written


def _member_end(member: ListedMember) -> int:
    return member.data_at + member.size + -member.size % tarfile.BLOCKSIZE


def archive_form_end(members: Sequence[ListedMember]) -> int | None:
    """Where the members end when the archive they were listed from already holds them exactly
    as this module writes them, in this order from its first byte (a layer bundler pushed, with
    ``members`` in archive order); ``None`` when it does not."""
    at = 0
    for member in members:
        if not member.archive_form or member.header_at != at:
            return None
        at = _member_end(member)
    return at


def listed_stat(member: ListedMember) -> os.stat_result:
    """The status a listed member would have as a file or folder of the bundle (its kind, mode
    and size; nothing else of it is carried)."""
    kind = stat.S_IFDIR | ARCHIVE_DIR_MODE if member.is_dir else stat.S_IFREG | member.mode
    return os.stat_result((kind, 0, 0, 1, 0, 0, member.size, 0, 0, 0))


def append_range(src_fd: int, offset: int, size: int, dst_fd: int) -> None:
    """Append ``size`` bytes of ``src_fd`` from ``offset`` at ``dst_fd``'s position, inside the
    kernel where it can (``copy_file_range``), else through a buffer."""
    end = offset + size
    while offset < end:
        try:
            copied = os.copy_file_range(src_fd, dst_fd, end - offset, offset)
        except OSError as err:
            if err.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            copied = _copy_by_buffer(src_fd, offset, min(end - offset, COPY_CHUNK), dst_fd)
        if not copied:
            raise OSError(errno.EIO, "the archive being copied from is shorter than it was")
        offset += copied


def _copy_by_buffer(src_fd: int, offset: int, size: int, dst_fd: int) -> int:
    chunk = os.pread(src_fd, size, offset)
    write_all(dst_fd, chunk)
    return len(chunk)


def _copy_range(fd: int, offset: int, size: int, out: BinaryIO) -> None:
    end = offset + size
    while offset < end:
        chunk = os.pread(fd, min(end - offset, COPY_CHUNK), offset)
        if not chunk:
            raise OSError(errno.EIO, "the archive being copied from is shorter than it was")
        out.write(chunk)
        offset += len(chunk)


def _write_member(
    parents: _Parents,
    name: str,
    out: BinaryIO,
    progress: Progress | None,
    digests: dict[str, str] | None,
) -> int:
    """Write one member's header and data; returns the bytes written."""
    fd, st = _open_member(parents, name)
    try:
        header = header_bytes(name, st)
        out.write(header)
        if stat.S_ISDIR(st.st_mode):
            if progress is not None:
                progress(1, 0)
            return len(header)
        size = st.st_size
        hasher = None if digests is None else xxhash.xxh3_128()
        _copy_exactly(fd, size, out, name, hasher)
        # a file that grew shows one more byte; one that shrank ended the copy early
        if os.read(fd, 1):
            raise _changed(name)
        if digests is not None and hasher is not None:
            digests[name] = hasher.hexdigest()
        pad = -size % tarfile.BLOCKSIZE
        out.write(bytes(pad))
        if progress is not None:
            progress(1, size)
        return len(header) + size + pad
    finally:
        os.close(fd)


def _changed(name: str) -> InvalidInput:
    shown = escape_display(name)
    return Tampered(
        f"{shown} changed size while it was being archived: stop what writes to the bundle and "
        "try again",
        path=shown,
    )
