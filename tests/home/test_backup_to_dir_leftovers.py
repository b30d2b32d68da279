"""What a backup killed while writing into ``--to DIR`` leaves there (04 §5.1): the next backup
into DIR names it with ``bundler recover DIR``, and ``recover DIR`` removes exactly it, by the
rule the home's ``backups/`` follows: never a finished backup, never a running backup's
temporary (its lock is held), never a file bundler does not make. Through the real CLI, killed
with SIGKILL under strace."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support.agekeys import age_key, setup
from support.faultinject import FaultRun, kill_at_each, ptrace_unavailable, trace_calls
from support.hostile_zips import run_cli
from support.kit import cli_command


def _traced() -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)


def _hidden(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("."))


def _killed_while_publishing_then_recovered(tmp_path: Path, *extra: str) -> None:
    project, _home, env, _marker = setup(tmp_path)
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    out = tmp_path / "out"
    out.mkdir()
    cmd = [*cli_command(), "home", "backup", "--project", str(project), "--to", str(out), *extra]
    done, calls = trace_calls(cmd, ["linkat"], env=env, relevant=str(out))
    assert done.returncode == 0, done.stderr
    # the commit point: the hidden temporary linked to the backup's name
    publishing = [c for c in calls if ".backup-" in c.line]
    assert len(publishing) == 1, calls
    finished = sorted(os.listdir(out))
    # what bundler does not make, though it looks close: left alone
    foreign = [".backup-notatoken.zip", ".backup-abcdefabcdef", ".backup-abcdefabcdef.txt"]
    for name in foreign:
        (out / name).write_bytes(b"mine")
    os.symlink(out / finished[0], out / ".backup-ABCDEFABCDEF.zip")
    foreign.append(".backup-ABCDEFABCDEF.zip")

    def check(_call: object, run: FaultRun) -> None:
        assert run.killed, run.stderr
        left = [n for n in _hidden(out) if n not in foreign]
        assert left and all(n.startswith(".backup-") for n in left), left
        # the next backup into DIR names it, with the command that clears it
        again = run_cli(*cmd[len(cli_command()) :], env=env)
        assert again.returncode == 0, again.stderr
        assert "left by an interrupted backup" in again.stderr, again.stderr
        assert all(n in again.stderr for n in left), again.stderr
        assert f"bundler recover {out}" in again.stderr, again.stderr
        before = set(os.listdir(out))
        recovered = run_cli("recover", str(out), env=env)
        assert recovered.returncode == 0, recovered.stderr
        assert set(os.listdir(out)) == before - set(left), recovered.stdout
        # done once: nothing more to clear, and the next backup stands (the killed one never
        # published)
        assert run_cli("recover", str(out), env=env).stdout.strip() == "nothing to do"
        assert len([n for n in os.listdir(out) if n.startswith("backup-")]) == 1

    def reset() -> None:
        for name in os.listdir(out):
            if name not in foreign:
                os.unlink(out / name)

    kill_at_each(cmd, publishing, check, reset=reset, env=env, every_kill_lands=True)


def test_recover_dir_removes_what_a_plain_backup_killed_while_publishing_left(
    tmp_path: Path,
) -> None:
    _traced()
    _killed_while_publishing_then_recovered(tmp_path)


def test_recover_dir_removes_what_an_encrypted_backup_killed_while_publishing_left(
    tmp_path: Path,
) -> None:
    _traced()
    _key, public = age_key(tmp_path)
    _killed_while_publishing_then_recovered(tmp_path, "--encrypt-to", public)


def test_recover_dir_never_removes_a_running_backups_temporary(tmp_path: Path) -> None:
    """A backup held (strace delays its publishing link by seconds) while ``recover DIR`` runs:
    its locked temporary stays, and the backup then publishes."""
    _traced()
    project, _home, env, _marker = setup(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [*cli_command(), "home", "backup", "--project", str(project), "--to", str(out)]
    _done, calls = trace_calls(cmd, ["linkat"], env=env, relevant=".backup-")
    (publishing,) = calls
    shutil.rmtree(out)
    out.mkdir()
    strace = shutil.which("strace") or "strace"
    delay = f"inject=linkat:delay_enter=8000000:when={publishing.index}"
    held = subprocess.Popen(
        [strace, "-f", "-qq", "-o", os.devnull, "-e", "trace=linkat", "-e", delay, "--", *cmd],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not [n for n in os.listdir(out) if n.endswith(".zip")]:
            assert held.poll() is None and time.monotonic() < deadline, "the backup never began"
            time.sleep(0.05)
        recovered = run_cli("recover", str(out), env=env)
        assert held.poll() is None, "the backup ended before recover did: nothing was tested"
        assert recovered.returncode == 0, recovered.stderr
        temporaries = [n for n in _hidden(out) if n.endswith(".zip")]
        assert len(temporaries) == 1, os.listdir(out)
        assert "interrupted backup" not in recovered.stdout, recovered.stdout
    finally:
        _stdout, stderr = held.communicate(timeout=120)
    assert held.returncode == 0, stderr
    assert _hidden(out) == []
    assert [n for n in os.listdir(out) if n.startswith("backup-")]
