"""A listed archive kept on disk: its members, and the digests of the files made from them.

An archive that is judged as it arrives and made into files only once it is checked (a pulled
layer: :func:`bundler.bundle.archive_read.list_tar`, then :func:`bundler.bundle.archive_replay.
replay_tar`) must keep its listing from the first step to the second, and the size and XXH3-128
of every file made for the verification that follows (which then need not read them back). In
memory that is about 0.7 KiB a file, and a layer may hold a million (06 P4: peak memory must not
grow with the number of files). So here each member is a record in an unnamed file
(:class:`MemberFile`), read back in archive order as often as needed, and each file's digest a
fixed-size slot of another (:class:`DigestSlots`), at the member's place in the archive, written
by whichever worker made the file. :class:`SpilledDigests` then answers a walk of the folder,
which asks in checksum order (02 §9.2), by reading the slots beside the listings in that order.

Both files are unnamed (``O_TMPFILE``; where a filesystem has none, created and unlinked at
once) in a private folder the caller gives: nobody can open them, nothing of them is left after
the process ends however it ends, and no cleanup or recovery has anything to find. They hold
names and digests, never file contents.
"""

from __future__ import annotations

import errno
import heapq
import os
import secrets
import struct
from collections.abc import Iterator
from typing import NamedTuple

from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.manifest import checksum_sort_text

_BLOCK = 1 << 20
"""Bytes written at once: some thousands of records."""

_READ = 1 << 16
"""Bytes read at once, by each reading under way (a walk has one per run, two files each)."""

MAX_RUNS = 32
"""The most runs in checksum order an archive's digests are read back as (:class:`MemberFile`):
an archive in another order has the files of its later runs read back by the walk instead."""

# size, header_at, data_at, the name's length in bytes, mode, is_dir, archive_form
_MEMBER = struct.Struct("<QQQIH??")
# written (a slot no worker wrote is zeros), size, the 16 bytes of the XXH3-128
_SLOT = struct.Struct("<?Q16s")

_NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)  # the filesystem has no O_TMPFILE


