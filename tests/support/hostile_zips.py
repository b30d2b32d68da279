"""Generators of hostile backup zips (06 §3 S2) and small helpers shared by the backup tests.

Each generator writes one zip to the path it is given and returns a fragment the one-line error
must contain (the offending entry, or ``backup.json``). Everything else in a hostile zip is
valid, so the refusal can only come from the rule the case is named after. Names that
:mod:`zipfile` would refuse to write (invalid UTF-8, a NUL) are produced by writing a placeholder
of the same length and patching the bytes of the local header and the central directory.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import struct
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from support import kit


def sqlite_bytes(rows: int = 20) -> bytes:
    """The bytes of a small, sound SQLite database."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chat.db"
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE msg(id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany("INSERT INTO msg(body) VALUES (?)", [(f"m{i}",) for i in range(rows)])
        conn.commit()
        conn.close()
        return path.read_bytes()


@dataclass
class Item:
    """One zip entry to write. ``listed``: put it in backup.json's entries (files only)."""

    name: str
    data: bytes = b""
    mode: int = stat.S_IFREG | 0o644
    compress: int = zipfile.ZIP_DEFLATED
    listed: bool = True


def digest(data: bytes) -> str:
    return xxhash.xxh3_128(data).hexdigest()


def base_items() -> list[Item]:
    """A sound backup's entries: a database, two files, a skill and their folders."""
    return [
        Item("chat.db", sqlite_bytes()),
        Item("files/", mode=stat.S_IFDIR | 0o755),
        Item("files/a.txt", b"hello\n" * 10),
        Item("files/notes/", mode=stat.S_IFDIR | 0o755),
        Item("files/notes/b.md", b"# notes\n"),
        Item("skills/", mode=stat.S_IFDIR | 0o755),
        Item("skills/s1/", mode=stat.S_IFDIR | 0o755),
        Item("skills/s1/SKILL.md", b"---\nname: s1\ndescription: d\n---\nbody\n"),
    ]


def manifest_for(items: list[Item], **overrides: Any) -> dict[str, Any]:
    """A backup.json describing ``items`` (files listed, folders in ``folders``)."""
    document: dict[str, Any] = {
        "format": 1,
        "tool": "bundler test",
        "created_at": "2026-01-01T00:00:00Z",
        "agent": "demo",
        "entries": [
            {"path": item.name, "size": len(item.data), "xxh3_128": digest(item.data)}
            for item in items
            if item.listed and not item.name.endswith("/")
        ],
        "folders": [item.name[:-1] for item in items if item.name.endswith("/") and item.listed],
    }
    document.update(overrides)
    return document


def write_zip(path: Path, items: list[Item], manifest: bytes | dict[str, Any] | None) -> None:
    """Write ``items`` and (unless None) ``manifest`` as backup.json into a zip at ``path``."""
    with zipfile.ZipFile(path, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # duplicate names are the point of some cases
        for item in items:
            info = zipfile.ZipInfo(item.name, (2026, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = item.mode << 16
            info.compress_type = (
                item.compress if not item.name.endswith("/") else zipfile.ZIP_STORED
            )
            archive.writestr(info, item.data)
        if manifest is not None:
            data = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
            archive.writestr("backup.json", data)


def patch(path: Path, old: bytes, new: bytes) -> None:
    """Replace every occurrence of ``old`` by ``new`` (same length) in the zip's bytes."""
    assert len(old) == len(new)
    data = path.read_bytes()
    assert data.count(old) >= 2, "placeholder must be in local header and central directory"
    path.write_bytes(data.replace(old, new))


def set_flag(path: Path, name: str, bit: int) -> None:
    """Set a general-purpose flag bit of entry ``name`` in its local header and directory record.

    zipfile rewrites ``flag_bits`` when it writes, so flags it would never set are patched in.
    """
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    local = info.header_offset
    struct.pack_into("<H", data, local + 6, struct.unpack_from("<H", data, local + 6)[0] | bit)
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + length] == name.encode():
            flags = struct.unpack_from("<H", data, at + 8)[0]
            struct.pack_into("<H", data, at + 8, flags | bit)
            break
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))


def _encrypted(path: Path) -> str:
    items = base_items() + [Item("files/secret.bin", b"x" * 40)]
    write_zip(path, items, manifest_for(items))
    set_flag(path, "files/secret.bin", 0x1)
    return "files/secret.bin"


def _with(
    extra: list[Item], *, drop: str | None = None, **overrides: Any
) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        items = [item for item in base_items() if item.name != drop] + extra
        write_zip(path, items, manifest_for(items, **overrides))

    return build


Case = Callable[[Path], str]


def _simple(extra: list[Item], expect: str, **kw: Any) -> Case:
    build = _with(extra, **kw)

    def case(path: Path) -> str:
        build(path)
        return expect

    return case


def _patched(placeholder: str, raw: bytes, expect: str) -> Case:
    def case(path: Path) -> str:
        items = base_items() + [Item(placeholder, b"x")]
        write_zip(path, items, manifest_for(items))
        patch(path, placeholder.encode("utf-8"), raw)
        return expect

    return case


def _bomb(path: Path) -> str:
    zeros = bytes(8 << 20)  # deflate reaches ~1030:1 on zeros: beyond the 1000:1 limit
    items = base_items() + [Item("files/bomb.bin", zeros)]
    write_zip(path, items, manifest_for(items))
    return "files/bomb.bin"


def _wrong_digest(path: Path) -> str:
    items = base_items()
    document = manifest_for(items)
    for entry in document["entries"]:
        if entry["path"] == "files/a.txt":
            entry["xxh3_128"] = "0" * 32
    write_zip(path, items, document)
    return "files/a.txt"


def _wrong_db_digest(path: Path) -> str:
    items = base_items()
    document = manifest_for(items)
    document["entries"][0]["xxh3_128"] = "f" * 32
    write_zip(path, items, document)
    return "chat.db"


def _wrong_size(path: Path) -> str:
    items = base_items()
    document = manifest_for(items)
    for entry in document["entries"]:
        if entry["path"] == "files/notes/b.md":
            entry["size"] += 1
    write_zip(path, items, document)
    return "files/notes/b.md"


def _listed_but_missing(path: Path) -> str:
    items = base_items()
    document = manifest_for(items)
    document["entries"].append({"path": "files/ghost.txt", "size": 1, "xxh3_128": "0" * 32})
    write_zip(path, items, document)
    return "files/ghost.txt"


def _manifest_bytes(raw: bytes) -> Case:
    def case(path: Path) -> str:
        write_zip(path, base_items(), raw)
        return "backup.json"

    return case


def _manifest_dict(mutate: Callable[[dict[str, Any]], None]) -> Case:
    def case(path: Path) -> str:
        items = base_items()
        document = manifest_for(items)
        mutate(document)
        write_zip(path, items, document)
        return "backup.json"

    return case


def _entry_field(field: str, value: Any) -> Case:
    """backup.json whose files/a.txt entry carries ``value`` (out of range) as ``field``."""
    return _manifest_dict(lambda d: d["entries"][1].update({field: value}))


def _manifest_text(replace: bytes, by: bytes) -> Case:
    """backup.json with one literal of the valid JSON text replaced (numbers JSON can spell)."""

    def case(path: Path) -> str:
        items = base_items()
        raw = json.dumps(manifest_for(items)).encode()
        assert replace in raw
        write_zip(path, items, raw.replace(replace, by, 1))
        return "backup.json"

    return case


# Every number of backup.json out of range: negative, beyond 64 bits, float, bool, string (06 §3
# S2); none may reach os.utime, os.chmod or a size computation.
NUMERIC_MANIFEST_CASES: dict[str, Case] = {
    "mtime_ns_negative": _entry_field("mtime_ns", -1),
    "mtime_ns_2_63": _entry_field("mtime_ns", 2**63),
    "mtime_ns_2_64": _entry_field("mtime_ns", 2**64),
    "mtime_ns_overflows_time_t": _entry_field("mtime_ns", 10**30),
    "mtime_ns_float": _entry_field("mtime_ns", 1.5),
    "mtime_ns_integral_float": _entry_field("mtime_ns", 1.0),
    "mtime_ns_bool": _entry_field("mtime_ns", True),
    "mtime_ns_string": _entry_field("mtime_ns", "1700000000000000000"),
    "mtime_ns_null": _entry_field("mtime_ns", None),
    "mtime_ns_nan": _manifest_text(b'"size": 60', b'"size": 60, "mtime_ns": NaN'),
    "mtime_ns_infinity": _manifest_text(b'"size": 60', b'"size": 60, "mtime_ns": Infinity'),
    "mtime_ns_5000_digits": _manifest_text(
        b'"size": 60', b'"size": 60, "mtime_ns": ' + b"9" * 5000
    ),
    "mode_beyond_12_bits": _entry_field("mode", 0o10000),
    "mode_negative": _entry_field("mode", -1),
    "mode_2_64": _entry_field("mode", 2**64),
    "mode_bool": _entry_field("mode", True),
    "mode_string": _entry_field("mode", "644"),
    "size_2_63": _entry_field("size", 2**63),
    "size_2_64": _entry_field("size", 2**64),
    "size_integral_float": _entry_field("size", 60.0),
    "size_exponent": _manifest_text(b'"size": 60', b'"size": 6e1'),
    "size_bool": _entry_field("size", True),
    "size_string": _entry_field("size", "60"),
    "size_overflow_float": _manifest_text(b'"size": 60', b'"size": 1e400'),
    "format_integral_float": _manifest_text(b'"format": 1', b'"format": 1.0'),
    "format_bool": _manifest_dict(lambda d: d.update(format=True)),
    "format_negative": _manifest_dict(lambda d: d.update(format=-1)),
    "format_2_64": _manifest_dict(lambda d: d.update(format=2**64)),
    "format_5000_digits": _manifest_text(b'"format": 1', b'"format": ' + b"1" * 5000),
}


def _record_at(data: bytearray, signature: bytes, name: str) -> int:
    """Offset of the local header (``PK\\3\\4``) or directory record (``PK\\1\\2``) of ``name``."""
    name_at, length_at = (30, 26) if signature == b"PK\x03\x04" else (46, 28)
    at = data.find(signature)
    while at >= 0:
        length = struct.unpack_from("<H", data, at + length_at)[0]
        if data[at + name_at : at + name_at + length] == name.encode():
            return at
        at = data.find(signature, at + 4)
    raise KeyError(name)


def _zip_field(
    where: str, offset: int, fmt: str, value: int, expect: str, *, entry: str = "files/a.txt"
) -> Case:
    """A sound backup with one numeric field of the zip structure set to ``value``.

    ``where`` is ``central`` or ``local`` (files/a.txt's directory record or local header, the
    entry stored so its sizes are known) or ``end`` (the end-of-central-directory record).
    """

    def case(path: Path) -> str:
        items = base_items()
        items[2] = Item("files/a.txt", b"hello\n" * 10, compress=zipfile.ZIP_STORED)
        write_zip(path, items, manifest_for(items))
        data = bytearray(path.read_bytes())
        if where == "end":
            at = data.rfind(b"PK\x05\x06")
        else:
            signature = b"PK\x01\x02" if where == "central" else b"PK\x03\x04"
            at = _record_at(data, signature, entry)
        struct.pack_into(fmt, data, at + offset, value)
        path.write_bytes(bytes(data))
        return expect

    return case


_A = "files/a.txt"
# Every numeric field of the zip structure out of range or inconsistent (06 §3 S2): versions,
# flags, methods, DOS dates, CRCs, sizes, disk numbers, attributes, offsets, counts, lengths.
NUMERIC_ZIP_CASES: dict[str, Case] = {
    "central_version_needed_255": _zip_field("central", 6, "<H", 255, "zip file version"),
    "central_made_by_not_unix": _zip_field("central", 5, "<B", 0, _A),
    "central_made_by_0xff": _zip_field("central", 4, "<H", 0xFFFF, _A),
    "central_flags_all_set": _zip_field("central", 8, "<H", 0xFFFE, _A),
    "central_flag_strong_encryption": _zip_field("central", 8, "<H", 0x0840, _A),
    "central_flag_masked_headers": _zip_field("central", 8, "<H", 0x2800, _A),
    "central_time_hour_31": _zip_field("central", 12, "<H", 0xFFFF, _A),
    "central_date_month_15": _zip_field("central", 14, "<H", 0xFFFF, _A),
    "central_date_zero": _zip_field("central", 14, "<H", 0, _A),
    "central_crc_wrong": _zip_field("central", 16, "<I", 0xDEADBEEF, _A),
    "central_compressed_size_4g": _zip_field("central", 20, "<I", 0xFFFFFFFF, _A),
    "central_size_4g": _zip_field("central", 24, "<I", 0xFFFFFFFF, _A),
    "central_compressed_size_0": _zip_field("central", 20, "<I", 0, _A),
    "central_disk_start_7": _zip_field("central", 34, "<H", 7, _A),
    "central_disk_start_ffff": _zip_field("central", 34, "<H", 0xFFFF, _A),
    "central_internal_attr_ffff": _zip_field("central", 36, "<H", 0xFFFF, _A),
    "central_external_attr_all_set": _zip_field("central", 38, "<I", 0xFFFFFFFF, _A),
    "central_offset_4g": _zip_field("central", 42, "<I", 0xFFFFFFFF, _A),
    "central_offset_2g": _zip_field("central", 42, "<I", 0x7FFFFFFF, _A),
    "central_offset_1": _zip_field("central", 42, "<I", 1, _A),
    "local_version_needed_255": _zip_field("local", 4, "<H", 255, _A),
    "local_flags_differ": _zip_field("local", 6, "<H", 0x0801, _A),
    "local_method_99": _zip_field("local", 8, "<H", 99, _A),
    "local_method_deflate": _zip_field("local", 8, "<H", 8, _A),
    "local_crc_differs": _zip_field("local", 14, "<I", 1, _A),
    "local_compressed_size_differs": _zip_field("local", 18, "<I", 7, _A),
    "local_size_differs": _zip_field("local", 22, "<I", 0xFFFFFFF0, _A),
    "local_name_length_ffff": _zip_field("local", 26, "<H", 0xFFFF, _A),
    "local_extra_length_ffff": _zip_field("local", 28, "<H", 0xFFFF, _A),
    "local_time_differs": _zip_field("local", 10, "<H", 0x1234, _A),
    "local_date_differs": _zip_field("local", 12, "<H", 0x5821, _A),
    "local_compressed_size_zip64_without_extra": _zip_field("local", 18, "<I", 0xFFFFFFFF, _A),
    "local_size_zip64_without_extra": _zip_field("local", 22, "<I", 0xFFFFFFFF, _A),
    "central_last_record_comment_past_directory": _zip_field(
        "central", 32, "<H", 4, "central directory", entry="backup.json"
    ),
    "central_last_record_extra_past_directory": _zip_field(
        "central", 30, "<H", 4, "central directory", entry="backup.json"
    ),
    "folder_entry_with_a_size": _zip_field("central", 24, "<I", 5, "files/", entry="files/"),
    "folder_entry_with_a_crc": _zip_field("central", 16, "<I", 7, "files/", entry="files/"),
    "folder_local_header_method_99": _zip_field("local", 8, "<H", 99, "files/", entry="files/"),
    "folder_local_header_flags_differ": _zip_field(
        "local", 6, "<H", 0x0001, "files/notes/", entry="files/notes/"
    ),
    "end_disk_3": _zip_field("end", 4, "<H", 3, "disk"),
    "end_directory_disk_3": _zip_field("end", 6, "<H", 3, "disk"),
    "end_count_zero": _zip_field("end", 10, "<H", 0, "entries"),
    "end_count_on_disk_zero": _zip_field("end", 8, "<H", 0, "entries"),
    "end_count_one_more": _zip_field("end", 10, "<H", 10, "entries"),
    "end_directory_offset_4g": _zip_field("end", 16, "<I", 0xFFFFFFFF, "central directory"),
    "end_directory_offset_0": _zip_field("end", 16, "<I", 0, "central directory"),
    "end_directory_size_0": _zip_field("end", 12, "<I", 0, "central directory"),
    "end_comment_length_ffff": _zip_field("end", 20, "<H", 0xFFFF, "end of central directory"),
}


def _no_manifest(path: Path) -> str:
    write_zip(path, base_items(), None)
    return "backup.json"


def _corrupt_database(path: Path) -> str:
    items = [Item("chat.db", b"SQLite format 3\x00" + os.urandom(4080))] + base_items()[1:]
    write_zip(path, items, manifest_for(items))
    return "chat.db"


def _database_of(data: bytes) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        items = [Item("chat.db", data)] + base_items()[1:]
        write_zip(path, items, manifest_for(items))
        return "chat.db"

    return make


def _wal_mode(data: bytes) -> bytes:
    """A sound database whose header says WAL (bytes 18 and 19 = 2): not what a backup holds."""
    return data[:18] + b"\x02\x02" + data[20:]


def _no_database(path: Path) -> str:
    items = base_items()[1:]
    write_zip(path, items, manifest_for(items))
    return "chat.db"


def _too_many_entries(path: Path) -> str:
    """An end-of-central-directory record whose directory could hold over a million entries."""
    write_zip(path, base_items(), manifest_for(base_items()))
    data = bytearray(path.read_bytes())
    at = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, at + 12, 47_000_000)
    path.write_bytes(bytes(data))
    return "1000000 entries"


