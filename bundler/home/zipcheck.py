"""The rules a backup zip must pass (04 §5.2, §5.3.1), shared by backup, verify-backup and restore.

One module spells them so that a backup can never hold an entry its restore would refuse: the
backup asks :func:`path_problem` of every entry it is about to write, verify-backup and restore
ask it of every entry they read.

Reading is defensive from the first byte: the entry count is taken from the end-of-central-
directory record before :mod:`zipfile` builds its list (a million-entry zip is refused without
allocating a million objects), names are checked as raw flags and bytes (an entry claiming UTF-8
that is not, a NUL inside a name), sizes and compression ratios come from the central directory,
and content is streamed with a hard stop at the size ``backup.json`` declares.
"""

from __future__ import annotations

import functools
import operator
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

import xxhash

from bundler.errors import (
    Hostile,
    InvalidInput,
    Malformed,
    NotABundle,
    Tampered,
    TooLarge,
    UnsuitablePath,
    Unsupported,
    os_failure,
)
from bundler.rules.names import CONTROL_CHARS, escape_display
from bundler.rules.units import human_size

FORMAT = 1
"""The newest backup format this tool reads and the one it writes."""
MANIFEST = "backup.json"
DATABASE = "chat.db"
TREES = ("files", "skills")
MAX_ENTRIES = 1_000_000
MAX_ENTRY_SIZE = 64 << 30
MAX_RATIO = 1000
"""Restore refuses an entry that decompresses to more than this many times its stored size."""
STORE_ABOVE_RATIO = 100
"""Backup stores uncompressed an entry that would compress beyond this, keeping a wide margin."""
MAX_MANIFEST_BYTES = 512 << 20
MAX_MTIME_NS = (1 << 63) - 1
"""The latest ``mtime_ns`` a backup carries: a signed 64-bit nanosecond count, which every
``time_t`` of 64 bits holds, so no listed time can overflow ``os.utime``."""
MAX_COMPONENT_BYTES = 255
MAX_DEPTH = 256

UTF8_FLAG = 0x800
"""The general-purpose flag that marks an entry's name as UTF-8."""
_ENCRYPTED_FLAG = 0x1
_DESCRIPTOR_FLAG = 0x8
_KNOWN_FLAGS = UTF8_FLAG | _DESCRIPTOR_FLAG | 0x6 | _ENCRYPTED_FLAG
"""Flags a backup entry may carry: UTF-8 name, data descriptor, deflate level (bits 1-2); the
encrypted bit is known so that it is refused by name. Any other bit changes how the entry is
read (patched data, strong encryption, masked headers...) and is refused."""
_UNIX = 3
_MAX_EXTRACT_VERSION = 63
LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
"""A local header's fixed part: signature, version needed (zipfile's version byte with its
reserved byte above it), flags, method, time, date, CRC-32, compressed and uncompressed sizes,
name and extra lengths."""
LOCAL_SIGNATURE = b"PK\x03\x04"
_ZIP64_SIZE = 0xFFFFFFFF
_CENTRAL_RECORD_MIN = 46
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CHUNK = 1 << 20


def show(name: str) -> str:
    """An entry name made safe to print (05 §3)."""
    return escape_display(name)


def invalid_entry(name: str, what: str, made: type[InvalidInput]) -> InvalidInput:
    shown = show(name)
    return made(f"backup entry {shown}: {what}", path=shown)


# --- names -----------------------------------------------------------------------------------


_PLAIN_PATH = re.compile(
    f"(?:{'|'.join(TREES)})"
    + r"(?:/(?!\.\.?(?:/|\Z))[^/\\"
    + CONTROL_CHARS.pattern[1:-1]  # its class of control characters, excluded
    + "]+)+"
)
"""A path below ``files/`` or ``skills/`` of non-empty components, none ``.`` or ``..``, without
a backslash or a control character: every rule of :func:`path_problem` holds for one of at most
63 characters (no component can reach 255 bytes, nor the path 256 levels)."""
_PLAIN_LENGTH = MAX_COMPONENT_BYTES // 4
"""The longest path :data:`_PLAIN_PATH` decides alone (a component past 255 bytes needs 64
characters)."""


