"""What reading an archive leaves when it is interrupted (docs/architecture.md lists both
names): ``bundler-archive-<token>/`` in the temporary folder (``bundle verify|inspect``) and
``.bundler-unpack-<token>/`` in an install (``agents import FILE.tar``); and that
``agents export --out FILE.tar`` leaves nothing there, only what ``recover FILE.tar`` clears.

A signal the CLI handles (SIGTERM here) removes them; a kill leaves them, and then ``doctor``
names them, and the next run (or ``recover --install``, or for the temporary folder's ``recover
DEST``) removes them; a folder a running command holds is never removed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import (
    ptrace_unavailable,
    run_with_fault,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.kit import cli_command, run_cli, tree_snapshot

FAST_SAMPLE = 6


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"}


def _scratch(tmp: Path) -> list[str]:
    return [name for name in os.listdir(tmp) if name.startswith("bundler-archive-")]


def _empty_install(path: Path) -> Path:
    path.mkdir()
    (path / "config.toml").write_text("")
    return path


def test_sigterm_while_verifying_an_archive_removes_the_scratch_folder(
    packed: Path, tmp_path: Path
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    fifo = tmp_path / "stream.tar"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [*cli_command(), "bundle", "verify", str(fifo)],
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # the first members only: verify makes its scratch folder, then waits for the rest
    with open(fifo, "wb") as writer:
        writer.write(packed.read_bytes()[:4096])
        writer.flush()
        deadline = time.monotonic() + 60
        while not _scratch(tmp) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _scratch(tmp)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert os.listdir(tmp) == []


def _kill_in_first_write_below(cmd: list[str], env: dict[str, str], below: Path) -> None:
    done, calls = trace_calls(cmd, ["write"], env=env, cwd="/", relevant=str(below))
    assert done.returncode == 0, done.stderr
    # tempfile probes the folder with a write of its own first
    first = next(c for c in calls if "bundler-archive-" in c.line)
    result = run_with_fault(cmd, "write", first.index, "SIGKILL", env=env, cwd="/")
    assert result.killed, result.stderr


def test_a_killed_verify_leaves_a_folder_doctor_names_and_the_next_verify_removes(
    packed: Path, tmp_path: Path
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(tmp)
    _kill_in_first_write_below([*cli_command(), "bundle", "verify", str(packed)], env, tmp)
    left = [n for n in os.listdir(tmp) if n.startswith("bundler-archive-")]
    assert len(left) == 1
    install = _empty_install(tmp_path / "install")
    doctor = run_cli(["--install", str(install), "doctor", "--json"], exact_env=env)
    warnings = json.loads(doctor.stdout)["warnings"]
    assert any(left[0] in w["detail"] and w["kind"] == "archive-leftover" for w in warnings)
    again = run_cli(["bundle", "verify", str(packed)], exact_env=env)
    assert again.returncode == 0, again.stderr
    assert os.listdir(tmp) == []


def test_a_killed_archive_import_leaves_a_folder_doctor_names_and_recover_removes(
    packed: Path, tmp_path: Path
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(tmp)
    install = _empty_install(tmp_path / "install")
    before = tree_snapshot(install)
    cmd = [
        *cli_command(), "--install", str(install), "agents", "import", str(packed),
        "--accept-risks",
    ]  # fmt: skip
    trace_install = _empty_install(tmp_path / "traced")
    traced_cmd = [str(trace_install) if part == str(install) else part for part in cmd]
    done, calls = trace_calls(traced_cmd, ["write"], env=env, cwd="/", relevant=str(trace_install))
    assert done.returncode == 0, done.stderr
    first = next(c for c in calls if ".bundler-unpack-" in c.line)
    result = run_with_fault(cmd, "write", first.index, "SIGKILL", env=env, cwd="/")
    assert result.killed, result.stderr
    left = [n for n in os.listdir(install) if n.startswith(".bundler-unpack-")]
    assert len(left) == 1
    doctor = run_cli(["--install", str(install), "doctor", "--json"], exact_env=env)
    problems = json.loads(doctor.stdout)["problems"]
    assert doctor.returncode == 3
    assert any(left[0] in p["path"] and "recover --install" in p["fix"] for p in problems)
    recovered = run_cli(["recover", "--install", str(install)], exact_env=env)
    assert recovered.returncode == 0, recovered.stderr
    assert left[0] in recovered.stdout
    assert tree_snapshot(install) == before


SCRATCH_CALLS = ["openat", "mkdir", "unlinkat", "close", "newfstatat", "getdents64", "flock"]


def _sigint_at_calls_of_an_archive_verify(packed: Path, tmp_path: Path, count: int | None) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [*cli_command(), "bundle", "verify", str(packed)]
    done, calls = trace_calls(cmd, SCRATCH_CALLS, env=_env(tmp), cwd="/", relevant=str(tmp))
    assert done.returncode == 0, done.stderr
    assert len(calls) > 20, "verify made too few calls in its temporary folder"
    for call in sample(calls, count):
        run = run_with_fault(cmd, call.syscall, call.index, "SIGINT", env=_env(tmp), cwd="/")
        assert run.fired and "Traceback" not in run.stderr, (call.line, run.stderr)
        assert run.returncode in (0, 130), (call.line, run.stderr)
        assert os.listdir(tmp) == [], (call.line, run.stderr)


def test_sigint_at_calls_of_an_archive_verify_leaves_nothing(packed: Path, tmp_path: Path) -> None:
    """Ctrl-C at the calls ``bundle verify FILE.tar`` makes in the temporary folder: as it made
    its scratch folder, unpacked into it and removed it. Three ways it left something or
    failed were found so: a signal during the removal broke it off (the folder stayed behind
    'cleaned up'); one as a descriptor was closed had the clean-up close it again (EBADF,
    reported as a failure to unpack, exit 1); one during Python's first probe of the
    temporary folder left the probe's file there."""
    _sigint_at_calls_of_an_archive_verify(packed, tmp_path, 3 * FAST_SAMPLE)


