"""A failed database snapshot is blamed on what failed, never on a sound store (05 §3).

Every SQLite error of a snapshot used to read "<chat.db> is not a readable SQLite database
(...): repair or remove it": a full destination disk, a file size limit, a store this user may
not read, and, for ``agents export --include-memory``, a store named ``/proc/self/fd/6/brain.db``.
Now a failure to write names the destination, an unreadable store says so with its real path,
and only a store SQLite finds corrupt is told to be repaired.

The faults are real: a file size limit (``RLIMIT_FSIZE``), an ``ENOSPC`` strace injects into
SQLite's write, and a store of mode 000 read by uid 65534.
"""

from __future__ import annotations

import os
import resource
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.hostile_zips import clean_env, make_project
from support.kit import cli_command, one_error

BLAME = "repair or remove it"


def _grow(database: Path, rows: int) -> None:
    conn = sqlite3.connect(database)
    try:
        conn.executemany("INSERT INTO msg(body) VALUES (?)", [("x" * 200,)] * rows)
        conn.commit()
    finally:
        conn.close()


def _small_files(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_file_size_limit_while_backing_up_names_the_destination_not_the_database(
    tmp_path: Path,
) -> None:
    project, home = make_project(tmp_path)
    _grow(home / "chat.db", 2000)
    before = (home / "chat.db").read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [*cli_command(), "home", "backup", "--project", str(project), "--to", str(out / "b.zip")],
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
        preexec_fn=lambda: _small_files(64 * 1024),
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert one_error(done.stderr), done.stderr
    assert BLAME not in done.stderr
    assert f"writing in {out}" in done.stderr
    assert os.listdir(out) == []
    assert (home / "chat.db").read_bytes() == before


def test_a_full_disk_while_backing_up_names_the_destination_not_the_database(
    tmp_path: Path,
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    project, _home = make_project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [*cli_command(), "home", "backup", "--project", str(project), "--to", str(out / "b.zip")]
    env = clean_env(tmp_path)
    done, calls = trace_calls(cmd, ["pwrite64"], env=env, cwd="/", relevant=str(out))
    assert done.returncode == 0, done.stderr
    first = next(call for call in calls if ".db" in call.line)  # SQLite writing the snapshot
    (out / "b.zip").unlink()
    run = run_with_fault(cmd, "pwrite64", first.index, "ENOSPC", env=env, cwd="/")
    assert run.fired
    assert run.returncode == 1, run.stderr
    assert one_error(run.stderr), run.stderr
    assert BLAME not in run.stderr
    assert "No space left on device" in run.stderr and str(out) in run.stderr
    assert os.listdir(out) == []


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder another user can traverse (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="bundler-snapshot-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to uid 65534 in the child")
def test_a_database_this_user_may_not_read_is_named_with_permission_denied(
    shared_tmp: Path,
) -> None:
    project, home = make_project(shared_tmp)
    for folder, _dirs, files in os.walk(shared_tmp):
        os.chown(folder, 65534, 65534)
        for name in files:
            os.chown(os.path.join(folder, name), 65534, 65534)
    os.chmod(home / "chat.db", 0)
    done = subprocess.run(
        [*cli_command(as_nobody=True), "home", "backup", "--project", str(project)],
        capture_output=True,
        text=True,
        env=clean_env(shared_tmp),
        cwd="/",
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert one_error(done.stderr), done.stderr
    assert BLAME not in done.stderr
    assert f"cannot read {home / 'chat.db'} (Permission denied)" in done.stderr


def test_a_file_size_limit_exporting_memory_names_no_proc_path_and_blames_no_store(
    tmp_path: Path,
) -> None:
    install = bf.write_install(tmp_path / "install", memory=True)
    store = install / "agents" / bf.ROOT_AGENT / "workspace" / "memory" / "brain.db"
    conn = sqlite3.connect(store)
    try:
        conn.executemany("INSERT INTO memories (body) VALUES (?)", [("m" * 200,)] * 2000)
        conn.commit()
    finally:
        conn.close()
    out = tmp_path / "out"
    done = subprocess.run(
        [*cli_command(), "agents", "export", bf.ROOT_AGENT, "--out", str(out), "--include-memory"],
        capture_output=True,
        text=True,
        env={**clean_env(tmp_path), "ZEROCLAW_CONFIG_DIR": str(install)},
        preexec_fn=lambda: _small_files(64 * 1024),
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert one_error(done.stderr), done.stderr
    assert BLAME not in done.stderr
    assert "/proc/self/fd" not in done.stderr
    assert not out.exists()