def _local_name_differs(path: Path) -> str:
    """files/a.txt's local header names files/b.txt: zipfile would refuse to open it, another
    tool would extract files/b.txt; every reader, threads included, refuses it up front."""
    items = base_items()
    write_zip(path, items, manifest_for(items))
    data = bytearray(path.read_bytes())
    at = _record_at(data, b"PK\x03\x04", "files/a.txt")
    data[at + 30 : at + 30 + len("files/a.txt")] = b"files/b.txt"
    path.write_bytes(bytes(data))
    return "files/a.txt: has a local header name different from its directory record"


def _not_a_zip(path: Path) -> str:
    path.write_bytes(b"this is not a zip file at all" * 10)
    return "not a zip file"


def _lying_sizes(path: Path) -> str:
    """A central directory whose size for files/a.txt disagrees with its data (CRC fails)."""
    items = base_items()
    write_zip(path, items, manifest_for(items))
    data = path.read_bytes()
    patched = data.replace(b"hello\n", b"jello\n") if b"hello\n" in data else data
    if patched == data:  # deflated: flip a byte of the compressed data instead
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("files/a.txt")
        offset = info.header_offset + 30 + len(b"files/a.txt") + 2
        raw = bytearray(data)
        raw[offset] ^= 0xFF
        patched = bytes(raw)
    path.write_bytes(patched)
    return "files/a.txt"