def path_problem(path: str, *, folder: bool = False) -> str | None:
    """Why ``path`` may not be an entry of a backup, or None when it may.

    ``path`` is ``/``-separated without a trailing slash. Files may be ``backup.json``,
    ``chat.db`` or a path below ``files/`` or ``skills/``; folders (``folder=True``) may be
    ``files``, ``skills`` or a path below them.
    """
    if len(path) <= _PLAIN_LENGTH and _PLAIN_PATH.fullmatch(path):
        return None  # the common case, at once
    return _path_problem(path, folder)


def all_plain(paths: list[str]) -> bool:
    """Whether :func:`path_problem` finds nothing in any of ``paths`` by its common case alone,
    decided over the list by C code; False when in doubt (each is then asked in turn)."""
    return not paths or (
        max(map(len, paths)) <= _PLAIN_LENGTH and all(map(_PLAIN_PATH.fullmatch, paths))
    )


def _path_problem(path: str, folder: bool) -> str | None:
    """:func:`path_problem`, every rule in turn."""
    if path.startswith("/"):
        return "is an absolute path"
    if "\\" in path:
        return "contains a backslash"
    parts = path.split("/")
    if ".." in parts:
        return "has a .. component"
    if "" in parts or "." in parts:
        return "has an empty or . component"
    if CONTROL_CHARS.search(path):
        return "contains a control character"
    if not folder and path in (MANIFEST, DATABASE):
        return None
    if parts[0] not in TREES or (len(parts) == 1 and not folder):
        return "is not backup.json, chat.db or a path below files/ or skills/"
    # a component beyond 255 bytes needs at least 64 characters (UTF-8 uses at most 4 per one)
    if len(path) > MAX_COMPONENT_BYTES // 4 and any(
        len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES for part in parts
    ):
        return f"has a component longer than {MAX_COMPONENT_BYTES} bytes"
    if len(parts) > MAX_DEPTH + 1:
        return f"is more than {MAX_DEPTH} levels deep"
    return None


def _kind_problem(info: zipfile.ZipInfo) -> str | None:
    unix_mode = info.external_attr >> 16
    kind = stat.S_IFMT(unix_mode)
    if stat.S_ISLNK(unix_mode):
        return "is a symbolic link"
    if info.filename.endswith("/"):
        return None if kind in (0, stat.S_IFDIR) else "is a folder entry with a non-folder mode"
    if kind not in (0, stat.S_IFREG) or info.external_attr & 0x10:
        return f"is not a regular file (mode {unix_mode:o})"
    return None


def _date_valid(date_time: tuple[int, int, int, int, int, int]) -> bool:
    _year, month, day, hour, minute, second = date_time
    return 1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60


def _record_problem(info: zipfile.ZipInfo) -> str | None:
    """The first numeric field of the directory record out of what a backup can hold."""
    if info.create_system != _UNIX:
        return f"does not carry a Unix mode (made by system {info.create_system}, not {_UNIX})"
    if info.extract_version > _MAX_EXTRACT_VERSION:
        return f"needs zip version {info.extract_version / 10:.1f} to extract"
    unknown = info.flag_bits & ~_KNOWN_FLAGS
    if unknown:
        return f"uses general-purpose flags {unknown:#06x} this reader does not support"
    if info.volume != 0:
        return f"lies on disk {info.volume}: a backup is one file"
    if info.internal_attr & ~1:
        return f"has internal attributes {info.internal_attr:#06x} a backup never sets"
    if not _date_valid(info.date_time):
        return "has an invalid date or time in the zip directory"
    return None