@pytest.mark.slow
def test_sigint_at_every_call_of_an_archive_verify_leaves_nothing(
    packed: Path, tmp_path: Path
) -> None:
    _sigint_at_calls_of_an_archive_verify(packed, tmp_path, slow_sample_count())


def _crash_env(tmp: Path) -> dict[str, str]:
    # cwd "/" below, so the code under test is named; a fixed time keeps the runs alike
    here = str(Path(__file__).resolve().parents[2])
    return {**_env(tmp), "PYTHONPATH": here, "SOURCE_DATE_EPOCH": "1700000000"}


def _killed_export_to_an_archive(tmp_path: Path, tmp: Path) -> tuple[Path, Path, str]:
    """Kill (SIGKILL) a real ``agents export --out FILE.tar`` whose workspace holds an install
    secret, once the whole workspace is copied into the bundle folder it stages beside FILE.tar
    and before the sweep's refusal: (the install, FILE.tar, the secret)."""
    secret = bf.INSTALL_SECRETS["anthropic"]
    install = bf.write_install(tmp_path / "install")
    (install / "agents" / bf.ROOT_AGENT / "workspace" / "leak.txt").write_text(f"key {secret}\n")
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "b.tar"
    cmd = [*cli_command(), "--install", str(install), "agents", "export", bf.ROOT_AGENT]
    cmd += ["--out", str(out)]
    env = _crash_env(tmp)
    done, calls = trace_calls(cmd, ["openat"], env=env, cwd="/", relevant=str(out.parent))
    assert done.returncode == 1 and "leak.txt" in done.stderr, done.stderr  # the secret refuses
    # the bundle's config fragment is written once every workspace file is copied
    at = next(c for c in calls if '"config.toml", O_WRONLY|O_CREAT' in c.line)
    assert ".zeroclaw-export-" in at.line
    killed = run_with_fault(cmd, at.syscall, at.index, "SIGKILL", env=env, cwd="/")
    assert killed.killed, killed.stderr
    return install, out, secret


