"""A tree's metadata read ahead by a helper process (:mod:`bundler.fs.prefetch`): it stats what
the walk will stat, in the walk's order, opens nothing but folders, follows no link, stays on
its device and depth, and is gone when the caller is done."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kit import clean_env

from bundler.fs.prefetch import read_metadata_ahead, stat_tree
from bundler.fs.safefs import walk

REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> Path:
    """A home-like folder: two trees, nested folders, odd names, links out of the tree."""
    home = root / "home"
    outside = root / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret").write_text("not ours")
    names = ("files/b/c/d.txt", "files/a.txt", "files/B.md", "files/é/ü.txt", "skills/s/SKILL.md")
    for rel in names:
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    os.symlink(outside, home / "files" / "b" / "to-outside")
    os.symlink(outside / "deep" / "secret", home / "files" / "secret-link")
    os.mkfifo(home / "files" / "fifo")
    return home


@pytest.fixture
def opened_home(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """:func:`_tree`'s home and a descriptor open on it (closed after the test)."""
    home = _tree(tmp_path)
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield home, fd
    finally:
        os.close(fd)


def _recording_stats(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``os.stat(name, dir_fd=...)`` made from now on, as the full path it named."""
    seen: list[str] = []
    real = os.stat

    def recorded(
        name: str, *, dir_fd: int | None = None, follow_symlinks: bool = True
    ) -> os.stat_result:
        if dir_fd is not None:
            seen.append(os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name))
        return real(name, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(os, "stat", recorded)
    return seen


def test_the_helper_stats_what_the_walk_stats_in_the_same_order(
    opened_home: tuple[Path, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, home_fd = opened_home
    ahead = _recording_stats(monkeypatch)
    count = stat_tree(home_fd, ["skills", "files"], 256)
    monkeypatch.undo()
    walked = _recording_stats(monkeypatch)
    for tree in ("files", "skills"):
        tree_fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY, dir_fd=home_fd)
        try:
            for _entry in walk(tree_fd, prefix=f"{tree}/", unopened=lambda _rel, _st: True):
                pass
        finally:
            os.close(tree_fd)
    monkeypatch.undo()
    # the helper stats the trees themselves too; everything else is the walk's, in its order
    in_skills = sum(1 for path in walked if path.startswith(str(home / "skills") + "/"))
    assert in_skills == 2
    files, skills = walked[:-in_skills], walked[-in_skills:]
    assert ahead == [str(home / "files"), *files, str(home / "skills"), *skills]
    assert count == len(ahead)
    assert not any(path.startswith(str(tmp_path / "outside")) for path in ahead)


def test_the_helper_goes_no_deeper_than_asked(tmp_path: Path) -> None:
    (tmp_path / "t" / "1" / "2" / "3" / "4").mkdir(parents=True)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # t (depth 0) and its entries to depth 2: t, 1, 2; never 3's contents
        assert stat_tree(fd, ["t"], 2) == 3
        assert stat_tree(fd, ["t"], 256) == 5
        assert stat_tree(fd, ["missing", "t"], 0) == 1
    finally:
        os.close(fd)


def test_the_helper_stays_on_its_device(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a file system without privileges")
    (tmp_path / "t" / "mnt").mkdir(parents=True)
    (tmp_path / "t" / "here").write_text("x")
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from bundler.fs.prefetch import stat_tree
        for name in ("a", "b", "c"):
            open(os.path.join({str(tmp_path / "t" / "mnt")!r}, name), "w").close()
        fd = os.open({str(tmp_path)!r}, os.O_RDONLY | os.O_DIRECTORY)
        print(stat_tree(fd, ["t"], 256))
        """
    )
    namespace = ["unshare", "-rm"]
    tried = subprocess.run([*namespace, "true"], capture_output=True, text=True)
    if tried.returncode != 0:
        pytest.skip(f"no mount namespace here: {tried.stderr.strip()}")
    mount = 'mount -t tmpfs tmpfs "$1" && exec "$2" -c "$3"'
    mounted = subprocess.run(
        [*namespace, "sh", "-c", mount, "sh", str(tmp_path / "t" / "mnt"), sys.executable, script],
        capture_output=True,
        text=True,
    )
    assert mounted.returncode == 0, mounted.stderr
    # t, mnt (stat-ed, on the other device: not entered) and here; never a, b, c
    assert mounted.stdout.split() == ["3"]


def _children() -> set[int]:
    pids: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as listed:
            pids.update(int(pid) for pid in listed.read().split())
    return pids


