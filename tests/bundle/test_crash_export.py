"""Crashes, I/O faults and races against the real ``bundler agents export`` (06 §2 R1, R2, R4).

Black-box: the CLI runs under strace, which kills it (SIGKILL) or fails one system call (EIO,
ENOSPC) at a chosen call index. Every export here is deterministic (fixed ``SOURCE_DATE_EPOCH``),
so "the new bundle" is known byte for byte from a reference export made beforehand.

The full sweeps are ``slow``; ``BUNDLER_SLOW_SAMPLE`` caps how many call indexes they try (CI).
A small evenly spread sample runs in the fast suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from faultinject import Call, ptrace_unavailable, run_with_fault, sample, trace_calls
from test_export_kit import (
    bundle_bytes,
    bundler,
    check_bundle,
    cli_env,
    export_cmd,
    hidden_leftovers,
    install_snapshot,
    make_install,
    run,
    workspace,
)

R1_SYSCALLS = [
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "rmdir",
    "fsync",
    "fdatasync",
    "syncfs",
]
R2_SYSCALLS = ["write", "fsync", "syncfs", "renameat2", "openat"]
FAST_SAMPLE = 4


def _slow_count() -> int | None:
    raw = os.environ.get("BUNDLER_SLOW_SAMPLE")
    return int(raw) if raw else None


@pytest.fixture(autouse=True)
def _needs_ptrace() -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)


@dataclass
class Scenario:
    """An install, a destination and the two states the destination may legally end in."""

    install: Path
    parent: Path
    out: Path
    force: bool
    old: dict[str, bytes | None] | None  # None: the destination was vacant
    new: dict[str, bytes | None]
    pristine: Path | None
    install_state: dict[str, tuple[int, bytes | None]]

    @property
    def cmd(self) -> list[str]:
        return export_cmd(self.install, self.out, *(["--force"] if self.force else []))

    def reset(self) -> None:
        """Put the destination back in its state before the export."""
        for name in hidden_leftovers(self.parent):
            path = self.parent / name
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        if self.out.exists():
            shutil.rmtree(self.out)
        if self.pristine is not None:
            shutil.copytree(self.pristine, self.out, symlinks=True)

    def state(self) -> dict[str, bytes | None] | None:
        return bundle_bytes(self.out) if self.out.exists() else None


def _scenario(tmp_path: Path, force: bool) -> Scenario:
    install = make_install(tmp_path / "install", files=50)
    parent = tmp_path / "dest"
    parent.mkdir()
    out = parent / "bundle"
    pristine: Path | None = None
    old: dict[str, bytes | None] | None = None
    if force:
        pristine = tmp_path / "pristine"
        assert run(export_cmd(install, pristine)).returncode == 0
        old = bundle_bytes(pristine)
        # the new export differs from the old one: a file gone, a file added
        (workspace(install) / "notes" / "d0" / "f000.txt").unlink()
        (workspace(install) / "added.txt").write_text("only in the new bundle\n")
    reference = tmp_path / "reference"
    assert run(export_cmd(install, reference)).returncode == 0
    new = bundle_bytes(reference)
    assert new != old
    scenario = Scenario(install, parent, out, force, old, new, pristine, install_snapshot(install))
    scenario.reset()
    return scenario


def _calls(scenario: Scenario, syscalls: list[str]) -> list[Call]:
    done, calls = trace_calls(
        scenario.cmd, syscalls, env=cli_env(), cwd="/", relevant=str(scenario.parent)
    )
    assert done.returncode == 0, done.stderr
    scenario.reset()
    assert calls, "the traced export made none of the calls under test"
    return calls


def _assert_old_or_new_after_recover(scenario: Scenario, call: Call) -> None:
    recovered = bundler("recover", str(scenario.out))
    assert recovered.returncode == 0, f"{call}: {recovered.stderr}"
    state = scenario.state()
    assert state in (scenario.old, scenario.new), (
        f"{call}: destination is neither the old nor the new bundle"
    )
    if state is not None:
        check_bundle(scenario.out)
    assert hidden_leftovers(scenario.parent) == [], call
    assert install_snapshot(scenario.install) == scenario.install_state, call


def _r1(tmp_path: Path, force: bool, count: int | None) -> None:
    scenario = _scenario(tmp_path, force)
    calls = _calls(scenario, R1_SYSCALLS)
    fired = 0
    for call in sample(calls, count):
        result = run_with_fault(
            scenario.cmd, call.syscall, call.index, "SIGKILL", env=cli_env(), cwd="/"
        )
        fired += result.killed
        if not result.killed:
            assert result.returncode == 0, f"{call}: {result.stderr}"
        _assert_old_or_new_after_recover(scenario, call)
        scenario.reset()
    assert fired, "no injected SIGKILL fired"


@pytest.mark.parametrize("force", [False, True], ids=["vacant", "force"])
def test_r1_sigkill_sample_then_recover_gives_old_or_new_bundle(
    tmp_path: Path, force: bool
) -> None:
    _r1(tmp_path, force, FAST_SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True], ids=["vacant", "force"])
def test_r1_sigkill_at_every_call_index_then_recover_gives_old_or_new_bundle(
    tmp_path: Path, force: bool
) -> None:
    _r1(tmp_path, force, _slow_count())


def _r2(tmp_path: Path, force: bool, count: int | None) -> None:
    scenario = _scenario(tmp_path, force)
    calls = _calls(scenario, R2_SYSCALLS)
    before = scenario.state()
    outcomes = {0: 0, 1: 0}
    for number, call in enumerate(sample(calls, count)):
        fault = "EIO" if number % 2 == 0 else "ENOSPC"
        result = run_with_fault(
            scenario.cmd, call.syscall, call.index, fault, env=cli_env(), cwd="/"
        )
        assert result.fired, f"{call}: the fault did not fire"
        assert "Traceback" not in result.stderr, f"{call}: {result.stderr}"
        assert result.returncode in (0, 1), f"{call}: exit {result.returncode}: {result.stderr}"
        outcomes[result.returncode] += 1
        if result.returncode == 1:
            lines = result.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), f"{call}: {result.stderr}"
            assert scenario.state() == before, f"{call}: destination changed by a failed export"
            assert hidden_leftovers(scenario.parent) == [], (
                f"{call}: leftovers after a failed export"
            )
        else:
            assert scenario.state() == scenario.new, f"{call}: exit 0 without the new bundle"
            if hidden_leftovers(scenario.parent):
                assert "warning: " in result.stderr, f"{call}: leftovers without a warning"
            _assert_old_or_new_after_recover(scenario, call)
            assert scenario.state() == scenario.new
        assert install_snapshot(scenario.install) == scenario.install_state, call
        scenario.reset()
    assert outcomes[1], "no fault made the export fail"


@pytest.mark.parametrize("force", [False, True], ids=["vacant", "force"])
def test_r2_io_fault_sample_fails_cleanly_or_publishes(tmp_path: Path, force: bool) -> None:
    _r2(tmp_path, force, FAST_SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True], ids=["vacant", "force"])
def test_r2_io_faults_at_50_or_more_call_indexes_fail_cleanly_or_publish(
    tmp_path: Path, force: bool
) -> None:
    count = _slow_count()
    _r2(tmp_path, force, max(count, 1) if count is not None else 60)


def _r4(tmp_path: Path, rounds: int) -> None:
    install = make_install(tmp_path / "install", files=50)
    refs = {}
    for alias in ("researcher", "writer"):
        ref = tmp_path / f"ref-{alias}"
        assert run(export_cmd(install, ref, alias=alias)).returncode == 0
        refs[alias] = bundle_bytes(ref)
    parent = tmp_path / "dest"
    parent.mkdir()
    out = parent / "bundle"
    env = cli_env()
    for number in range(rounds):
        procs = {
            alias: subprocess.Popen(
                export_cmd(install, out, "--force", alias=alias),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for alias in ("researcher", "writer")
        }
        results = {
            alias: (proc.wait(timeout=120), proc.communicate()) for alias, proc in procs.items()
        }
        codes = {alias: code for alias, (code, _) in results.items()}
        assert set(codes.values()) <= {0, 1}, results
        assert 0 in codes.values(), results
        for _code, (_stdout, stderr) in results.values():
            assert "Traceback" not in stderr
        state = bundle_bytes(out)
        assert state in (refs["researcher"], refs["writer"]), f"round {number}: a mix"
        check_bundle(out)
        winners = [alias for alias, code in codes.items() if code == 0]
        assert any(state == refs[alias] for alias in winners), (
            f"round {number}: a refused export published"
        )
        assert hidden_leftovers(parent) == [], f"round {number}"
        if number % 2:
            shutil.rmtree(out)  # alternate between a vacant and an occupied destination


def test_r4_two_concurrent_exports_sample(tmp_path: Path) -> None:
    _r4(tmp_path, 4)


@pytest.mark.slow
def test_r4_two_concurrent_exports_to_one_destination_50_times(tmp_path: Path) -> None:
    count = _slow_count()
    _r4(tmp_path, 50 if count is None else max(count, 1))
