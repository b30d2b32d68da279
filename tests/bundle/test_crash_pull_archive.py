"""Crashes and I/O faults against the real ``bundle pull REF FILE.tar`` (issue 16; the 06 §2
R1/R2 bars, for a pull whose layers are streamed straight into the archive's staging file).

strace kills the CLI (SIGKILL) or fails one call (EIO, ENOSPC) at a chosen index. After
``bundler recover DEST`` the destination holds the old archive or the new one, byte for byte,
and nothing else is left beside it; a rerun completes. The registry is real
(``registry_server``), the scenarios those of ``bundle pack`` (``test_crash_archive``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from faultinject import kill_at_each, sample
from kit import cli_command
from registry_server import Registry
from test_crash_archive import (
    KILL_SYSCALLS,
    Scenario,
    _assert_old_or_new_after_recover,
    _calls,
    _fail_at,
    _needs_ptrace,  # noqa: F401 - autouse: skips where ptrace is not permitted
    archive_scenario,
)
from test_export_kit import bundler, cli_env

SAMPLE = 10


def _pull_scenario(
    tmp_path: Path, bundles: tuple[Path, Path], registry: Registry, force: bool
) -> Scenario:
    ref = registry.ref("agents/crash:1")
    pushed = bundler("bundle", "push", str(bundles[1]), ref, "--plain-http")
    assert pushed.returncode == 0, pushed.stderr
    return archive_scenario(
        tmp_path,
        bundles,
        force,
        lambda _new, out: ["bundle", "pull", ref, str(out), "--plain-http"],
    )


@pytest.mark.parametrize("force", [False, True], ids=["vacant", "replace"])
def test_pull_into_an_archive_killed_at_a_sample_of_steps_then_recover_gives_old_or_new(
    tmp_path: Path,
    two_bundles: tuple[Path, Path],
    registry: Registry,
    force: bool,
) -> None:
    scenario = _pull_scenario(tmp_path, two_bundles, registry, force)
    calls = [
        call
        for call in _calls(scenario, [*KILL_SYSCALLS, "ftruncate", "copy_file_range"])
        if not (call.syscall == "write" and ".target>" in call.line)
    ]
    assert any(call.syscall == "ftruncate" for call in calls), "no end blocks were cut"
    kill_at_each(
        scenario.cmd,
        sample(calls, SAMPLE),
        lambda call, _run: _assert_old_or_new_after_recover(scenario, call),
        reset=scenario.reset,
        env=cli_env(),
        cwd="/",
    )
    scenario.reset()
    rerun = bundler(*scenario.cmd[len(cli_command()) :])
    assert rerun.returncode == 0, rerun.stderr
    assert scenario.state() == scenario.new


def test_an_io_fault_in_a_pull_into_an_archive_fails_cleanly_or_publishes(
    tmp_path: Path,
    two_bundles: tuple[Path, Path],
    registry: Registry,
) -> None:
    _fail_at(_pull_scenario(tmp_path, two_bundles, registry, True), SAMPLE)
