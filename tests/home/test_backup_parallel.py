"""Backup compresses on every core yet writes the same zip (04 §5.1); ``--compression`` picks the
deflate level of new entries."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.hostile_zips import clean_env, make_project, run_cli

from bundler.errors import InvalidInput
from bundler.home.deflate import LEVELS, pack
from bundler.home.verify import verify_backup

WORDS = ["the", "agent", "said", "it", "would", "look", "into", "report", "and", "answer", "with"]


def text(rng: random.Random, size: int) -> bytes:
    return " ".join(rng.choice(WORDS) for _ in range(size // 4)).encode()[:size]


def fill(home: Path) -> None:
    """Text files of many sizes, random ones, and one past the size read whole (streamed)."""
    rng = random.Random(7)
    for i in range(60):
        folder = home / "files" / f"d{i % 6}"
        folder.mkdir(exist_ok=True)
        (folder / f"t{i}.txt").write_bytes(text(rng, rng.randint(0, 300_000)))
        (folder / f"r{i}.bin").write_bytes(rng.randbytes(rng.randint(1, 20_000)))
    (home / "files" / "large.log").write_bytes(text(rng, (16 << 20) + 12_345))
    (home / "files" / "middle.log").write_bytes(text(rng, (3 << 20) + 777))  # several blocks


def entries_part(path: Path) -> bytes:
    """The zip from the entry after chat.db (whose snapshot is dated by the run) up to
    backup.json (written last, with the run's time): every entry's local header and data."""
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        assert infos[0].filename == "chat.db"
        start = infos[1].header_offset
        end = archive.getinfo("backup.json").header_offset
    return path.read_bytes()[start:end]


def raw_entry(path: Path, info: zipfile.ZipInfo) -> bytes:
    """The bytes an entry holds in the zip, as compressed."""
    data = path.read_bytes()
    name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_length + extra_length
    return data[start : start + info.compress_size]


def backup_cli(project: Path, env: dict[str, str], *args: str, cores: str | None = None) -> None:
    prefix = ["taskset", "-c", cores] if cores else []
    done = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            "bundler",
            "home",
            "backup",
            "--project",
            str(project),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr


def test_zip_is_byte_identical_on_one_core_and_on_all(
    tmp_path: Path, each_deflate_engine: str
) -> None:
    assert len(os.sched_getaffinity(0)) >= 2, "this test compares one core with several"
    project, home = make_project(tmp_path)
    fill(home)
    user = tmp_path / "user"
    user.mkdir()
    env = clean_env(user)
    one, many = tmp_path / "one.zip", tmp_path / "many.zip"
    backup_cli(project, env, "--full", "--to", str(one), cores="0")
    backup_cli(project, env, "--full", "--to", str(many))
    assert entries_part(one) == entries_part(many)
    with zipfile.ZipFile(one) as a, zipfile.ZipFile(many) as b:
        assert a.read("chat.db") == b.read("chat.db")
        # all but backup.json, whose created_at is the run's
        assert [(i.filename, i.CRC, i.compress_size, i.header_offset) for i in a.infolist()][
            :-1
        ] == [(i.filename, i.CRC, i.compress_size, i.header_offset) for i in b.infolist()][:-1]
        assert a.getinfo("files/large.log").compress_type == zipfile.ZIP_DEFLATED
    verify_backup(many)
    # the large entry is deflated in blocks on the workers: still one stream any unzip reads
    assert subprocess.run(["unzip", "-tq", str(many)], capture_output=True).returncode == 0


def test_compression_levels_change_the_bytes_never_the_content(
    tmp_path: Path, each_deflate_engine: str
) -> None:
    project, home = make_project(tmp_path)
    fill(home)
    user = tmp_path / "user"
    user.mkdir()
    env = clean_env(user)
    sizes = {}
    for level in ("none", "fast", "default", "best"):
        target = tmp_path / f"{level}.zip"
        done = run_cli(
            "home", "backup", "--project", str(project), "--full", "--compression", level,
            "--to", str(target), env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        verify_backup(target)
        assert subprocess.run(["unzip", "-tq", str(target)], capture_output=True).returncode == 0
        with zipfile.ZipFile(target) as archive:
            infos = [i for i in archive.infolist() if i.filename != "backup.json"]
            sizes[level] = sum(i.compress_size for i in infos)
            methods = {i.compress_type for i in infos}
            content = {i.filename: archive.read(i) for i in infos}
            listing = archive.getinfo("backup.json")
            listed = archive.read(listing)
        # backup.json too is made by the level's engine, as a file of the home would be
        assert raw_entry(target, listing) == pack(listed, LEVELS[level]).payload
        if level == "none":
            assert methods == {zipfile.ZIP_STORED} == {listing.compress_type}
            first = content
        else:
            assert zipfile.ZIP_DEFLATED in methods
            assert content == first
    assert sizes["best"] < sizes["default"] <= sizes["fast"] < sizes["none"]
    if each_deflate_engine == "isal":
        # ISA-L's default is not zlib's: the engine asked for is the one that ran
        forced = tmp_path / "zlib.zip"
        args = ["home", "backup", "--project", str(project), "--full", "--to", str(forced)]
        done = run_cli(*args, env={**env, "BUNDLER_DEFLATE_ENGINE": "zlib"})
        assert done.returncode == 0, done.stderr
        with zipfile.ZipFile(forced) as archive:
            infos = [i for i in archive.infolist() if i.filename != "backup.json"]
            assert sum(i.compress_size for i in infos) < sizes["default"]
            assert {i.filename: archive.read(i) for i in infos} == first
    done = run_cli("home", "backup", "--project", str(project), "--compression", "max", env=env)
    assert done.returncode == 2


def test_damaged_entries_checked_on_every_core_name_the_first_in_zip_order(
    tmp_path: Path,
) -> None:
    """The check of a zip runs on one thread per core; the entry it names is still the first
    damaged one in the zip, as a check in order would name it."""
    assert len(os.sched_getaffinity(0)) >= 2, "this test checks on several threads"
    project, home = make_project(tmp_path)
    rng = random.Random(11)
    for i in range(300):
        (home / "files" / f"r{i:03d}.bin").write_bytes(rng.randbytes(3000))
    user = tmp_path / "user"
    user.mkdir()
    path = tmp_path / "b.zip"
    backup_cli(project, clean_env(user), "--full", "--to", str(path))
    with zipfile.ZipFile(path) as archive:
        infos = [i for i in archive.infolist() if i.filename.endswith(".bin")]
    data = bytearray(path.read_bytes())
    for info in (infos[250], infos[20]):  # one in a later batch, one in the first
        assert info.compress_type == zipfile.ZIP_STORED
        name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
        data[info.header_offset + 30 + name_len + extra_len + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidInput) as caught:
        verify_backup(path)
    assert f"backup entry {infos[20].filename}:" in caught.value.message
    assert infos[250].filename not in caught.value.message
    done = run_cli("home", "verify-backup", str(path), env=clean_env(user))
    assert done.returncode == 3 and infos[20].filename in done.stderr, done.stderr


_ENGINE_IMPORTS = """
import sys, threading
where = []
def hook(event, args):
    if event == "import" and args[0].split(".")[0] == "isal":
        where.append(threading.current_thread() is threading.main_thread())
sys.addaudithook(hook)
from bundler.cli import main
code = main(sys.argv[1:])
print(where)
sys.exit(code)
"""


def test_the_deflate_engine_is_loaded_on_the_main_thread_before_any_worker(
    tmp_path: Path,
) -> None:
    """An import that runs out of memory in a worker thread fails as CPython's SystemError, a
    traceback; on the main thread it is a MemoryError, which the command reports on one line."""
    pytest.importorskip("isal")
    project, home = make_project(tmp_path)
    fill(home)
    done = subprocess.run(
        [sys.executable, "-c", _ENGINE_IMPORTS, "home", "backup", "--project", str(project)],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path / "user"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    where = done.stdout.strip().splitlines()[-1]
    assert where.startswith("[True") and "False" not in where, where
