"""The earlier backup a new one copies unchanged entries from (04 §5.1.1).

A backup is one self-contained zip, so an incremental backup cannot refer to its base: it copies
the base's compressed bytes of every unchanged entry into the new zip instead of deflating the
source again. "Unchanged" is decided from the source, never from the base alone: the source
file is read and hashed, and its size, XXH3-128 and CRC-32 must equal what the base lists and
stores (and its mtime the listed ``mtime_ns``). The copied bytes are then checked once more by
the new zip's own read-back (every entry inflated, its CRC and digest matched against the
source's), so a base whose bytes were tampered with cannot put a wrong byte into a published
backup: the backup is written again without it, with a warning. A file the home's index says
is unchanged (:mod:`bundler.home.reuse_index`) is not read: its copied bytes are hashed as they
pass and must be the bytes a read-back checked, or the base is dropped the same way.

The base is opened with every directory rule of :func:`bundler.home.zipcheck.open_zip` and its
``backup.json`` checked (:func:`~bundler.home.zipindex.read_index`,
:func:`~bundler.home.zipindex.match_index`); one that fails is not used, with a warning. The
backup the home's index is pinned to, found with the same length and directory bytes, is the
zip a read-back checked: its entries are taken from the index instead (:func:`open_base`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, NamedTuple, cast

import xxhash

from bundler.errors import BundlerError
from bundler.fs.digest import digest_fd
from bundler.fs.readahead import ReadAhead, read_ahead
from bundler.home.backup_age import is_encrypted
from bundler.home.reuse_index import EMPTY, NO_MTIME, Index, Pin, Record, Records
from bundler.home.zipcheck import (
    DATABASE,
    LOCAL_HEADER,
    LOCAL_HEADER_ROOM,
    LOCAL_SIGNATURE,
    STORE_ABOVE_RATIO,
    UTF8_FLAG,
    check_local_header,
    check_local_header_in,
    dos_date_time,
    dos_stamp,
    local_header_length,
    open_zip,
    read_end_record,
)
from bundler.home.zipindex import Listed, match_index, read_index
from bundler.rules.names import escape_display

_NAME = re.compile(r"backup-(\d{8})-(\d{6})(?:-(\d{1,3}))?\.zip(?:\.age)?")
_CHUNK = 1 << 20
ZIP64_FROM = 1 << 30
"""Entries from this size on are written with ZIP64 headers (backup-format.md)."""


class BaseUnusable(Exception):
    """The base could not give an entry's bytes: the backup is written again without it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def backup_order(name: str) -> tuple[str, str, int] | None:
    """The sort key of a default backup name (``backup-YYYYMMDD-HHMMSS[-N].zip``, or
    ``.zip.age`` encrypted), or None for any other name: the newest backup of a folder is the
    one with the largest key."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return match[1], match[2], int(match[3] or 1)


def newest_backup(folder: Path) -> Path | None:
    """The newest default-named backup in ``folder`` (a regular file, maybe encrypted), or
    None."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    ranked = sorted(
        ((key, name) for name in names if (key := backup_order(name)) is not None), reverse=True
    )
    for _key, name in ranked:
        with contextlib.suppress(OSError):
            if os.path.isfile(folder / name) and not os.path.islink(folder / name):
                return folder / name
    return None


class Candidate(NamedTuple):
    """An entry of the base that may stand for a source file: its name, and what its directory
    record and ``backup.json`` say of it."""

    name: str
    record: Record

    def zipinfo(self) -> zipfile.ZipInfo:
        """The entry as zipfile would have read it from the base's directory (what a check of
        its local header compares)."""
        record = self.record
        stamp = record.stamp
        info = zipfile.ZipInfo(self.name, dos_date_time(stamp & 0xFFFF, stamp >> 16))
        info.header_offset = record.offset
        info.flag_bits = record.flags
        info.compress_type = record.method
        info.CRC = record.crc
        info.compress_size = record.packed
        info.file_size = record.size
        return info


