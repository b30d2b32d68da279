"""R1 for encrypted backups (04 §5.6, 06 §2): the real CLI killed (SIGKILL, under strace) at
sampled calls of an encrypted backup and of an encrypted restore. Whatever the moment, no plain
byte of the home is found outside the home (the backup) or outside the restore's staging and
its restored files (the restore): not beside the encrypted file, not in ``$TMPDIR``; and
``recover --home`` removes every temporary of the run from the home.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.agekeys import age_key, backup_cli, found_in, setup
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
from support.hostile_zips import run_cli
from support.kit import cli_command

# the calls that make, fill, flush, publish and remove the run's files and folders
SYSCALLS = ["openat", "write", "fsync", "linkat", "unlinkat", "mkdir", "rmdir"]
QUICK = 8


def _count() -> int:
    return slow_sample_count() or QUICK


def _traced(tmp_path: Path) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)


def test_encrypted_backup_killed_leaves_no_plain_byte_and_recover_cleans(tmp_path: Path) -> None:
    _traced(tmp_path)
    project, home, env, marker = setup(tmp_path)
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    _key, public = age_key(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    tmpdir = Path(env["TMPDIR"])
    cmd = [*cli_command(), "home", "backup", "--project", str(project), "--to", str(out)]
    cmd += ["--encrypt-to", public]
    done, calls = trace_calls(cmd, SYSCALLS, env=env, relevant=str(tmp_path))
    assert done.returncode == 0, done.stderr
    # the calls while the zip is built in the home, encrypted beside out/, published
    chosen = sample(calls, _count())

    def reset() -> None:
        for name in os.listdir(out):
            os.unlink(out / name)

    def check(call: Call, _run: FaultRun) -> None:
        assert found_in(out, marker) == [], call.line
        assert found_in(tmpdir, marker) == [], call.line
        recovered = run_cli("recover", "--home", str(home), env=env)
        assert recovered.returncode == 0, (call.line, recovered.stderr)
        assert os.listdir(home / "backups") == [], (call.line, os.listdir(home / "backups"))
        for name in os.listdir(out):
            # ciphertext only: the published backup or its hidden temporary
            assert name.endswith(".zip.age"), (call.line, name)

    killed = kill_at_each(cmd, chosen, check, reset=reset, env=env)
    assert killed


def test_a_killed_encrypted_backup_left_plain_bytes_only_inside_the_home(tmp_path: Path) -> None:
    """The sweep above must have killed runs that held the plain zip: its scratch folder in the
    home's backups/ holds the marker, and only there, until recover removes it."""
    _traced(tmp_path)
    project, home, env, marker = setup(tmp_path)
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    _key, public = age_key(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [*cli_command(), "home", "backup", "--project", str(project), "--to", str(out)]
    cmd += ["--encrypt-to", public]
    done, calls = trace_calls(cmd, ["write"], env=env, relevant=str(out))
    assert done.returncode == 0, done.stderr
    os.unlink(out / os.listdir(out)[0])
    first_encrypted_write = calls[0]  # the plain zip is whole by then

    def check(call: Call, run: FaultRun) -> None:
        assert run.killed
        left = found_in(home / "backups", marker)
        assert left and all(p.startswith(".backup-") for p in left), left
        assert found_in(out, marker) == []

    kill_at_each(cmd, [first_encrypted_write], check, reset=lambda: None, env=env)
    # the next backup names what the dead one left, with the command that removes it
    again = run_cli("home", "backup", "--project", str(project), "--to", str(out), env=env)
    assert again.returncode == 0, again.stderr
    assert "left by an interrupted backup" in again.stderr and ".backup-" in again.stderr
    assert f"bundler recover --home {home}" in again.stderr
    recovered = run_cli("recover", "--home", str(home), env=env)
    assert recovered.returncode == 0, recovered.stderr
    assert os.listdir(home / "backups") == []


def test_encrypted_restore_killed_leaves_plain_bytes_only_in_its_staging(tmp_path: Path) -> None:
    _traced(tmp_path)
    project, _home, env, marker = setup(tmp_path)
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    key, public = age_key(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    sealed = backup_cli(project, env, "--to", str(out), "--encrypt-to", public)
    tmpdir = Path(env["TMPDIR"])
    target = tmp_path / "target"
    cmd = [*cli_command(), "home", "restore", str(sealed), "--home", str(target)]
    cmd += ["--age-identity", str(key)]
    done, calls = trace_calls(cmd, SYSCALLS, env=env, relevant=str(target))
    assert done.returncode == 0, done.stderr
    chosen = sample(calls, _count())
    outcomes = {"restored": 0, "not": 0}

    def reset() -> None:
        if target.exists():
            import shutil

            shutil.rmtree(target)

    def check(call: Call, _run: FaultRun) -> None:
        assert found_in(out, marker) == [], call.line
        assert found_in(tmpdir, marker) == [], call.line
        assert found_in(tmp_path, marker, skip=("project", "target")) == [], call.line
        for hit in found_in(target, marker):
            assert hit.startswith((".restore-", "files/")), (call.line, hit)
        if not target.exists():
            outcomes["not"] += 1
            return
        recovered = run_cli("recover", "--home", str(target), env=env)
        assert recovered.returncode == 0, (call.line, recovered.stderr)
        assert not [n for n in os.listdir(target) if n.startswith(".restore-")], call.line
        restored = (target / "files" / "marker.bin").exists()
        if restored:
            assert (target / "files" / "marker.bin").read_bytes() == marker
        outcomes["restored" if restored else "not"] += 1

    kill_at_each(cmd, chosen, check, reset=reset, env=env)
    assert sum(outcomes.values()) == len(chosen)


def test_ctrl_c_while_encrypting_or_decrypting_cleans_up_and_exits_130(tmp_path: Path) -> None:
    """SIGINT delivered in the middle of age's stream (pyrage calls back into Python for each
    chunk, where the interrupt is raised): the run stops, removes its scratch folder and its
    temporaries, and publishes nothing."""
    _traced(tmp_path)
    project, home, env, marker = setup(tmp_path)
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    key, public = age_key(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [*cli_command(), "home", "backup", "--project", str(project), "--to", str(out)]
    cmd += ["--encrypt-to", public]
    done, calls = trace_calls(cmd, ["write"], env=env, relevant=str(out))
    assert done.returncode == 0, done.stderr
    sealed = out / os.listdir(out)[0]
    kept = tmp_path / "kept.zip.age"
    os.rename(sealed, kept)
    middle = calls[len(calls) // 2]
    run = run_with_fault(cmd, "write", middle.index, "SIGINT", env=env)
    assert run.fired and run.returncode == 130, run.stderr
    assert os.listdir(out) == [] and os.listdir(home / "backups") == []
    # a restore interrupted while it decrypts into its staging: the home stays as it was
    target = tmp_path / "target"
    cmd = [*cli_command(), "home", "restore", str(kept), "--home", str(target)]
    cmd += ["--age-identity", str(key)]
    done, calls = trace_calls(cmd, ["write"], env=env, relevant=".restore-")
    assert done.returncode == 0, done.stderr
    import shutil

    shutil.rmtree(target)
    run = run_with_fault(cmd, "write", calls[len(calls) // 4].index, "SIGINT", env=env)
    assert run.fired and run.returncode == 130, run.stderr
    assert not target.exists()
    assert found_in(tmp_path, marker, skip=("project",)) == []
