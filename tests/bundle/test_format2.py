"""Bundle format 2 end to end through the real CLI (02 §10, 03 §3.1 point 9; issue: format 2).

Memory travels only as a consistent snapshot: taken while a writer commits, it holds a prefix
of the committed rows; taken from a quiet store, it leaves every byte, mode and mtime of the
source and its sidecars as they were. Without ``--include-memory`` the exporter's format 1 is
unchanged, byte for byte, against a bundle stored in ``tests/expected``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.bundlefactory import reseal
from support.kit import run_cli
from support.race_helpers import run_as_nobody

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "install"
EXPECTED_FORMAT_1 = Path(__file__).resolve().parents[1] / "expected" / "researcher-format1"
EPOCH = "1764000000"  # 2025-11-24T16:00:00Z

WRITER = r"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("CREATE TABLE IF NOT EXISTS ticks (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)")
print("ready", flush=True)
n = 0
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    conn.execute("INSERT INTO ticks (payload) VALUES (?)", ("x" * 200,))
    n += 1
print(n, flush=True)
"""


def bundler(
    *args: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={"SOURCE_DATE_EPOCH": EPOCH, **(env_extra or {})}, timeout=300)


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = tmp_path / "install"
    shutil.copytree(EXAMPLE, root, symlinks=True)
    return root


def brain_of(install: Path) -> Path:
    return install / "agents" / "researcher" / "workspace" / "memory" / "brain.db"