def _holding(root: Path, secret: str) -> list[Path]:
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()
    ]


def test_a_killed_export_to_an_archive_leaves_only_what_recover_of_the_archive_clears(
    tmp_path: Path,
) -> None:
    """A kill during ``agents export --out FILE.tar`` leaves the bundle it was building (an
    unswept copy of the workspace) beside FILE.tar, where every publication stages, and
    nothing in the temporary folder: doctor names it with ``bundler recover FILE.tar``,
    ``recover --scan`` lists it (changing nothing), and ``recover FILE.tar`` clears it all."""
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    install, out, secret = _killed_export_to_an_archive(tmp_path, tmp)
    assert os.listdir(tmp) == []
    left = sorted(os.listdir(out.parent))
    assert left and all(name.startswith(".zeroclaw-export-") for name in left), left
    assert _holding(out.parent, secret), "the kill landed before the secret's copy was made"
    env = _crash_env(tmp)

    doctor = run_cli(["--install", str(install), "--json", "doctor"], exact_env=env)
    named = [p for p in json.loads(doctor.stdout)["problems"] if p["kind"] == "export-leftover"]
    assert named and all(p["fix"] == f"bundler recover {out}" for p in named), doctor.stdout

    before = tree_snapshot(out.parent)
    scan = run_cli(["--json", "recover", "--scan", str(out.parent)], exact_env=env)
    assert scan.returncode == 0, scan.stderr
    listed = sorted(os.path.basename(a["path"]) for a in json.loads(scan.stdout)["actions"])
    assert listed == left
    assert tree_snapshot(out.parent) == before

    recovered = run_cli(["recover", str(out)], exact_env=env)
    assert recovered.returncode == 0, recovered.stderr
    assert os.listdir(out.parent) == [] and os.listdir(tmp) == []
    again = run_cli(["--install", str(install), "--json", "doctor"], exact_env=env)
    assert not any(p["kind"] == "export-leftover" for p in json.loads(again.stdout)["problems"])


def test_recover_leaves_a_running_archive_read_s_scratch_folder_alone(
    packed: Path, tmp_path: Path
) -> None:
    """A scratch folder is dead only when no process holds its lock: a ``bundle verify`` still
    reading its archive (a pipe here, fed slowly) keeps its folder through ``doctor`` and
    ``recover``, while the dead folder of a verify killed meanwhile is removed."""
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _crash_env(tmp)
    fifo = tmp_path / "stream.tar"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [*cli_command(), "bundle", "verify", str(fifo)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    data = packed.read_bytes()
    with open(fifo, "wb") as writer:
        writer.write(data[:4096])
        writer.flush()
        deadline = time.monotonic() + 60
        while not _scratch(tmp) and time.monotonic() < deadline:
            time.sleep(0.05)
        [live] = _scratch(tmp)
        # killed after the verify made its folder (a run clears dead ones before it makes its own)
        _kill_in_first_write_below([*cli_command(), "bundle", "verify", str(packed)], env, tmp)
        install = _empty_install(tmp_path / "install")
        out = tmp_path / "elsewhere.tar"
        [dead] = [name for name in _scratch(tmp) if name != live]
        live_before = tree_snapshot(tmp / live)
        doctor = run_cli(["--install", str(install), "--json", "doctor"], exact_env=env)
        listed = [w["path"] for w in json.loads(doctor.stdout)["warnings"]]
        assert str(tmp / dead) in listed and str(tmp / live) not in listed, doctor.stdout
        recovered = run_cli(["recover", str(out)], exact_env=env)
        assert recovered.returncode == 0, recovered.stderr
        assert dead in recovered.stdout and live not in recovered.stdout
        assert _scratch(tmp) == [live]
        assert tree_snapshot(tmp / live) == live_before
        writer.write(data[4096:])
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert os.listdir(tmp) == []
