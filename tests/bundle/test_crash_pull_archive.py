"""Crashes and I/O faults against the real ``bundle pull REF FILE.tar`` and ``bundle pull REF
DIR`` (the 06 §2 R1/R2 bars, for a pull whose layers are streamed straight into the
archive's staging file, and for one flushing the staged folder while it verifies it).

strace kills the CLI (SIGKILL) or fails one call (EIO, ENOSPC) at a chosen index. After
``bundler recover DEST`` the destination holds the old archive or bundle or the new one, byte
for byte, and nothing else is left beside it; a rerun completes. The registry is real
(``registry_server``), the scenarios those of ``bundle pack`` and ``bundle unpack``
(``test_crash_archive``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.crash_archive import (
    KILL_SYSCALLS,
    Scenario,
    archive_scenario,
    assert_old_or_new_after_recover,
    calls_of,
    fail_at,
    kill_at,
    needs_ptrace,  # noqa: F401 - autouse: skips where ptrace is not permitted
)
from support.export_kit import bundle_bytes, bundler, cli_env
from support.faultinject import Call, kill_at_each, sample, trace_log
from support.kit import cli_command, one_error
from support.registry_server import Registry

SAMPLE = 8


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
        for call in calls_of(scenario, [*KILL_SYSCALLS, "ftruncate", "copy_file_range"])
        if not (call.syscall == "write" and ".target>" in call.line)
    ]
    assert any(call.syscall == "ftruncate" for call in calls), "no end blocks were cut"
    kill_at_each(
        scenario.cmd,
        sample(calls, SAMPLE),
        lambda call, _run: assert_old_or_new_after_recover(scenario, call),
        reset=scenario.reset,
        env=cli_env(),
        cwd="/",
    )
    _assert_a_rerun_completes(scenario)


def _assert_a_rerun_completes(scenario: Scenario) -> None:
    scenario.reset()
    rerun = bundler(*scenario.cmd[len(cli_command()) :])
    assert rerun.returncode == 0, rerun.stderr
    assert scenario.state() == scenario.new


def test_an_io_fault_in_a_pull_into_an_archive_fails_cleanly_or_publishes(
    tmp_path: Path,
    two_bundles: tuple[Path, Path],
    registry: Registry,
) -> None:
    fail_at(_pull_scenario(tmp_path, two_bundles, registry, True), SAMPLE)


# --------------------------------------------------------------------------- into a folder


def _pull_folder_scenario(
    tmp_path: Path, bundles: tuple[Path, Path], registry: Registry, force: bool
) -> Scenario:
    old_bundle, new_bundle = bundles
    ref = registry.ref("agents/crash:1")
    pushed = bundler("bundle", "push", str(new_bundle), ref, "--plain-http")
    assert pushed.returncode == 0, pushed.stderr
    parent = tmp_path / "dest"
    parent.mkdir()
    out = parent / "bundle"
    cmd = [*cli_command(), "bundle", "pull", ref, str(out), "--plain-http"]
    scenario = Scenario(
        cmd + (["--force"] if force else []),
        parent,
        out,
        bundle_bytes(old_bundle) if force else None,
        bundle_bytes(new_bundle),
        old_bundle if force else None,
    )
    scenario.reset()
    return scenario


@pytest.mark.parametrize("force", [False, True], ids=["vacant", "replace"])
def test_pull_into_a_folder_killed_at_a_sample_of_steps_then_recover_gives_old_or_new(
    tmp_path: Path,
    two_bundles: tuple[Path, Path],
    registry: Registry,
    force: bool,
) -> None:
    scenario = _pull_folder_scenario(tmp_path, two_bundles, registry, force)
    kill_at(scenario, SAMPLE)
    _assert_a_rerun_completes(scenario)


def test_an_io_fault_in_a_pull_into_a_folder_fails_cleanly_or_publishes(
    tmp_path: Path,
    two_bundles: tuple[Path, Path],
    registry: Registry,
) -> None:
    fail_at(_pull_folder_scenario(tmp_path, two_bundles, registry, True), SAMPLE)


# the flush, delayed so that the verification beside it is long over when it ends: a pull
# that published without waiting for it would show here
SLOW_FLUSH = "syncfs:delay_enter=500000"


# strace delays a failed call but not a killed one: the kill lands whenever the flush starts
@pytest.mark.parametrize("fault", ["error=EIO:delay_enter=500000", "signal=SIGKILL"])
def test_a_pull_into_a_folder_whose_flush_fails_or_dies_publishes_nothing(
    tmp_path: Path,
    two_bundles: tuple[Path, Path],
    registry: Registry,
    fault: str,
) -> None:
    """The staged folder is flushed in a thread of its own while it is verified: its one
    syncfs, failed or killed after the verification ended, leaves the old bundle (after
    recover), said on one line."""
    scenario = _pull_folder_scenario(tmp_path, two_bundles, registry, True)
    done, log = trace_log(
        scenario.cmd,
        ["syncfs"],
        env=cli_env(),
        cwd="/",
        inject=f"syncfs:{fault}:when=1",
    )
    # strace numbers each thread's calls apart: the flush thread's first syncfs is the one
    assert "Traceback" not in done.stderr
    if fault.startswith("error=EIO"):
        assert "(INJECTED) (DELAYED)" in log, log
        assert done.returncode == 1, done.stderr
        assert one_error(done.stderr), done.stderr
    else:
        assert "syncfs(" in log, log
        assert done.returncode in (-9, 137), done.stderr
    assert scenario.state() == scenario.old
    assert_old_or_new_after_recover(scenario, Call("syncfs", 1, fault))
    assert scenario.state() == scenario.old


def test_a_pull_into_a_folder_is_flushed_before_it_is_published(
    tmp_path: Path,
    two_bundles: tuple[Path, Path],
    registry: Registry,
) -> None:
    """Durability: the syncfs of the staged folder has returned before the rename that
    publishes it, though it ran beside the verification."""
    scenario = _pull_folder_scenario(tmp_path, two_bundles, registry, False)
    done, log = trace_log(
        scenario.cmd, ["syncfs", "renameat2"], env=cli_env(), cwd="/", inject=SLOW_FLUSH
    )
    assert done.returncode == 0, done.stderr
    assert scenario.state() == scenario.new
    lines = log.splitlines()
    flushed = [
        index
        for index, line in enumerate(lines)
        if ("syncfs(" in line or "<... syncfs resumed>" in line)
        and "unfinished" not in line
        and "= 0" in line
    ]
    published = [
        index
        for index, line in enumerate(lines)
        if "renameat2(" in line and ".zeroclaw-export-" in line and '"bundle"' in line
    ]
    assert len(flushed) == 1 and len(published) == 1, log
    assert flushed[0] < published[0], log