class Base:
    """An opened, checked earlier backup (its entries :class:`Records`); entries are copied
    from it raw (:func:`copy_raw`) through ``fd``, which stays open while the base is used."""

    def __init__(self, path: Path, fd: int, records: Records, data_end: int) -> None:
        self.path = path
        self.fd = fd
        self._records = records
        self.data_end = data_end
        """Where the entries' bytes end (the central directory begins)."""
        self.reused = 0
        self.ahead: ReadAhead | None = None
        """The thread reading the base ahead of :func:`copy_run` and :func:`copy_raw`, which
        report how far they read."""

    def reached(self, offset: int) -> None:
        """The copies have read the base up to ``offset`` (the read-ahead may go a window
        further)."""
        if self.ahead is not None:
            self.ahead.reached(offset)

    @classmethod
    def read(cls, path: Path, archive: zipfile.ZipFile) -> Base:
        """The base ``archive`` (opened by :func:`~bundler.home.zipcheck.open_zip`), its
        ``backup.json`` read and matched with its directory."""
        if archive.fp is None:
            raise ValueError("the zip is closed")
        index = read_index(archive)
        infos = match_index(index, archive.infolist())
        records = records_of(infos, index.files)
        return cls(path, archive.fp.fileno(), records, archive.start_dir)

    def _entry(self, relpath: str) -> Candidate | None:
        record = self._records.get(relpath)
        if record is None or record.method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            return None
        # the base may come from elsewhere: what a backup never writes is not copied either
        if record.size > STORE_ABOVE_RATIO * max(1, record.packed):
            return None
        return Candidate(relpath, record)

    def candidate(self, relpath: str, st: os.stat_result) -> Candidate | None:
        """The base's entry for ``relpath`` when its listed size and time match ``st`` (the
        database snapshot carries no time: its size and digest decide), else None."""
        found = self._entry(relpath)
        if found is None or found.record.size != st.st_size:
            return None
        if relpath != DATABASE and found.record.mtime_ns != st.st_mtime_ns:
            return None
        return found

    def database(self) -> Candidate | None:
        """The base's snapshot of the store, for a store the index says is unchanged (its
        size is the snapshot's, never the store's: the index's record decides)."""
        return self._entry(DATABASE)


def records_of(infos: Sequence[zipfile.ZipInfo], listed: Mapping[str, Listed]) -> Records:
    """The :class:`Records` of a backup's file entries ``infos`` (as its directory was read),
    listed in its ``backup.json`` as ``listed``."""
    stamps = [dos_stamp(info.date_time) for info in infos]
    items = [listed[info.filename] for info in infos]
    columns = (
        [info.header_offset for info in infos],
        [info.file_size for info in infos],
        [date_word << 16 | time_word for time_word, date_word in stamps],
        [info.flag_bits for info in infos],
        [info.CRC for info in infos],
        [info.compress_type for info in infos],
        [info.compress_size for info in infos],
        [NO_MTIME if item.mtime_ns is None else item.mtime_ns for item in items],
        [item.xxh3_128 for item in items],
    )
    return Records([info.filename for info in infos], columns)


def directory_identity(fp: IO[bytes]) -> tuple[int, int, str]:
    """A zip's length, where its central directory begins, and the XXH3-128 of its bytes
    from there to its end: the directory and end records, which name every entry, where it
    lies and what it holds (its CRC). Raises :class:`InvalidInput` for a zip whose end records
    do not hold, and :class:`OSError`."""
    end = read_end_record(fp)
    size = fp.seek(0, os.SEEK_END)
    fp.seek(end.directory_offset)
    hasher = xxhash.xxh3_128()
    while chunk := fp.read(_CHUNK):
        hasher.update(chunk)
    return size, end.directory_offset, hasher.hexdigest()


def pin_of(fp: IO[bytes], infos: Sequence[zipfile.ZipInfo], listed: Mapping[str, Listed]) -> Pin:
    """The pin of a backup just read back (``fp``; its file entries ``infos`` as its directory
    was read, ``listed`` as its ``backup.json`` was); its ``path`` is given once it is
    published."""
    size, directory_at, digest = directory_identity(fp)
    return Pin("", size, directory_at, digest, records_of(infos, listed))


