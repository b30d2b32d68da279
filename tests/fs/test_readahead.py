"""Reading a file ahead of its reader (bundler.fs.readahead): the bytes come into the page cache
while the block runs, never more than a window past what the reader reported, and the thread
and its descriptor are gone when the block ends, however it ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bundler.fs import readahead
from bundler.fs.interrupts import NO_THREAD
from bundler.fs.readahead import CHUNK, read_ahead
from bundler.fs.threads import running

MIB = 1 << 20


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _until(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture
def data_file(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    path = tmp_path / "data.bin"
    with open(path, "wb") as sink:
        sink.write(os.urandom(24 * MIB))
        sink.flush()
        os.fsync(sink.fileno())
    yield path, 24 * MIB


def _resident(path: Path) -> int:
    """Bytes of ``path`` in the page cache, by util-linux's fincore."""
    shown = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(shown.strip())


def test_the_file_comes_into_the_page_cache_while_the_block_runs(
    data_file: tuple[Path, int],
) -> None:
    path, size = data_file
    if shutil.which("fincore") is None:
        pytest.skip("util-linux's fincore is not installed: the page cache cannot be seen")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if _resident(path) > size // 4:
            pytest.skip("this file system keeps the file cached (tmpfs?): nothing to read ahead")
        with read_ahead(fd, 0, size, window=size) as ahead:
            # the block reads nothing itself
            assert _until(lambda: ahead.read_to == size)
            # evicted above and read by nothing else: what is cached the thread read (at least
            # most of it, should the machine reclaim some of it meanwhile)
            assert _resident(path) >= size // 2
    finally:
        os.close(fd)


def test_the_thread_stays_a_window_ahead_of_what_the_reader_reported(
    data_file: tuple[Path, int],
) -> None:
    path, size = data_file
    window = 2 * CHUNK
    fd = os.open(path, os.O_RDONLY)
    try:
        with read_ahead(fd, 0, size, window=window) as ahead:
            assert _until(lambda: ahead.read_to >= window)
            time.sleep(0.2)  # time enough for more reads, were any allowed
            assert ahead.read_to == window
            ahead.reached(CHUNK)
            assert _until(lambda: ahead.read_to >= CHUNK + window)
            time.sleep(0.2)
            assert ahead.read_to == CHUNK + window
            ahead.reached(size)
            assert _until(lambda: ahead.read_to == size)
    finally:
        os.close(fd)


def test_the_thread_and_its_descriptor_end_with_the_block(data_file: tuple[Path, int]) -> None:
    path, size = data_file
    fd = os.open(path, os.O_RDONLY)
    try:
        before = _open_fds()
        with read_ahead(fd, 0, size, window=CHUNK) as ahead:
            assert _until(lambda: ahead.read_to == CHUNK)
            assert "bundler-readahead" in running()
        assert "bundler-readahead" not in running()
        assert _open_fds() == before
        with pytest.raises(KeyError), read_ahead(fd, 0, size, window=CHUNK):
            raise KeyError("the block fails")
        assert "bundler-readahead" not in running()
        assert _open_fds() == before
    finally:
        os.close(fd)


def test_a_descriptor_that_cannot_be_read_ends_the_thread_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[object] = []
    monkeypatch.setattr(threading, "excepthook", reported.append)
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        before = _open_fds()
        with read_ahead(folder, 0, 10 * MIB) as ahead:
            assert _until(lambda: "bundler-readahead" not in running())
            assert ahead.read_to == 0  # EISDIR on its first read
        assert _open_fds() == before
    finally:
        os.close(folder)
    assert reported == []


def test_without_a_thread_the_block_runs_and_leaks_no_descriptor(
    data_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(_thread: object) -> None:
        raise RuntimeError(NO_THREAD)

    monkeypatch.setattr(readahead, "start_thread", refuse)
    path, size = data_file
    fd = os.open(path, os.O_RDONLY)
    try:
        before = _open_fds()
        with read_ahead(fd, 0, size) as ahead:
            assert os.pread(fd, 4, 0)  # the block reads on its own
            assert ahead.read_to == 0
        assert _open_fds() == before
    finally:
        os.close(fd)