def _raw_deflate(data: bytes, *, finished: bool = True, declared: int | None = None) -> Case:
    """files/u.bin holding ``data`` deflated, its CRC right, written stored and then its method
    and sizes patched. ``finished=False``: the stream never ends (flushed, no final block), its
    size and listed digest right: zipfile reads it whole, another inflater stops with an error.
    ``declared``: the size the zip and backup.json give it, fewer bytes than it inflates to."""

    def case(path: Path) -> str:
        deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
        raw = deflate.compress(data) + deflate.flush(
            zlib.Z_FINISH if finished else zlib.Z_SYNC_FLUSH
        )
        size = len(data) if declared is None else declared
        items = [*base_items(), Item("files/u.bin", raw, compress=zipfile.ZIP_STORED)]
        document = manifest_for(items)
        document["entries"][-1].update(size=size, xxh3_128=digest(data[:size]))
        write_zip(path, items, document)
        blob = bytearray(path.read_bytes())
        for signature, method_at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
            at = _record_at(blob, signature, "files/u.bin")
            struct.pack_into("<H", blob, at + method_at, zipfile.ZIP_DEFLATED)
            struct.pack_into("<I", blob, at + method_at + 6, zlib.crc32(data))
            struct.pack_into("<I", blob, at + method_at + 14, size)
        path.write_bytes(bytes(blob))
        return "files/u.bin"

    return case