def export(install: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return bundler(
        "--install", str(install), "agents", "export", "researcher", "--out", str(out), *extra
    )


def rows(database: Path, table: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True)
    try:
        return list(conn.execute(f"SELECT * FROM {table} ORDER BY id"))
    finally:
        conn.close()


def integrity(database: Path) -> str:
    conn = sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def file_states(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file of ``folder``: bytes, mode and mtime in nanoseconds."""
    states = {}
    for entry in sorted(folder.iterdir()):
        st = entry.lstat()
        states[entry.name] = (entry.read_bytes(), st.st_mode, st.st_mtime_ns)
    return states


def test_include_memory_while_a_writer_commits_gives_a_valid_snapshot(
    install: Path, tmp_path: Path
) -> None:
    brain = brain_of(install)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(brain), "6"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        before = (
            sqlite3.connect(str(brain), timeout=30)
            .execute("SELECT count(*) FROM ticks")
            .fetchone()[0]
        )
        done = export(install, tmp_path / "bundle", "--include-memory")
        after = (
            sqlite3.connect(str(brain), timeout=30)
            .execute("SELECT count(*) FROM ticks")
            .fetchone()[0]
        )
    finally:
        writer.wait(timeout=60)
    assert done.returncode == 0, done.stderr
    store = tmp_path / "bundle" / "memory" / "brain.db"
    assert integrity(store) == "ok"
    carried = rows(store, "ticks")
    assert before <= len(carried) <= after
    # a valid snapshot is a prefix of the committed rows: ids 1..n with nothing missing
    assert [row[0] for row in carried] == list(range(1, len(carried) + 1))
    assert rows(store, "memories") == rows(brain_of(EXAMPLE.parent / "install"), "memories")
    verified = bundler("bundle", "verify", str(tmp_path / "bundle"))
    assert verified.returncode == 0, verified.stderr


@pytest.mark.parametrize("leftover_wal", [False, True], ids=["quiet", "leftover-wal"])
def test_include_memory_leaves_the_source_store_and_sidecars_untouched(
    install: Path, tmp_path: Path, leftover_wal: bool
) -> None:
    brain = brain_of(install)
    if leftover_wal:
        # a server that died: WAL mode with committed frames not yet checkpointed
        conn = sqlite3.connect(str(brain), isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("INSERT INTO memories (category, content) VALUES ('fact', 'only in the wal')")
        shutil.copy2(brain, tmp_path / "brain.db")
        shutil.copy2(str(brain) + "-wal", tmp_path / "brain.db-wal")
        shutil.copy2(str(brain) + "-shm", tmp_path / "brain.db-shm")
        conn.close()  # the last close would checkpoint: put the crash-time files back
        for name in ("brain.db", "brain.db-wal", "brain.db-shm"):
            shutil.copy2(tmp_path / name, brain.parent / name)
        assert os.path.exists(str(brain) + "-wal")
    os.utime(brain, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = file_states(brain.parent)
    done = export(install, tmp_path / "bundle", "--include-memory")
    assert done.returncode == 0, done.stderr
    assert file_states(brain.parent) == before
    carried = rows(tmp_path / "bundle" / "memory" / "brain.db", "memories")
    if leftover_wal:
        assert ("only in the wal",) in [(row[2],) for row in carried]


def test_format_2_round_trip_restores_the_snapshot_rows(install: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    assert export(install, bundle, "--include-memory").returncode == 0
    target = tmp_path / "target"
    target.mkdir()
    done = bundler("--install", str(target), "agents", "import", str(bundle), "--accept-risks")
    assert done.returncode == 0, done.stderr
    restored = target / "agents" / "researcher" / "workspace" / "memory" / "brain.db"
    assert rows(restored, "memories") == rows(bundle / "memory" / "brain.db", "memories")
    assert rows(restored, "memories") == rows(brain_of(install), "memories")


def test_format_1_is_byte_identical_to_the_stored_expected_bundle(
    install: Path, tmp_path: Path
) -> None:
    out = tmp_path / "bundle"
    done = export(install, out)
    assert done.returncode == 0, done.stderr
    produced = {
        p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }
    expected = {
        p.relative_to(EXPECTED_FORMAT_1).as_posix(): p.read_bytes()
        for p in sorted(EXPECTED_FORMAT_1.rglob("*"))
        if p.is_file()
    }
    assert sorted(produced) == sorted(expected)
    for name, data in expected.items():
        assert produced[name] == data, name


def regenerate_expected() -> None:
    """Rewrite ``tests/expected/researcher-format1`` (run by hand after a deliberate change)."""
    shutil.rmtree(EXPECTED_FORMAT_1, ignore_errors=True)
    done = export(EXAMPLE, EXPECTED_FORMAT_1)
    if done.returncode != 0:
        raise SystemExit(done.stderr)


if __name__ == "__main__":
    regenerate_expected()


# --- the snapshot is in rollback-journal mode ---------------------------------------------------


def header_versions(database: Path) -> bytes:
    """Bytes 18 and 19 of the SQLite header: file format write/read version (1 rollback, 2 WAL)."""
    with open(database, "rb") as handle:
        return handle.read(20)[18:20]


def make_wal_store(brain: Path) -> None:
    """Put the store in WAL mode for good (the mode is stored in the file; no sidecar stays)."""
    conn = sqlite3.connect(str(brain), isolation_level=None)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    assert header_versions(brain) == b"\x02\x02"
    assert not os.path.exists(f"{brain}-wal")


@pytest.fixture
def world_readable_tmp() -> Iterator[Path]:
    """A folder user 65534 can reach (pytest's tmp_path lies below a 0700 root folder)."""
    folder = Path(tempfile.mkdtemp(prefix="bundler-f2-", dir="/tmp"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop privileges to uid 65534")
def test_memory_snapshot_of_a_wal_store_is_in_rollback_mode_and_opens_read_only_anywhere(
    install: Path, world_readable_tmp: Path
) -> None:
    brain = brain_of(install)
    make_wal_store(brain)
    before = file_states(brain.parent)
    bundle = world_readable_tmp / "bundle"
    done = export(install, bundle, "--include-memory")
    assert done.returncode == 0, done.stderr
    assert file_states(brain.parent) == before, "the source is never touched"
    store = bundle / "memory" / "brain.db"
    assert header_versions(store) == b"\x01\x01"
    for folder, _dirs, files in os.walk(bundle):
        os.chmod(folder, 0o755)  # root's folders: user 65534 can read them, never write
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    expected = rows(brain, "memories")

    def read_as_nobody() -> list[tuple[object, ...]]:
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            return list(conn.execute("SELECT * FROM memories ORDER BY id"))
        finally:
            conn.close()

    # an unprivileged reader, who cannot write the bundle's folders
    assert run_as_nobody(read_as_nobody) == expected
    # read-only media: the bundle's memory folder mounted read-only, read by root
    media = world_readable_tmp / "media"
    media.mkdir()
    subprocess.run(["mount", "--bind", str(store.parent), str(media)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(media)], check=True)
        conn = sqlite3.connect(f"file:{media / 'brain.db'}?mode=ro", uri=True)
        try:
            assert list(conn.execute("SELECT * FROM memories ORDER BY id")) == expected
        finally:
            conn.close()
    finally:
        subprocess.run(["umount", str(media)], check=True)
    # a read-only open where the bundle is writable creates no -wal/-shm: verify still passes
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        assert list(conn.execute("SELECT * FROM memories ORDER BY id")) == expected
    finally:
        conn.close()
    assert [name for name in os.listdir(store.parent) if name.startswith("brain.db-")] == []
    verified = bundler("bundle", "verify", str(bundle))
    assert verified.returncode == 0, verified.stderr


def test_bundle_verify_refuses_a_carried_store_in_wal_mode(install: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    assert export(install, bundle, "--include-memory").returncode == 0
    store = bundle / "memory" / "brain.db"
    data = bytearray(store.read_bytes())
    data[18:20] = b"\x02\x02"  # what a WAL-mode store says: a reader needs a writable folder
    store.write_bytes(bytes(data))
    reseal(bundle)
    done = bundler("bundle", "verify", str(bundle))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "memory/brain.db" in done.stdout + done.stderr
    assert "rollback" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_verify_of_a_format_2_bundle_leaves_no_private_folder_and_clears_a_killed_runs(
    install: Path, tmp_path: Path
) -> None:
    """The memory store is checked from a copy in a private scratch folder of the temporary
    folder: removed when verify ends, and one a killed verify left (unlocked) is removed by the
    next verify that makes one."""
    bundle = tmp_path / "bundle"
    assert export(install, bundle, "--include-memory").returncode == 0
    private = tmp_path / "tmp"
    private.mkdir()
    (private / "bundler-verify-Kil1edRunAbc").mkdir(mode=0o700)
    done = bundler("bundle", "verify", str(bundle), env_extra={"TMPDIR": str(private)})
    assert done.returncode == 0, done.stderr
    assert list(private.iterdir()) == []
