"""Reading a bundle archive: hostile input, unpacked into an empty staging folder.

An archive may come from anyone. Only what :mod:`bundler.bundle.archive_write` could have
written, give or take what other tar programs add harmlessly, is admitted: regular files and
folders whose names pass the bundle's own path rule, each folder listed before its contents,
every name once. Links of both kinds, devices, FIFOs, sparse files, global headers, names that
climb (``..``) or start at ``/``, members under or over another member's file are refused, as are
a damaged or truncated archive and anything but zeros in the padding after a member's data or
after its end: every tar program pads with zeros, and bytes no reader looks at would let two
different archives pass for one bundle. Limits on the member
count, each member's size, the total size and each extended header are checked from the header,
before a byte of that member is written, and so is whether ``checksums.xxh3`` lists it
(:class:`bundler.bundle.archive_members.ChecksumGate`).

The block loop is our own, and a header is read by :func:`parse_header`: the plain headers
bundle archives are made of (octal number fields, the unsigned checksum) by a fast path, every
other one by :meth:`tarfile.TarInfo.frombuf` (checksum, number fields), so what is accepted is
exactly what ``frombuf`` accepts. :mod:`tarfile`'s stream mode is not used: it reads a pax or GNU
long-name header of any declared size into memory before a caller can refuse it, and takes a
damaged header after the first member, or a missing end marker, for the end of the archive.
Nothing is ever extracted by :mod:`tarfile`. Before either, a header exactly as bundle archives
have it (one ustar block, the fields :func:`bundler.bundle.archive_write.header_bytes` writes)
is read from the block alone by :func:`bundler.bundle.archive_write.archive_form`, which gives
what ``parse_header`` would and stops at the first field that differs: on a bundle of many
small files the header is most of the reader's time per member.

Everything is created through descriptors below ``dest_fd`` with ``O_NOFOLLOW|O_EXCL``, folders
0700 as an export stages them. A file is created with its own permission bits when the umask
keeps them all (``dest_fd`` is a fresh private folder, so nobody else sees it being written),
else 0600 and then ``fchmod``: one system call less per file in the common case. The caller owns
``dest_fd``, a fresh empty folder, and removes it on failure.

With ``digests``, the reader also records each file's XXH3-128 (the digest ``checksums.xxh3``
uses) from the bytes as it writes them, so that the verification of a folder only bundler has
written can compare those instead of reading every file back (:func:`bundler.bundle.verify.
verify_bundle`'s ``known_digests``).
"""

from __future__ import annotations

import functools
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, BinaryIO

import xxhash

from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.archive_members import (
    ChecksumGate,
    MemberPlaces,
    create_file,
    create_problem,
    make_folder,
    member_error,
    name_problem,
    process_umask,
)
from bundler.bundle.archive_write import FILE_MODE_BITS, archive_form
from bundler.bundle.manifest import CHECKSUMS_NAME
from bundler.bundle.tar_header import Header, parse_header, parse_pax
from bundler.bundle.walk import MAX_ENTRIES
from bundler.errors import (
    Hostile,
    InvalidInput,
    Malformed,
    NotABundle,
    Tampered,
    TooLarge,
    Unsupported,
)
from bundler.fs.durable import write_all
from bundler.fs.safefs import display_name, open_beneath
from bundler.fs.scratch import temp_root
from bundler.rules.names import escape_display
from bundler.rules.units import human_size

BLOCK = tarfile.BLOCKSIZE
_ZERO_BLOCK = bytes(BLOCK)
_CHUNK = 1 << 20
_STREAM_READ = 2 << 20

_LINK_TYPES = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link"}
_SPECIAL_TYPES = {
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
}
_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)

Digests = dict[str, tuple[int, str]]
"""Bundle path -> (size, XXH3-128 hex) of each file as it was written."""