CASES: dict[str, Case] = {
    "zip_slip_dotdot_in_tree": _simple([Item("files/../../evil.txt", b"x")], "evil.txt"),
    "zip_slip_dotdot_top": _simple([Item("../evil.txt", b"x")], "../evil.txt"),
    "absolute_name": _simple([Item("/etc/evil.conf", b"x")], "/etc/evil.conf"),
    "absolute_folder": _simple([Item("/tmp/evil/", mode=stat.S_IFDIR | 0o755)], "/tmp/evil/"),
    "backslash_slip": _simple([Item("files\\..\\..\\evil.txt", b"x")], "evil.txt"),
    "empty_component": _simple([Item("files//x.txt", b"x")], "files//x.txt"),
    "dot_component": _simple([Item("files/./x.txt", b"x")], "files/./x.txt"),
    "symlink_entry": _simple(
        [Item("files/link", b"/etc/passwd", mode=stat.S_IFLNK | 0o777)], "files/link"
    ),
    "symlink_folder_entry": _simple(
        [Item("skills/evil", b"/", mode=stat.S_IFLNK | 0o777)], "skills/evil"
    ),
    "fifo_entry": _simple([Item("files/pipe", b"", mode=stat.S_IFIFO | 0o644)], "files/pipe"),
    "device_entry": _simple([Item("files/dev", b"", mode=stat.S_IFCHR | 0o644)], "files/dev"),
    "duplicate_file": _simple([Item("files/a.txt", b"other")], "files/a.txt"),
    "duplicate_database": _simple([Item("chat.db", sqlite_bytes(3))], "chat.db"),
    "database_empty_file": _database_of(b""),
    "database_in_wal_mode": _database_of(_wal_mode(sqlite_bytes(3))),
    "file_and_folder_clash": _simple([Item("files/a.txt/inner", b"x")], "files/a.txt/inner"),
    "file_two_levels_below_a_file": _simple(
        [Item("files/notes/c.md", b"x"), Item("files/notes/b.md/deep/x.txt", b"x")],
        "files/notes/b.md/deep/x.txt",
    ),
    "folder_entry_below_a_file": _simple(
        [Item("files/a.txt/inner/", mode=stat.S_IFDIR | 0o755)], "files/a.txt/inner"
    ),
    "outside_allowed_top_file": _simple([Item("evil.sh", b"#!/bin/sh\n")], "evil.sh"),
    "outside_allowed_backups": _simple([Item("backups/old.zip", b"x")], "backups/old.zip"),
    "outside_allowed_sidecar": _simple([Item("chat.db-wal", b"x")], "chat.db-wal"),
    "outside_allowed_readme": _simple([Item("README.md", b"x")], "README.md"),
    "tree_root_as_file": _simple([Item("skills", b"x")], "skills", drop="skills/"),
    "control_char_name": _simple([Item("files/a\x1b[2Jb", b"x")], "files/a\\x1b[2Jb"),
    "unlisted_entry": _simple([Item("files/extra.txt", b"x", listed=False)], "files/extra.txt"),
    "encrypted_flag": _encrypted,
    "unsupported_compression": _simple(
        [Item("files/b.bz2", b"y" * 100, compress=zipfile.ZIP_BZIP2)], "files/b.bz2"
    ),
    "zip_bomb": _bomb,
    "wrong_digest": _wrong_digest,
    "wrong_database_digest": _wrong_db_digest,
    "wrong_declared_size": _wrong_size,
    "listed_but_missing": _listed_but_missing,
    "corrupt_data": _lying_sizes,
    # read whole in one call (small) and streamed (beyond 16 KiB compressed)
    "deflate_stream_unfinished": _raw_deflate(b"never ends\n" * 50, finished=False),
    "deflate_stream_unfinished_large": _raw_deflate(os.urandom(40 << 10), finished=False),
    "inflates_beyond_declared_size": _raw_deflate(b"more\n" * 2000, declared=100),
    "inflates_beyond_declared_size_large": _raw_deflate(os.urandom(3 << 20), declared=1 << 20),
    "non_utf8_name_flagged": _patched("files/é.txt", b"files/\xff\xfe.txt", "files/\\xff\\xfe.txt"),
    "non_utf8_name_unflagged": _patched("files/q.txt", b"files/\x81.txt", "files/"),
    "nul_in_name": _patched("files/aXb.txt", b"files/a\x00b.txt", "files/a"),
    "newer_format": _manifest_dict(lambda d: d.update(format=2)),
    "format_not_integer": _manifest_dict(lambda d: d.update(format="1")),
    "manifest_not_json": _manifest_bytes(b"{not json"),
    "manifest_duplicate_key": _manifest_bytes(b'{"format": 1, "format": 1}'),
    "manifest_bad_schema": _manifest_dict(lambda d: d["entries"][0].update(size=-1)),
    "manifest_unknown_key": _manifest_dict(lambda d: d.update(run="rm -rf /")),
    "manifest_entry_unknown_key": _manifest_dict(lambda d: d["entries"][1].update(owner=0)),
    "manifest_lists_escape": _manifest_dict(
        lambda d: d["entries"].append({"path": "../x", "size": 0, "xxh3_128": "0" * 32})
    ),
    "missing_manifest": _no_manifest,
    "corrupt_database": _corrupt_database,
    "no_database": _no_database,
    "declares_too_many_entries": _too_many_entries,
    "not_a_zip": _not_a_zip,
    "local_name_differs": _local_name_differs,
    **NUMERIC_MANIFEST_CASES,
    **NUMERIC_ZIP_CASES,
}


