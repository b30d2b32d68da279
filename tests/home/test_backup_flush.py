"""When a backup's zip reaches the disk (04 §5.1), seen with strace on the real CLI: its writing to
disk starts while it is still being written, its flush runs on a thread beside the read-back,
and it is flushed before it is given its name, however the two overlap. A second backup's walk
is preceded by a helper process that stats the same trees and opens no file, and its copies of
the base's entries by a thread that reads the base ahead of them."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from support import kit
from support.faultinject import ptrace_unavailable, trace_log
from support.hostile_zips import clean_env, make_project

pytestmark = pytest.mark.skipif(ptrace_unavailable() is not None, reason=str(ptrace_unavailable()))


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A home whose zip is a few times the span after which its writeback is started."""
    project, home = make_project(tmp_path)
    rng = random.Random(5)
    for number in range(5):
        (home / "files" / f"blob{number}.bin").write_bytes(rng.randbytes(7 << 20))
    return project, home


def _backup(tmp_path: Path, project: Path, out: Path, syscalls: list[str]) -> str:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    cmd = [*kit.cli_command(), "home", "backup", "--project", str(project), "--to", str(out)]
    done, log = trace_log(cmd, syscalls, env=clean_env(user), timeout=300)
    assert done.returncode == 0, done.stderr
    return log


def _ends(log: str, pattern: str) -> list[int]:
    """The lines at which the calls matching ``pattern`` returned (their own line, or the
    ``resumed`` line of a call another thread's line interrupted)."""
    lines = log.splitlines()
    found = []
    for number, line in enumerate(lines):
        if not re.search(pattern, line):
            continue
        if "<unfinished ...>" not in line:
            found.append(number)
            continue
        pid, call = line.split()[0], re.search(r"\s([a-z_0-9]+)\(", line)
        assert call is not None
        resumed = f"{pid} <... {call.group(1)} resumed>"
        found.append(next(n for n in range(number + 1, len(lines)) if lines[n].startswith(resumed)))
    return found


def test_the_zip_is_written_to_disk_as_it_grows_and_flushed_before_it_is_named(
    tmp_path: Path,
) -> None:
    project, _home = _project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    log = _backup(tmp_path, project, out, ["fsync", "sync_file_range", "linkat"])
    temporary = r"/\.backup-[A-Za-z0-9]{12}\.zip>"
    started = _ends(log, r"sync_file_range\(\d+<[^>]*" + temporary)
    flushed = _ends(log, r"fsync\(\d+<[^>]*" + temporary)
    named = _ends(log, r"linkat\(.*\.backup-[A-Za-z0-9]{12}\.zip")
    assert len(flushed) == 1 and len(named) == 1, log
    # 35 MiB in entries of 7: its writing was started at least twice before the flush
    assert len(started) >= 2 and max(started) < flushed[0], log
    assert flushed[0] < named[0], log
    # the flush ran on a thread of its own, not the one that names the zip
    flush_line = log.splitlines()[flushed[0]]
    link_line = log.splitlines()[named[0]]
    assert flush_line.split()[0] != link_line.split()[0]


def test_a_helper_stats_the_trees_ahead_of_the_walk_and_opens_no_file(tmp_path: Path) -> None:
    project, home = _project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    log = _backup(tmp_path, project, out, ["openat", "newfstatat", "statx"])
    lines = log.splitlines()
    # strace cuts the script's path short: the isolated flags and the arguments name the helper
    (spawn,) = [line for line in lines if "execve(" in line and '"-I", "-S"' in line]
    assert re.search(r'"-I", "-S", "[^"]*"(\.\.\.)?, "\d", "256", "files", "skills"\]', spawn)
    helper = spawn.split()[0]
    mine = [line for line in lines if line.startswith(helper + " ")]
    stats = "\n".join(line for line in mine if "stat" in line)
    for number in range(5):
        assert f'"blob{number}.bin"' in stats
    # after its exec: folders only, never a file of the home
    after = mine[mine.index(spawn) + 1 :]
    below_home = [line for line in after if "openat(" in line and str(home) in line]
    assert below_home, after
    for line in below_home:
        assert "O_DIRECTORY" in line and "O_NOFOLLOW" in line, line


def test_a_second_backup_reads_its_base_ahead_on_a_thread_of_its_own(tmp_path: Path) -> None:
    project, _home = _project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    _backup(tmp_path, project, out, ["fsync"])
    (base,) = out.glob("backup-*.zip")
    (_home / "files" / "blob0.bin").write_bytes(b"changed")
    # glibc makes os.preadv's call preadv2
    log = _backup(tmp_path, project, out, ["pread64", "preadv", "preadv2"])
    on_base = [line for line in log.splitlines() if f"/{base.name}>" in line]
    ahead = [line.split()[0] for line in on_base if re.search(r"preadv2?\(", line)]
    copying = {line.split()[0] for line in on_base if "pread64(" in line}
    # the copies read the base on one thread, and another read it ahead of them, in reads of
    # 4 MiB: at least the four unchanged files of 7 MiB
    assert ahead and copying and not set(ahead) & copying, on_base
    assert len(ahead) >= 7, on_base
