"""The copier (02 §7.1, 9.2): bytes, digests, metadata, live stores, O_EXCL, durability."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash
from support.race_helpers import can_mount_tmpfs, unmount

from bundler.errors import Refused
from bundler.fs.copytree import CopiedFile, CopyOptions, copy_tree, digest_fd, make_durable
from bundler.fs.safefs import SkipCounts, WorkspaceExclude, open_source_root


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    yield src, dst


def copy(
    src: Path,
    dst: Path,
    *,
    prefix: str = "workspace/",
    workspace: bool = True,
    use_cfr: bool = True,
) -> tuple[list[CopiedFile], SkipCounts, list[str]]:
    src_fd = open_source_root(src, install_root=None)
    assert src_fd is not None
    dst_fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
    counts, live = SkipCounts(), []
    try:
        copied = list(
            copy_tree(
                src_fd,
                dst_fd,
                CopyOptions(
                    prefix=prefix,
                    exclude=WorkspaceExclude(src_fd) if workspace else None,
                    on_skip=counts.record,
                    on_live_store=live.append,
                    use_copy_file_range=use_cfr,
                ),
            )
        )
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    return copied, counts, live


def test_copy_carries_bytes_and_xxh3_128_digests(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "a").mkdir()
    (src / "a" / "big").write_bytes(os.urandom(3 * (1 << 20) + 17))  # several buffer refills
    (src / "empty").write_bytes(b"")
    copied, _, _ = copy(src, dst)
    assert [c.relpath for c in copied] == ["workspace/a/big", "workspace/empty"]
    for item in copied:
        data = (dst / item.relpath.removeprefix("workspace/")).read_bytes()
        assert data == (src / item.relpath.removeprefix("workspace/")).read_bytes()
        assert item.size == len(data)
        assert item.xxh3_128 == xxhash.xxh3_128(data).hexdigest()


def test_copied_files_come_in_checksum_order_a_c_before_a_b(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "a").mkdir()
    (src / "a" / "c").write_text("c")
    (src / "a-b").write_text("ab")
    copied, _, _ = copy(src, dst, prefix="")
    assert [c.relpath for c in copied] == ["a/c", "a-b"]


def test_executable_bits_kept_setuid_setgid_sticky_dropped(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    (src / "suid").write_text("x")
    (src / "suid").chmod(0o6755)
    (src / "sticky").write_text("x")
    (src / "sticky").chmod(0o1640)
    (src / "readonly").write_text("x")
    (src / "readonly").chmod(0o400)
    copy(src, dst)
    modes = {name: stat.S_IMODE(os.stat(dst / name).st_mode) for name in os.listdir(dst)}
    assert modes == {"run.sh": 0o755, "suid": 0o755, "sticky": 0o640, "readonly": 0o400}


def test_mtime_kept_to_the_nanosecond(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "old").write_text("x")
    os.utime(src / "old", ns=(1_000_000_123, 1_234_567_890_123_456_789))
    copy(src, dst)
    assert os.stat(dst / "old").st_mtime_ns == 1_234_567_890_123_456_789


def test_folders_created_0700(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "shared").mkdir(mode=0o777)
    (src / "shared").chmod(0o777)
    copy(src, dst)
    assert stat.S_IMODE(os.stat(dst / "shared").st_mode) == 0o700


def test_root_memory_not_copied_nested_notes_memory_carried(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "memory").mkdir()
    (src / "memory" / "brain.db").write_text("private")
    (src / "MEMORY_SNAPSHOT.md").write_text("private")
    (src / "notes" / "memory").mkdir(parents=True)
    (src / "notes" / "memory" / "x").write_text("travels")
    copied, _, _ = copy(src, dst)
    assert [c.relpath for c in copied] == ["workspace/notes/memory/x"]
    assert sorted(os.listdir(dst)) == ["notes"]


def make_live_store(path: Path, *, journal_mode: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode={journal_mode}")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES ('private row')")
    conn.commit()
    if journal_mode == "wal":
        return conn
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t VALUES ('in flight')")  # keeps the -journal beside it
    return conn


def test_live_sqlite_store_with_wal_not_copied_and_reported(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "db").mkdir()
    conn = make_live_store(src / "db" / "app.db", journal_mode="wal")
    try:
        assert (src / "db" / "app.db-wal").exists()
        copied, _, live = copy(src, dst)
    finally:
        conn.close()
    assert live == ["workspace/db/app.db", "workspace/db/app.db-shm", "workspace/db/app.db-wal"]
    assert copied == []
    assert os.listdir(dst / "db") == []


def test_live_sqlite_store_with_journal_not_copied(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    conn = make_live_store(src / "cache.sqlite", journal_mode="delete")
    try:
        assert (src / "cache.sqlite-journal").exists()
        _, _, live = copy(src, dst)
    finally:
        conn.rollback()
        conn.close()
    assert live == ["workspace/cache.sqlite", "workspace/cache.sqlite-journal"]


def test_quiet_sqlite_database_without_sidecar_is_copied(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    conn = sqlite3.connect(src / "quiet.db")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    copied, _, live = copy(src, dst)
    assert live == [] and [c.relpath for c in copied] == ["workspace/quiet.db"]


def test_no_copied_file_starts_with_sqlite_magic_from_a_live_store(
    dirs: tuple[Path, Path],
) -> None:
    src, dst = dirs
    conns = []
    for index in range(5):
        (src / f"d{index}").mkdir()
        conns.append(make_live_store(src / f"d{index}" / "s.db", journal_mode="wal"))
        (src / f"d{index}" / "plain.txt").write_text("SQLite format 3 lookalike without NUL")
    try:
        copy(src, dst)
    finally:
        for conn in conns:
            conn.close()
    for dirpath, _dirs, names in os.walk(dst):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as handle:
                assert not handle.read(16).startswith(b"SQLite format 3\0")


def test_existing_destination_name_refused_not_overwritten(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "f").write_text("new")
    (dst / "f").write_text("planted")
    with pytest.raises(Refused, match="cannot write workspace/f") as raised:
        copy(src, dst)
    assert raised.value.path == "workspace/f"
    assert (dst / "f").read_text() == "planted"


def test_planted_destination_symlink_not_written_through(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    src, dst = dirs
    (src / "f").write_text("new")
    (tmp_path / "victim").write_text("intact")
    (dst / "f").symlink_to(tmp_path / "victim")
    with pytest.raises(Refused):
        copy(src, dst)
    assert (tmp_path / "victim").read_text() == "intact"


@pytest.mark.parametrize("use_cfr", [True, False], ids=["copy_file_range", "read_write"])
def test_observer_sees_every_byte_in_order(dirs: tuple[Path, Path], use_cfr: bool) -> None:
    src, dst = dirs
    payload = os.urandom(2 * (1 << 20) + 5)
    (src / "x").write_bytes(payload)
    (src / "y").write_bytes(b"tail")
    seen: dict[str, bytearray] = {}
    src_fd = open_source_root(src, install_root=None)
    assert src_fd is not None
    dst_fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in copy_tree(
            src_fd,
            dst_fd,
            CopyOptions(
                observer=lambda path, chunk: seen.setdefault(path, bytearray()).extend(chunk),
                use_copy_file_range=use_cfr,
            ),
        ):
            pass
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    assert seen == {"x": bytearray(payload), "y": bytearray(b"tail")}


@pytest.mark.parametrize("use_cfr", [True, False], ids=["copy_file_range", "read_write"])
def test_disk_full_refused_naming_the_file(tmp_path: Path, use_cfr: bool) -> None:
    mnt = tmp_path / "small"
    if not can_mount_tmpfs(mnt):
        pytest.skip("this host forbids mounting a tmpfs (needed for a real ENOSPC)")
    try:
        src = tmp_path / "src"
        src.mkdir()
        (src / "huge").write_bytes(os.urandom(2 << 20))  # the tmpfs holds 1 MiB
        with pytest.raises(Refused, match=r"cannot copy workspace/huge \(No space left") as r:
            copy(src, mnt, use_cfr=use_cfr)
        assert r.value.path == "workspace/huge"
    finally:
        unmount(mnt)


def test_digest_fd_matches_xxhsum_format(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"hello\n")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        size, digest = digest_fd(fd)
    finally:
        os.close(fd)
    assert size == 6
    assert digest == xxhash.xxh3_128(b"hello\n").hexdigest() and len(digest) == 32


@pytest.mark.parametrize("method", ["auto", "syncfs", "fsync"])
def test_make_durable_flushes_with_each_method(dirs: tuple[Path, Path], method: str) -> None:
    src, dst = dirs
    (src / "d").mkdir()
    (src / "d" / "f").write_text("x")
    copy(src, dst)
    fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
    try:
        used = make_durable(fd, method=method)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert used in ("syncfs", "fsync")
    if method != "auto":
        assert used == method


@pytest.mark.parametrize("use_cfr", [True, False], ids=["copy_file_range", "read_write"])
@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 2 << 20])
def test_copy_exact_at_buffer_boundaries(dirs: tuple[Path, Path], size: int, use_cfr: bool) -> None:
    src, dst = dirs
    data = os.urandom(size)
    (src / "f").write_bytes(data)
    (copied,), _, _ = copy(src, dst, use_cfr=use_cfr)
    assert (dst / "f").read_bytes() == data
    assert copied.size == size and copied.xxh3_128 == xxhash.xxh3_128(data).hexdigest()


def test_file_growing_after_classification_is_copied_to_its_end(dirs: tuple[Path, Path]) -> None:
    src, dst = dirs
    (src / "log").write_bytes(b"start\n")
    src_fd = open_source_root(src, install_root=None)
    assert src_fd is not None
    dst_fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)

    def grow(rel: str, _st: os.stat_result) -> bool:
        with open(src / rel, "ab") as handle:
            handle.write(b"appended before the open\n")
        return False

    try:
        (copied,) = list(copy_tree(src_fd, dst_fd, CopyOptions(exclude=grow)))
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    assert (dst / "log").read_bytes() == b"start\nappended before the open\n"
    assert copied.size == 31


FAULT_SCRIPT = """
import os, sys
from pathlib import Path
from bundler.fs.copytree import CopyOptions, copy_tree, make_durable
from bundler.errors import Refused
from bundler.fs.safefs import open_source_root
src = open_source_root(Path(sys.argv[1]), install_root=None)
dst = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECTORY)
try:
    options = CopyOptions(prefix="workspace/", use_copy_file_range=sys.argv[3] == "cfr")
    for _ in copy_tree(src, dst, options):
        pass
    make_durable(dst, method="fsync")
