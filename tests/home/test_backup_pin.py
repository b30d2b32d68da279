"""The base an index is pinned to (04 §5.1.1, :mod:`bundler.home.reuse_index`): taken at the
index's word while its length and directory bytes are those the read-back checked, read whole
otherwise; every byte copied from it is checked either way."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

from support.hostile_zips import clean_env, make_project

from bundler.home.backup import BackupReport, backup_home
from bundler.home.restore import restore_home
from bundler.home.reuse_index import index_path, load_index
from bundler.home.verify import verify_backup


def env_for(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    return clean_env(user)


def backup(tmp_path: Path, project: Path, **kw: object) -> BackupReport:
    return backup_home(project, environ=env_for(tmp_path), **kw)  # type: ignore[arg-type]


def content(home: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(home)): p.read_bytes()
        for tree in ("files", "skills")
        for p in sorted((home / tree).rglob("*"))
        if p.is_file()
    }


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


def test_a_pin_that_is_not_whole_is_dropped_and_the_files_stay_known(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    backup(tmp_path, project)
    path = index_path(home)
    document = json.loads(path.read_bytes())
    known = load_index(home).known
    document["backup"]["entries"]["offset"][0] = True  # a bool where an offset goes
    path.write_text(json.dumps(document))
    damaged = load_index(home)
    assert damaged.pin is None
    assert damaged.known == known
    document["backup"]["entries"]["offset"][0] = -1
    path.write_text(json.dumps(document))
    assert load_index(home).pin is None
    document["files"]["size"] = document["files"]["size"][:-1]  # a short column: all of it goes
    path.write_text(json.dumps(document))
    assert load_index(home).known == {}
