"""What a restore and a second backup read (04 §5.1.1, §5.3), counted with strace on the real CLI.

A restore inflates each entry once, into its own staging folder, checking it as it writes: the
zip's bytes are read about once. A tampered entry is still refused, nothing of the home changed.
"""

from __future__ import annotations

import random
import re
import zipfile
from pathlib import Path

import pytest
from support import kit
from support.faultinject import ptrace_unavailable, trace_log
from support.hostile_zips import clean_env, make_project, tree_state

from bundler.home.backup import backup_home

pytestmark = pytest.mark.skipif(ptrace_unavailable() is not None, reason=str(ptrace_unavailable()))

_CALL = re.compile(
    r"^(\d+)\s+(read|pread64)\((\d+)<([^>]*)>.*(?:(<unfinished \.\.\.>)|= (-?\d+)(?: \w+ \(.*\))?)$"
)
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (read|pread64) resumed>.*= (-?\d+)(?: \w+ \(.*\))?$")


def bytes_read(log: str, path: Path) -> int:
    """The bytes every thread of an strace log read from ``path`` (read and pread64)."""
    total = 0
    waiting: dict[str, bool] = {}  # a thread's call cut in two by another's: is it on path
    for line in log.splitlines():
        call = _CALL.match(line)
        if call is not None:
            pid, _name, _fd, where, unfinished, result = call.groups()
            if unfinished:
                waiting[pid] = where == str(path)
            elif where == str(path) and int(result) > 0:
                total += int(result)
            continue
        resumed = _RESUMED.match(line)
        if resumed is not None and waiting.pop(resumed[1], False) and int(resumed[3]) > 0:
            total += int(resumed[3])
    return total


def env_for(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "user"
    user.mkdir(exist_ok=True)
    return clean_env(user)


def compressible(rng: random.Random, size: int) -> bytes:
    words = [b"agent", b"memory", b"note", b"tool", b"result", b"retry", b"server", b"budget"]
    out = bytearray()
    while len(out) < size:
        out += b" ".join(rng.choice(words) for _ in range(12)) + b"\n"
    return bytes(out[:size])


def grown_project(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose home holds enough compressed bytes that a second read of them shows."""
    project, home = make_project(tmp_path)
    rng = random.Random(7)
    for number in range(40):
        (home / "files" / "notes" / f"n{number:02}.txt").write_bytes(compressible(rng, 200_000))
    (home / "files" / "big.bin").write_bytes(rng.randbytes(3 << 20))
    return project, home


def test_restore_reads_the_zip_once(tmp_path: Path) -> None:
    project, _home = grown_project(tmp_path)
    zip_path = backup_home(project, to=tmp_path / "b.zip", environ=env_for(tmp_path)).path
    size = zip_path.stat().st_size
    target = tmp_path / "restored"
    cmd = [*kit.cli_command(), "home", "restore", str(zip_path), "--project", str(project)]
    done, log = trace_log(
        [*cmd, "--home", str(target)], ["read", "pread64"], env=env_for(tmp_path), timeout=300
    )
    assert done.returncode == 0, done.stderr
    total = bytes_read(log, zip_path)
    # the directory, backup.json and each local header read a second time are small beside it
    assert size <= total < size * 1.1, (total, size)
    assert (target / "files" / "big.bin").read_bytes() == (
        project / "home" / "files" / "big.bin"
    ).read_bytes()


def test_a_tampered_entry_is_refused_and_the_home_is_as_found(tmp_path: Path) -> None:
    project, home = grown_project(tmp_path)
    zip_path = backup_home(project, to=tmp_path / "b.zip", environ=env_for(tmp_path)).path
    with zipfile.ZipFile(zip_path) as archive:
        info = archive.getinfo("files/notes/n39.txt")
        at = info.header_offset + 30 + len(info.orig_filename.encode()) + len(info.extra)
        at += info.compress_size // 2
    data = bytearray(zip_path.read_bytes())
    data[at] ^= 0x55  # the deflated bytes change; the directory's CRC and the digest do not
    zip_path.write_bytes(bytes(data))
    (home / "files" / "notes" / "n00.txt").write_bytes(b"changed since the backup\n")
    before = tree_state(home)
    done = kit.run_cli(
        ["home", "restore", str(zip_path), "--project", str(project)], env=env_for(tmp_path)
    )
    assert done.returncode == 3, done.stderr
    assert "files/notes/n39.txt" in done.stderr
    assert tree_state(home) == before
