"""Crashes and I/O faults against the real ``bundle pack`` and ``bundle unpack`` (the
06 §2 R1/R2 bars export meets, for the archive form).

Black-box, as ``test_crash_export.py``: strace kills the CLI (SIGKILL) or fails one call (EIO,
ENOSPC) at a chosen index. After ``bundler recover DEST`` the destination holds the old archive
or bundle or the new one, byte for byte, and nothing else is left beside it. The fast suite kills
at every call index of the small ``pack`` and at an evenly spread sample of ``unpack``'s; the
``slow`` sweep takes them all.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.crash_archive import (
    FAST_SAMPLE,
    assert_old_or_new_after_recover,
    fail_at,
    kill_at,
    needs_ptrace,  # noqa: F401 - autouse: skips where ptrace is not permitted
    pack_scenario,
    unpack_scenario,
)
from support.export_kit import cli_env
from support.faultinject import (
    Call,
    Fault,
    run_with_fault,
)
from support.kit import one_error


@pytest.mark.parametrize("force", [False, True], ids=["vacant", "replace"])
def test_pack_killed_at_every_step_then_recover_gives_the_old_or_new_archive(
    tmp_path: Path, two_bundles: tuple[Path, Path], force: bool
) -> None:
    kill_at(pack_scenario(tmp_path, two_bundles, force), None)


@pytest.mark.parametrize("force", [False, True], ids=["vacant", "replace"])
def test_unpack_killed_at_a_sample_of_steps_then_recover_gives_the_old_or_new_bundle(
    tmp_path: Path, two_bundles: tuple[Path, Path], force: bool
) -> None:
    kill_at(unpack_scenario(tmp_path, two_bundles, force), FAST_SAMPLE)


@pytest.mark.parametrize("command", ["pack", "unpack"])
def test_an_io_fault_fails_cleanly_or_publishes(
    tmp_path: Path, two_bundles: tuple[Path, Path], command: str
) -> None:
    make = pack_scenario if command == "pack" else unpack_scenario
    fail_at(make(tmp_path, two_bundles, True), FAST_SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True], ids=["vacant", "replace"])
def test_unpack_killed_at_every_step_then_recover_gives_the_old_or_new_bundle(
    tmp_path: Path, two_bundles: tuple[Path, Path], force: bool
) -> None:
    # CI (BUNDLER_SLOW_SAMPLE set) takes a wider sample than the fast test's, not every step
    sampled = os.environ.get("BUNDLER_SLOW_SAMPLE", "")
    kill_at(unpack_scenario(tmp_path, two_bundles, force), 2 * FAST_SAMPLE if sampled else None)


@pytest.mark.parametrize("fault", ["EIO", "ENOSPC", "SIGKILL"])
def test_a_fault_in_the_direct_writes_of_a_long_pack_keeps_the_old_archive(
    tmp_path: Path, fault: Fault
) -> None:
    """A bundle of 48 MB is packed with direct writes on a thread of its own (bundler.fs.
    direct). A fault in its second pwritev2 is one error line, exit 1, the old archive left as
    it was; a kill there leaves what recover clears; either way the old archive or the new."""

    bundles = (bf.big_bundle(tmp_path, "old", b"old-"), bf.big_bundle(tmp_path, "new", b"new!"))
    scenario = pack_scenario(tmp_path, bundles, True)
    result = run_with_fault(scenario.cmd, "pwritev2", 2, fault, env=cli_env(), cwd="/")
    assert "Traceback" not in result.stderr, result.stderr
    if fault == "SIGKILL":
        assert result.killed, result.stderr
    else:
        assert "(INJECTED)" in result.log
        assert result.returncode == 1 and one_error(result.stderr), result.stderr
        assert "the destination is unchanged" in result.stderr
    assert scenario.state() == scenario.old
    assert_old_or_new_after_recover(scenario, Call("pwritev2", 2, ""))
