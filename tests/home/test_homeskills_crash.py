"""04 §3: a skill save is atomic and durable. The real CLI is killed (SIGKILL) or failed (EIO)
at each rename/fsync/unlink/mkdir it makes below the home; ``SKILL.md`` is then the old skill
whole or the new one whole, never a mix, and a failure says so on one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.faultinject import ptrace_unavailable, run_with_fault, sample, trace_calls
from support.hostile_agent_yaml import clean_env
from support.kit import cli_command

from bundler.home.homes import init_home, resolve_home

SYSCALLS = ["rename", "renameat", "renameat2", "fsync", "unlink", "unlinkat", "mkdir", "mkdirat"]
OLD = "---\nname: notes\ndescription: old\n---\n" + "old body\n" * 200
NEW_BODY = "new body\n" * 300
NEW = "---\nname: notes\ndescription: new\n---\n" + NEW_BODY


def _sample_size() -> int | None:
    value = os.environ.get("BUNDLER_SLOW_SAMPLE")
    return int(value) if value else None


@pytest.fixture
def world(tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    user, project, home = tmp_path / "user", tmp_path / "project", tmp_path / "home"
    user.mkdir()
    project.mkdir()
    (project / "Agent.yaml").write_text(f"name: nano\ndata:\n  home: {home}\n")
    env = clean_env(user, PYTHONDONTWRITEBYTECODE="1", SOURCE_DATE_EPOCH="1700000000")
    init_home(resolve_home(project, environ=env))
    body = tmp_path / "body.md"
    body.write_text(NEW_BODY)
    # the skill exists already (see _reset): replacing it takes --force
    cmd = [*cli_command(), "home", "skills", "save", "notes", "--force"]
    cmd += ["--description", "new", "--file", str(body), "--project", str(project)]
    return cmd, env, home


def _reset(home: Path) -> Path:
    folder = home / "skills" / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    for leftover in folder.iterdir():
        leftover.unlink()
    (folder / "SKILL.md").write_text(OLD)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["SIGKILL", "EIO"])
def test_save_skill_is_old_or_new_whole_at_every_fault(
    world: tuple[list[str], dict[str, str], Path], fault: str
) -> None:
    cmd, env, home = world
    _reset(home)
    clean, calls = trace_calls(cmd, SYSCALLS, env=env, relevant=str(home))
    assert clean.returncode == 0, clean.stderr
    assert calls, "the save made no traced call below the home"
    for call in sample(calls, _sample_size()):
        folder = _reset(home)
        run = run_with_fault(cmd, call.syscall, call.index, fault, env=env)  # type: ignore[arg-type]
        text = (folder / "SKILL.md").read_text()
        assert text in (OLD, NEW), f"torn SKILL.md after {fault} at {call.syscall}#{call.index}"
        if fault == "EIO" and run.fired:
            assert "Traceback" not in run.stderr, run.stderr
            if run.returncode != 0:
                assert run.returncode == 1
                assert len(run.stderr.splitlines()) == 1
                assert text == OLD
                assert os.listdir(folder) == ["SKILL.md"], "a failed save left a temporary file"


@pytest.mark.parametrize("syscall", ["write", "fsync"])
def test_a_refused_save_of_a_new_skill_leaves_no_skill_folder(
    world: tuple[list[str], dict[str, str], Path], syscall: str
) -> None:
    """A save refused by a full disk left its new, empty ``skills/<name>/`` behind, which
    ``home skills`` then listed, while the error said the previous skill was intact."""
    cmd, env, home = world
    fresh = [word if word != "notes" else "fresh" for word in cmd]
    done, calls = trace_calls(fresh, [syscall], env=env, cwd="/", relevant=str(home / "skills"))
    assert done.returncode == 0, done.stderr
    shutil.rmtree(home / "skills" / "fresh")
    before = sorted(os.listdir(home / "skills"))
    into = next(call for call in calls if "fresh" in call.line)  # the new SKILL.md's
    run = run_with_fault(fresh, syscall, into.index, "ENOSPC", env=env, cwd="/")
    assert run.fired
    assert run.returncode == 1, run.stderr
    assert "No space left on device" in run.stderr
    assert sorted(os.listdir(home / "skills")) == before