def check_infos(infos: Sequence[zipfile.ZipInfo]) -> None:
    """Refuse (InvalidInput, naming the entry) anything 04 §5.3.1 refuses in the directory.

    Every numeric field of each record is checked here, before anything uses it.
    """
    if len(infos) > MAX_ENTRIES:
        raise TooLarge(f"backup holds {len(infos)} entries, more than {MAX_ENTRIES}")
    seen: set[str] = set()
    paths: list[str] = []  # every entry's, in the directory's order
    files: list[str] = []
    for info in infos:
        name = info.orig_filename
        if "\x00" in name or info.filename != name:
            raise invalid_entry(name, "has a NUL character in its name", Hostile)
        if not info.flag_bits & UTF8_FLAG and not name.isascii():
            raise invalid_entry(name, "has a name that is not marked as UTF-8", Malformed)
        if info.flag_bits & _ENCRYPTED_FLAG:
            raise invalid_entry(name, "is encrypted", Unsupported)
        folder = name.endswith("/")
        path = name[:-1] if folder else name
        problem = path_problem(path, folder=folder) or _kind_problem(info)
        if problem:
            raise invalid_entry(name, problem, Hostile)
        problem = _record_problem(info)
        if problem:
            raise invalid_entry(name, problem, Malformed)
        if path in seen:
            raise invalid_entry(name, "appears more than once", Hostile)
        seen.add(path)
        paths.append(path)
        if folder:
            if info.file_size or info.compress_size or info.CRC:
                raise invalid_entry(name, "is a folder entry that holds data", Malformed)
            continue
        files.append(path)
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise invalid_entry(
                name, f"uses unsupported compression method {info.compress_type}", Unsupported
            )
        if info.file_size > MAX_ENTRY_SIZE:
            raise invalid_entry(name, f"is larger than {human_size(MAX_ENTRY_SIZE)}", TooLarge)
        if info.file_size > MAX_RATIO * info.compress_size:
            raise invalid_entry(
                name, f"has a compression ratio beyond {MAX_RATIO}:1 (a zip bomb?)", Hostile
            )
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise invalid_entry(
                name, "is stored with a size different from its stored length", Malformed
            )
    file_set = set(files)
    not_files: set[str] = set()  # folders above an entry already found to be no file's path
    for path in paths:
        # a file that is also the folder of another entry (a file's or a folder's) cannot be
        # extracted
        above = path.rpartition("/")[0]
        while above and above not in not_files:
            if above in file_set:
                raise invalid_entry(path, "lies below an entry that is a file", Hostile)
            not_files.add(above)
            above = above.rpartition("/")[0]


# --- the central directory, read before zipfile is asked --------------------------------------


