"""Crashes, I/O faults and races against the real ``bundler agents export`` (06 §2 R1, R2, R4).

Black-box: the CLI runs under strace, which kills it (SIGKILL) or fails one system call (EIO,
ENOSPC) at a chosen call index. Every export here is deterministic (fixed ``SOURCE_DATE_EPOCH``),
so "the new bundle" is known byte for byte from a reference export made beforehand.

The full sweeps are ``slow``; ``BUNDLER_SLOW_SAMPLE`` caps how many call indexes they try (CI).
A small evenly spread sample runs in the fast suite.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.export_kit import (
    bundle_bytes,
    bundler,
    check_bundle,
    cli_env,
    export_cmd,
    hidden_leftovers,
    make_install,
    run,
    snapshot,
    workspace,
)
from support.faultinject import (
    Call,
    Fault,
    FaultRun,
    kill_at_each,
    ptrace_unavailable,
    run_with_fault,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.installs import one_error
from support.kit import FAULT_SYSCALLS, SWAP_SYSCALLS

R1_SYSCALLS = SWAP_SYSCALLS
R2_SYSCALLS = FAULT_SYSCALLS
FAST_SAMPLE = 4


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


def _scenario(tmp_path: Path, force: bool, files: int = 50) -> Scenario:
    install = make_install(tmp_path / "install", files=files)
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
    scenario = Scenario(install, parent, out, force, old, new, pristine, snapshot(install))
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
    assert snapshot(scenario.install) == scenario.install_state, call


def _r1(tmp_path: Path, force: bool, count: int | None) -> None:
    scenario = _scenario(tmp_path, force)
    kill_at_each(
        scenario.cmd,
        sample(_calls(scenario, R1_SYSCALLS), count),
        lambda call, _run: _assert_old_or_new_after_recover(scenario, call),
        reset=scenario.reset,
        env=cli_env(),
        cwd="/",
    )


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
    _r1(tmp_path, force, slow_sample_count())


# --- replacing a bundle: exchange, retire, remove, flush, record (02 §8.3) ----------------------


def _replace_calls(scenario: Scenario) -> list[Call]:
    """The R1 calls of a clean ``--force`` export from the exchange on, in the order made."""
    calls = _calls(scenario, R1_SYSCALLS)  # in the log's order, which is the order made
    start = next(i for i, call in enumerate(calls) if "RENAME_EXCHANGE" in call.line)
    return calls[start:]


def test_replacing_a_bundle_retires_the_old_one_right_after_the_exchange(tmp_path: Path) -> None:
    """02 §8.3: exchange, then rename the old bundle to ``.zeroclaw-export-old-<token>``, then
    remove it; then flush the parent and remove the record. Nothing of the old bundle is removed
    under the staging name, and the retire rename is the very next step after the exchange."""
    scenario = _scenario(tmp_path, True, files=4)
    after = _replace_calls(scenario)
    exchange = after[0]
    token = exchange.line.split(".zeroclaw-export-", 1)[1][:12]
    staging, retired = f".zeroclaw-export-{token}", f".zeroclaw-export-old-{token}"
    retire = after[1]
    assert retire.syscall in ("rename", "renameat", "renameat2"), after[:3]
    assert f'"{staging}"' in retire.line and f'"{retired}"' in retire.line, retire
    record = f"{staging}.target"
    removals = [call for call in after[2:] if call.syscall in ("unlink", "unlinkat", "rmdir")]
    assert removals and f'"{record}"' in removals[-1].line, "the record goes last"
    for call in removals[:-1]:
        assert staging + ">" not in call.line and f'"{staging}"' not in call.line, (
            f"removed under the staging name, not the retired one: {call.line}"
        )
    flushes = [i for i, call in enumerate(after) if call.syscall in ("fsync", "fdatasync")]
    retired_gone = next(
        i
        for i, call in enumerate(after)
        if f'"{retired}"' in call.line and call.syscall in ("unlinkat", "rmdir")
    )
    assert any(retired_gone < i < after.index(removals[-1]) for i in flushes), (
        "the parent is flushed after the old bundle is removed and before the record goes"
    )


@pytest.mark.parametrize("point", ["retire", "first_removal"])
def test_sigkill_after_the_exchange_leaves_the_old_bundle_whole_then_recovers_to_the_new(
    tmp_path: Path, point: str
) -> None:
    """A kill after the exchange, before the retire rename (the old bundle sits whole under the
    staging name) or after it, before the first removal (whole under the retired name): the new
    bundle is published, and recovery clears the old one to exactly the new bundle."""
    scenario = _scenario(tmp_path, True, files=4)
    after = _replace_calls(scenario)
    if point == "retire":
        call, holder = after[1], ".zeroclaw-export-"
    else:
        call = next(c for c in after if c.syscall in ("unlink", "unlinkat", "rmdir"))
        holder = ".zeroclaw-export-old-"
    result = run_with_fault(
        scenario.cmd, call.syscall, call.index, "SIGKILL", env=cli_env(), cwd="/"
    )
    assert result.killed, result.stderr
    assert scenario.state() == scenario.new
    check_bundle(scenario.out)
    folders = [
        name
        for name in hidden_leftovers(scenario.parent)
        if not name.endswith(".target")
        and name.startswith(holder)
        and (holder != ".zeroclaw-export-" or not name.startswith(".zeroclaw-export-old-"))
    ]
    assert len(folders) == 1, hidden_leftovers(scenario.parent)
    assert bundle_bytes(scenario.parent / folders[0]) == scenario.old
    _assert_old_or_new_after_recover(scenario, call)
    assert scenario.state() == scenario.new


@pytest.mark.slow
def test_sigkill_at_every_step_of_a_replacement_recovers_to_exactly_one_bundle(
    tmp_path: Path,
) -> None:
    """Every kill point from the exchange to the record's removal (a small bundle, so all of
    them; CI takes a wide sample, its first point the exchange itself): recovery leaves exactly
    the new bundle, complete, and no leftover."""
    scenario = _scenario(tmp_path, True, files=4)
    after = _replace_calls(scenario)
    assert len(after) < 80, "the small scenario grew: keep this test exhaustive but quick"
    count = slow_sample_count()
    points = sample(after, None if count is None else 4 * count)

    def check(call: Call, run: FaultRun) -> None:
        assert run.killed, f"{call}: {run.stderr}"
        # the exchange itself was not made when the kill lands on it: the old bundle stays
        expected = scenario.old if call is after[0] else scenario.new
        _assert_old_or_new_after_recover(scenario, call)
        assert scenario.state() == expected, call
        again = bundler("recover", str(scenario.out))
        assert again.returncode == 0 and scenario.state() == expected, call

    kill_at_each(scenario.cmd, points, check, reset=scenario.reset, env=cli_env(), cwd="/")


def _r2(tmp_path: Path, force: bool, count: int | None) -> None:
    scenario = _scenario(tmp_path, force)
    calls = _calls(scenario, R2_SYSCALLS)
    before = scenario.state()
    outcomes = {0: 0, 1: 0}
    for number, call in enumerate(sample(calls, count)):
        fault: Fault = "EIO" if number % 2 == 0 else "ENOSPC"
        result = run_with_fault(
            scenario.cmd, call.syscall, call.index, fault, env=cli_env(), cwd="/"
        )
        assert result.fired, f"{call}: the fault did not fire"
        assert "Traceback" not in result.stderr, f"{call}: {result.stderr}"
        assert result.returncode in (0, 1), f"{call}: exit {result.returncode}: {result.stderr}"
        outcomes[result.returncode] += 1
        if result.returncode == 1:
            assert one_error(result.stderr), f"{call}: {result.stderr}"
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
        assert snapshot(scenario.install) == scenario.install_state, call
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
    count = slow_sample_count()
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
    count = slow_sample_count()
    _r4(tmp_path, 50 if count is None else max(count, 1))


# --- Ctrl-C at the calls beside the destination (05 §2: 130 is "cleaned up like a failure") ---

INTERRUPT_SYSCALLS = ["openat", "mkdir", "mkdirat", "fsync", *R1_SYSCALLS]


def _sigint_beside_the_destination(tmp_path: Path, force: bool, count: int | None) -> None:
    scenario = _scenario(tmp_path, force, files=4)
    calls = [c for c in _calls(scenario, INTERRUPT_SYSCALLS) if ".zeroclaw-export" in c.line]
    assert calls, "the traced export made no call beside its destination"
    for call in sample(calls, count):
        run = run_with_fault(scenario.cmd, call.syscall, call.index, "SIGINT", env=cli_env())
        assert run.fired and "Traceback" not in run.stderr, (call.line, run.stderr)
        assert run.returncode in (0, 130), (call.line, run.stderr)
        if run.returncode == 130:
            assert one_error(run.stderr), (call.line, run.stderr)
            assert scenario.state() == scenario.old, (call.line, run.stderr)
            assert hidden_leftovers(scenario.parent) == [], (call.line, run.stderr)
        else:
            assert scenario.state() == scenario.new, call.line
            if hidden_leftovers(scenario.parent):
                assert "recover" in run.stderr, (call.line, run.stderr)
            _assert_old_or_new_after_recover(scenario, call)
        scenario.reset()


@pytest.mark.parametrize("force", [False, True], ids=["vacant", "force"])
def test_sigint_at_any_call_beside_the_destination_cleans_up_or_publishes(
    tmp_path: Path, force: bool
) -> None:
    """An interrupt that arrived once the bundle was published (the export still writing its
    report) said 'cleaned up' with exit 130 while the new bundle stood. From the commit on a
    signal is noted and the export finishes with a warning. Every call that creates, flushes,
    renames or removes a name beside the destination is interrupted in turn: 130 leaves the
    old destination and nothing else; 0 leaves the new bundle."""
    _sigint_beside_the_destination(tmp_path, force, 2 * FAST_SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True], ids=["vacant", "force"])
def test_sigint_at_every_call_beside_the_destination_cleans_up_or_publishes(
    tmp_path: Path, force: bool
) -> None:
    _sigint_beside_the_destination(tmp_path, force, slow_sample_count())
