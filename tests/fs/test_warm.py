"""Warming the caches ahead of a walk (:mod:`bundler.fs.warm`): what the thread asks the kernel
for, seen by strace on a real tree, and that it never fails nor outlives its block."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from support.faultinject import ptrace_unavailable, trace_log

from bundler.fs.warm import warming

_WARM_AND_WAIT = """
import os, sys
from bundler.fs.warm import warming
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
with warming(fd, ["files", "skills"], sys.argv[2]) as thread:
    thread.join()
"""


def _tree(root: Path) -> tuple[Path, list[Path]]:
    """A home with two trees of nested files, links out of them, and a folder outside."""
    outside = root / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "not-for-warming").write_text("x")
    home = root / "home"
    files = []
    for rel in ("files/a.txt", "files/notes/b.md", "files/notes/deeper/c.log", "skills/s/SKILL.md"):
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
        files.append(path)
    (home / "files" / "linked-folder").symlink_to(outside)
    (home / "skills" / "linked-file").symlink_to(outside / "deep" / "not-for-warming")
    (home / "left-out.txt").write_text("not a tree")
    return home, files


@pytest.mark.skipif(ptrace_unavailable() is not None, reason=str(ptrace_unavailable()))
def test_warming_stats_every_entry_of_the_trees_follows_no_link_and_reads_ahead(
    tmp_path: Path,
) -> None:
    home, files = _tree(tmp_path)
    ahead = tmp_path / "base.zip"
    ahead.write_bytes(b"PK" * 5000)
    done, log = trace_log(
        [sys.executable, "-c", _WARM_AND_WAIT, str(home), str(ahead)],
        ["newfstatat", "openat", "fadvise64", "getdents64"],
    )
    assert done.returncode == 0, done.stderr
    stats = [line for line in log.splitlines() if "newfstatat(" in line]
    for path in files:
        assert any(f'"{path.name}"' in line for line in stats), path
    for link in ("linked-folder", "linked-file"):
        assert any(f'"{link}"' in line and "AT_SYMLINK_NOFOLLOW" in line for line in stats)
    assert "not-for-warming" not in log and "outside/deep" not in log
    assert '"left-out.txt"' not in log
    assert any(
        "fadvise64(" in line and str(ahead) in line and "POSIX_FADV_WILLNEED" in line
        for line in log.splitlines()
    )


def test_warming_never_fails_and_never_outlives_its_block(tmp_path: Path) -> None:
    home, _ = _tree(tmp_path)
    (home / "skills-link").symlink_to(home / "skills")
    root = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # a tree that is missing, one that is a link, one that is a file; a base that is gone
        with warming(
            root, ["missing", "skills-link", "left-out.txt", "files"], "/no/such/zip"
        ) as t:
            t.join(timeout=10)
            assert not t.is_alive()
        with warming(root, ["files", "skills"], str(tmp_path / "outside")) as thread:
            pass
    finally:
        os.close(root)
    assert not thread.is_alive()
    assert all(t.name != thread.name for t in threading.enumerate())


_WARM_AND_LEAVE = """
import os, sys
from bundler.fs.warm import warming
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
with warming(fd, ["files"]) as thread:
    pass
print(thread.is_alive())
"""


@pytest.mark.skipif(ptrace_unavailable() is not None, reason=str(ptrace_unavailable()))
def test_warming_stops_when_its_block_ends(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for n in range(100):
        folder = home / "files" / f"d{n:03}"
        folder.mkdir(parents=True)
        for m in range(20):
            (folder / f"f{m}").touch()
    # each stat slowed to 5 ms: the whole walk would take ten seconds
    done, log = trace_log(
        [sys.executable, "-c", _WARM_AND_LEAVE, str(home)],
        ["newfstatat"],
        inject="newfstatat:delay_enter=5000",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    stats_in_tree = [line for line in log.splitlines() if '"f' in line and "/files/d" in line]
    assert len(stats_in_tree) < 2000 // 2