@dataclass(frozen=True)
class EndRecord:
    """What the end-of-central-directory records (ZIP64 where present) declare, checked."""

    count: int
    directory_size: int
    directory_offset: int

    @property
    def bound(self) -> int:
        """The most entries the directory can hold: the larger of the declared count and what
        its byte size could hold, so a record that lies low cannot smuggle a million entries."""
        return max(self.count, self.directory_size // _CENTRAL_RECORD_MIN)


def _not_a_backup_zip(what: str) -> InvalidInput:
    return Malformed(f"not a zip file this tool reads ({what})")


def read_end_record(fp: IO[bytes]) -> EndRecord:
    """Read and check the end-of-central-directory record (and ZIP64 record) before zipfile.

    Every number is checked: the archive lies on one disk, both entry counts agree, the comment
    ends the file, and the directory ends exactly where the end record begins (zipfile would
    otherwise shift every entry's offset by the difference, or seek to a negative position).
    """
    size = fp.seek(0, os.SEEK_END)
    tail_len = min(size, 22 + 0xFFFF + 20)
    fp.seek(size - tail_len)
    tail = fp.read(tail_len)
    at = tail.rfind(_EOCD)
    if at < 0 or at + 22 > len(tail):
        raise NotABundle("not a zip file (no end of central directory record)")
    disk, cd_disk, on_disk, count, cd_size, cd_offset, comment = struct.unpack_from(
        "<HHHHIIH", tail, at + 4
    )
    if at + 22 + comment != len(tail):
        raise _not_a_backup_zip(
            "the end of central directory record's comment does not end the file"
        )
    directory_end = size - tail_len + at
    if at >= 20 and tail[at - 20 : at - 16] == _EOCD64_LOCATOR:
        locator_disk, offset, disks = struct.unpack_from("<IQI", tail, at - 20 + 4)
        locator_at = directory_end - 20
        if locator_disk != 0 or disks != 1:
            raise _not_a_backup_zip("the zip64 locator names more than one disk")
        if offset + 56 > locator_at:
            raise Malformed("not a zip file (bad zip64 end of central directory locator)")
        fp.seek(offset)
        record = fp.read(56)
        if record[:4] != _EOCD64:
            raise Malformed("not a zip file (bad zip64 end of central directory record)")
        length, _made, _needed, disk, cd_disk, on_disk, count, cd_size, cd_offset = (
            struct.unpack_from("<QHHIIQQQQ", record, 4)
        )
        if offset + 12 + length != locator_at:
            raise _not_a_backup_zip("the zip64 end record does not end at its locator")
        directory_end = offset
    end = EndRecord(int(count), int(cd_size), int(cd_offset))
    if end.bound > MAX_ENTRIES + 1:
        # first: what the record declares is refused before anything else is believed
        raise TooLarge(f"the zip declares more than {MAX_ENTRIES} entries")
    if disk != 0 or cd_disk != 0:
        raise _not_a_backup_zip(f"spans several disks (disk {disk}, directory on disk {cd_disk})")
    if on_disk != count:
        raise _not_a_backup_zip(f"the end record declares {count} entries and {on_disk} on disk")
    if cd_offset + cd_size != directory_end:
        raise _not_a_backup_zip(
            "the central directory is not where the end record says: data before or inside it"
        )
    return end


def declared_entry_bound(fp: BinaryIO) -> int:
    """The most entries the central directory can hold (see :meth:`EndRecord.bound`)."""
    return read_end_record(fp).bound


def _check_directory_ends(fp: BinaryIO, infos: Sequence[zipfile.ZipInfo], end: EndRecord) -> None:
    """Refuse a last directory record whose declared lengths run past the directory.

    zipfile reads the records from an in-memory copy of the directory and accepts a short read
    of the last one's extra field or comment; every earlier record is exact, or the next one
    would not have parsed.
    """
    if not infos:
        return
    earlier = infos[:-1]
    names = list(map(operator.attrgetter("orig_filename"), earlier))
    if all(map(str.isascii, names)):  # as many bytes in UTF-8 and cp437 as characters
        name_bytes = sum(map(len, names))
    else:
        name_bytes = sum(
            len(info.orig_filename.encode("utf-8" if info.flag_bits & UTF8_FLAG else "cp437"))
            for info in earlier
        )
    at = end.directory_offset + _CENTRAL_RECORD_MIN * len(earlier) + name_bytes
    at += sum(map(len, map(operator.attrgetter("extra"), earlier)))
    at += sum(map(len, map(operator.attrgetter("comment"), earlier)))
    fp.seek(at)
    record = fp.read(_CENTRAL_RECORD_MIN)
    if len(record) < _CENTRAL_RECORD_MIN:
        raise Malformed("the central directory is shorter than its records")
    name_len, extra_len, comment_len = struct.unpack_from("<HHH", record, 28)
    if at + _CENTRAL_RECORD_MIN + name_len + extra_len + comment_len != (
        end.directory_offset + end.directory_size
    ):
        raise Malformed(
            "not a zip file this tool reads (the last record of the central directory does not "
            "end where the directory ends)"
        )


@contextmanager
def open_zip(path: Path) -> Iterator[zipfile.ZipFile]:
    """Open a backup zip for reading after the entry-count check; the directory is checked.

    Raises :class:`Refused` when the file is missing or not a regular file and
    :class:`InvalidInput` for anything wrong inside it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise os_failure(
            f"cannot open {path} ({os.strerror(exc.errno or 0)}): name an existing backup zip",
            exc,
            path=str(path),
        ) from exc
    # checked before fdopen, which refuses a folder with an error of its own
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsuitablePath(f"{path} is not a regular file", path=str(path))
    with os.fdopen(fd, "rb") as fp:
        # every fault found in the zip, by this module or by the caller's block (an entry,
        # backup.json), is raised without the zip's name and named with it here, once
        try:
            end = read_end_record(fp)
            with _opened_archive(fp) as archive:
                infos = archive.infolist()
                if len(infos) != end.count:
                    raise Malformed(
                        f"the end of central directory record declares {end.count} entries, "
                        f"the directory holds {len(infos)}"
                    )
                check_infos(infos)
                _check_directory_ends(fp, infos, end)
                yield archive
        except InvalidInput as exc:
            raise exc.restated(f"{path}: {exc.message}", path=exc.path or str(path)) from None


def _opened_archive(fp: BinaryIO) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(fp)
    except UnicodeDecodeError as exc:
        raw = exc.object if isinstance(exc.object, bytes) else b""
        name = raw.decode("utf-8", "backslashreplace")
        raise invalid_entry(name, "has a name that is not valid UTF-8", Malformed) from None
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        struct.error,
        ValueError,
        NotImplementedError,  # a directory record needing a zip version beyond 6.3
    ) as exc:
        raise Malformed(f"not a readable zip file ({exc})") from None


# --- content ---------------------------------------------------------------------------------


def stream_entry(
    archive: zipfile.ZipFile | int,
    info: zipfile.ZipInfo,
    size: int,
    digest: str | None,
    sink: Callable[[bytes], object],
) -> None:
    """Feed the entry's bytes to ``sink``, stopping hard past ``size``; check the digest.

    ``archive`` may be the zip's descriptor: it is then read with ``pread``, which moves no
    shared file position, so threads read entries side by side. Raises :class:`InvalidInput`
    naming the entry when it holds more or fewer bytes than ``size``, when its digest is not
    ``digest``, or when zipfile finds it corrupt (CRC, header).
    """
    ahead = info.compress_size if info.compress_size <= _ONE_READ else 0
    start, head = _local_header(archive, info, ahead)
    hasher = xxhash.xxh3_128()
    total = 0
    try:
        for chunk in _contents(archive, info, start, head):
            total += len(chunk)
            if total > size:
                raise invalid_entry(
                    info.filename, f"holds more than its declared {human_size(size)}", Malformed
                )
            hasher.update(chunk)
            sink(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as exc:
        raise invalid_entry(info.filename, f"cannot be read ({exc})", Tampered) from None
    if total != size:
        # the difference, exact: two sizes a few bytes apart read alike once rounded
        short = "less" if total < size else "more"
        raise invalid_entry(
            info.filename,
            f"holds {human_size(abs(total - size))} {short} than its declared {human_size(size)}",
            Malformed,
        )
    if digest is not None and hasher.hexdigest() != digest:
        raise invalid_entry(
            info.filename, "does not match its xxh3_128 digest in backup.json", Tampered
        )


_ONE_READ = 16 << 10
"""An entry of at most this many compressed bytes is read with its local header, in one read,
and inflated in one call: its output is bounded by deflate's own ratio (about 1032:1, 16.5 MiB
here) before its declared size is compared with it."""


def _contents(
    archive: zipfile.ZipFile | int, info: zipfile.ZipInfo, start: int, head: bytes
) -> Iterator[bytes]:
    """The entry's bytes, its raw data read from ``start`` (``head``: all of it, when the
    local header's read held it) and inflated once; its CRC checked at the end (``BadZipFile``,
    as zipfile says it).

    zipfile's reader costs more per entry than inflating a small file does; this one reads a
    small entry in one call, and inflates with ISA-L where it imports (the same raw deflate,
    inflated about twice as fast). The data ends where the deflate stream ends or after the
    directory's compressed size, whichever is first, as zipfile reads it; a deflate stream
    that does not end within that size is refused (zlib's "incomplete or truncated stream").
    Chunks are at most :data:`_CHUNK` bytes, but for a one-read entry (:data:`_ONE_READ`).
    Only the forms :func:`check_infos` admits are read here; zipfile reads any other.
    """
    method = info.compress_type
    if info.flag_bits & _ENCRYPTED_FLAG or method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        with _opened(archive, info, start) as source:
            while chunk := source.read(_CHUNK):
                yield chunk
        return
    engine = inflate_engine()
    try:
        if len(head) == info.compress_size and head:
            whole = head if method == zipfile.ZIP_STORED else engine.decompress(head, -15)
            crc = engine.crc32(whole)
            yield whole
        else:
            crc = yield from _streamed(_reader(archive), info, start, engine)
    except engine.error as exc:
        raise zlib.error(str(exc)) from None
    if crc != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")


def _streamed(
    read: Callable[[int, int], bytes], info: zipfile.ZipInfo, start: int, engine: Any
) -> Generator[bytes, None, int]:
    """:func:`_contents` of an entry read :data:`_CHUNK` bytes at a time; returns the CRC."""
    inflater = engine.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    crc, at, left = 0, start, info.compress_size
    while left > 0 and not (inflater is not None and inflater.eof):
        raw = read(at, min(_CHUNK, left))
        if not raw:
            raise EOFError("the zip ends inside the entry")
        at, left = at + len(raw), left - len(raw)
        if inflater is None:
            crc = engine.crc32(raw, crc)
            yield raw
            continue
        # at most _CHUNK out of each call: a stream that inflates beyond its declared size
        # is stopped by the caller a chunk past it, not held whole
        while raw and not inflater.eof:
            chunk = inflater.decompress(raw, _CHUNK)
            raw = inflater.unconsumed_tail
            crc = engine.crc32(chunk, crc)
            yield chunk
    if inflater is not None and not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return int(crc)


ENGINE_VARIABLE = "BUNDLER_DEFLATE_ENGINE"
"""Set to ``zlib``: entries are deflated and inflated by zlib, not ISA-L (the tests run both)."""


@functools.cache
def isal_module() -> Any:
    """``isal.isal_zlib``, or None where it does not import or zlib is asked for."""
    if os.environ.get(ENGINE_VARIABLE) == "zlib":
        return None
    try:
        # here, not at the top: start-up is counted, and most commands read no backup
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


def inflate_engine() -> Any:
    """The module inflating raw deflate: ISA-L's ``isal_zlib`` (:func:`isal_module`), which
    reads any raw deflate, else :mod:`zlib` (the same interface)."""
    isal = isal_module()
    return zlib if isal is None else isal


def _opened(
    archive: zipfile.ZipFile | int, info: zipfile.ZipInfo, start: int
) -> IO[bytes] | zipfile.ZipExtFile:
    if isinstance(archive, zipfile.ZipFile):
        return archive.open(info)
    return zipfile.ZipExtFile(_At(archive, start), "r", info)


class _At:
    """A zip's bytes from an offset on, through ``pread``."""

    def __init__(self, fd: int, at: int) -> None:
        self.fd, self.at = fd, at

    def read(self, count: int) -> bytes:
        data = os.pread(self.fd, count, self.at)
        self.at += len(data)
        return data


def dos_stamp(date_time: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    """The DOS (time, date) words zipfile decoded ``date_time`` from (the decoding is exact)."""
    year, month, day, hour, minute, second = date_time
    return hour << 11 | minute << 5 | second // 2, (year - 1980) << 9 | month << 5 | day


def dos_date_time(time_word: int, date_word: int) -> tuple[int, int, int, int, int, int]:
    """The ``date_time`` zipfile decodes from DOS (time, date) words: :func:`dos_stamp`
    undone."""
    return (
        (date_word >> 9) + 1980,
        (date_word >> 5) & 0xF,
        date_word & 0x1F,
        time_word >> 11,
        (time_word >> 5) & 0x3F,
        (time_word & 0x1F) * 2,
    )


def _zip64_sizes(extra: bytes) -> tuple[int, int] | None:
    """(uncompressed, compressed) from the ZIP64 field of a local header's extra, or None."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        if kind == 1 and length >= 16 and at + 4 + length <= len(extra):
            usize, csize = struct.unpack_from("<QQ", extra, at + 4)
            return int(usize), int(csize)
        at += 4 + length
    return None


def _local_problem(raw: bytes, tail: bytes, info: zipfile.ZipInfo) -> str | None:
    _sig, version, flags, method, time_word, date_word, crc, packed, size, name_len, _x = (
        LOCAL_HEADER.unpack_from(raw)
    )
    if version > _MAX_EXTRACT_VERSION:
        return f"needs zip version {version / 10:.1f} to extract (local header)"
    if flags != info.flag_bits:
        return "has local header flags different from its directory record"
    if method != info.compress_type:
        return "has a local header compression method different from its directory record"
    if (time_word, date_word) != dos_stamp(info.date_time):
        return "has a local header date or time different from its directory record"
    if flags & _DESCRIPTOR_FLAG:
        return None  # CRC and sizes follow the data; zipfile checks the CRC as it reads
    if crc != info.CRC:
        return "has a local header CRC different from its directory record"
    if _ZIP64_SIZE in (packed, size):
        # both sizes then live in the ZIP64 field of the local extra (APPNOTE 4.5.3)
        sizes = _zip64_sizes(tail[name_len:])
        if sizes is None:
            return "has ZIP64 sizes in its local header but no ZIP64 field"
        packed = sizes[1] if packed == _ZIP64_SIZE else packed
        size = sizes[0] if size == _ZIP64_SIZE else size
    if packed != info.compress_size or size != info.file_size:
        return "has local header sizes different from its directory record"
    return None


LOCAL_HEADER_ROOM = LOCAL_HEADER.size + 512
"""Bytes read at a local header: the header with the name and extra of nearly every entry, in
one read."""


def local_header_length(raw: bytes | memoryview) -> int | None:
    """The length of the local header (name and extra included) that ``raw`` begins with, or
    None when it does not begin with one (:func:`check_local_header_in` then says so)."""
    if len(raw) < LOCAL_HEADER.size or raw[:4] != LOCAL_SIGNATURE:
        return None
    name_len, extra_len = struct.unpack_from("<HH", raw, 26)
    return int(LOCAL_HEADER.size + name_len + extra_len)


def _plainly_agrees(
    raw: bytes | memoryview, fields: tuple[int, ...], info: zipfile.ZipInfo, offset: int = 0
) -> bool:
    """The common case of :func:`_local_problem` and the name's check, decided at once, of the
    header at ``offset`` in ``raw`` (its ``fields`` unpacked): a header without a data
    descriptor or ZIP64 sizes, with a UTF-8 (or ASCII) name, whose every field equals the
    directory's. False when in doubt (the full check then decides)."""
    _sig, version, flags, method, time_word, date_word, crc, packed, size, name_len, _x = fields
    if (
        version > _MAX_EXTRACT_VERSION
        or flags & _DESCRIPTOR_FLAG
        or _ZIP64_SIZE in (packed, size)
        or (flags, method, crc, packed, size)
        != (info.flag_bits, info.compress_type, info.CRC, info.compress_size, info.file_size)
        or (time_word, date_word) != dos_stamp(info.date_time)
    ):
        return False
    try:
        # unmarked: ASCII, which cp437 (the name's encoding then) spells alike
        name = info.orig_filename.encode("utf-8" if flags & UTF8_FLAG else "ascii")
    except UnicodeEncodeError:
        return False
    at = offset + LOCAL_HEADER.size
    return len(name) == name_len and raw[at : at + name_len] == name


def check_local_header_in(raw: bytes | memoryview, info: zipfile.ZipInfo) -> int:
    """:func:`check_local_header` of the zip's bytes from ``info``'s header offset on, already
    read (``raw``, at least the whole header, or all there is of it); the header's length."""
    if len(raw) < LOCAL_HEADER.size or raw[:4] != LOCAL_SIGNATURE:
        raise invalid_entry(
            info.filename, "has no local header where the directory says", Malformed
        )
    fields = LOCAL_HEADER.unpack_from(raw)
    name_len, extra_len = fields[9], fields[10]
    length = LOCAL_HEADER.size + name_len + extra_len
    if _plainly_agrees(raw, fields, info):
        return int(length)
    tail = bytes(raw[LOCAL_HEADER.size : length])
    problem = _local_problem(bytes(raw[: LOCAL_HEADER.size]), tail, info)
    encoding = "utf-8" if info.flag_bits & UTF8_FLAG else "cp437"
    if not problem and tail[:name_len].decode(encoding, "replace") != info.orig_filename:
        problem = "has a local header name different from its directory record"
    if problem:
        # a local header that says other than the directory is read one way by zipfile and
        # another way by another tool
        raise invalid_entry(info.filename, problem, Hostile)
    return int(length)


def check_local_header(archive: zipfile.ZipFile | int, info: zipfile.ZipInfo) -> int:
    """Refuse an entry whose local header says something else than its directory record;
    where its data starts. ``archive``: as :func:`stream_entry`.

    zipfile reads only the name from the local header (and refuses one that is not the
    directory's); another tool reads the rest, so a backup whose two headers disagree would
    mean different things to different readers.
    """
    return _local_header(archive, info, 0)[0]


_HEADERS_SPAN = 1 << 20
_HEADERS_GAP = 16 << 10
"""Local headers are read together, up to :data:`_HEADERS_SPAN` bytes at a time, while each lies
within this many bytes of the one before: copying the data between costs less than a read
more, but only where that data is short."""


def check_local_headers(archive: zipfile.ZipFile | int, infos: Iterable[zipfile.ZipInfo]) -> None:
    """:func:`check_local_header` of each of ``infos`` in the order of their offsets (the first
    that fails is named), the headers that lie close together read in one ``pread``: one read
    for many small entries, where a read each cost more than the check."""
    fd = archive if isinstance(archive, int) else _descriptor(archive)
    ordered = sorted(infos, key=operator.attrgetter("header_offset"))
    unpack = LOCAL_HEADER.unpack_from
    at = 0
    while at < len(ordered):
        start = ordered[at].header_offset
        end = at + 1
        while (
            end < len(ordered)
            and ordered[end].header_offset - ordered[end - 1].header_offset <= _HEADERS_GAP
            and ordered[end].header_offset + LOCAL_HEADER_ROOM - start <= _HEADERS_SPAN
        ):
            end += 1
        data = os.pread(fd, ordered[end - 1].header_offset + LOCAL_HEADER_ROOM - start, start)
        for info in ordered[at:end]:
            offset = info.header_offset - start
            # the common case first, on the bytes read, without a view or a call per step
            if offset + LOCAL_HEADER.size <= len(data):
                fields = unpack(data, offset)
                if (
                    fields[0] == LOCAL_SIGNATURE
                    and offset + LOCAL_HEADER.size + fields[9] + fields[10] <= len(data)
                    and _plainly_agrees(data, fields, info, offset)
                ):
                    continue
            raw = memoryview(data)[offset:]
            length = local_header_length(raw)
            if length is not None and length > len(raw):
                check_local_header(fd, info)  # a long name or extra field: read alone
            else:
                check_local_header_in(raw, info)
        at = end


def _descriptor(archive: zipfile.ZipFile) -> int:
    if archive.fp is None:
        raise ValueError("the zip is closed")
    return archive.fp.fileno()


def _local_header(
    archive: zipfile.ZipFile | int, info: zipfile.ZipInfo, ahead: int
) -> tuple[int, bytes]:
    """:func:`check_local_header`, reading up to ``ahead`` bytes of the data in the same read:
    where the data starts, and those bytes (fewer when the name and extra field were long)."""
    read = _reader(archive)
    raw = read(info.header_offset, LOCAL_HEADER_ROOM + ahead)
    length = local_header_length(raw)
    if length is not None and length > len(raw):
        raw = read(info.header_offset, length)
    header = check_local_header_in(raw, info)
    return int(info.header_offset + header), raw[header : header + ahead]


def _reader(archive: zipfile.ZipFile | int) -> Callable[[int, int], bytes]:
    if not isinstance(archive, zipfile.ZipFile):
        return lambda at, count: os.pread(archive, count, at)
    fp = archive.fp
    if fp is None:
        raise ValueError("the zip is closed")

    def read(at: int, count: int) -> bytes:
        fp.seek(at)
        return fp.read(count)

    return read