except Refused as exc:
    print(exc.message)
    sys.exit(exc.code)
"""


@pytest.mark.parametrize(
    ("syscall", "method", "expected"),
    [
        ("fsync", "cfr", "could not make a durable (Input/output error)"),
        ("copy_file_range", "cfr", "cannot copy workspace/a (Input/output error): check the disk"),
        ("write", "rw", "cannot copy workspace/a (Input/output error): check the disk"),
        ("readv", "rw", "cannot copy workspace/a (Input/output error): check the disk"),
        ("preadv,preadv2", "cfr", "cannot read workspace/a (Input/output error): check the disk"),
    ],
)
def test_io_error_refused_naming_the_file(
    dirs: tuple[Path, Path], syscall: str, method: str, expected: str
) -> None:
    import shutil
    import subprocess
    import sys

    if shutil.which("strace") is None:
        pytest.skip("strace is needed to inject a real EIO into the copying process")
    src, dst = dirs
    (src / "a").write_bytes(b"payload")
    result = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            f"trace={syscall}",
            "-e",
            f"inject={syscall}:error=EIO:when=1",
            sys.executable,
            "-c",
            FAULT_SCRIPT,
            str(src),
            str(dst),
            method,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip().startswith(expected)
    assert "Traceback" not in result.stderr


def test_copy_tree_takes_its_options_object_only(dirs: tuple[Path, Path]) -> None:
    # how a copy is made is one frozen options object; a stray keyword is a TypeError, not a
    # second way to say the same thing
    from bundler.fs.copytree import CopyOptions

    src, dst = dirs
    (src / "notes.md").write_text("hello\n")
    src_fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    dst_fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
    options = CopyOptions(prefix="workspace/", use_copy_file_range=False)
    try:
        (copied,) = list(copy_tree(src_fd, dst_fd, options))
        assert copied.relpath == "workspace/notes.md"
        assert (dst / "notes.md").read_text() == "hello\n"
        with pytest.raises(TypeError):
            list(copy_tree(src_fd, dst_fd, options, prefix="memory/"))  # type: ignore[call-arg]
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    assert options.prefix == "workspace/"
