"""What a restore and a second backup read (04 §5.1.1, §5.3), counted with strace on the real CLI.

A restore inflates each entry once, into its own staging folder, checking it as it writes: the
zip's bytes are read about once. A tampered entry is still refused, nothing of the home changed.
A second backup reads only the files that changed (restic's rule, :mod:`bundler.home.reuse_index`)
and inflates none of the entries it copied from its base.
"""

from __future__ import annotations

import os
import random
import time
import zipfile
from pathlib import Path

import pytest
from support import kit
from support.faultinject import READS, bytes_read, bytes_read_below, ptrace_unavailable, trace_log
from support.hostile_zips import clean_env, content_state, make_project, tree_state

from bundler.home.backup import backup_home
from bundler.home.reuse_index import index_path

pytestmark = pytest.mark.skipif(ptrace_unavailable() is not None, reason=str(ptrace_unavailable()))


def env_for(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    return clean_env(user)


def compressible(rng: random.Random, size: int) -> bytes:
    words = [b"agent", b"memory", b"note", b"tool", b"result", b"retry", b"server", b"budget"]
    out = bytearray()
    while len(out) < size:
        out += b" ".join(rng.choice(words) for _ in range(12)) + b"\n"
    return bytes(out[:size])


def grown_project(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose home holds enough compressed bytes that a second read of them shows."""
    project, home = make_project(tmp_path)
    rng = random.Random(7)
    for number in range(40):
        (home / "files" / "notes" / f"n{number:02}.txt").write_bytes(compressible(rng, 200_000))
    (home / "files" / "big.bin").write_bytes(rng.randbytes(3 << 20))
    return project, home


def test_restore_reads_the_zip_once(tmp_path: Path) -> None:
    project, _home = grown_project(tmp_path)
    zip_path = backup_home(project, to=tmp_path / "b.zip", environ=env_for(tmp_path)).path
    size = zip_path.stat().st_size
    target = tmp_path / "restored"
    cmd = [*kit.cli_command(), "home", "restore", str(zip_path), "--project", str(project)]
    done, log = trace_log([*cmd, "--home", str(target)], READS, env=env_for(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr
    total = bytes_read(log, zip_path)
    # the directory, backup.json and each local header read a second time are small beside it
    assert size <= total < size * 1.1, (total, size)
    assert (target / "files" / "big.bin").read_bytes() == (
        project / "home" / "files" / "big.bin"
    ).read_bytes()


def test_a_tampered_entry_is_refused_and_the_home_is_as_found(tmp_path: Path) -> None:
    project, home = grown_project(tmp_path)
    zip_path = backup_home(project, to=tmp_path / "b.zip", environ=env_for(tmp_path)).path
    with zipfile.ZipFile(zip_path) as archive:
        info = archive.getinfo("files/notes/n39.txt")
        at = info.header_offset + 30 + len(info.orig_filename.encode()) + len(info.extra)
        at += info.compress_size // 2
    data = bytearray(zip_path.read_bytes())
    data[at] ^= 0x55  # the deflated bytes change; the directory's CRC and the digest do not
    zip_path.write_bytes(bytes(data))
    (home / "files" / "notes" / "n00.txt").write_bytes(b"changed since the backup\n")
    before = tree_state(home)
    done = kit.run_cli(
        ["home", "restore", str(zip_path), "--project", str(project)], env=env_for(tmp_path)
    )
    assert done.returncode == 3, done.stderr
    assert "files/notes/n39.txt" in done.stderr
    assert tree_state(home) == before


def backup_cmd(project: Path, out: Path) -> list[str]:
    return [*kit.cli_command(), "home", "backup", "--project", str(project), "--to", str(out)]


def traced_backup(tmp_path: Path, project: Path, out: Path) -> tuple[str, Path]:
    """A backup into ``out`` under strace: its log and the zip it published."""
    before = set(out.iterdir())
    done, log = trace_log(backup_cmd(project, out), READS, env=env_for(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr
    (made,) = set(out.iterdir()) - before
    return log, made


def test_a_second_backup_reads_no_unchanged_file_and_inflates_no_copied_entry(
    tmp_path: Path,
) -> None:
    """restic's rule (04 §5.1.1): a file whose size, times, inode and device are what they were
    when its entry was made is not read; its entry, copied from the base, hashes to bytes a
    read-back checked, and is not inflated again."""
    project, home = grown_project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    first = kit.run_cli(backup_cmd(project, out)[3:], env=env_for(tmp_path))
    assert first.returncode == 0, first.stderr
    index = index_path(home)
    assert index.stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(home / "backups")) == []  # the home is only read
    changed = home / "files" / "notes" / "n05.txt"
    changed.write_bytes(changed.read_bytes() + b"one more line\n")
    time.sleep(0.01)
    log, second = traced_backup(tmp_path, project, out)
    reads = bytes_read_below(log, home / "files")
    assert set(reads) == {str(changed)}, sorted(reads)
    assert reads[str(changed)] == changed.stat().st_size
    # the new zip (a hidden temporary until published) is read back for its directory,
    # backup.json, the local headers and the entries made afresh: a small part of it
    new_zip = sum(n for path, n in bytes_read_below(log, out).items() if "/.backup-" in path)
    assert new_zip < second.stat().st_size // 5, (new_zip, second.stat().st_size)
    for name in list(out.iterdir()):
        if name != second:
            name.unlink()  # the second stands alone
    check = kit.run_cli(["home", "verify-backup", str(second)], env=env_for(tmp_path))
    assert check.returncode == 0, check.stderr
    target = tmp_path / "restored"
    done = kit.run_cli(
        ["home", "restore", str(second), "--project", str(project), "--home", str(target)],
        env=env_for(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert content_state(target / "files") == content_state(home / "files")


def test_a_damaged_index_is_ignored_and_every_file_is_read(tmp_path: Path) -> None:
    project, home = grown_project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    assert kit.run_cli(backup_cmd(project, out)[3:], env=env_for(tmp_path)).returncode == 0
    index = index_path(home)
    data = index.read_bytes()
    # cut within the files' table, as a crash may leave a file never flushed
    index.write_bytes(data[: data.index(b"\n") + 100])
    log, second = traced_backup(tmp_path, project, out)
    reads = bytes_read_below(log, home / "files")
    files = [p for p in (home / "files").rglob("*") if p.is_file() and p.stat().st_size]
    assert all(reads.get(str(path)) == path.stat().st_size for path in files)
    check = kit.run_cli(["home", "verify-backup", str(second)], env=env_for(tmp_path))
    assert check.returncode == 0, check.stderr


def test_a_base_entry_changed_since_it_was_checked_is_not_copied(tmp_path: Path) -> None:
    """The index says the file is unchanged, but the base's bytes for it are no longer the ones
    a read-back checked: the backup is made again without the base, and holds the file's
    bytes."""
    project, home = grown_project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    assert kit.run_cli(backup_cmd(project, out)[3:], env=env_for(tmp_path)).returncode == 0
    (base,) = out.iterdir()
    with zipfile.ZipFile(base) as archive:
        info = archive.getinfo("files/notes/n10.txt")
        at = info.header_offset + 30 + len(info.orig_filename.encode()) + len(info.extra)
    data = bytearray(base.read_bytes())
    data[at + info.compress_size // 2] ^= 0x55
    base.write_bytes(bytes(data))
    done = kit.run_cli(backup_cmd(project, out)[3:], env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "is not used as the base" in done.stderr
    (second,) = set(out.iterdir()) - {base}
    with zipfile.ZipFile(second) as archive:
        assert archive.read("files/notes/n10.txt") == (home / "files/notes/n10.txt").read_bytes()


def small_run_project(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose files are small neighbours: a second backup copies them as one run."""
    project, home = make_project(tmp_path)
    rng = random.Random(11)
    for number in range(12):
        (home / "files" / "notes" / f"r{number:02}.txt").write_bytes(compressible(rng, 3000))
    return project, home


def test_a_run_of_copied_entries_refuses_a_local_header_tampered_between_two_of_them(
    tmp_path: Path,
) -> None:
    """Unchanged neighbours are copied from one read of the base (04 §5.1.1): each one's local
    header is still checked against the base's directory, and its bytes against the index, from
    that read (a changed byte of an entry in a run: the test above). An entry in the middle of
    the run whose local header says another time drops the base: the backup is made again
    without it, and holds the file's bytes."""
    project, home = small_run_project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    # by the CLI: the index goes to the cache folder the second backup's environment names
    assert kit.run_cli(backup_cmd(project, out)[3:], env=env_for(tmp_path)).returncode == 0
    (base,) = out.iterdir()
    name = "files/notes/r05.txt"
    with zipfile.ZipFile(base) as archive:
        names = [info.filename for info in archive.infolist()]
        info = archive.getinfo(name)
    # copied with its neighbours: the entries around it are unchanged files too
    assert names[names.index(name) - 1].startswith("files/notes/r0")
    assert names[names.index(name) + 1].startswith("files/notes/r0")
    data = bytearray(base.read_bytes())
    data[info.header_offset + 10] ^= 0x01  # the time word: the directory says otherwise
    base.write_bytes(bytes(data))
    done = kit.run_cli(backup_cmd(project, out)[3:], env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "is not used as the base" in done.stderr
    assert "date or time different" in done.stderr and "r05.txt" in done.stderr
    (second,) = set(out.iterdir()) - {base}
    with zipfile.ZipFile(second) as archive:
        for number in range(12):
            path = f"files/notes/r{number:02}.txt"
            assert archive.read(path) == (home / path).read_bytes()


def test_the_index_is_a_cache_replaced_without_a_flush(tmp_path: Path) -> None:
    """The index is replaced atomically but never flushed (04 §5.1.1): losing it to a crash
    costs the next backup time, and a damaged one is ignored."""
    project, home = grown_project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    calls = ["fsync", "fdatasync", "rename", "renameat", "renameat2"]
    done, log = trace_log(backup_cmd(project, out), calls, env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    index = index_path(home)
    assert index.is_file()
    renamed = [line for line in log.splitlines() if "rename" in line and index.name in line]
    assert renamed, log
    flushed = [line for line in log.splitlines() if "sync(" in line and "backup-index" in line]
    assert flushed == [], flushed
