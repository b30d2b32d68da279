"""R1 for restore (06 §2): SIGKILL at every rename/unlink/rmdir/fsync/syncfs of the real program.

Each run restores a backup into a fresh copy of the same home (about 50 files, a previous
``*.before-restore`` set and a ``-wal`` so every kind of move happens) under strace, with the
N-th call of one system call killed; then ``bundler recover --home`` runs, and the home must hold
the old state or the new one, whole, with no ``.restore-*`` folder left. The calls are found by a
clean traced run first; only calls naming the home are injected (the interpreter's own start-up
makes none of them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from support.faultinject import (
    Call,
    FaultRun,
    kill_at_each,
    ptrace_unavailable,
    run_with_fault,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.hostile_zips import clean_env, content_state, make_project, run_cli
from support.installs import one_error
from support.kit import FAULT_SYSCALLS, RENAME_SYSCALLS, SWAP_SYSCALLS, cli_command

from bundler.home.backup import backup_home

SYSCALLS = SWAP_SYSCALLS


def _prepare(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A pristine home (old state) and a backup of a different state of it."""
    env = clean_env(tmp_path / "user")
    (tmp_path / "user").mkdir()
    project, home = make_project(tmp_path)
    for index in range(40):
        (home / "files" / "notes" / f"n{index:02}.txt").write_text(f"note {index}\n")
    zip_path = backup_home(project, to=tmp_path / "b.zip", environ=env).path
    (home / "files" / "a.txt").write_text("old state\n")
    (home / "files" / "old-only.txt").write_text("only in the old state\n")
    shutil.copytree(home / "skills", home / "skills.before-restore")
    (home / "chat.db-wal").write_bytes(b"")
    pristine = tmp_path / "pristine"
    shutil.copytree(home, pristine, symlinks=True)
    return pristine, zip_path, env


def _fresh(pristine: Path, home: Path) -> None:
    if home.exists():
        shutil.rmtree(home)
    shutil.copytree(pristine, home, symlinks=True)


def _traced_restore(tmp_path: Path) -> tuple[Path, Path, list[str], dict[str, str]]:
    """(the pristine home, the home to restore into, the command, its environment), for a run
    under strace; skips the test where ptrace is not permitted."""
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    pristine, zip_path, env = _prepare(tmp_path)
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    home = tmp_path / "target" / "home"
    home.parent.mkdir()
    # on one core the files are extracted on the main thread, whose calls the sweeps number
    # and fault (strace's when=N counts per thread); a kill on a worker ends the same process
    # at the same stage, which the sweep over the main thread's calls covers
    one_core = ["taskset", "-c", "0"]
    cmd = [*one_core, *cli_command(), "home", "restore", str(zip_path), "--home", str(home)]
    return pristine, home, [*cmd, "--force"], env


def _sweep(tmp_path: Path, count: int | None) -> int:
    pristine, home, cmd, env = _traced_restore(tmp_path)

    _fresh(pristine, home)
    done, calls = trace_calls(cmd, SYSCALLS, env=env, relevant=str(home))
    assert done.returncode == 0, done.stderr
    new_state = content_state(home)
    old_state = content_state(pristine)
    assert new_state != old_state
    assert calls, "the restore made no traced call on the home"

    chosen: list[Call] = sample(calls, count)
    outcomes = {"old": 0, "new": 0}

    def check(call: Call, _run: FaultRun) -> None:
        recovered = run_cli("recover", "--home", str(home), env=env)
        assert recovered.returncode == 0, (call.line, recovered.stderr)
        assert not [n for n in os.listdir(home) if n.startswith(".restore-")], call.line
        state = content_state(home)
        backups = {k: v for k, v in state.items() if not k.startswith("backups")}
        if backups == {k: v for k, v in old_state.items() if not k.startswith("backups")}:
            outcomes["old"] += 1
        else:
            assert backups == {k: v for k, v in new_state.items() if not k.startswith("backups")}, (
                f"after a kill at {call.syscall}#{call.index} ({call.line}) and recover, the home "
                "is neither the old state nor the new one"
            )
            outcomes["new"] += 1

    reset = partial(_fresh, pristine, home)
    kill_at_each(cmd, chosen, check, reset=reset, env=env, every_kill_lands=True)
    assert sum(outcomes.values()) == len(chosen)
    return len(chosen)


def test_restore_killed_at_sampled_calls_recovers_to_old_or_new_state(tmp_path: Path) -> None:
    """A quick sample across the run (the full sweep is the slow test below)."""
    assert _sweep(tmp_path, 6) == 6


def _fault_sweep(tmp_path: Path, count: int | None) -> tuple[int, int]:
    """06 §2 R2 for restore: EIO/ENOSPC at sampled calls; (refused runs, completed runs)."""
    pristine, home, cmd, env = _traced_restore(tmp_path)
    _fresh(pristine, home)
    done, calls = trace_calls(cmd, FAULT_SYSCALLS, env=env, relevant=str(home))
    assert done.returncode == 0, done.stderr
    new_state = content_state(home)
    old_state = content_state(pristine)
    refused = completed = 0
    for index, call in enumerate(sample(calls, count)):
        fault = "EIO" if index % 2 == 0 else "ENOSPC"
        _fresh(pristine, home)
        run = run_with_fault(cmd, call.syscall, call.index, fault, env=env)  # type: ignore[arg-type]
        assert run.fired, call.line
        assert "Traceback" not in run.stderr, (call.line, run.stderr)
        if run.returncode == 1:
            assert one_error(run.stderr), (call.line, run.stderr)
            assert content_state(home) == old_state, f"refused at {call.line} but the home changed"
            refused += 1
        else:
            assert run.returncode == 0, (call.line, run.returncode, run.stderr)
            assert run_cli("recover", "--home", str(home), env=env).returncode == 0
            assert content_state(home) == new_state, f"{call.line}: exit 0 but not the new state"
            completed += 1
        assert not [n for n in os.listdir(home) if n.startswith(".restore-")], call.line
    return refused, completed


