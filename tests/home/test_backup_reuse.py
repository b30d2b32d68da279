"""Incremental backups by reuse (04 §5.1.1): an unchanged entry's compressed bytes are copied
from the newest earlier backup, checked against the source, and the new zip stands alone. The
base the home's index is pinned to is taken at the index's word while its length and directory
bytes are those the read-back checked, read whole otherwise; every byte copied from it is checked
either way."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import xxhash
from support.hostile_zips import clean_env, make_project, rows, run_cli

from bundler.home.backup import BackupReport, backup_home
from bundler.home.restore import restore_home
from bundler.home.reuse_index import index_path, load_index, save_index
from bundler.home.verify import verify_backup


def env_for(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    return clean_env(user)


def backup(tmp_path: Path, project: Path, **kw: object) -> BackupReport:
    return backup_home(project, environ=env_for(tmp_path), **kw)  # type: ignore[arg-type]


def raw_data(path: Path, name: str) -> bytes:
    """The compressed bytes of entry ``name`` as they lie in the zip."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    with open(path, "rb") as fp:
        fp.seek(info.header_offset)
        header = fp.read(30)
        name_len, extra_len = struct.unpack_from("<HH", header, 26)
        fp.seek(info.header_offset + 30 + name_len + extra_len)
        return fp.read(info.compress_size)


def index_of(path: Path) -> dict[str, dict[str, object]]:
    with zipfile.ZipFile(path) as archive:
        return {e["path"]: e for e in json.loads(archive.read("backup.json"))["entries"]}


