"""The store in an incremental backup (04 §5.1.1): a quiet store whose stat is the one the index
recorded is not snapshotted again, its entry is the base's snapshot, copied; a store that
changed, that has a sidecar beside it, or that was written just before it was read, is
snapshotted afresh. Counted with strace on the real CLI: what the backup read of ``chat.db``."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import zipfile
from pathlib import Path

import pytest
from support import kit
from support.faultinject import READS, bytes_read, ptrace_unavailable, trace_log
from support.hostile_zips import clean_env, make_project, rows

from bundler.home.reuse_index import SETTLED_NS, settled_before

pytestmark = pytest.mark.skipif(ptrace_unavailable() is not None, reason=str(ptrace_unavailable()))


def env_for(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    return clean_env(user)


def backup_cmd(project: Path, target: Path, base: Path | None) -> list[str]:
    """A backup into the file ``target``, on ``base`` when one is given (named: no wait for the
    next second's default name)."""
    cmd = ["home", "backup", "--project", str(project), "--to", str(target)]
    return cmd if base is None else [*cmd, "--base", str(base)]


def settled_project(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose store last changed long enough ago to be recorded by a backup."""
    project, home = make_project(tmp_path, rows=500)
    time.sleep(SETTLED_NS / 1e9 + 0.1)
    return project, home


def traced(
    tmp_path: Path, project: Path, target: Path, base: Path | None = None
) -> tuple[int, dict[str, object]]:
    """A ``--json`` backup into ``target`` under strace: the bytes it read of the store, and
    its report."""
    cmd = [*kit.cli_command(), *backup_cmd(project, target, base), "--json"]
    done, log = trace_log(cmd, READS, env=env_for(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr
    return bytes_read(log, project / "home" / "chat.db"), json.loads(done.stdout)


def stored_database(zip_path: Path) -> tuple[zipfile.ZipInfo, bytes]:
    with zipfile.ZipFile(zip_path) as archive:
        info = archive.getinfo("chat.db")
        return info, archive.read(info)


def restored_rows(tmp_path: Path, zip_path: Path, project: Path, name: str) -> int:
    target = tmp_path / name
    done = kit.run_cli(
        ["home", "restore", str(zip_path), "--project", str(project), "--home", str(target)],
        env=env_for(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    return rows(target / "chat.db")


def test_an_unchanged_quiet_store_is_copied_from_the_base_unread(tmp_path: Path) -> None:
    project, home = settled_project(tmp_path)
    first, second = tmp_path / "first.zip", tmp_path / "second.zip"
    read_first, _report = traced(tmp_path, project, first)
    assert read_first > 0
    read_second, report = traced(tmp_path, project, second, base=first)
    assert read_second == 0
    assert report["base"] == str(first) and report["entries"] == report["reused"]
    info_first, data_first = stored_database(first)
    info_second, data_second = stored_database(second)
    assert data_second == data_first
    assert info_second.CRC == info_first.CRC
    assert info_second.compress_size == info_first.compress_size
    assert info_second.external_attr >> 16 & 0o777 == 0o600
    first.unlink()  # the second stands alone
    check = kit.run_cli(["home", "verify-backup", str(second)], env=env_for(tmp_path))
    assert check.returncode == 0, check.stderr
    assert restored_rows(tmp_path, second, project, "restored") == 500
    assert sorted(os.listdir(home)) == ["backups", "chat.db", "files", "skills"]


def test_a_changed_store_is_snapshotted_again_and_not_recorded_until_it_settles(
    tmp_path: Path,
) -> None:
    """A store written since its entry was made is read again; so is, at the next backup, one
    written just before a backup read it (its stat was not recorded: a second write within the
    same clock tick would not have moved it)."""
    project, home = settled_project(tmp_path)
    first, second, third = (tmp_path / f"{name}.zip" for name in ("first", "second", "third"))
    traced(tmp_path, project, first)
    conn = sqlite3.connect(home / "chat.db")
    conn.execute("INSERT INTO msg(body) VALUES ('written after the first backup')")
    conn.commit()
    conn.close()
    read_second, _report = traced(tmp_path, project, second, base=first)
    assert read_second > 0
    assert restored_rows(tmp_path, second, project, "second") == 501
    read_third, _report = traced(tmp_path, project, third, base=second)
    assert read_third > 0  # written less than SETTLED_NS before the second read it
    assert restored_rows(tmp_path, third, project, "third") == 501


def test_a_store_with_a_sidecar_beside_it_is_snapshotted_again(tmp_path: Path) -> None:
    """A ``-wal`` beside the store may hold commits its own bytes do not: equal stats say
    nothing then, and the store is read (as leftover sidecars are, 04 §5.1)."""
    project, home = settled_project(tmp_path)
    first, second = tmp_path / "first.zip", tmp_path / "second.zip"
    traced(tmp_path, project, first)
    (home / "chat.db-journal").write_bytes(b"")  # an empty journal: not hot, the rows stand
    read_second, _report = traced(tmp_path, project, second, base=first)
    assert read_second > 0
    assert restored_rows(tmp_path, second, project, "restored") == 500


def test_a_base_whose_store_entry_was_changed_gives_a_fresh_snapshot(tmp_path: Path) -> None:
    """The index says the store is unchanged, but the base's bytes for it are not those its
    read-back checked: the base is dropped with a warning, the store is snapshotted after all,
    and the backup holds its rows."""
    project, _home = settled_project(tmp_path)
    first, second = tmp_path / "first.zip", tmp_path / "second.zip"
    traced(tmp_path, project, first)
    info, _data = stored_database(first)
    at = info.header_offset + 30 + len(info.orig_filename.encode()) + len(info.extra)
    damaged = bytearray(first.read_bytes())
    damaged[at + info.compress_size // 2] ^= 0x55
    first.write_bytes(bytes(damaged))
    done = kit.run_cli(backup_cmd(project, second, first), env=env_for(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "is not used as the base" in done.stderr
    assert restored_rows(tmp_path, second, project, "restored") == 500


@pytest.mark.parametrize(
    ("changed_ago_ns", "expected"),
    [(0, False), (SETTLED_NS - 1, False), (SETTLED_NS, True), (10 * SETTLED_NS, True)],
)
def test_a_store_is_settled_once_its_last_change_is_two_seconds_before_the_read(
    tmp_path: Path, changed_ago_ns: int, expected: bool
) -> None:
    path = tmp_path / "store"
    path.write_bytes(b"x")
    st = os.stat(path)
    read_at = max(st.st_mtime_ns, st.st_ctime_ns) + changed_ago_ns
    assert settled_before(st, read_at) is expected
    # a time set in the future (utime) does not make a store settled either
    os.utime(path, ns=(st.st_atime_ns, read_at + SETTLED_NS))
    assert settled_before(os.stat(path), read_at) is False