def test_restore_io_faults_at_sampled_calls_fail_cleanly_or_complete(tmp_path: Path) -> None:
    refused, completed = _fault_sweep(tmp_path, 6)
    assert refused + completed == 6 and refused >= 1


@pytest.mark.slow
def test_restore_io_faults_at_many_calls_fail_cleanly_or_complete(tmp_path: Path) -> None:
    """06 §2 R2: at least 50 fault runs (BUNDLER_SLOW_SAMPLE overrides the count)."""
    wanted = slow_sample_count()
    refused, completed = _fault_sweep(tmp_path, 60 if wanted is None else wanted)
    assert refused >= 1


@pytest.mark.slow
def test_restore_killed_at_every_call_recovers_to_old_or_new_state(tmp_path: Path) -> None:
    """06 §2 R1 for restore: every call index (BUNDLER_SLOW_SAMPLE runs a spread sample)."""
    _sweep(tmp_path, slow_sample_count())


def _around_the_commit(calls: list[Call]) -> list[Call]:
    """Every rename of the swap and the first calls after the last one: the commit point is the
    last move, and what follows it (the journal's removal, the staging folder's) is tidying."""
    renames = [call for call in calls if call.syscall in RENAME_SYSCALLS]
    after = calls[calls.index(renames[-1]) + 1 :][:4]
    return renames + after


def _interrupt_sweep(tmp_path: Path, pick: Callable[[list[Call]], list[Call]]) -> dict[str, int]:
    pristine, home, cmd, env = _traced_restore(tmp_path)
    _fresh(pristine, home)
    done, calls = trace_calls(cmd, SYSCALLS, env=env, relevant=str(home))
    assert done.returncode == 0, done.stderr
    new_state, old_state = content_state(home), content_state(pristine)
    outcomes = {"cleaned up": 0, "stands": 0}
    for call in pick(calls):
        _fresh(pristine, home)
        run = run_with_fault(cmd, call.syscall, call.index, "SIGINT", env=env)
        assert run.fired and "Traceback" not in run.stderr, (call.line, run.stderr)
        leftovers = [name for name in os.listdir(home) if name.startswith(".restore-")]
        if run.returncode == 130:
            # "cleaned up like a failure" (05 §2): the old state, whole, and nothing left
            assert "cleaned up" in run.stderr and one_error(run.stderr), (call.line, run.stderr)
            assert content_state(home) == old_state and not leftovers, (
                f"SIGINT at {call.line}: exit 130 says cleaned up, yet the home changed"
            )
            outcomes["cleaned up"] += 1
            continue
        # past the commit point: the restore stands, a warning says what recover tidies
        assert run.returncode == 0, (call.line, run.returncode, run.stderr)
        assert not leftovers or "recover --home" in run.stderr, (call.line, run.stderr)
        assert run_cli("recover", "--home", str(home), env=env).returncode == 0
        assert content_state(home) == new_state, f"SIGINT at {call.line}: exit 0, not the new state"
        outcomes["stands"] += 1
    return outcomes


def test_restore_interrupted_around_its_commit_is_cleaned_up_or_stands_with_a_warning(
    tmp_path: Path,
) -> None:
    """Ctrl-C during the swap, or just after it, was reported "interrupted; cleaned up" (exit
    130) while the home held the restored state and the staging folder stayed: a user told
    so ran the restore again, which moved their original data out of reach."""
    outcomes = _interrupt_sweep(tmp_path, _around_the_commit)
    assert outcomes["stands"] >= 1


@pytest.mark.slow
def test_restore_interrupted_at_every_call_is_cleaned_up_or_stands_with_a_warning(
    tmp_path: Path,
) -> None:
    outcomes = _interrupt_sweep(tmp_path, lambda calls: sample(calls, slow_sample_count()))
    assert outcomes["cleaned up"] >= 1 and outcomes["stands"] >= 1


def test_a_restore_refused_after_creating_the_home_removes_it(tmp_path: Path) -> None:
    """A restore into a home that does not exist creates it as a first start does; one that
    then failed (disk full while extracting) said "the home is unchanged" and left it made."""
    _pristine, home, cmd, env = _traced_restore(tmp_path)
    assert not home.exists()
    done, calls = trace_calls(cmd, ["write"], env=env, relevant=".restore-")
    assert done.returncode == 0, done.stderr
    shutil.rmtree(home)
    run = run_with_fault(cmd, "write", calls[len(calls) // 2].index, "ENOSPC", env=env)
    assert run.fired and run.returncode == 1 and one_error(run.stderr), run.stderr
    assert not home.exists(), os.listdir(home)