def _open_pinned(path: Path, index: Index) -> Base | None:
    """The base at ``path`` when it is the backup ``index`` is pinned to (its real path, its
    length and its directory's bytes), without reading its directory or ``backup.json``
    again; else None."""
    pin = index.pin
    if pin is None or os.path.realpath(path) != pin.path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size == pin.size:
            with os.fdopen(os.dup(fd), "rb") as fp:
                if directory_identity(fp) == (pin.size, pin.directory_at, pin.directory_xxh3):
                    opened, fd = fd, -1
                    return Base(path, opened, pin.records, pin.directory_at)
    except (BundlerError, OSError):
        pass
    finally:
        if fd >= 0:
            os.close(fd)
    return None


@contextlib.contextmanager
def open_base(path: Path, warnings: list[str], index: Index = EMPTY) -> Iterator[Base | None]:
    """The base at ``path`` opened and checked, or None (with a warning naming why): the
    backup ``index`` is pinned to is taken at its word (:func:`_open_pinned`), any other
    opened and read whole."""
    shown = escape_display(str(path))
    if is_encrypted(path):
        warnings.append(
            f"{shown} is encrypted and is not used as the base: every entry is compressed "
            "afresh (an encrypted backup given --age-identity decrypts its base privately)"
        )
        yield None
        return
    pinned = _open_pinned(path, index)
    if pinned is not None:
        try:
            with _read_ahead(pinned):
                yield pinned
        finally:
            os.close(pinned.fd)
        return
    opened = contextlib.ExitStack()
    base: Base | None = None
    try:
        base = Base.read(path, opened.enter_context(open_zip(path)))
    except BundlerError as exc:
        warnings.append(f"{shown} is not used as the base: {exc.message}")
    except OSError as exc:
        warnings.append(f"{shown} is not used as the base ({os.strerror(exc.errno or 0)})")
    if base is None:
        opened.close()
    try:
        if base is None:
            yield None
        else:
            with _read_ahead(base):
                yield base
    finally:
        # closed as if nothing happened: an error of the backup's is not the base's to name
        opened.close()


@contextlib.contextmanager
def _read_ahead(base: Base) -> Iterator[None]:
    """While the block runs, the base's entries are read ahead of the copies (an incremental
    backup copies most of them, in order)."""
    with read_ahead(base.fd, 0, base.data_end) as ahead:
        base.ahead = ahead
        try:
            yield
        finally:
            base.ahead = None


def source_matches(fd: int, relpath: str, candidate: Candidate) -> tuple[int, str] | None:
    """Read the source from its start: its (size, digest) when size, XXH3-128 and CRC-32 all
    equal the base entry's, else None (the caller rewinds and compresses it afresh)."""
    crc = 0

    def observe(_relpath: str, chunk: memoryview) -> None:
        nonlocal crc
        crc = zlib.crc32(chunk, crc)

    record = candidate.record
    size, digest = digest_fd(fd, relpath=relpath, observer=observe, expected=record.size)
    if size != record.size or digest != record.digest or crc != record.crc:
        return None
    return size, digest


def copy_raw(
    archive: zipfile.ZipFile,
    base: Base,
    old: Candidate,
    new: zipfile.ZipInfo,
    expect: str | None = None,
) -> str:
    """Append ``new`` to ``archive`` with the compressed bytes of the base's ``old`` entry,
    neither inflated nor deflated; ``new`` takes the method, CRC and sizes of ``old``. The
    XXH3-128 of the bytes copied, taken as they pass through this process.

    Raises :class:`BaseUnusable` when the base's local header disagrees with its directory,
    its data ends early, or its bytes do not hash to ``expect`` (when given).
    """
    record = old.record
    try:
        data_at = check_local_header(base.fd, old.zipinfo())
    except BundlerError as exc:
        raise BaseUnusable(exc.message) from None
    sink = start_entry(archive, new, record.method, record.crc, record.size, record.packed)
    hasher = xxhash.xxh3_128()
    done = 0
    while done < record.packed:
        base.reached(data_at + done)
        # through the zip's write buffer: many small entries, one write call
        data = os.pread(base.fd, min(_CHUNK, record.packed - done), data_at + done)
        if not data:
            raise BaseUnusable(f"entry {escape_display(old.name)} ends early")
        hasher.update(data)
        sink.write(data)
        done += len(data)
    raw = hasher.hexdigest()
    if expect is not None and raw != expect:
        raise _other_bytes(old)
    end_entry(archive, new)
    base.reused += 1
    return raw


