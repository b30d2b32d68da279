"""Helpers for the safe-tree tests: hostile trees, privilege-dropped children, racing processes.

Everything here builds real objects (symbolic links, FIFOs, sockets, hard links) and real
processes; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

NOBODY = 65534
MARKER_OUTSIDE = b"OUTSIDE-MARKER-7f3a9c"
MARKER_MEMORY = b"MEMORY-MARKER-51e2b8"


def fd_count() -> int:
    """Descriptors this process holds now (to prove a walk leaks none)."""
    return len(os.listdir("/proc/self/fd"))


def make_socket(path: Path) -> None:
    """Leave a bound Unix socket file at ``path``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    finally:
        sock.close()


def run_as_nobody(func: Callable[[], Any]) -> Any:
    """Run ``func`` in a forked child that dropped to uid/gid 65534; return or re-raise its result.

    Root ignores permission bits, so "unreadable" can only be tested without privileges. The
    child inherits the already-imported modules and open descriptors; it needs no path access.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            outcome: tuple[str, Any] = ("ok", func())
        except BaseException as exc:  # noqa: BLE001 - shipped back to the parent
            outcome = ("raised", exc)
        with os.fdopen(write_end, "wb") as pipe:
            pickle.dump(outcome, pipe)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "raised":
        raise value
    return value


def can_mount_tmpfs(target: Path, size: str = "1m") -> bool:
    """Mount a tmpfs of ``size`` (mount's ``size=``: ``1m``, or bytes) at ``target``; False when
    this host forbids mounting."""
    target.mkdir(exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "bundler-test", str(target)],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def unmount(target: Path) -> None:
    """Undo :func:`can_mount_tmpfs` (lazily, in case a descriptor is still open)."""
    subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


# --- racing ---------------------------------------------------------------------------------

RACER_SOURCE = r"""
import os, random, sys
from bundler.fs.durable import RENAME_EXCHANGE, renameat2
root, outside, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
dirs = sorted(os.path.join(root, d) for d in os.listdir(root) if d.startswith("d"))
files = [os.path.join(d, "f%02d" % i) for d in dirs for i in range(20)]
memory = os.path.join(root, "memory")
partners = {}
for name, target in (("link-out", os.path.join(outside, "secret.txt")),
                     ("link-mem", os.path.join(memory, "brain.db")),
                     ("dir-out", outside), ("dir-mem", memory)):
    partners[name] = os.path.join(root, ".racer-" + name)
    os.symlink(target, partners[name])
partners["file"] = os.path.join(root, ".racer-file")
with open(partners["file"], "wb") as fh:
    fh.write(b"another regular file")
partners["folder"] = os.path.join(root, ".racer-folder")
os.mkdir(partners["folder"])
with open(os.path.join(partners["folder"], "inner"), "wb") as fh:
    fh.write(b"inner")
# Every swap is one atomic RENAME_EXCHANGE, so the tree is never missing the entry: the swap
# lands between the walker's classification and its open as often as the scheduler allows.
# Bursts have an even length, so the tree returns to its original shape after each.
ACTIONS = [
    (files, "link-out"),   # a file becomes a link escaping the tree
    (files, "link-mem"),   # a file becomes a link into memory/
    (files, "file"),       # another file is renamed over an admitted one
    (files, "folder"),     # a file becomes a folder
    (dirs, "dir-out"),     # a folder becomes a link escaping the tree
    (dirs, "dir-mem"),     # a folder becomes a link to memory/
    (dirs, None),          # memory/ is moved into a folder, then back
]
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    targets, partner = rng.choice(ACTIONS)
    target = rng.choice(targets)
    for _ in range(2 * rng.randrange(1, 50)):
        try:
            if partner is None:
                hidden = os.path.join(target, "moved-memory")
                os.rename(memory, hidden)
                os.rename(hidden, memory)
            else:
                renameat2(-100, target, -100, partners[partner], RENAME_EXCHANGE)
        except OSError:
            pass
"""


def build_race_tree(root: Path, outside: Path, *, folders: int = 8, files: int = 20) -> None:
    """A workspace with ``memory/`` and an outside folder, both full of marker bytes."""
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_bytes(MARKER_OUTSIDE * 4)
    for index in range(files):
        (outside / f"f{index:02d}").write_bytes(MARKER_OUTSIDE)
    root.mkdir(parents=True, exist_ok=True)
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "brain.db").write_bytes(MARKER_MEMORY * 8)
    for index in range(files):
        (root / "memory" / f"f{index:02d}").write_bytes(MARKER_MEMORY)
    (root / "MEMORY_SNAPSHOT.md").write_bytes(MARKER_MEMORY)
    rng = random.Random(0)
    for folder in range(folders):
        sub = root / f"d{folder:02d}"
        sub.mkdir(exist_ok=True)
        for index in range(files):
            (sub / f"f{index:02d}").write_bytes(rng.randbytes(rng.randrange(64, 4096)))


@contextlib.contextmanager
def racer(root: Path, outside: Path, seed: int) -> Iterator[subprocess.Popen[bytes]]:
    """A separate process mutating ``root`` (see :data:`RACER_SOURCE`) while the block runs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RACER_SOURCE, str(root), str(outside), str(seed)],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # wait until it is racing
        yield proc
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0)


def tree_contains(root: Path, needle: bytes) -> list[str]:
    """Every regular file below ``root`` (no links followed) whose bytes contain ``needle``."""
    hits: list[str] = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                hits.append(path + " (link)")
                continue
            with open(path, "rb") as handle:
                if needle in handle.read():
                    hits.append(path)
    return hits
