"""SIGINT at the moments a command cannot be cut in two (05 §2): during start-up, before the
command has touched anything, and right after a backup is published, when nothing may be
undone. The real CLI runs under strace, which delivers the signal after a chosen system call."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.hostile_zips import clean_env, make_project, run_cli
from support.kit import cli_command, one_error

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _needs_ptrace() -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)


def _console_script() -> list[str]:
    """The console script's entry, as ``pip install`` makes it call (``python -m bundler``
    runs the same function)."""
    return [*cli_command()]


def test_sigint_during_start_up_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """A signal before the command line had installed its handler, while it imported its
    modules, gave a KeyboardInterrupt traceback (SIGINT) or a death without a word (SIGTERM,
    SIGHUP). From the package's first line it is noted, and taken as soon as the command line
    can report it: one line, exit 130, nothing touched."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(REPO)}
    install = REPO / "examples" / "install"
    cmd = [*_console_script(), "--install", str(install), "config", "validate"]
    done, calls = trace_calls(cmd, ["openat"], env=env, relevant="bundler/cli/")
    assert done.returncode == 0, done.stderr
    # the module of its output, imported before main() runs
    calls = [call for call in calls if "output" in call.line]
    assert calls, "the command line's modules were not opened"
    run = run_with_fault(cmd, "openat", calls[0].index, "SIGINT", env=env)
    assert run.fired, run.stderr
    assert "Traceback" not in run.stderr and "KeyboardInterrupt" not in run.stderr, run.stderr
    assert run.returncode == 130 and one_error(run.stderr), run.stderr


def test_sigint_as_a_backup_is_published_is_a_warning_and_the_backup_stands(
    tmp_path: Path,
) -> None:
    """The backup's zip gets its name by a link (the commit point); what followed (the
    temporary's removal, the folder's flush, the report) was still cut by an interrupt, which
    said 'cleaned up' with exit 130 while the backup stood, and a rerun to the same --to was
    refused as the file existed. A signal from the commit on is noted: exit 0, a warning."""
    env = clean_env(tmp_path / "user")
    (tmp_path / "user").mkdir()
    project, _home = make_project(tmp_path)
    target = tmp_path / "out"
    target.mkdir()
    zip_path = target / "b.zip"
    cmd = [*cli_command(), "home", "backup", "--project", str(project), "--to", str(zip_path)]
    done, calls = trace_calls(cmd, ["linkat", "link"], env=env, relevant=str(target))
    assert done.returncode == 0, done.stderr
    assert calls, "the backup was not published by a link"
    zip_path.unlink()
    run = run_with_fault(cmd, calls[-1].syscall, calls[-1].index, "SIGINT", env=env)
    assert run.fired and "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 0, run.stderr
    assert "warning: interrupted by SIGINT" in run.stderr and "cleaned up" not in run.stderr
    assert sorted(os.listdir(target)) == ["b.zip"], "a temporary was left beside the backup"
    verified = run_cli("home", "verify-backup", str(zip_path), env=env)
    assert verified.returncode == 0, verified.stderr