CopyJob = tuple[Candidate, zipfile.ZipInfo, str]
"""One entry of :func:`copy_run`: the base's entry, the new one, the XXH3-128 its bytes must
have."""


def copy_run(archive: zipfile.ZipFile, base: Base, jobs: Sequence[CopyJob]) -> None:
    """:func:`copy_raw` of each job in order (``expect`` given), reading the base in spans of up
    to 1 MiB rather than twice per entry: each entry's local header is checked, and its bytes
    hashed, from the span read. An entry the span does not hold whole (a large one, or one whose
    header runs past it) is copied alone by :func:`copy_raw`.

    Raises :class:`BaseUnusable` as :func:`copy_raw` does."""
    fd = base.fd
    at = 0
    while at < len(jobs):
        start = jobs[at][0].record.offset
        end = at
        span = 0
        while end < len(jobs):
            record = jobs[end][0].record
            reach = record.offset - start + LOCAL_HEADER_ROOM + record.packed
            if record.offset < start or (end > at and reach > _CHUNK):
                break
            span = max(span, reach)
            end += 1
        if span > _CHUNK:  # one large entry: streamed
            old, new, expect = jobs[at]
            copy_raw(archive, base, old, new, expect)
            at += 1
            continue
        base.reached(start)
        view = memoryview(os.pread(fd, span, start))
        # then each entry ends where the next begins: no tell each
        pending = _Pending(_at_end(archive), view)
        for old, new, expect in jobs[at:end]:
            _copy_from(archive, pending, base, old.record.offset - start, old, new, expect)
        pending.flush()
        at = end


class _Pending:
    """The bytes of one read of the base that the zip takes as they are, not yet written:
    entries lying end to end in the base, each with its header unchanged, reach the zip's
    file as one slice of the read, not one write (and one copy into the file's buffer) each."""

    def __init__(self, sink: IO[bytes], view: memoryview) -> None:
        self.sink = sink
        self.view = view
        self.begin = 0
        self.end = 0

    def add(self, begin: int, end: int) -> None:
        """The zip's next bytes are ``view[begin:end]``."""
        if begin != self.end:
            self.flush()
            self.begin = begin
        self.end = end

    def flush(self) -> None:
        """Write what is pending: the zip's file then ends where its directory will begin."""
        if self.end > self.begin:
            self.sink.write(self.view[self.begin : self.end])
        self.begin = self.end


def _copy_from(
    archive: zipfile.ZipFile,
    pending: _Pending,
    base: Base,
    at: int,
    old: Candidate,
    new: zipfile.ZipInfo,
    expect: str,
) -> None:
    """:func:`copy_raw` of one entry whose local header begins at ``at`` in ``pending``'s read
    of the base.

    A file's new local header is most often the base's, byte for byte (the same name, time,
    method, CRC and sizes): then the base's header and data are taken as they are, in one
    piece. Otherwise the base's header is checked against its directory record first."""
    record = old.record
    raw = pending.view[at:]
    header = _local_header(
        archive, new, record.method, record.crc, record.size, record.packed, None
    )
    verbatim = raw[: len(header)] == header
    data_at = len(header) if verbatim else local_header_length(raw)
    if data_at is None or data_at + record.packed > len(raw):
        # read, checked and named alone; it leaves the zip's file where the next entry goes
        pending.flush()
        copy_raw(archive, base, old, new, expect)
        return
    if not verbatim:
        try:
            check_local_header_in(raw[:data_at], old.zipinfo())
        except BundlerError as exc:
            raise BaseUnusable(exc.message) from None
    data = raw[data_at : data_at + record.packed]
    if xxhash.xxh3_128_hexdigest(data) != expect:
        raise _other_bytes(old)
    if verbatim:
        pending.add(at, at + data_at + record.packed)
    else:
        pending.flush()
        pending.sink.write(header)
        pending.sink.write(data)
    _record(archive, new, archive.start_dir + len(header) + record.packed)
    base.reused += 1