def build(name: str, folder: Path) -> tuple[Path, str]:
    """Write the hostile zip ``name`` into ``folder``: its path and the expected fragment."""
    path = folder / f"{name}.zip"
    expect = CASES[name](path)
    return path, expect


def tree_state(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Kind, mode, bytes or link target and mtime_ns of ``folder`` (as ``"."``) and everything
    below it (links not followed)."""
    return kit.tree_snapshot(folder, mtimes=True, dir_mtimes=True, include_root=True)


def content_state(folder: Path) -> dict[str, tuple[str, bytes | str | None, int]]:
    """Like :func:`tree_state` without mtimes of folders (restore recreates folders)."""
    return {
        path: (kind, data, mode if kind != "dir" else 0)
        for path, (kind, mode, data, _mtime) in tree_state(folder).items()
        if path != "."
    }


# --- homes and the real CLI ------------------------------------------------------------------


def clean_env(user_home: Path) -> dict[str, str]:
    """The environment for a CLI run: no BXAGENTS_* override, ``HOME`` pointing at a test folder."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("BXAGENTS_")}
    env["HOME"] = str(user_home)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def make_project(tmp_path: Path, *, rows: int = 30) -> tuple[Path, Path]:
    """A project whose Agent.yaml puts the data home at ``<project>/home``, with a database in
    WAL-capable rollback mode, files (nested, with modes and an empty folder) and a skill."""
    project = tmp_path / "project"
    home = project / "home"
    for folder in (
        home / "files" / "notes" / "deep",
        home / "files" / "empty",
        home / "skills" / "s1",
        home / "backups",
    ):
        folder.mkdir(parents=True)
    os.chmod(home, 0o700)
    (project / "Agent.yaml").write_text("name: demo\ndata:\n  home: ./home\n")
    conn = sqlite3.connect(home / "chat.db")
    conn.execute("CREATE TABLE msg(id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO msg(body) VALUES (?)", [(f"message {i}",) for i in range(rows)])
    conn.commit()
    conn.close()
    (home / "files" / "a.txt").write_text("alpha\n")
    (home / "files" / "notes" / "b.md").write_bytes(os.urandom(5000))
    (home / "files" / "notes" / "deep" / "c.bin").write_bytes(bytes(200_000))
    (home / "files" / "script.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(home / "files" / "script.sh", 0o750)
    (home / "skills" / "s1" / "SKILL.md").write_text("---\nname: s1\ndescription: d\n---\nbody\n")
    return project, home


def run_cli(*args: str, env: dict[str, str], cwd: Path | None = None) -> Any:
    """Run ``python -m bundler ARGS`` as a real process; returns the CompletedProcess."""
    return kit.run_cli(args, exact_env=env, cwd=cwd, timeout=300)


def rows(database: Path) -> int:
    """Row count of ``msg`` (opened immutable, so nothing is created beside it)."""
    conn = sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM msg").fetchone()[0])
    finally:
        conn.close()


# --- encrypted backups (04 §5.6) ---------------------------------------------------------------

AGE_MAGIC = b"age-encryption.org/v1\n"


def hostile_age_backups(sound: bytes) -> dict[str, bytes]:
    """Damaged forms of the sound encrypted backup ``sound`` (a ``.zip.age`` file), by name:
    each must be refused by a reader holding the right identity, with nothing written. The
    ``listed`` ones are also refused by ``home backups`` without a key (their header or length
    already shows it); the others only a key can tell."""
    header_end = sound.index(b"\n---") + 1
    header_end = sound.index(b"\n", header_end) + 1
    flipped = bytearray(sound)
    flipped[header_end + 40] ^= 0x01
    return {
        "listed:garbage": os.urandom(4096),
        "listed:zip-renamed": b"PK\x03\x04" + os.urandom(200),
        "listed:header-only": sound[:header_end],
        "key:cut-mid-chunk": sound[: header_end + 16 + 1000],
        "listed:cut-in-a-tag": sound[: header_end + 16 + 65552 + 10],
        "listed:cut-in-header": sound[: header_end // 2],
        "listed:passphrase-stanza": AGE_MAGIC
        + b"-> scrypt c2FsdHNhbHRzYWx0c2FsdA 18\n"
        + b"x" * 43
        + b"\n--- "
        + b"A" * 43
        + b"\n"
        + os.urandom(16 + 100 + 16),
        "key:cut-at-chunk-end": sound[: len(sound) - (len(sound) - header_end - 16) % 65552]
        if (len(sound) - header_end - 16) > 65552
        else sound[:header_end] + sound[header_end : header_end + 16 + 65552],
        "key:flipped-payload-byte": bytes(flipped),
        "key:mac-altered": _mac_altered(sound),
    }


def _mac_altered(sound: bytes) -> bytes:
    """``sound`` with its header's MAC changed in one character (still base64 of 32 bytes)."""
    at = sound.index(b"\n--- ") + len(b"\n--- ")
    changed = b"B" if sound[at : at + 1] != b"B" else b"C"
    return sound[:at] + changed + sound[at + 1 :]
