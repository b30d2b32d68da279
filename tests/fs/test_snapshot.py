"""snapshot_database: consistent copies that never change the source (04 §5.1, 02 §10)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.kit import tree_snapshot

from bundler.errors import Refused
from bundler.fs.snapshot import integrity_ok, open_readonly, snapshot_database, store_in_use


def tree_state(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Kind, mode, bytes (or link target) and mtime_ns of every entry of ``folder``."""
    return tree_snapshot(folder, mtimes=True, dir_mtimes=True)


def make_store(path: Path, rows: int = 200, *, wal: bool = True) -> None:
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE msg(id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO msg(body) VALUES (?)", [(f"row {i}" * 5,) for i in range(rows)])
    conn.commit()
    conn.close()


def leave_wal_behind(path: Path, rows: int = 50, *, keep_shm: bool = True) -> None:
    """Commit ``rows`` into the WAL from a process that dies without checkpointing."""
    code = (
        "import sqlite3, os, sys\n"
        "c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=WAL')\n"
        "c.execute('PRAGMA wal_autocheckpoint=0')\n"
        f"for i in range({rows}):\n"
        "    c.execute('INSERT INTO msg(body) VALUES (?)', ('late',)); c.commit()\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert Path(f"{path}-wal").stat().st_size > 0
    if not keep_shm:
        os.unlink(f"{path}-shm")


def count(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM msg").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("method", ["vacuum", "backup"])
def test_quiet_store_is_read_without_creating_or_changing_anything(
    tmp_path: Path, method: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    make_store(home / "chat.db", wal=False)
    os.chmod(home / "chat.db", 0o640)
    before = tree_state(home)
    time.sleep(0.01)
    info = snapshot_database(home / "chat.db", tmp_path / "snap.db", method=method)  # type: ignore[arg-type]
    assert tree_state(home) == before
    assert info.read_as == "quiet" and not info.retried
    assert count(tmp_path / "snap.db") == 200
    assert integrity_ok(tmp_path / "snap.db")
    assert (tmp_path / "snap.db").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("keep_shm", [True, False])
@pytest.mark.parametrize("method", ["vacuum", "backup"])
def test_leftover_wal_is_folded_in_without_touching_the_sidecars(
    tmp_path: Path, method: str, keep_shm: bool
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    make_store(home / "chat.db")
    leave_wal_behind(home / "chat.db", keep_shm=keep_shm)
    before = tree_state(home)
    time.sleep(0.01)
    info = snapshot_database(home / "chat.db", tmp_path / "snap.db", method=method)  # type: ignore[arg-type]
    assert tree_state(home) == before, "the snapshot changed the source or its sidecars"
    assert info.read_as == "leftover"
    assert count(tmp_path / "snap.db") == 250
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bundler-snap-")]


def test_store_with_server_attached_is_read_live_and_wal_survives(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    make_store(db)
    leave_wal_behind(db)
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM msg').fetchone()\n"
            "print('ready', flush=True); sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        assert store_in_use(db)
        wal_before = Path(f"{db}-wal").read_bytes()
        db_before = db.read_bytes()
        info = snapshot_database(db, tmp_path / "snap.db", method="vacuum")
        assert info.read_as == "live"
        assert count(tmp_path / "snap.db") == 250
        # a read-only connection never checkpoints: WAL and database bytes are unchanged
        assert Path(f"{db}-wal").read_bytes() == wal_before
        assert db.read_bytes() == db_before
    finally:
        server.communicate("")
    assert not store_in_use(db)


WRITER = """
import os, sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute('PRAGMA journal_mode=WAL')
c.execute('CREATE TABLE IF NOT EXISTS msg(id INTEGER PRIMARY KEY, body TEXT)')
i = 0
while True:
    c.execute('BEGIN IMMEDIATE')
    c.execute('INSERT INTO msg(body) VALUES (?)', ('x' * 200,))
    c.execute('COMMIT')
    i += 1
    if i % 50 == 0:
        with open(sys.argv[2] + '.tmp', 'w') as f:
            f.write(str(i))
        os.replace(sys.argv[2] + '.tmp', sys.argv[2])  # readers never see a half-written count
"""


@pytest.mark.parametrize("method", ["vacuum", "backup"])
def test_snapshot_during_tight_wal_writer_holds_every_row_committed_before(
    tmp_path: Path, method: str
) -> None:
    db = tmp_path / "chat.db"
    progress = tmp_path / "progress"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(progress)])
    try:
        deadline = time.monotonic() + 30
        while not (progress.exists() and int(progress.read_text()) >= 500):
            assert time.monotonic() < deadline, "writer did not start"
            time.sleep(0.01)
        committed_before = int(progress.read_text())
        info = snapshot_database(db, tmp_path / "snap.db", method=method)  # type: ignore[arg-type]
        committed_after = int(progress.read_text())
    finally:
        writer.kill()
        writer.wait()
    assert info.read_as == "live"
    assert integrity_ok(tmp_path / "snap.db")
    rows = count(tmp_path / "snap.db")
    assert committed_before <= rows <= committed_after + 50


def test_missing_store_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="does not exist"):
        snapshot_database(tmp_path / "chat.db", tmp_path / "snap.db", method="vacuum")
    assert not (tmp_path / "snap.db").exists()


def test_symlinked_store_is_refused_without_reading_the_target(tmp_path: Path) -> None:
    make_store(tmp_path / "real.db")
    (tmp_path / "chat.db").symlink_to(tmp_path / "real.db")
    with pytest.raises(Refused, match="symbolic link"):
        snapshot_database(tmp_path / "chat.db", tmp_path / "snap.db", method="vacuum")
    assert not (tmp_path / "snap.db").exists()


def test_not_a_database_is_refused_and_leaves_no_snapshot(tmp_path: Path) -> None:
    (tmp_path / "chat.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(Refused, match="not a readable SQLite database"):
        snapshot_database(tmp_path / "chat.db", tmp_path / "snap.db", method="vacuum")
    assert not (tmp_path / "snap.db").exists()


def test_existing_destination_is_never_overwritten(tmp_path: Path) -> None:
    make_store(tmp_path / "chat.db", wal=False)
    (tmp_path / "snap.db").write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        snapshot_database(tmp_path / "chat.db", tmp_path / "snap.db", method="vacuum")
    assert (tmp_path / "snap.db").read_bytes() == b"keep"


def test_every_connection_runs_with_trusted_schema_off(tmp_path: Path) -> None:
    """A hostile schema cannot make the reader run SQL functions it did not ask for."""
    make_store(tmp_path / "chat.db", wal=False)
    for immutable in (True, False):
        with open_readonly(tmp_path / "chat.db", immutable=immutable) as conn:
            assert conn.execute("PRAGMA trusted_schema").fetchone() == (0,)
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                conn.execute("INSERT INTO msg(body) VALUES ('x')")


def test_hot_rollback_journal_is_rolled_back_in_a_private_copy_only(tmp_path: Path) -> None:
    """A writer killed mid-transaction leaves a hot -journal; the snapshot holds the last commit."""
    home = tmp_path / "home"
    home.mkdir()
    make_store(home / "chat.db", rows=300, wal=False)
    code = (
        "import sqlite3, os, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA cache_size=1')\n"  # spill changed pages into the file before commit
        "c.execute('BEGIN')\n"
        "c.execute('UPDATE msg SET body = ?', ('overwritten' * 20,))\n"
        "c.execute('INSERT INTO msg(body) SELECT body FROM msg')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(home / "chat.db")], check=True)
    assert Path(f"{home / 'chat.db'}-journal").stat().st_size > 0
    before = tree_state(home)
    info = snapshot_database(home / "chat.db", tmp_path / "snap.db", method="vacuum")
    assert info.read_as == "leftover"
    assert tree_state(home) == before
    assert count(tmp_path / "snap.db") == 300
    conn = sqlite3.connect(f"file:{tmp_path / 'snap.db'}?mode=ro", uri=True)
    assert conn.execute("SELECT count(*) FROM msg WHERE body LIKE 'overwritten%'").fetchone() == (
        0,
    )
    conn.close()


# --- the lock probe asks the kernel with the platform's struct flock ----------------------------

LOCK_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_SH if sys.argv[4] == "read" else fcntl.LOCK_EX,
            int(sys.argv[3]), int(sys.argv[2]))
print("held", flush=True)
sys.stdin.read()
"""


def _hold_lock(path: Path, start: int, length: int, kind: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(path), str(start), str(length), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize(
    ("start", "length", "kind"),
    [
        (0x40000000, 1, "write"),  # PENDING: a writer committing in rollback mode
        (0x40000002 + 300, 1, "read"),  # one byte of the SHARED range: a reader
        (0x40000000 + 511, 1, "read"),  # the last byte of the range SQLite uses
    ],
)
def test_lock_probe_reports_the_holder_of_a_lock_in_sqlites_database_range(
    tmp_path: Path, start: int, length: int, kind: str
) -> None:
    from bundler.fs.snapshot import lock_holder

    db = tmp_path / "chat.db"
    make_store(db, wal=False)
    assert lock_holder(str(db), 0x40000000, 512) is None
    holder = _hold_lock(db, start, length, kind)
    try:
        # the pid, start and length the kernel wrote back are read from the right offsets
        assert lock_holder(str(db), 0x40000000, 512) == (holder.pid, start, length)
        assert lock_holder(str(db), 0, 0x40000000) is None, "no lock below the range"
        assert store_in_use(db)
    finally:
        holder.communicate("")
    assert lock_holder(str(db), 0x40000000, 512) is None
    assert not store_in_use(db)


def test_lock_probe_sees_the_dms_lock_of_a_wal_reader_on_the_shm(tmp_path: Path) -> None:
    from bundler.fs.snapshot import lock_holder

    db = tmp_path / "chat.db"
    make_store(db)
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM msg').fetchone()\n"
            "print('ready', flush=True); sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
        held = lock_holder(f"{db}-shm", 120, 16)
        assert held is not None and held[0] == reader.pid
        assert store_in_use(db)
    finally:
        reader.communicate("")
    assert not store_in_use(db)


def test_home_backup_with_a_reader_attached_reads_live_and_changes_no_byte(tmp_path: Path) -> None:
    """Through the CLI: a WAL home with a reader attached (the lock probe says "in use")."""
    from support.hostile_zips import clean_env, make_project, run_cli

    project, home = make_project(tmp_path)
    db = home / "chat.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    leave_wal_behind(db, rows=40)
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM msg').fetchone()\n"
            "print('ready', flush=True); sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    user = tmp_path / "user"
    user.mkdir()
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
        wal_before, db_before = Path(f"{db}-wal").read_bytes(), db.read_bytes()
        done = run_cli(
            "home",
            "backup",
            "--project",
            str(project),
            "--to",
            str(tmp_path / "b.zip"),
            env=clean_env(user),
        )
        assert done.returncode == 0, done.stderr
        assert Path(f"{db}-wal").read_bytes() == wal_before and db.read_bytes() == db_before
    finally:
        reader.communicate("")
    import zipfile

    with zipfile.ZipFile(tmp_path / "b.zip") as archive:
        (tmp_path / "restored.db").write_bytes(archive.read("chat.db"))
    assert count(tmp_path / "restored.db") == 30 + 40
