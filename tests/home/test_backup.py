"""home backup and verify-backup (04 §5.1, §5.2), through the library and the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from support import kit
from support.hostile_zips import clean_env, make_project, rows, run_cli, tree_state

from bundler.errors import InvalidInput, Refused
from bundler.fs.snapshot import integrity_ok
from bundler.home.backup import backup_home
from bundler.home.publish import default_backup_name
from bundler.home.restore import restore_home
from bundler.home.verify import verify_backup

NOBODY = 65534


def env_for(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    return clean_env(user)


def backup(tmp_path: Path, project: Path, **kw: object) -> object:
    return backup_home(project, environ=env_for(tmp_path), **kw)  # type: ignore[arg-type]


def unchanged_but_new_zip(before: dict, after: dict, new_zip: str) -> None:  # type: ignore[type-arg]
    """Every entry of the home is as it was, apart from the new zip and backups/'s own mtime."""
    assert set(after) - set(before) == {new_zip}
    for path, state in before.items():
        if path == "backups":
            assert after[path][:3] == state[:3]
        else:
            assert after[path] == state, f"{path} changed"


def test_backup_holds_database_files_skills_and_index(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    report = backup(tmp_path, project)
    assert report.path.parent == home / "backups"  # type: ignore[attr-defined]
    with zipfile.ZipFile(report.path) as archive:  # type: ignore[attr-defined]
        names = set(archive.namelist())
        index = json.loads(archive.read("backup.json"))
    assert {"chat.db", "files/a.txt", "files/notes/b.md", "files/notes/deep/c.bin"} <= names
    assert {"files/empty/", "skills/s1/SKILL.md", "backup.json"} <= names
    assert not any(name.startswith("backups") for name in names)
    assert index["format"] == 1 and index["agent"] == "demo"
    assert index["tool"].startswith("bundler ")
    assert {entry["path"] for entry in index["entries"]} == {
        n for n in names if not n.endswith("/") and n != "backup.json"
    }
    assert verify_backup(report.path).entries == len(index["entries"])  # type: ignore[attr-defined]


def test_zip_is_created_0600(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    report = backup(tmp_path, project)
    assert report.path.stat().st_mode & 0o777 == 0o600  # type: ignore[attr-defined]


def test_quiet_home_is_unchanged_except_the_new_zip(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    before = tree_state(home)
    time.sleep(0.01)
    report = backup(tmp_path, project)
    unchanged_but_new_zip(before, tree_state(home), f"backups/{report.path.name}")  # type: ignore[attr-defined]


@pytest.mark.parametrize("keep_shm", [True, False], ids=["wal_and_shm", "wal_only"])
def test_home_with_leftover_wal_is_unchanged_and_the_wal_is_in_the_backup(
    tmp_path: Path, keep_shm: bool
) -> None:
    project, home = make_project(tmp_path, rows=10)
    code = (
        "import sqlite3, os, sys\n"
        "c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=WAL')\n"
        "c.execute('PRAGMA wal_autocheckpoint=0')\n"
        "for i in range(40):\n"
        "    c.execute('INSERT INTO msg(body) VALUES (?)', ('late',)); c.commit()\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(home / "chat.db")], check=True)
    if not keep_shm:
        os.unlink(home / "chat.db-shm")
    before = tree_state(home)
    time.sleep(0.01)
    report = backup(tmp_path, project)
    unchanged_but_new_zip(before, tree_state(home), f"backups/{report.path.name}")  # type: ignore[attr-defined]
    with zipfile.ZipFile(report.path) as archive:  # type: ignore[attr-defined]
        (tmp_path / "out.db").write_bytes(archive.read("chat.db"))
    assert rows(tmp_path / "out.db") == 50


WRITER = """
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute('PRAGMA journal_mode=WAL')
i = 0
while True:
    c.execute('INSERT INTO msg(body) VALUES (?)', ('w' * 300,))
    i += 1
    if i % 20 == 0:
        with open(sys.argv[2] + '.tmp', 'w') as f:
            f.write(str(i))
        os.replace(sys.argv[2] + '.tmp', sys.argv[2])
"""


def test_backup_while_a_writer_commits_in_wal_mode_holds_every_row_committed_before(
    tmp_path: Path,
) -> None:
    project, home = make_project(tmp_path, rows=0)
    progress = tmp_path / "progress"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(home / "chat.db"), str(progress)])
    try:
        deadline = time.monotonic() + 30
        while not (progress.exists() and int(progress.read_text()) >= 400):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        committed_before = int(progress.read_text())
        done = run_cli("home", "backup", "--project", str(project), "--json", env=env_for(tmp_path))
        assert writer.poll() is None, "the writer must still be running"
    finally:
        writer.kill()
        writer.wait()
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    with zipfile.ZipFile(answer["backup"]) as archive:
        (tmp_path / "snap.db").write_bytes(archive.read("chat.db"))
    assert integrity_ok(tmp_path / "snap.db")
    assert rows(tmp_path / "snap.db") >= committed_before


def test_default_name_takes_the_next_suffix_when_taken(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    now = datetime.now(timezone.utc)
    for second in range(3):
        (home / "backups" / default_backup_name(now + timedelta(seconds=second))).write_bytes(b"x")
    report = backup(tmp_path, project)
    assert report.path.name.endswith("-2.zip")  # type: ignore[attr-defined]
    for second in range(3):
        assert (
            home / "backups" / default_backup_name(now + timedelta(seconds=second))
        ).read_bytes() == b"x"


def test_default_backup_name_is_utc() -> None:
    moment = datetime(2026, 3, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=2)))
    assert default_backup_name(moment) == "backup-20260304-030607.zip"
    assert default_backup_name(moment, 3) == "backup-20260304-030607-3.zip"


def test_existing_to_is_never_replaced_exit_1(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    target = tmp_path / "mine.zip"
    target.write_bytes(b"precious")
    done = run_cli(
        "home", "backup", "--project", str(project), "--to", str(target), env=env_for(tmp_path)
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "exists" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert target.read_bytes() == b"precious"


def test_a_backups_folder_that_cannot_be_created_is_one_error_naming_it() -> None:
    """The default target, ``<home>/backups/``, absent in a home the user may not write in (a
    read-only home alike): one error naming the folder and saying to use --to; it was a
    traceback from the folder's mkdir."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop privileges to uid 65534 in a child")
    base = Path(tempfile.mkdtemp(prefix="bundler-backups-", dir="/tmp"))
    try:
        base.chmod(0o755)
        project, home = make_project(base)
        (home / "backups").rmdir()
        for folder, dirs, files in os.walk(base):
            for entry in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(entry, NOBODY, NOBODY, follow_symlinks=False)
        home.chmod(0o555)
        done = kit.run_cli(
            ["home", "backup", "--project", str(project)], env=env_for(base), as_nobody=True
        )
        assert done.returncode == 1 and kit.one_error(done.stderr), done.stderr
        assert f"cannot create {home / 'backups'} for the backup (Permission denied)" in (
            done.stderr
        )
        assert "--to" in done.stderr
        assert not (home / "backups").exists()
    finally:
        shutil.rmtree(base)


def test_to_a_new_file_elsewhere(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    target = tmp_path / "out" / "b.zip"
    target.parent.mkdir()
    done = run_cli(
        "home",
        "backup",
        "--project",
        str(project),
        "--to",
        str(target),
        "--json",
        env=env_for(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["ok"] is True and answer["backup"] == str(target)
    assert answer["entries"] == 6 and answer["bytes"] > 200_000
    assert sorted(os.listdir(target.parent)) == ["b.zip"]


def test_to_ending_in_a_slash_names_a_folder_never_a_zip_of_that_name(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    wanted = tmp_path / "backups-here"
    args = ("home", "backup", "--project", str(project), "--to", f"{wanted}/")
    refused = run_cli(*args, env=env_for(tmp_path))
    assert refused.returncode == 1, refused.stderr
    assert "names a folder" in refused.stderr and f"mkdir -p {wanted}/" in refused.stderr
    assert not os.path.lexists(wanted)
    # once the folder is there, the same command puts a timestamped zip in it
    wanted.mkdir()
    done = run_cli(*args, env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    assert [name.endswith(".zip") for name in os.listdir(wanted)] == [True]


@pytest.mark.parametrize("tree", ["files", "skills"])
def test_to_inside_files_or_skills_is_refused(tmp_path: Path, tree: str) -> None:
    project, home = make_project(tmp_path)
    with pytest.raises(Refused, match="must not contain itself"):
        backup(tmp_path, project, to=home / tree / "sub" / ".." / "x.zip")
    assert not (home / tree / "x.zip").exists()


def test_home_without_database_is_refused(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    os.unlink(home / "chat.db")
    with pytest.raises(Refused, match="without a database"):
        backup(tmp_path, project)
    assert os.listdir(home / "backups") == []


def test_links_special_files_and_hard_links_are_skipped_and_counted(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("secret outside the home")
    (home / "files" / "escape").symlink_to(outside)
    (home / "skills" / "dir-link").symlink_to(tmp_path)
    os.mkfifo(home / "files" / "pipe")
    os.link(home / "files" / "a.txt", home / "files" / "a-hard.txt")
    done = run_cli("home", "backup", "--project", str(project), "--json", env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["skipped"]["symlinks"] == 2
    assert answer["skipped"]["special"] == 1
    assert answer["skipped"]["hard_links"] == 2  # both names of the linked file
    with zipfile.ZipFile(answer["backup"]) as archive:
        names = archive.namelist()
        assert not any(
            "escape" in n or "pipe" in n or "dir-link" in n or "a.txt" in n for n in names
        )
        assert all(b"secret outside" not in archive.read(n) for n in names if not n.endswith("/"))


def test_entry_restore_would_refuse_makes_the_backup_refuse(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    (home / "files" / "back\\slash.txt").write_text("x")
    done = run_cli("home", "backup", "--project", str(project), env=env_for(tmp_path))
    assert done.returncode == 1
    assert "back\\slash.txt" in done.stderr and "restore would refuse" in done.stderr
    assert "Traceback" not in done.stderr
    assert os.listdir(home / "backups") == []


def test_entry_compressing_beyond_100_to_1_is_stored(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    report = backup(tmp_path, project)
    with zipfile.ZipFile(report.path) as archive:  # type: ignore[attr-defined]
        zeros = archive.getinfo("files/notes/deep/c.bin")
        assert zeros.compress_type == zipfile.ZIP_STORED
        for info in archive.infolist():
            assert info.file_size <= 100 * max(info.compress_size, 1)


def test_symlinked_files_folder_is_refused(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    os.rename(home / "files", tmp_path / "real-files")
    (home / "files").symlink_to(tmp_path / "real-files")
    with pytest.raises(Refused, match="not a real folder"):
        backup(tmp_path, project)
    assert os.listdir(home / "backups") == []


def test_verify_backup_cli_accepts_a_sound_backup_and_exits_3_on_a_flipped_byte(
    tmp_path: Path,
) -> None:
    project, _home = make_project(tmp_path)
    report = backup(tmp_path, project)
    zip_path: Path = report.path  # type: ignore[attr-defined]
    ok = run_cli("home", "verify-backup", str(zip_path), "--json", env=env_for(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["entries"] == 6
    with zipfile.ZipFile(zip_path) as archive:
        info = archive.getinfo("files/a.txt")
    data = bytearray(zip_path.read_bytes())
    data[info.header_offset + 30 + len("files/a.txt")] ^= 0x01
    zip_path.write_bytes(bytes(data))
    bad = run_cli("home", "verify-backup", str(zip_path), env=env_for(tmp_path))
    assert bad.returncode == 3
    assert bad.stderr.startswith(f"error: {zip_path}: backup entry files/a.txt")
    assert "Traceback" not in bad.stderr


def test_verify_backup_of_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="cannot open"):
        verify_backup(tmp_path / "nope.zip")


def test_a_backup_named_by_a_folder_is_refused_as_the_file_it_should_be(tmp_path: Path) -> None:
    """``home restore DIR`` blamed the home ("restore into HOME failed (Is a directory)") and
    suggested recover: fdopen refused the folder before the regular-file check."""
    (tmp_path / "folder.zip").mkdir()
    with pytest.raises(Refused, match=r"folder\.zip is not a regular file"):
        verify_backup(tmp_path / "folder.zip")
    project, home = make_project(tmp_path)
    env = clean_env(tmp_path / "user")
    with pytest.raises(Refused, match=r"folder\.zip is not a regular file"):
        restore_home(project, tmp_path / "folder.zip", home=tmp_path / "h", environ=env)
    assert not (tmp_path / "h").exists()


def test_verify_backup_of_fifo_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.zip")
    with pytest.raises(Refused, match="not a regular file"):
        verify_backup(tmp_path / "pipe.zip")


def test_recover_removes_what_an_interrupted_backup_left(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    (home / "backups" / ".backup-abcdefabcdef.zip").write_bytes(b"partial")
    (home / "backups" / "backup-20200101-000000.zip").write_bytes(b"finished")
    done = run_cli("recover", "--home", str(home), "--json", env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["actions"]) == 1
    assert os.listdir(home / "backups") == ["backup-20200101-000000.zip"]


def test_corrupt_source_database_is_refused(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    (home / "chat.db").write_bytes(b"garbage" * 1000)
    with pytest.raises(Refused, match="not a readable SQLite database"):
        backup(tmp_path, project)
    assert os.listdir(home / "backups") == []


def test_invalid_agent_yaml_is_invalid_input(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    (project / "Agent.yaml").write_text("name: [1, 2]\n")
    with pytest.raises(InvalidInput):
        backup(tmp_path, project)


def test_to_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    with pytest.raises(Refused, match="does not exist"):
        backup(tmp_path, project, to=tmp_path / "missing" / "b.zip")
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("mtime_ns", [-1_000_000_000, 2**63 + 10**9], ids=["1969", "after-2262"])
def test_file_time_outside_the_carried_range_is_backed_up_without_mtime_and_restores(
    tmp_path: Path, mtime_ns: int
) -> None:
    """A legitimate file with a time backup.json cannot hold must not make the backup fail."""
    project, home = make_project(tmp_path)
    os.utime(home / "files" / "a.txt", ns=(mtime_ns, mtime_ns))
    zip_path = tmp_path / "b.zip"
    done = run_cli(
        "home", "backup", "--project", str(project), "--to", str(zip_path), env=env_for(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(zip_path) as archive:
        index = json.loads(archive.read("backup.json"))
    listed = {entry["path"]: entry for entry in index["entries"]}
    assert "mtime_ns" not in listed["files/a.txt"]
    assert (
        listed["files/script.sh"]["mtime_ns"] == (home / "files" / "script.sh").stat().st_mtime_ns
    )
    (home / "files" / "a.txt").write_text("changed")
    restored = run_cli(
        "home", "restore", str(zip_path), "--project", str(project), env=env_for(tmp_path)
    )
    assert restored.returncode == 0, restored.stderr
    assert (home / "files" / "a.txt").read_text() == "alpha\n"


def test_database_of_a_wal_home_is_backed_up_in_rollback_journal_mode(tmp_path: Path) -> None:
    """Like a format 2 memory snapshot, the zip's chat.db opens read-only
    anywhere: no -wal/-shm is needed beside it."""
    project, home = make_project(tmp_path)
    conn = sqlite3.connect(str(home / "chat.db"), isolation_level=None)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    before = tree_state(home)
    zip_path = tmp_path / "b.zip"
    done = run_cli(
        "home", "backup", "--project", str(project), "--to", str(zip_path), env=env_for(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert tree_state(home) == before
    with zipfile.ZipFile(zip_path) as archive:
        header = archive.read("chat.db")[:20]
    assert header[18:20] == b"\x01\x01"
