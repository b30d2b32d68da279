"""``agents export --out FILE.tar`` stages beside FILE.tar, as every publication does (02 §8.2):
it needs no room in ``$TMPDIR`` (a small tmpfs on many laptops), a full disk is named as the
destination's, and a kill at any step leaves only what ``bundler recover FILE.tar`` clears.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import (
    Call,
    FaultRun,
    kill_at_each,
    ptrace_unavailable,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.kit import SWAP_SYSCALLS, clean_env, cli_command, one_error, run_cli

ROOT = Path(__file__).resolve().parents[2]
FAST_SAMPLE = 6
TINY = "64k"
# mounts a tmpfs of TINY bytes on $0 in a mount namespace of the command's own, runs the
# command, then lists what it left on that tmpfs after a marker line
ON_A_TINY_TMPFS = (
    f'mount -t tmpfs -o size={TINY},mode=1777 bundler-tiny "$0" || exit 99; '
    '"$@"; status=$?; echo "--- left on the tmpfs:"; ls -A "$0"; exit $status'
)


@cache
def _mount_namespaces_unavailable() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed (util-linux)"
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", ON_A_TINY_TMPFS, "/mnt", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a mount namespace here: {probe.stderr.strip()[:200]}"
    return None


def _on_a_tiny_tmpfs(folder: Path, cmd: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``cmd`` with a tmpfs of :data:`TINY` bytes mounted on ``folder``: (exit status,
    stderr, the names it left on the tmpfs)."""
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", ON_A_TINY_TMPFS, str(folder), *cmd],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=300,
    )
    assert done.returncode != 99, done.stderr
    left = done.stdout.rpartition("--- left on the tmpfs:\n")[2]
    return done.returncode, done.stderr, left


def _install_larger_than_tiny(path: Path) -> Path:
    install = bf.write_install(path)
    # incompressible, far beyond the tmpfs: a copy of the bundle cannot fit there
    big = install / "agents" / bf.ROOT_AGENT / "workspace" / "big.bin"
    big.write_bytes(os.urandom(1 << 20))
    return install


def _export_cmd(install: Path, out: Path) -> list[str]:
    args = ["--install", str(install), "agents", "export", bf.ROOT_AGENT, "--out", str(out)]
    return [*cli_command(), *args]


def test_an_export_to_an_archive_needs_no_room_in_a_small_temporary_folder(
    tmp_path: Path,
) -> None:
    reason = _mount_namespaces_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = _install_larger_than_tiny(tmp_path / "install")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out" / "x.tar"
    out.parent.mkdir()
    env = clean_env({"TMPDIR": str(tmp)})
    status, stderr, left = _on_a_tiny_tmpfs(tmp, _export_cmd(install, out), env)
    assert status == 0, stderr
    assert left == ""
    assert os.listdir(out.parent) == ["x.tar"]
    assert out.stat().st_size > 1 << 20
    assert run_cli(["bundle", "verify", str(out)]).returncode == 0


def test_a_full_disk_under_the_archive_is_named_as_the_archive_s_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    reason = _mount_namespaces_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = _install_larger_than_tiny(tmp_path / "install")
    small = tmp_path / "small"
    small.mkdir()
    out = small / "x.tar"
    status, stderr, left = _on_a_tiny_tmpfs(small, _export_cmd(install, out), clean_env())
    assert status == 1 and one_error(stderr), stderr
    # the copy names the file it could not write; nothing names a folder of another disk
    assert "(No space left on device)" in stderr and "free some space" in stderr
    assert "bundler-archive-" not in stderr and str(tmp_path / "tmp") not in stderr
    assert left == ""


def _recover_and_check(
    out: Path, tmp: Path, reference: bytes, env: dict[str, str]
) -> Callable[[Call, FaultRun], None]:
    """What a killed run must leave: nothing in ``$TMPDIR``, and after ``recover FILE.tar``
    the whole archive or nothing beside it."""

    def check(call: Call, run: FaultRun) -> None:
        assert os.listdir(tmp) == [], call.line
        recovered = run_cli(["recover", str(out)], exact_env=env)
        assert recovered.returncode == 0, (call.line, recovered.stderr)
        left = os.listdir(out.parent)
        # the archive is published whole or not at all; nothing else is left
        assert left in ([], ["x.tar"]), (call.line, left)
        if left:
            assert out.read_bytes() == reference, call.line

    return check


def _kill_sweep(tmp_path: Path, count: int | None) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = bf.write_install(tmp_path / "install")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out" / "x.tar"
    out.parent.mkdir()
    env = clean_env(
        {
            "TMPDIR": str(tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
            "SOURCE_DATE_EPOCH": "1700000000",
            "PYTHONPATH": str(ROOT),
        }
    )
    cmd = _export_cmd(install, out)
    traced = [*SWAP_SYSCALLS, "openat", "mkdirat", "write"]
    done, calls = trace_calls(cmd, traced, env=env, cwd="/", relevant=str(out.parent))
    assert done.returncode == 0, done.stderr
    reference = out.read_bytes()
    # the bundle folder is made beside the archive
    assert any(call.syscall == "mkdirat" and ".zeroclaw-export-" in call.line for call in calls)

    def reset() -> None:
        for name in os.listdir(out.parent):
            path = out.parent / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    check = _recover_and_check(out, tmp, reference, env)
    kill_at_each(cmd, sample(calls, count), check, reset=reset, env=env, cwd="/")


def test_a_kill_during_an_export_to_an_archive_leaves_only_what_recover_clears(
    tmp_path: Path,
) -> None:
    _kill_sweep(tmp_path, FAST_SAMPLE)


@pytest.mark.slow
def test_a_kill_at_every_step_of_an_export_to_an_archive_leaves_only_what_recover_clears(
    tmp_path: Path,
) -> None:
    _kill_sweep(tmp_path, slow_sample_count())
