"""04 §1.2 under faults: ``home init`` killed (SIGKILL) or failed (EIO) at each mkdir, link,
unlink, rename or fsync; a failure is one line without traceback, and running it again always
ends with the complete home and a whole README.md."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from support.faultinject import ptrace_unavailable, run_with_fault, sample, trace_calls
from support.hostile_agent_yaml import clean_env, run_cli
from support.kit import cli_command

from bundler.home.homes import README_TEXT

SYSCALLS = ["mkdir", "mkdirat", "link", "linkat", "unlink", "unlinkat", "fsync", "rename"]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["SIGKILL", "EIO"])
def test_init_after_any_fault_then_again_gives_the_complete_home(
    tmp_path: Path, fault: str
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    user, project = tmp_path / "user", tmp_path / "project"
    user.mkdir()
    project.mkdir()
    home = tmp_path / "state" / "home"
    (project / "Agent.yaml").write_text(f"name: nano\ndata:\n  home: {home}\n")
    env = clean_env(user, PYTHONDONTWRITEBYTECODE="1", SOURCE_DATE_EPOCH="1700000000")
    args = ["home", "init", "--project", str(project)]
    cmd = [*cli_command(), *args]
    clean, calls = trace_calls(cmd, SYSCALLS, env=env, relevant=str(tmp_path / "state"))
    assert clean.returncode == 0, clean.stderr
    assert len(calls) >= 8, "init made fewer traced calls than it has folders to create"
    count = os.environ.get("BUNDLER_SLOW_SAMPLE")
    for call in sample(calls, int(count) if count else None):
        for leftover in (
            sorted(home.parent.rglob("*"), reverse=True) if home.parent.exists() else []
        ):
            leftover.rmdir() if leftover.is_dir() else leftover.unlink()
        run = run_with_fault(cmd, call.syscall, call.index, fault, env=env)  # type: ignore[arg-type]
        if fault == "EIO" and run.returncode != 0:
            assert run.returncode == 1, run.stderr
            assert "Traceback" not in run.stderr
            assert len(run.stderr.splitlines()) == 1
        again = run_cli(*args, env=env)
        assert again.returncode == 0, again.stderr
        assert sorted(os.listdir(home)) == ["README.md", "backups", "files", "skills"]
        assert (home / "README.md").read_text() == README_TEXT
        for folder in ("", "files", "skills", "backups"):
            assert stat.S_IMODE(os.lstat(home / folder).st_mode) == 0o700