def unzip_test(path: Path) -> None:
    done = subprocess.run(["unzip", "-t", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def change(path: Path, data: bytes) -> None:
    """Write ``data`` and move the time forward, as an editor's save does."""
    before = path.stat().st_mtime_ns
    path.write_bytes(data)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def content(home: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(home)): p.read_bytes()
        for tree in ("files", "skills")
        for p in sorted((home / tree).rglob("*"))
        if p.is_file()
    }


def test_second_backup_copies_unchanged_entries_and_stands_alone(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    first = backup(tmp_path, project)
    assert first.base is None and first.reused == 0
    change(home / "files" / "a.txt", b"changed, and longer\n")
    second = backup(tmp_path, project)
    assert second.base == first.path
    # chat.db (the same snapshot), b.md, c.bin, script.sh and SKILL.md are copied; a.txt is not
    assert second.reused == 5
    for name in ("files/notes/deep/c.bin", "files/notes/b.md", "chat.db"):
        assert raw_data(second.path, name) == raw_data(first.path, name)
    assert index_of(second.path)["files/a.txt"]["xxh3_128"] == xxhash.xxh3_128_hexdigest(
        b"changed, and longer\n"
    )
    expected = content(home)
    first.path.unlink()
    unzip_test(second.path)
    assert verify_backup(second.path).entries == 6
    shutil.rmtree(home / "files")
    restore_home(project, second.path, environ=env_for(tmp_path))
    assert content(home) == expected
    assert rows(home / "chat.db") == 30


def test_a_file_changed_within_its_size_and_time_is_read_and_not_copied(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    backup(tmp_path, project)
    target = home / "files" / "notes" / "b.md"
    st = target.stat()
    new = os.urandom(st.st_size)
    target.write_bytes(new)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # the time says: unchanged
    second = backup(tmp_path, project)
    assert second.reused == 5  # all but b.md
    assert index_of(second.path)["files/notes/b.md"]["xxh3_128"] == xxhash.xxh3_128_hexdigest(new)
    with zipfile.ZipFile(second.path) as archive:
        assert archive.read("files/notes/b.md") == new


def test_a_base_whose_entry_bytes_were_tampered_with_is_not_used(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    first = backup(tmp_path, project)
    # flip one byte inside b.md's stored data: directory, CRC and backup.json all unchanged
    with zipfile.ZipFile(first.path) as archive:
        info = archive.getinfo("files/notes/b.md")
    assert info.compress_type == zipfile.ZIP_STORED
    data = bytearray(first.path.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    data[info.header_offset + 30 + name_len + extra_len + 100] ^= 0xFF
    first.path.write_bytes(bytes(data))
    second = backup(tmp_path, project)
    assert second.base is None and second.reused == 0
    assert any("is not used as the base" in w and "b.md" in w for w in second.warnings)
    with zipfile.ZipFile(second.path) as archive:
        assert archive.read("files/notes/b.md") == (home / "files/notes/b.md").read_bytes()
    unzip_test(second.path)
    verify_backup(second.path)


def test_a_base_that_is_not_a_backup_is_not_used_with_a_warning(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("files/a.txt", "alpha\n")
    report = backup(tmp_path, project, base=other)
    assert report.base is None and report.reused == 0
    assert any("other.zip is not used as the base" in w for w in report.warnings)
    verify_backup(report.path)


def test_a_file_refused_in_a_backup_with_a_base_is_named_without_blaming_the_base(
    tmp_path: Path,
) -> None:
    """An error of the backup's own (a file restore would refuse) while a base is open is that
    error, one line naming the file: not a crash of the base's clean-up, nor the base's fault."""
    project, home = make_project(tmp_path)
    env = env_for(tmp_path)
    assert backup(tmp_path, project).reused == 0  # the base of the next
    with open(home / "files" / "huge.bin", "wb") as sparse:
        sparse.truncate(65 << 30)  # beyond the 64 GiB an entry may hold; no block written
    done = run_cli("home", "backup", "--project", str(project), env=env)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: files/huge.bin is larger than"), done.stderr
    assert "Traceback" not in done.stderr and "not used as the base" not in done.stderr


def test_full_copies_nothing_and_base_names_the_zip_to_copy_from(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    first = backup(tmp_path, project, to=tmp_path / "first.zip")
    # a zip named by --to FILE is never taken as a base on its own
    assert backup(tmp_path, project, to=tmp_path / "second.zip").reused == 0
    assert backup(tmp_path, project, full=True).reused == 0
    named = backup(tmp_path, project, base=first.path)
    assert named.base == first.path and named.reused == 6


def test_cli_base_and_full_and_json(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    env = env_for(tmp_path)
    done = run_cli("home", "backup", "--project", str(project), "--json", env=env)
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    assert first["base"] is None and first["reused"] == 0
    done = run_cli("home", "backup", "--project", str(project), "--json", env=env)
    second = json.loads(done.stdout)
    assert second["base"] == first["backup"] and second["reused"] == 6
    done = run_cli("home", "backup", "--project", str(project), "--full", "--json", env=env)
    assert json.loads(done.stdout)["reused"] == 0
    done = run_cli("home", "backup", "--project", str(project), "--base", "nope.zip", env=env)
    assert done.returncode == 1 and "--base nope.zip" in done.stderr
    assert sorted(p.name for p in (home / "backups").iterdir()).__len__() == 3


def spoil_backup_json(path: Path) -> None:
    """Flip a byte of ``backup.json``'s compressed bytes: the directory (and its CRC) unchanged."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("backup.json")
    data = bytearray(path.read_bytes())
    name_len, extra_len = (
        int.from_bytes(data[info.header_offset + at : info.header_offset + at + 2], "little")
        for at in (26, 28)
    )
    data[info.header_offset + 30 + name_len + extra_len + info.compress_size // 2] ^= 0x5A
    path.write_bytes(bytes(data))


def test_a_backup_pins_the_zip_it_published_in_the_index(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    first = backup(tmp_path, project)
    pin = load_index(home).pin
    assert pin is not None
    assert pin.path == os.path.realpath(first.path)
    assert pin.size == first.path.stat().st_size
    with zipfile.ZipFile(first.path) as archive:
        files = {i.filename: i for i in archive.infolist() if not i.filename.endswith("/")}
    del files["backup.json"]
    assert sorted(pin.records.paths) == sorted(files)
    for name, info in files.items():
        record = pin.records.get(name)
        assert record is not None
        assert (record.offset, record.size, record.crc, record.packed) == (
            info.header_offset,
            info.file_size,
            info.CRC,
            info.compress_size,
        )


def test_the_pinned_base_is_taken_without_reading_its_directory_or_backup_json(
    tmp_path: Path,
) -> None:
    """A base whose backup.json no longer inflates would be refused if it were read; pinned, it
    is not read, and the entries copied from it are checked as they pass, so the new backup is
    whole. Without the pin, the same base is read, refused, and the backup is full."""
    project, home = make_project(tmp_path)
    first = backup(tmp_path, project)
    spoil_backup_json(first.path)
    (home / "files" / "a.txt").write_bytes(b"changed since the first backup\n")
    second = backup(tmp_path, project)
    assert second.base == first.path
    assert second.reused >= 4, second
    assert second.warnings == []
    expected = content(home)
    first.path.unlink()
    verify_backup(second.path)
    shutil.rmtree(home / "files")
    restore_home(project, second.path, environ=env_for(tmp_path))
    assert content(home) == expected

    third_base = tmp_path / "spoiled.zip"
    shutil.copyfile(second.path, third_base)
    spoil_backup_json(third_base)
    third = backup(tmp_path, project, base=third_base, to=tmp_path / "third.zip")
    assert third.base is None and third.reused == 0
    assert any("spoiled.zip is not used as the base" in w for w in third.warnings)


def test_a_base_replaced_under_its_name_is_read_whole(tmp_path: Path) -> None:
    """Another backup put where the pinned one was (a restored copy, say) has another directory:
    the pin does not hold, so the base is read and checked whole, and its entries copied."""
    project, home = make_project(tmp_path)
    first = backup(tmp_path, project)
    (home / "files" / "notes" / "b.md").write_bytes(b"a second version of b\n" * 50)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = backup(tmp_path, project, to=elsewhere / "other.zip", full=True)
    os.replace(other.path, first.path)
    second = backup(tmp_path, project)
    assert second.base == first.path
    assert second.warnings == []
    assert second.reused >= 4, second
    first.path.unlink()
    verify_backup(second.path)
    with zipfile.ZipFile(second.path) as archive:
        assert archive.read("files/notes/b.md") == b"a second version of b\n" * 50


_FILE_COLUMNS = 8 * 8 + 2 * 16
"""Bytes a file's row takes in the index: eight numbers, two digests."""
_ENTRY_COLUMNS = 8 * 8 + 16
"""Bytes a pinned entry's row takes: eight numbers, a digest."""


class IndexFile:
    """An index's bytes, as the format lays them out: the header line, then the files' table
    (paths, then its columns), then the pinned entries' table."""

    def __init__(self, data: bytes) -> None:
        line, _, _ = data.partition(b"\n")
        self.head = json.loads(line)
        self.body_at = len(line) + 1
        self.data = data
        files = self.head["files"]
        self.files_at = self.body_at
        self.pin_at = self.files_at + files["names"] + files["count"] * _FILE_COLUMNS

    def files_column(self, number: int) -> int:
        """Where the files' number column ``number`` (0: size) begins."""
        files = self.head["files"]
        return self.files_at + files["names"] + number * 8 * files["count"]

    def pin_column(self, number: int) -> int:
        """Where the pinned entries' number column ``number`` (0: offset) begins."""
        entries = self.head["backup"]["entries"]
        return self.pin_at + entries["names"] + number * 8 * entries["count"]

    def rewritten(self, at: int, new: bytes, cut: int = 0, table: str | None = None) -> bytes:
        """The index with ``new`` at ``at`` (``cut`` bytes taken out there first), and, when
        ``table`` is named (``files`` or ``entries``), that table's digest made anew so that
        only the number checks can refuse it."""
        data = self.data[:at] + new + self.data[at + len(new) + cut :]
        if table is None:
            return data
        head = json.loads(json.dumps(self.head))
        if table == "files":
            shape, begins, ends = head["files"], self.files_at, self.pin_at
        else:
            shape, begins, ends = head["backup"]["entries"], self.pin_at, len(self.data)
        shape["xxh3"] = xxhash.xxh3_128_hexdigest(data[begins : ends - cut])
        line = json.dumps(head).encode() + b"\n"
        return line + data[self.body_at :]


def test_a_pin_that_is_not_whole_is_dropped_and_the_files_stay_known(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    backup(tmp_path, project)
    path = index_path(home)
    layout = IndexFile(path.read_bytes())
    known = load_index(home).known
    offsets = layout.pin_column(0)
    for damaged in (
        layout.rewritten(offsets, b"", cut=8),  # a number short
        layout.rewritten(len(layout.data) - 1, b"\x00", cut=1),  # a digest byte changed
        layout.rewritten(offsets, struct.pack("<q", -1), cut=8, table="entries"),  # before it
        layout.rewritten(offsets, struct.pack("<Q", 1 << 63), cut=8, table="entries"),  # past it
        layout.rewritten(layout.pin_at, b"\xff", cut=1, table="entries"),  # a path not UTF-8
        layout.rewritten(layout.pin_at, b"\x00", cut=1, table="entries"),  # a path split
        layout.data + b"\x00",  # a byte past the end
    ):
        path.write_bytes(damaged)
        index = load_index(home)
        assert index.pin is None
        assert index.known == known
    sizes = layout.files_column(0)
    for damaged in (
        layout.rewritten(sizes, b"", cut=8),  # a number short: every later one shifts
        layout.rewritten(sizes, b"\x01"),  # a byte changed
        layout.rewritten(sizes, struct.pack("<q", -1), cut=8, table="files"),  # a size below 0
        layout.data[: layout.body_at - 1],  # the header alone, without its line's end
        b"\x88" + layout.data[1:],  # a header that is not UTF-8
        json.dumps({**layout.head, "format": 3}).encode() + layout.data[layout.body_at - 1 :],
    ):
        path.write_bytes(damaged)
        assert load_index(home) == load_index(tmp_path / "no home")  # empty: all of it goes


def test_the_index_holds_every_number_a_file_system_gives(tmp_path: Path) -> None:
    """Times before 1970 and inode or device numbers past 2**63 are kept as they are."""
    project, home = make_project(tmp_path)
    backup(tmp_path, project)
    index = load_index(home)
    name, item = next(iter(index.known.items()))
    odd = item._replace(stat=(item.stat[0], -5, -(1 << 62), (1 << 64) - 1, 1 << 63))
    save_index(home, {**index.known, name: odd}, index.pin)
    again = load_index(home)
    assert again.known[name] == odd
    assert again.pin == index.pin


def test_an_index_with_a_digest_of_another_length_is_not_written(tmp_path: Path) -> None:
    """Digests are packed end to end: two of 15 and 17 bytes would shift every later one by a
    byte, so such an index is not written at all (the one before stays)."""
    project, home = make_project(tmp_path)
    backup(tmp_path, project)
    index = load_index(home)
    (first, one), (second, two) = list(index.known.items())[:2]
    odd = {**index.known, first: one._replace(raw="ab" * 15), second: two._replace(raw="ab" * 17)}
    save_index(home, odd, index.pin)
    assert load_index(home) == index