def _other_bytes(old: Candidate) -> BaseUnusable:
    """The refusal of a base entry whose bytes are not the ones a backup checked."""
    return BaseUnusable(
        f"entry {escape_display(old.name)} holds other bytes than the ones a backup checked"
    )


def start_entry(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    method: int,
    crc: int,
    size: int,
    packed: int,
    *,
    zip64: bool | None = None,
) -> IO[bytes]:
    """Write the local header of an entry whose data is already compressed (``packed`` bytes
    of ``method`` for ``size`` bytes with ``crc``), as zipfile writes one into a seekable zip:
    the caller writes exactly the data to the returned file, then calls :func:`end_entry`.
    ``zip64`` (default: from ``size``) for a header written again with the same length once
    the sizes are known."""
    sink = _at_end(archive)
    sink.write(_local_header(archive, info, method, crc, size, packed, zip64))
    return sink


def _at_end(archive: zipfile.ZipFile) -> IO[bytes]:
    """The zip's file, where its next entry goes."""
    sink = archive.fp
    if sink is None:
        raise ValueError("the zip is closed")
    if sink.tell() != archive.start_dir:
        # a seek flushes the write buffer: one write call per entry, where the buffer would
        # gather many small entries into one
        sink.seek(archive.start_dir)
    return sink


def _local_header(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    method: int,
    crc: int,
    size: int,
    packed: int,
    zip64: bool | None,
) -> bytes:
    """``info`` given its method, CRC and sizes, placed at the zip's end; its local header."""
    info.compress_type = method
    info.CRC = crc
    info.file_size = size
    info.compress_size = packed
    info.flag_bits = 0  # sizes in the local header, no data descriptor
    if zip64 is None:
        zip64 = size >= ZIP64_FROM or size * 1.05 > zipfile.ZIP64_LIMIT
    info.header_offset = archive.start_dir
    if zip64 or info.extra or method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return info.FileHeader(zip64)
    # FileHeader's bytes in one pack, in the layout zipcheck reads (a test holds them equal):
    # without a ZIP64 field or a method of a later version it leaves the versions as they are,
    # and it marks a name UTF-8 exactly when it is not ASCII
    name = info.filename
    plain = name.isascii()
    encoded = name.encode("ascii" if plain else "utf-8")
    flags = 0 if plain else UTF8_FLAG
    time_word, date_word = dos_stamp(info.date_time)
    version = info.extract_version | info.reserved << 8
    fields = (version, flags, method, time_word, date_word, crc, packed, size, len(encoded), 0)
    return LOCAL_HEADER.pack(LOCAL_SIGNATURE, *fields) + encoded


def end_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Record an entry begun with :func:`start_entry` whose data is written."""
    sink = archive.fp
    if sink is None:
        raise ValueError("the zip is closed")
    _record(archive, info, sink.tell())


def _record(archive: zipfile.ZipFile, info: zipfile.ZipInfo, end: int) -> None:
    """Enter ``info``, whose bytes are written up to ``end``, in the zip's directory."""
    archive.start_dir = end
    archive.filelist.append(info)
    archive.NameToInfo[info.filename] = info


class _Gathered:
    """The zip's file while zipfile writes its central directory: the pieces (four an entry)
    are kept in order, for one write once the directory is whole."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.parts: list[bytes] = []
        # list.append itself: a piece costs no Python call, no lock and no copy
        self.write = self.parts.append

    def tell(self) -> int:
        return self.at + sum(map(len, self.parts))

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        # zipfile seeks only to where the directory begins, before it writes anything
        if (offset, whence) != (self.at, os.SEEK_SET) or self.parts:
            raise io.UnsupportedOperation("the directory is written in order")
        return offset

    def flush(self) -> None:
        return None


def close_zip(archive: zipfile.ZipFile) -> None:
    """Close ``archive``, a zip being written: zipfile writes its central directory and end
    records, the same bytes as its own close, but into memory, and they reach the zip's file in
    one write (zipfile's four writes an entry into the buffered file took as long as copying a
    second backup's unchanged entries' headers)."""
    sink = _at_end(archive)
    gathered = _Gathered(archive.start_dir)
    archive.fp = cast("IO[bytes]", gathered)
    archive.close()
    sink.write(b"".join(gathered.parts))
