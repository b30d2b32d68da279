"""Durability primitives: atomic replacement and renameat2 through ctypes."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bundler.fs import durable


@pytest.mark.parametrize("replace", [durable.atomic_write, durable.replace_unsynced])
def test_a_replacement_replaces_and_leaves_no_temporary(
    tmp_path: Path, replace: Callable[..., None]
) -> None:
    (tmp_path / "f").write_bytes(b"old")
    fd = durable.open_dir(tmp_path)
    try:
        replace(fd, "f", b"new", mode=0o640)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"new"
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["f"]


def test_atomic_write_does_not_follow_a_planted_temporary_link(tmp_path: Path) -> None:
    fd = durable.open_dir(tmp_path)
    try:
        durable.atomic_write(fd, "f", b"x")
        assert sorted(os.listdir(tmp_path)) == ["f"]
    finally:
        os.close(fd)


def test_replace_unsynced_that_fails_leaves_the_old_file_and_no_temporary(
    tmp_path: Path,
) -> None:
    (tmp_path / "f").write_bytes(b"old")
    (tmp_path / "d").mkdir()
    fd = durable.open_dir(tmp_path)
    try:
        with pytest.raises(OSError):
            durable.replace_unsynced(fd, "d", b"new")  # a folder: the rename is refused
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["d", "f"]


def test_rename_noreplace_refuses_an_existing_destination(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    fd = durable.open_dir(tmp_path)
    try:
        with pytest.raises(OSError) as raised:
            durable.renameat2(fd, "a", fd, "b", durable.RENAME_NOREPLACE)
    finally:
        os.close(fd)
    assert raised.value.errno in (errno.EEXIST, *durable.UNSUPPORTED_ERRNOS)
    assert (tmp_path / "b").read_text() == "b"


def test_rename_exchange_swaps_two_entries(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").write_text("file")
    fd = durable.open_dir(tmp_path)
    try:
        durable.renameat2(fd, "a", fd, "b", durable.RENAME_EXCHANGE)
    except OSError as err:
        pytest.skip(f"this filesystem does not support RENAME_EXCHANGE ({err.strerror})")
    finally:
        os.close(fd)
    assert (tmp_path / "a").read_text() == "file"
    assert (tmp_path / "b").is_dir()


def test_open_dir_refuses_a_symbolic_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    with pytest.raises(OSError):
        durable.open_dir(tmp_path / "link")


def test_random_tokens_are_12_alphanumerics() -> None:
    token = durable.random_token()
    assert len(token) == 12 and token.isalnum() and token.isascii()


def test_start_writeback_is_a_hint_that_changes_nothing(tmp_path: Path) -> None:
    """A hint: the file's bytes stay what they were, and a descriptor it cannot use is ignored
    (the flush to come reports real failures)."""
    from bundler.fs.durable import start_writeback

    data = os.urandom(4 << 20)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        start_writeback(fd)
        start_writeback(fd, 1 << 20, 1 << 20)
        os.fsync(fd)
    finally:
        os.close(fd)
    start_writeback(fd)  # closed: EBADF, ignored
    assert path.read_bytes() == data