@dataclass(frozen=True)
class ArchiveLimits:
    """How much an archive may hold; every limit is checked before the member is written."""

    max_members: int = MAX_ENTRIES
    """As many as a bundle may hold entries (:data:`bundler.bundle.walk.MAX_ENTRIES`)."""
    max_member_bytes: int = 64 << 30
    max_total_bytes: int = 256 << 30
    max_header_bytes: int = 64 << 10
    """The data of one pax extended header or GNU long-name header."""
    max_trailing_bytes: int = 1 << 20
    """Zero padding after the end-of-archive marker (tar pads to its record size)."""


def read_tar(
    stream: BinaryIO,
    dest_fd: int,
    limits: ArchiveLimits,
    *,
    name: str = "archive",
    digests: Digests | None = None,
) -> list[str]:
    """Unpack the tar ``stream`` into the empty folder ``dest_fd``; return the member names.

    ``name`` (the archive as the user named it) starts every error message. Raises
    :class:`InvalidInput` naming the archive and the member (escaped) for anything the module
    docstring refuses; ``OSError`` for a failure to read the stream or write the folder. On any
    exception part of the archive may have been written: the caller removes ``dest_fd``'s folder.
    ``digests``, when given, receives ``(size, XXH3-128 hex)`` of every file member by its name,
    computed from the bytes written.
    """
    return _Reader(stream, dest_fd, limits, name, digests).run()


def list_tar(
    stream: BinaryIO,
    limits: ArchiveLimits,
    *,
    name: str = "archive",
    digests: Digests | None = None,
    record: Callable[[ListedMember], object] | None = None,
    recall: Callable[[], Iterable[tuple[str, bool]]] | None = None,
    gated: Callable[[str], bool] | None = None,
) -> list[ListedMember]:
    """Read the tar ``stream`` by every rule of :func:`read_tar`, writing nothing: its members,
    in archive order, with where each lies in the stream (from its start).

    For a caller that keeps the archive and needs its members' bytes later (``bundle pull``
    into an archive copies them from the layer blob, into a folder unpacks them with
    :func:`bundler.bundle.archive_replay.replay_tar`), so that an archive is judged while it
    arrives, and a bundle of many small files without making a file for each. ``digests``
    receives what :func:`read_tar` gives it.

    ``record``, when given, receives each member as it is listed, and the list returned is
    empty (a caller that keeps the listing on disk: :class:`bundler.bundle.archive_spill.
    MemberFile`); ``recall`` then gives back (name, is a folder) of the members it has received,
    so that an archive in checksum order is judged without holding them again
    (:class:`bundler.bundle.archive_members.MemberPlaces`; without ``record``, the list is what
    is recalled). ``gated`` names the files the :class:`ChecksumGate` judges (all when None):
    for an archive that is one part of a bundle (a pulled layer), whose caller refuses any
    member outside it, so that only the lines of ``checksums.xxh3`` it needs are held.
    """
    listed: list[ListedMember] = []
    if record is None:
        recall = _names_of(listed)
    lister = _Lister(stream, -1, limits, name, digests, gated, recall)
    lister.record = listed.append if record is None else record
    lister.run()
    return listed


def _names_of(members: Iterable[ListedMember]) -> Callable[[], Iterator[tuple[str, bool]]]:
    """A ``recall`` of list_tar's: (name, is a folder) of ``members``, read again each call."""
    return lambda: ((member.name, member.is_dir) for member in members)