def unnamed_file(dir_fd: int) -> int:
    """A new empty file, readable and writable by this process only, with no name in the
    folder ``dir_fd`` (gone with its last descriptor)."""
    try:
        return os.open(".", os.O_RDWR | os.O_TMPFILE | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as err:
        if err.errno not in _NO_TMPFILE:
            raise
    name = f".bundler-spill-{secrets.token_hex(8)}"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        os.unlink(name, dir_fd=dir_fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _blocks(fd: int, at: int, end: int) -> Iterator[bytes]:
    """The bytes of ``fd`` from ``at`` up to ``end``, a block at a time, each read at its own
    offset (so that several readings of one file may be under way at once)."""
    while at < end:
        data = os.pread(fd, min(_READ, end - at), at)
        if not data:
            raise OSError(errno.EIO, "a spill file ended before what was written to it")
        at += len(data)
        yield data


def _write_at(fd: int, data: bytes | bytearray, at: int) -> None:
    view = memoryview(data)
    while view:
        count = os.pwrite(fd, view, at)
        view = view[count:]
        at += count


class MemberFile:
    """The members of one listed archive, in archive order, in an unnamed file of ``dir_fd``.

    :meth:`append` adds one (through a buffer of :data:`_BLOCK` bytes); iterating reads them all
    back from the first, as often as wanted, each pass with its own offset. ``len`` is the
    number appended. Use it as a context manager, or :meth:`close` it.

    It also notes where the members' checksum order breaks (a bundle archive's root files come
    before its folders, 02 "archive form"): the archive is a few runs in that order, up to
    :data:`MAX_RUNS` (the last one takes the rest), which :meth:`runs` reads back one by one.
    """

    def __init__(self, dir_fd: int) -> None:
        self._fd = unnamed_file(dir_fd)
        self._pending = bytearray()
        self._end = 0  # bytes written to the file
        self._count = 0
        self._starts = [(0, 0)]  # (byte, member) where each run starts
        self._key = ""  # the last member's checksum order

    def __enter__(self) -> MemberFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (it is then gone)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __len__(self) -> int:
        return self._count

    def share(self) -> MemberFile:
        """Another :class:`MemberFile` of the same members, closed on its own (what is appended
        to either after this is not seen by the other)."""
        if self._pending:
            self._flush()
        other = MemberFile.__new__(MemberFile)
        other._fd = os.dup(self._fd)
        other._pending = bytearray()
        other._end = self._end
        other._count = self._count
        other._starts = list(self._starts)
        other._key = self._key
        return other

    def append(self, member: ListedMember) -> None:
        """Add ``member`` after the others."""
        # a listed name was read strictly: no control character, valid UTF-8
        key = checksum_sort_text(member.name)
        if key < self._key and len(self._starts) < MAX_RUNS:
            self._starts.append((self._end + len(self._pending), self._count))
        self._key = key
        name = member.name.encode("utf-8", "surrogateescape")
        self._pending += _MEMBER.pack(
            member.size,
            member.header_at,
            member.data_at,
            len(name),
            member.mode,
            member.is_dir,
            member.archive_form,
        )
        self._pending += name
        self._count += 1
        if len(self._pending) >= _BLOCK:
            self._flush()

    def _flush(self) -> None:
        _write_at(self._fd, self._pending, self._end)
        self._end += len(self._pending)
        self._pending.clear()

    def __iter__(self) -> Iterator[ListedMember]:
        if self._pending:
            self._flush()
        return self._read(0, self._end)

    def runs(self) -> list[tuple[int, int, Iterator[ListedMember]]]:
        """The runs in checksum order: (the place of the first member, the number of members,
        a reading of them), in archive order."""
        if self._pending:
            self._flush()
        ends = [*self._starts[1:], (self._end, self._count)]
        return [
            (first, stop - first, self._read(at, end))
            for (at, first), (end, stop) in zip(self._starts, ends, strict=True)
        ]

    def _read(self, start: int, end: int) -> Iterator[ListedMember]:
        left = b""
        head = _MEMBER.size
        for block in _blocks(self._fd, start, end):
            data = left + block if left else block
            at = 0
            while len(data) - at >= head:
                size, header_at, data_at, length, mode, is_dir, form = _MEMBER.unpack_from(data, at)
                if len(data) - at - head < length:
                    break
                name = data[at + head : at + head + length].decode("utf-8", "surrogateescape")
                yield ListedMember(name, is_dir, mode, size, header_at, data_at, form)
                at += head + length
            left = data[at:]
        if left:
            raise OSError(errno.EIO, "a spill file ends inside a record")


class DigestSlots:
    """The size and XXH3-128 of each file made from a listed archive, by the member's place in
    the archive (its index among the members, folders included): one fixed-size slot each, in an
    unnamed file of ``dir_fd``. Any thread may :meth:`put` (one positional write each)."""

    def __init__(self, dir_fd: int) -> None:
        self._fd = unnamed_file(dir_fd)
        self._end = 0

    def __enter__(self) -> DigestSlots:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (it is then gone)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def put(self, place: int, size: int, digest: str) -> None:
        """Record the file made of the member at ``place``: ``size`` bytes, XXH3-128 ``digest``
        (32 hex digits)."""
        _write_at(self._fd, _SLOT.pack(True, size, bytes.fromhex(digest)), place * _SLOT.size)

    def read(self, first: int, count: int) -> Iterator[tuple[int, str] | None]:
        """The slots of ``count`` places from ``first``, in order: (size, digest), or None where
        no file was recorded (a folder, a file not made)."""
        start = first * _SLOT.size
        end = max(start, min((first + count) * _SLOT.size, os.fstat(self._fd).st_size))
        done = 0
        left = b""
        for block in _blocks(self._fd, start, end):
            data = left + block if left else block
            whole = len(data) - len(data) % _SLOT.size
            for written, size, raw in _SLOT.iter_unpack(data[:whole]):
                yield (size, raw.hex()) if written else None
            done += whole // _SLOT.size
            left = data[whole:]
        for _ in range(done, count):  # past the last slot written: none of them were
            yield None


class _Known(NamedTuple):
    key: str  # the path's checksum order (manifest.checksum_sort_text)
    size: int
    digest: str


def _in_order(members: MemberFile, slots: DigestSlots) -> Iterator[_Known]:
    """The recorded digests of one archive's files, by path in checksum order: a merge of its
    runs in that order (:meth:`MemberFile.runs`). A file that comes out of its run's order
    (only in the last run) is left out, so that a walk reads it back rather than an order being
    made in memory."""
    return heapq.merge(
        *(_run(members, slots.read(first, count)) for first, count, members in members.runs())
    )


def _run(
    members: Iterator[ListedMember], slots: Iterator[tuple[int, str] | None]
) -> Iterator[_Known]:
    last = ""
    for member, slot in zip(members, slots, strict=True):
        if slot is None or member.is_dir:
            continue
        key = checksum_sort_text(member.name)
        if key > last:
            last = key
            yield _Known(key, slot[0], slot[1])


class SpilledDigests:
    """The digests recorded of the files made from several listed archives (each a
    :class:`MemberFile` and its :class:`DigestSlots`, whose paths no other holds), for a walk of
    the folder they were made in: :meth:`get` as ``verify_bundle``'s ``known_digests`` asks it.

    A walk asks in checksum order (02 §9.2), so the answers are read from the files as a merge of
    the archives' orders and nothing per file is held; a path asked before the last one starts
    the reading again from the first (a second walk). A path without an answer is read back by
    the walk. ``listed`` holds, in memory, the digests of archives only listed, never made.
    """

    def __init__(self) -> None:
        self.listed: dict[str, tuple[int, str]] = {}
        self._parts: list[tuple[MemberFile, DigestSlots]] = []
        self._reading: Iterator[_Known] = iter(())
        self._next: _Known | None = None
        self._last = ""
        self._restart = True  # the next question starts the reading from the first

    def __enter__(self) -> SpilledDigests:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every archive's files."""
        for members, slots in self._parts:
            members.close()
            slots.close()
        self._parts.clear()

    def record(self, members: MemberFile, dir_fd: int) -> DigestSlots:
        """The slots for the files made from ``members`` (the listing of one archive, shared:
        the caller still closes its own), kept with it until these are closed; they are made
        in ``dir_fd``."""
        kept = members.share()
        try:
            slots = DigestSlots(dir_fd)
        except BaseException:
            kept.close()
            raise
        self._parts.append((kept, slots))
        self._restart = True
        return slots

    def take(self, other: SpilledDigests) -> None:
        """Take every archive of ``other``, which no longer closes them."""
        self.listed.update(other.listed)
        self._parts += other._parts
        other._parts = []
        self._restart = True

    def get(self, rel: str) -> tuple[int, str] | None:
        """The (size, XXH3-128) recorded of the file at bundle path ``rel``, or None."""
        known = self.listed.get(rel)
        if known is not None or not self._parts:
            return known
        # a walked path holds no control character and no lone surrogate
        key = checksum_sort_text(rel)
        if self._restart or key < self._last:
            self._restart = False
            self._reading = heapq.merge(*(_in_order(m, s) for m, s in self._parts))
            self._next = next(self._reading, None)
        self._last = key
        while self._next is not None and self._next.key < key:
            self._next = next(self._reading, None)
        if self._next is not None and self._next.key == key:
            return self._next.size, self._next.digest
        return None