def _finished(pid: int, timeout: float = 20.0) -> None:
    """Wait, without reaping it, until ``pid`` has exited (a zombie)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as status:
            if status.read().rsplit(")", 1)[1].split()[0] == "Z":
                return
        time.sleep(0.01)
    raise AssertionError(f"the helper {pid} did not finish")


def _a_stopped_helper_is_killed_and_reaped(fd: int) -> None:
    """A helper that will never finish (SIGSTOP) is gone, not left a zombie, once the block
    ends: the block does not wait for its walk."""
    before = _children()
    with read_metadata_ahead(fd, ["files"], 256):
        (helper,) = _children() - before
        os.kill(helper, signal.SIGSTOP)
    with pytest.raises(ProcessLookupError):
        os.kill(helper, 0)


def test_the_helper_is_a_process_of_its_own_reaped_when_the_block_ends(
    opened_home: tuple[Path, int],
) -> None:
    _home, fd = opened_home
    before = _children()
    with read_metadata_ahead(fd, ["files", "skills"], 256):
        (helper,) = _children() - before
        _finished(helper)
    with pytest.raises(ProcessLookupError):
        os.kill(helper, 0)  # reaped: no zombie left
    # and killed when it has not finished: the block does not wait for the walk
    _a_stopped_helper_is_killed_and_reaped(fd)


def test_without_pidfds_the_helper_is_killed_by_its_pid_and_reaped(
    opened_home: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    _home, fd = opened_home
    monkeypatch.delattr(os, "pidfd_open")  # a kernel or platform without them
    _a_stopped_helper_is_killed_and_reaped(fd)


def test_a_helper_that_cannot_start_costs_nothing(
    opened_home: tuple[Path, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _home, fd = opened_home
    before = _children()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))
    with read_metadata_ahead(fd, ["files"], 256):
        pass
    monkeypatch.setattr(sys, "executable", "")
    with read_metadata_ahead(fd, ["files"], 256):
        assert _children() == before
    monkeypatch.undo()
    # children the kernel reaps: a helper's pid could be another process's by its end
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        with read_metadata_ahead(fd, ["files"], 256):
            assert _children() == before
    finally:
        signal.signal(signal.SIGCHLD, previous)


_TRACED = "execve,openat,newfstatat,statx,stat,lstat"


@pytest.fixture
def traced_helper(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """The helper run by read_metadata_ahead under ``strace -f``, home fd 3 and stdio closed:
    the home, and the trace."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt install strace)")
    home = _tree(tmp_path)
    trace = tmp_path / "trace"
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from bundler.fs.prefetch import read_metadata_ahead
        fd = os.open({str(home)!r}, os.O_RDONLY | os.O_DIRECTORY)
        assert fd == 3, fd
        for stdio in (0, 1, 2):
            os.close(stdio)
        with read_metadata_ahead(fd, ["files", "skills"], 256):
            time.sleep(1.5)
        """
    )
    subprocess.run(
        ["strace", "-f", "-qq", "-s", "200", "-o", str(trace), "-e", f"trace={_TRACED}"]
        + [sys.executable, "-c", script],
        check=True,
        env={**clean_env(), "PYTHONPATH": str(REPO)},
    )
    yield home, trace.read_text()


def test_the_helper_opens_only_folders_never_through_a_link(
    traced_helper: tuple[Path, str],
) -> None:
    home, trace = traced_helper
    lines = trace.splitlines()
    helper = next(line.split()[0] for line in lines if "execve(" in line and "prefetch.py" in line)
    # the caller's descriptor 3 is handed as 4 (3 may not be its own number in the helper)
    assert re.search(r'prefetch\.py", "4", "256", "files", "skills"\]', trace)
    mine = [line for line in trace.splitlines() if line.startswith(helper + " ")]
    after_exec = mine[next(i for i, line in enumerate(mine) if "prefetch.py" in line) :]
    opened = [line for line in after_exec if "openat(" in line and "prefetch.py" not in line]
    walked = [line for line in opened if re.search(r"openat\([0-9]+, ", line)]
    assert walked, after_exec
    for line in walked:
        assert "O_DIRECTORY" in line and "O_NOFOLLOW" in line, line
    stats = " ".join(line for line in after_exec if "stat" in line)
    for name in ("a.txt", "B.md", "d.txt", "SKILL.md", "to-outside", "secret-link", "fifo"):
        assert f'"{name}"' in stats
    assert "outside/deep" not in trace and '"deep"' not in trace and '"secret"' not in trace