class _Reader:
    keeps_names = True  # read_tar answers with every member's name

    def __init__(
        self,
        stream: BinaryIO,
        dest_fd: int,
        limits: ArchiveLimits,
        name: str,
        digests: Digests | None = None,
        gated: Callable[[str], bool] | None = None,
        recall: Callable[[], Iterable[tuple[str, bool]]] | None = None,
    ) -> None:
        self.stream = stream
        self.dest_fd = dest_fd
        self.limits = limits
        self.archive = display_name(os.fsencode(name))
        self.offset = 0
        self.places = MemberPlaces(recall)
        self.names: list[str] = []  # the members' names, for read_tar's answer
        self.members = 0
        self.total = 0
        self.digests = digests
        self.umask = process_umask()
        self._parent: tuple[str, int] | None = None
        self.member_at = 0  # where the current member's first header block starts
        self.form_header = False  # whether its header is one block in archive form
        self.gate = ChecksumGate(gated)
        self._kept: IO[bytes] | None = None  # the data of checksums.xxh3, while it is read
        self._chunk = b""  # read from the stream, from self._at on not yet taken
        self._view = memoryview(self._chunk)
        self._at = 0

    # --- the stream ---------------------------------------------------------------------

    def _invalid(self, why: str, made: type[InvalidInput] = Malformed) -> InvalidInput:
        return made(f"{self.archive} {why}", path=self.archive)

    def _read_some(self, size: int) -> bytes:
        """At most ``size`` bytes, ``b""`` only at the stream's end. The stream is read in
        chunks of :data:`_STREAM_READ` held here: most requests are a header or a small file, which
        are then a slice of the chunk rather than a call to the stream."""
        return self._read_view(size).tobytes()

    def _read_view(self, size: int) -> memoryview:
        """As :meth:`_read_some`, in place in the chunk: for a member's data, which is only
        written and hashed."""
        at = self._at
        if at == len(self._chunk):
            self._next_chunk()
            at = 0
        data = self._view[at : at + size]
        self._at = at + len(data)
        self.offset += len(data)
        return data

    def _next_chunk(self) -> None:
        self._chunk = self.stream.read(_STREAM_READ)
        self._view = memoryview(self._chunk)
        self._at = 0

    def _read_exact(self, size: int, where: Callable[[], str]) -> bytes:
        parts: list[bytes] = []
        left = size
        while left:
            data = self._read_some(min(left, _CHUNK))
            if not data:
                raise self._invalid(f"is truncated {where()}")
            parts.append(data)
            left -= len(data)
        return b"".join(parts)

    def _skip_padding(
        self, size: int, where: Callable[[], str], dirty: Callable[[], InvalidInput]
    ) -> None:
        """Read the padding after ``size`` bytes of data: ``dirty()`` is raised unless it is
        all zeros."""
        pad = -size % BLOCK
        if pad and self._read_exact(pad, where).count(0) != pad:
            raise dirty()

    # --- the loop -----------------------------------------------------------------------

    def run(self) -> list[str]:
        try:
            self._loop()
        finally:
            self._drop_parent()
        return self.names

    def _loop(self) -> None:
        pax: dict[str, bytes] | None = None
        long_name: str | None = None
        while True:
            at = self.offset
            if pax is None and long_name is None:
                self.member_at = at
                # a header as bundle archives have it, read in place in the chunk: what
                # parse_header would give (archive_form's tests hold it to that)
                form = archive_form(self._chunk, self._at)
                if form is not None:
                    self._at += BLOCK
                    self.offset += BLOCK
                    self.form_header = True
                    self._admit(form.name, form.is_dir, form.size, form.mode)
                    continue
            block = self._read_some(BLOCK)
            while block and len(block) < BLOCK:
                more = self._read_some(BLOCK - len(block))
                if not more:
                    break
                block += more
            if len(block) < BLOCK:
                if at == 0 and not block:
                    raise self._invalid("is empty, not a tar archive", NotABundle)
                if block:
                    raise self._invalid(f"is truncated in the header at byte {at}")
                raise self._invalid(
                    f"is truncated at byte {at}: the end-of-archive marker is missing"
                )
            if block == _ZERO_BLOCK:
                if pax is not None or long_name is not None:
                    raise self._invalid(f"ends after an extended header at byte {at}")
                self._end(at)
                return
            form = archive_form(block) if pax is None and long_name is None else None
            if form is not None:  # one that straddled two chunks
                self.form_header = True
                self._admit(form.name, form.is_dir, form.size, form.mode)
                continue
            self.form_header = False
            try:
                info = parse_header(block)
            except tarfile.HeaderError:
                if at == 0:
                    raise self._invalid("is not a tar archive", NotABundle) from None
                raise self._invalid(
                    f"has a damaged header at byte {at} (a member's size may be wrong)"
                ) from None
            if info.size < 0:
                raise self._invalid(f"declares a negative size at byte {at}")
            if info.type in (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME):
                if pax is not None or long_name is not None:
                    raise self._invalid(f"has two extended headers for one member at byte {at}")
                data = self._header_data(info, at)
                if info.type == tarfile.XHDTYPE:
                    pax = self._pax(data, at)
                else:
                    long_name = self._long_name(data, at)
                continue
            self._member(info, pax or {}, long_name, at)
            pax, long_name = None, None

    def _header_data(self, info: Header, at: int) -> bytes:
        if info.size > self.limits.max_header_bytes:
            raise self._invalid(
                f"has an extended header of {human_size(info.size)} at byte {at} "
                f"(at most {human_size(self.limits.max_header_bytes)})",
                TooLarge,
            )
        data = self._read_exact(info.size, lambda: f"in the extended header at byte {at}")
        self._skip_padding(
            info.size,
            lambda: f"in the extended header at byte {at}",
            lambda: self._invalid(f"has padding that is not zeros after the header at byte {at}"),
        )
        return data

    def _pax(self, data: bytes, at: int) -> dict[str, bytes]:
        try:
            return parse_pax(data)
        except ValueError as err:
            raise self._invalid(f"has a malformed pax header at byte {at}: {err}") from None

    def _long_name(self, data: bytes, at: int) -> str:
        raw = data.split(b"\0", 1)[0]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._invalid(f"has a long name that is not UTF-8 at byte {at}") from None

    def _end(self, at: int) -> None:
        second = self._read_exact(BLOCK, lambda: f"in the end-of-archive marker at byte {at}")
        if second != _ZERO_BLOCK:
            raise self._invalid(f"has a lone zero block at byte {at} followed by more data")
        trailing = 0
        while True:
            data = self._read_some(_CHUNK)
            if not data:
                return
            trailing += len(data)
            if data.count(0) != len(data):
                raise self._invalid("has data after its end-of-archive marker")
            if trailing > self.limits.max_trailing_bytes:
                raise self._invalid(
                    f"has more than {human_size(self.limits.max_trailing_bytes)} of padding "
                    "after its end"
                )

    # --- one member ---------------------------------------------------------------------

    def _member(self, info: Header, pax: dict[str, bytes], long_name: str | None, at: int) -> None:
        name = info.name
        if long_name is not None:
            name = long_name
        if "path" in pax:
            try:
                name = pax["path"].decode("utf-8")
            except UnicodeDecodeError:
                raise self._invalid(f"has a pax path that is not UTF-8 at byte {at}") from None
        is_dir = info.type == tarfile.DIRTYPE
        if is_dir and name.endswith("/"):
            name = name[:-1]
        kind = self._kind_problem(info, pax)
        if kind is not None:
            raise self._fail(name, kind[1], kind[0])
        size = info.size
        if "size" in pax:
            if not pax["size"].isdigit() or len(pax["size"]) > 20:
                raise self._fail(name, "has a malformed pax size", Malformed)
            size = int(pax["size"])
        if is_dir and size:
            raise self._fail(name, "is a folder that declares data", Malformed)
        self._admit(name, is_dir, size, info.mode & FILE_MODE_BITS)

    def _admit(self, name: str, is_dir: bool, size: int, mode: int) -> None:
        """The checks every member passes, whatever its headers were, then its making."""
        problem = name_problem(name) or self.places.problem(name)
        if problem is not None:
            raise self._fail(name, problem, Hostile)
        limits = self.limits
        if self.members >= limits.max_members:
            raise self._fail(
                name, f"is one more than the {limits.max_members} members allowed", TooLarge
            )
        if size > limits.max_member_bytes:
            raise self._fail(
                name,
                f"declares {human_size(size)}, more than {human_size(limits.max_member_bytes)}",
                TooLarge,
            )
        if self.total + size > limits.max_total_bytes:
            raise self._fail(
                name,
                f"takes the archive past {human_size(limits.max_total_bytes)} unpacked",
                TooLarge,
            )
        unlisted = None if is_dir else self.gate.problem(name, size)
        if unlisted is not None:
            raise self._fail(name, unlisted[1], unlisted[0])
        self.total += size
        self.places.add(name, is_dir)
        self.members += 1
        if self.keeps_names:
            self.names.append(name)
        if is_dir:
            self._mkdir(name)
        elif name == CHECKSUMS_NAME:
            # its bytes wait in an unnamed file (a million lines are 75 MB), read back by the
            # gate a block at a time; gone with the process however it ends
            with tempfile.TemporaryFile(prefix="bundler-checksums-", dir=temp_root()) as kept:
                self._kept = kept
                try:
                    self._write_file(name, size, mode)
                finally:
                    self._kept = None
                kept.seek(0)
                self._learn_checksums(iter(functools.partial(kept.read, _CHUNK), b""))
        else:
            self._write_file(name, size, mode)

    def _learn_checksums(self, data: Iterable[bytes]) -> None:
        try:
            before = self.gate.learn(data)
        except InvalidInput as err:
            raise self._fail(CHECKSUMS_NAME, f"cannot be read: {err.message}", type(err)) from None
        if before is not None:
            raise self._fail(before, f"is not listed in {CHECKSUMS_NAME}", Tampered)

    def _fail(self, name: str, why: str, made: type[InvalidInput]) -> InvalidInput:
        return member_error(self.archive, name, why, made)

    def _kind_problem(
        self, info: Header, pax: dict[str, bytes]
    ) -> tuple[type[InvalidInput], str] | None:
        kind = info.type
        if kind in _LINK_TYPES or kind == tarfile.GNUTYPE_LONGLINK or "linkpath" in pax:
            return Hostile, f"is {_LINK_TYPES.get(kind, 'a link')}: a bundle holds none"
        if kind in _SPECIAL_TYPES:
            return Hostile, f"is {_SPECIAL_TYPES[kind]}: a bundle holds only files and folders"
        if kind == tarfile.GNUTYPE_SPARSE or any(key.startswith("GNU.sparse.") for key in pax):
            return Unsupported, "is a sparse file: pack the bundle with 'bundler bundle pack'"
        if kind == tarfile.XGLTYPE:
            return Unsupported, "is a global pax header, which bundle archives do not use"
        if kind not in _FILE_TYPES and kind != tarfile.DIRTYPE:
            return Unsupported, (
                f"has the tar type {escape_display(kind.decode('latin-1'))}, not a file or folder"
            )
        return None

    # --- writing ------------------------------------------------------------------------

    def _drop_parent(self) -> None:
        if self._parent is not None:
            fd = self._parent[1]
            self._parent = None
            os.close(fd)

    def _parent_fd(self, parent: str) -> int:
        if not parent:
            return self.dest_fd
        if self._parent is not None and self._parent[0] == parent:
            return self._parent[1]
        self._drop_parent()
        fd = open_beneath(self.dest_fd, parent)
        self._parent = (parent, fd)
        return fd

    def _mkdir(self, name: str) -> None:
        parent, _, leaf = name.rpartition("/")
        try:
            make_folder(self._parent_fd(parent), leaf)
        except OSError as err:
            raise self._create_error(err, name) from None

    def _write_file(self, name: str, size: int, mode: int) -> None:
        parent, _, leaf = name.rpartition("/")
        try:
            fd, exact = create_file(self._parent_fd(parent), leaf, mode, self.umask)
        except OSError as err:
            raise self._create_error(err, name) from None
        try:
            digest = self._copy_data(fd, name, size)
            if not exact:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
        if self.digests is not None:
            self.digests[name] = (size, digest)

    def _copy_data(self, fd: int | None, name: str, size: int) -> str:
        """Write the member's ``size`` bytes to ``fd`` (``None``: only read them) and skip its
        padding; the XXH3-128 of the bytes."""
        padded = size + (-size % BLOCK)
        at, chunk = self._at, self._chunk
        kept = self._kept
        if at + padded <= len(chunk):
            # most members: the data and its padding lie in the chunk read, taken in place
            view = self._view[at : at + size]
            if fd is not None:
                write_all(fd, view)
            if kept is not None:
                kept.write(view)
            if chunk.count(0, at + size, at + padded) != padded - size:
                raise self._dirty_padding(name)
            self._at = at + padded
            self.offset += padded
            return "" if self.digests is None else str(xxhash.xxh3_128_hexdigest(view))
        write: Callable[[bytes | memoryview], object]
        write = _discard if fd is None else (lambda data: write_all(fd, data))
        if kept is not None:
            write = _keeping(write, kept)
        if padded <= _CHUNK:
            # most members: the data and its padding in one read, one write, a one-shot digest
            data = self._read_some(padded)
            while len(data) < padded:
                more = self._read_some(padded - len(data))
                if not more:
                    break
                data += more
            if len(data) < size:
                write(data)
                raise self._fail(
                    name,
                    f"is cut short: the archive ends {human_size(size - len(data))} before it does",
                    Malformed,
                )
            if len(data) < padded:
                write(memoryview(data)[:size])
                raise self._invalid(f"is truncated after member {escape_display(name)}")
            view = memoryview(data)[:size]
            write(view)
            if data.count(0, size) != padded - size:
                raise self._dirty_padding(name)
            return "" if self.digests is None else str(xxhash.xxh3_128_hexdigest(view))
        hasher = xxhash.xxh3_128() if self.digests is not None else None
        left = size
        while left:
            piece = self._read_view(left)
            if not piece:
                raise self._fail(
                    name,
                    f"is cut short: the archive ends {human_size(left)} before it does",
                    Malformed,
                )
            if hasher is not None:
                hasher.update(piece)
            write(piece)
            left -= len(piece)
        self._skip_padding(
            size,
            lambda: f"after member {escape_display(name)}",
            lambda: self._dirty_padding(name),
        )
        return "" if hasher is None else str(hasher.hexdigest())

    def _dirty_padding(self, name: str) -> InvalidInput:
        return self._fail(name, "is padded with bytes that are not zeros", Malformed)

    def _create_error(self, err: OSError, name: str) -> BaseException:
        why = create_problem(err)
        return err if why is None else self._fail(name, why, Hostile)


def _discard(_data: bytes | memoryview) -> None:
    """What a member's data is written to when it is only listed."""


def _keeping(
    write: Callable[[bytes | memoryview], object], kept: IO[bytes]
) -> Callable[[bytes | memoryview], object]:
    """``write``, keeping a copy of each piece in ``kept`` (the data of ``checksums.xxh3``)."""

    def both(data: bytes | memoryview) -> object:
        kept.write(data)
        return write(data)

    return both


class _Lister(_Reader):
    """The reader with every check and no writing: each member is recorded instead."""

    keeps_names = False
    record: Callable[[ListedMember], object]  # where each member goes, as it is listed

    def _mkdir(self, name: str) -> None:
        self._record(name, True, 0, 0, self.offset)

    def _write_file(self, name: str, size: int, mode: int) -> None:
        data_at = self.offset
        digest = self._copy_data(None, name, size)
        self._record(name, False, mode, size, data_at)
        if self.digests is not None:
            self.digests[name] = (size, digest)

    def _record(self, name: str, is_dir: bool, mode: int, size: int, data_at: int) -> None:
        self.record(
            ListedMember(name, is_dir, mode, size, self.member_at, data_at, self.form_header)
        )
