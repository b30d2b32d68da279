"""Writing a long run of bytes past the page cache (bundler.fs.direct): the bytes on disk are
the bytes given, wherever they start and however they are cut, on any filesystem; a failed
write is raised, and no thread outlives the writer."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bundler.fs.direct import ALIGN, BUFFER, SequentialWriter
from bundler.fs.threads import running

OFFSETS = [0, 1, 511, ALIGN - 1, ALIGN, ALIGN + 512, 12345]
SIZES = [0, 1, ALIGN - 1, ALIGN, BUFFER - 1, BUFFER, BUFFER + 1, 3 * BUFFER + 4097]


def write_through(path: Path, offset: int, data: bytes, chunk: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        with SequentialWriter(fd, offset) as writer:
            for at in range(0, len(data), chunk):
                writer.write(data[at : at + chunk])
            writer.finish()
    finally:
        os.close(fd)


def writer_threads() -> list[str]:
    return [name for name in running() if name == "bundler-write"]


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("size", SIZES)
def test_the_file_holds_the_bytes_given_where_they_were_given(
    tmp_path: Path, offset: int, size: int
) -> None:
    """Whatever the start's alignment and the length, the bytes before ``offset`` stay, and
    the bytes given follow them, through the direct writes and the buffered head and tail."""
    before = os.urandom(offset + 100)
    path = tmp_path / "f"
    path.write_bytes(before)
    data = os.urandom(size)
    for chunk in (max(1, size), 65536 + 3):
        write_through(path, offset, data, chunk)
        held = path.read_bytes()
        assert held[:offset] == before[:offset]
        assert held[offset : offset + size] == data
    assert not writer_threads()


@pytest.mark.parametrize("where", ["tmp_path", "/dev/shm"])
def test_every_filesystem_gets_the_same_bytes(tmp_path: Path, where: str) -> None:
    """tmpfs refused O_DIRECT before Linux 6.6; where it is refused, or cannot be had, every
    write goes through the page cache and the bytes are the same."""
    folder = tmp_path if where == "tmp_path" else Path(where)
    if not folder.is_dir():
        pytest.skip(f"{where} is not a folder on this machine")
    path = folder / f"bundler-direct-{os.getpid()}"
    try:
        path.write_bytes(b"x" * 700)
        data = os.urandom(2 * BUFFER + 999)
        write_through(path, 700, data, 1 << 20)
        assert path.read_bytes() == b"x" * 700 + data
    finally:
        path.unlink(missing_ok=True)


def test_long_runs_are_written_by_direct_writes_on_a_second_descriptor(tmp_path: Path) -> None:
    """Seen from the system calls: the file is opened again with O_DIRECT, and the aligned
    buffers are written through it with pwritev at aligned offsets."""
    from support.faultinject import ptrace_unavailable, trace_log

    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    path = tmp_path / "f"
    path.write_bytes(b"")
    program = (
        "import os, sys\n"
        "from bundler.fs.direct import SequentialWriter\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "with SequentialWriter(fd, 512) as w:\n"
        "    w.write(b'a' * (3 << 22))\n"
        "    w.finish()\n"
    )
    cmd = [sys.executable, "-c", program, str(path)]
    done, log = trace_log(cmd, ["openat", "pwritev2"])
    assert done.returncode == 0, done.stderr
    lines = log.splitlines()
    assert any("/proc/self/fd/" in line and "O_DIRECT" in line for line in lines)
    direct = [line for line in lines if "pwritev2(" in line]
    assert direct, lines[-20:]
    for line in direct:
        # pwritev2(fd, [iov], iovcnt, offset, flags) = count
        found = re.search(r"\], \d+, (\d+), \d+\) = (\d+)", line)
        assert found is not None, line
        assert int(found[1]) % ALIGN == 0 and int(found[1]) >= 512, line
        assert int(found[2]) % ALIGN == 0, line
    assert path.read_bytes() == bytes(512) + b"a" * (3 << 22)


def run_program(program: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``program`` in a Python of its own (it sets process limits) on an empty file."""
    path = tmp_path / "f"
    path.write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-c", program, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done


FAILING = """
import os, resource, signal, sys
from bundler.fs.direct import BUFFER, SequentialWriter
from bundler.fs.threads import running
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (BUFFER, BUFFER))
fd = os.open(sys.argv[1], os.O_RDWR)
writer = SequentialWriter(fd, 0)
try:
    for _ in range(8):
        writer.write(b"z" * BUFFER)
    writer.finish()
except OSError as err:
    print("raised", err.errno)
finally:
    writer.close()
print("threads", running().count("bundler-write"))
"""


def test_a_failed_write_is_raised_by_a_later_call_and_close_stops_the_thread(
    tmp_path: Path,
) -> None:
    """Past the file size limit the writer thread's pwritev fails with EFBIG: the caller's
    next call raises it, and close leaves no thread behind."""
    done = run_program(FAILING, tmp_path)
    assert f"raised {errno.EFBIG}" in done.stdout, done.stdout
    assert "threads 0" in done.stdout, done.stdout


LITTLE_MEMORY = """
import os, resource, sys
from bundler.fs.direct import BUFFER, SequentialWriter
from bundler.fs.threads import running
data = b"q" * (2 * BUFFER + 4097)
with open("/proc/self/status") as status:
    size = next(int(line.split()[1]) for line in status if line.startswith("VmSize:")) * 1024
# room for one buffer of the three, and nothing more
resource.setrlimit(resource.RLIMIT_AS, (size + BUFFER + (1 << 20), resource.RLIM_INFINITY))
fd = os.open(sys.argv[1], os.O_RDWR)
with SequentialWriter(fd, 100) as writer:
    print("threads", running().count("bundler-write"))
    writer.write(data)
    writer.finish()
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
with open(sys.argv[1], "rb") as written:
    print("same", written.read() == bytes(100) + data)
"""


def test_too_little_memory_for_the_buffers_writes_through_the_page_cache(tmp_path: Path) -> None:
    """The aligned buffers cannot be had under a tight address-space limit: no thread, every
    byte through the page cache, and the file is the same."""
    done = run_program(LITTLE_MEMORY, tmp_path)
    assert "threads 0" in done.stdout and "same True" in done.stdout, done.stdout
