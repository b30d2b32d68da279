"""Crashes and I/O faults against the real ``bundler agents import`` (06 §2 R1, R2; 03 §3.2, §6).

Black-box: the CLI runs under strace, which kills it (SIGKILL) or fails one system call at a chosen
call index. After ``bundler recover --install`` the install must be byte-identical to its state
before the import, or hold the complete import (compared with a reference import made in a copy;
the receipt's name and text carry a timestamp and a token, so receipts are compared by count).

The full sweeps are ``slow``; ``BUNDLER_SLOW_SAMPLE`` caps how many call indexes they try. A small
evenly spread sample runs in the fast suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import (
    Call,
    FaultRun,
    kill_at_each,
    ptrace_unavailable,
    run_with_fault,
    run_with_sigints,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.installs import one_error
from support.kit import (
    FAULT_SYSCALLS,
    RENAME_SYSCALLS,
    SWAP_SYSCALLS,
    clean_env,
    cli_command,
    run_cli,
)

R1_SYSCALLS = SWAP_SYSCALLS
R2_SYSCALLS = FAULT_SYSCALLS
FAST_SAMPLE = 6
SECRET = "sk-ant-CRASHTEST-zqxjzqxjzqxjzqxjzq"
# secrets in plain text: the reference import's bytes are then the same on every run (an import
# that seals them and creates the key is test_crash_import_key's)
USER_CONFIG = (
    '# mine\n[risk_profiles.strict]\nlevel = "readonly"   # kept\n\n[secrets]\nencrypt = false\n'
)
REPO = Path(__file__).resolve().parents[2]

State = dict[str, bytes | None]


@pytest.fixture(autouse=True)
def _needs_ptrace() -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)


def cli_env() -> dict[str, str]:
    return clean_env(
        {"PYTHONDONTWRITEBYTECODE": "1", "SOURCE_DATE_EPOCH": "1700000000", "PYTHONPATH": str(REPO)}
    )


def bundler(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, exact_env=cli_env(), cwd="/")


def state(install: Path) -> State:
    """Every entry's bytes (None for folders); receipts by count, their file listings by
    content (no time in them), the lock file ignored."""
    out: State = {}
    receipts = 0
    listings: list[bytes] = []
    for path in sorted(install.rglob("*")):
        rel = str(path.relative_to(install))
        if rel == ".config.lock":
            continue
        if rel.startswith("data/state/imports/"):
            if path.name.endswith(".toml.files"):
                listings.append(path.read_bytes())
            else:
                receipts += 1
            continue
        out[rel] = None if path.is_dir() and not path.is_symlink() else path.read_bytes()
    out["<receipts>"] = str(receipts).encode()
    out["<listings>"] = b"\0".join(listings)
    return out


@dataclass
class Scenario:
    install: Path
    pristine: Path
    bundle: Path
    old: State
    new: State

    @property
    def cmd(self) -> list[str]:
        return [
            *cli_command(),
            "--install",
            str(self.install),
            "agents",
            "import",
            str(self.bundle),
            "--accept-risks",
            "--secret",
            f"providers.models.anthropic.main.api_key={SECRET}",
        ]

    def reset(self) -> None:
        shutil.rmtree(self.install)
        shutil.copytree(self.pristine, self.install, symlinks=True)


def _scenario(tmp_path: Path) -> Scenario:
    bundle = bf.build_bundle(tmp_path / "bundle")
    for i in range(45):  # about 50 files, so every call index can be tried
        (bundle / "workspace" / "notes" / f"n{i:02d}.md").write_text(f"note {i}\n")
    bf.reseal(bundle)
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    (pristine / "config.toml").write_text(USER_CONFIG, encoding="utf-8")
    (pristine / "agents").mkdir()  # an existing parent is kept; missing ones are created
    install = tmp_path / "install"
    shutil.copytree(pristine, install)
    reference = Scenario(install, pristine, bundle, state(install), {})
    done = subprocess.run(
        reference.cmd, capture_output=True, text=True, env=cli_env(), cwd="/", timeout=120
    )
    assert done.returncode == 0, done.stderr
    new = state(install)
    assert new["<receipts>"] == b"1"
    scenario = Scenario(install, pristine, bundle, reference.old, new)
    scenario.reset()
    return scenario


def _calls(scenario: Scenario, syscalls: list[str]) -> list[Call]:
    done, calls = trace_calls(
        scenario.cmd, syscalls, env=cli_env(), cwd="/", relevant=str(scenario.install)
    )
    assert done.returncode == 0, done.stderr
    scenario.reset()
    assert calls, "the traced import made none of the calls under test"
    return calls


def _leftovers(install: Path) -> list[str]:
    return [
        name
        for name in os.listdir(install)
        if name.startswith((".bundler-import-", ".config.toml.bundler-"))
    ]


def _assert_old_or_new_after_recover(scenario: Scenario, call: Call) -> None:
    recovered = bundler("recover", "--install", str(scenario.install))
    assert recovered.returncode == 0, f"{call}: {recovered.stderr}"
    now = state(scenario.install)
    assert now in (scenario.old, scenario.new), (
        f"{call}: install is neither before nor after the import"
    )
    assert _leftovers(scenario.install) == [], call
    again = bundler("recover", "--install", str(scenario.install))
    assert again.returncode == 0 and state(scenario.install) == now, (
        f"{call}: recovery is not idempotent"
    )


def _kill_each(scenario: Scenario, calls: list[Call]) -> None:
    def check(call: Call, run: FaultRun) -> None:
        assert SECRET not in run.stdout + run.stderr
        for leftover in _leftovers(scenario.install):
            path = scenario.install / leftover
            for file in path.rglob("*") if path.is_dir() else [path]:
                if file.is_file() and file.name in ("journal.toml",):
                    assert SECRET.encode() not in file.read_bytes(), (
                        f"{call}: secret in the journal"
                    )
        _assert_old_or_new_after_recover(scenario, call)

    kill_at_each(
        scenario.cmd,
        calls,
        check,
        reset=scenario.reset,
        env=cli_env(),
        cwd="/",
        every_kill_lands=True,
    )


def test_sigkill_sample_then_recover_gives_old_or_new_install(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    _kill_each(scenario, sample(_calls(scenario, R1_SYSCALLS), FAST_SAMPLE))


def test_sigkill_at_the_commit_rename_leaves_recoverable_journal_without_secret(
    tmp_path: Path,
) -> None:
    scenario = _scenario(tmp_path)
    calls = [c for c in _calls(scenario, RENAME_SYSCALLS) if "config.toml" in c.line]
    assert calls, "no config rename traced"
    commit = calls[-1]
    run = run_with_fault(
        scenario.cmd, commit.syscall, commit.index, "SIGKILL", env=cli_env(), cwd="/"
    )
    assert run.killed
    staging = [
        scenario.install / name
        for name in _leftovers(scenario.install)
        if name.startswith(".bundler-import-")
    ]
    assert len(staging) == 1
    journal = (staging[0] / "journal.toml").read_bytes()
    assert SECRET.encode() not in journal and b"agents/researcher/workspace" in journal
    _assert_old_or_new_after_recover(scenario, commit)
    assert state(scenario.install) == scenario.old  # killed before the rename: not committed


@pytest.mark.parametrize("where", ["listing", "receipt"])
def test_sigkill_after_the_commit_then_recover_writes_the_receipt_and_its_listing(
    tmp_path: Path, where: str
) -> None:
    """Killed after the commit, while publishing the receipt's file listing (its rename into
    place) or the receipt (its link): recovery writes the missing receipt and the listing
    beside it, byte for byte what an uninterrupted import writes, from the journal and the
    staged listing; the receipt is never there without its listing."""
    scenario = _scenario(tmp_path)
    syscalls = RENAME_SYSCALLS if where == "listing" else ["link", "linkat"]
    mark = ".toml.files" if where == "listing" else ".partial"
    calls = [c for c in _calls(scenario, syscalls) if mark in c.line]
    assert calls, f"no {where} publication traced"
    run = run_with_fault(
        scenario.cmd, calls[0].syscall, calls[0].index, "SIGKILL", env=cli_env(), cwd="/"
    )
    assert run.killed
    imports = scenario.install / "data" / "state" / "imports"
    assert not list(imports.glob("*.toml")), "the receipt was written before the kill"
    assert (scenario.install / "config.toml").read_bytes() == scenario.new["config.toml"]
    recovered = bundler("recover", "--install", str(scenario.install))
    assert recovered.returncode == 0, recovered.stderr
    assert state(scenario.install) == scenario.new
    assert _leftovers(scenario.install) == []
    receipt = next(imports.glob("*.toml"))
    undone = bundler("--install", str(scenario.install), "agents", "import", "--undo", str(receipt))
    assert undone.returncode == 0, undone.stderr
    assert not (scenario.install / "agents" / "researcher").exists()


@pytest.mark.slow
def test_sigkill_at_every_call_then_recover_gives_old_or_new_install(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    _kill_each(scenario, sample(_calls(scenario, R1_SYSCALLS), slow_sample_count()))


def _fail_each(scenario: Scenario, calls: list[Call], fault: str) -> None:
    for call in calls:
        run = run_with_fault(scenario.cmd, call.syscall, call.index, fault, env=cli_env(), cwd="/")  # type: ignore[arg-type]
        if not run.fired:
            scenario.reset()
            continue
        assert "Traceback" not in run.stderr, (call, run.stderr)
        assert SECRET not in run.stdout + run.stderr
        now = state(scenario.install)
        if run.returncode == 0:
            # after the commit: the complete import, maybe with leftovers recover clears
            assert bundler("recover", "--install", str(scenario.install)).returncode == 0
            assert state(scenario.install) == scenario.new, call
        else:
            assert run.returncode == 1, (call, run.returncode, run.stderr)
            assert one_error(run.stderr), (call, run.stderr)
            if now != scenario.old:
                # a failed rollback says so and leaves it to recover
                assert "bundler recover --install" in run.stderr, (call, run.stderr)
                assert bundler("recover", "--install", str(scenario.install)).returncode == 0
                assert state(scenario.install) == scenario.old, call
            assert _leftovers(scenario.install) == [] or "recover" in run.stderr, call
        scenario.reset()


def test_io_fault_sample_fails_cleanly_or_completes(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    calls = _calls(scenario, R2_SYSCALLS)
    _fail_each(scenario, sample(calls, FAST_SAMPLE), "EIO")


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["EIO", "ENOSPC"])
def test_io_fault_at_every_call_fails_cleanly_or_completes(tmp_path: Path, fault: str) -> None:
    scenario = _scenario(tmp_path)
    calls = _calls(scenario, R2_SYSCALLS)
    _fail_each(scenario, sample(calls, slow_sample_count() or max(50, len(calls))), fault)


def test_recover_removes_staging_without_journal(tmp_path: Path) -> None:
    install = tmp_path / "install"
    (install / ".bundler-import-AAAAAAAAAAAA" / "workspace").mkdir(parents=True)
    (install / ".bundler-import-AAAAAAAAAAAA" / "workspace" / "f").write_text("staged\n")
    (install / ".config.toml.bundler-AAAAAAAAAAAA").write_text("half a config")
    (install / "config.toml").write_text(USER_CONFIG)
    result = bundler("recover", "--install", str(install), "--json")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in install.iterdir()) == [".config.lock", "config.toml"]
    assert (install / "config.toml").read_text() == USER_CONFIG


def test_recover_refuses_when_config_matches_neither_digest(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    calls = [c for c in _calls(scenario, RENAME_SYSCALLS) if "config.toml" in c.line]
    run = run_with_fault(
        scenario.cmd, calls[-1].syscall, calls[-1].index, "SIGKILL", env=cli_env(), cwd="/"
    )
    assert run.killed
    (scenario.install / "config.toml").write_text(USER_CONFIG + "# edited meanwhile\n")
    before = state(scenario.install)
    dry = bundler("recover", "--install", str(scenario.install), "--dry-run")
    result = bundler("recover", "--install", str(scenario.install))
    assert dry.returncode == 1 and result.returncode == 1
    assert "matches neither" in result.stderr and "agents/researcher/workspace" in result.stderr
    assert state(scenario.install) == before


def _undo_scenario(
    tmp_path: Path, *, worked: bool = False
) -> tuple[Scenario, list[str], State, State]:
    """An install right after the import (with ``worked``, its agent has edited a file and
    written one since), the undo command, and its states before and after."""
    scenario = _scenario(tmp_path)
    done = subprocess.run(
        scenario.cmd, capture_output=True, text=True, env=cli_env(), cwd="/", timeout=120
    )
    assert done.returncode == 0, done.stderr
    if worked:
        notes = scenario.install / "agents" / "researcher" / "workspace" / "notes"
        (notes / "n07.md").write_text("note 7, edited by the agent\n")
        (notes / "agent.md").write_text("written by the agent\n")
    imported = tmp_path / "imported"
    shutil.copytree(scenario.install, imported, symlinks=True)
    receipt = next((scenario.install / "data" / "state" / "imports").glob("*.toml"))
    cmd = [
        *cli_command(),
        "--install",
        str(scenario.install),
        "agents",
        "import",
        "--undo",
        str(receipt),
    ]
    undone = subprocess.run(
        cmd, capture_output=True, text=True, env=cli_env(), cwd="/", timeout=120
    )
    assert undone.returncode == 0, undone.stderr
    after = state(scenario.install)
    assert (scenario.install / "config.toml").read_text() == USER_CONFIG
    kept = [rel for rel, data in after.items() if data is not None and rel.startswith("agents/")]
    assert sorted(kept) == (
        ["agents/researcher/workspace/notes/agent.md", "agents/researcher/workspace/notes/n07.md"]
        if worked
        else []
    )
    return (
        Scenario(scenario.install, imported, scenario.bundle, state(imported), after),
        cmd,
        state(imported),
        after,
    )


@pytest.mark.parametrize("worked", [False, True], ids=["untouched", "agent_worked"])
def test_sigkill_during_undo_then_recover_gives_before_or_after(
    tmp_path: Path, worked: bool
) -> None:
    """Killed anywhere, an undo recovers to the install as it was or as the undo leaves it;
    with files the agent wrote, those are in place either way."""
    scenario, cmd, before, after = _undo_scenario(tmp_path, worked=worked)
    scenario.reset()
    done, calls = trace_calls(
        cmd, R1_SYSCALLS, env=cli_env(), cwd="/", relevant=str(scenario.install)
    )
    assert done.returncode == 0, done.stderr

    def check(call: Call, _run: FaultRun) -> None:
        recovered = bundler("recover", "--install", str(scenario.install))
        assert recovered.returncode == 0, f"{call}: {recovered.stderr}"
        assert state(scenario.install) in (before, after), call
        assert _leftovers(scenario.install) == [], call

    count = slow_sample_count()
    kill_at_each(
        cmd,
        sample(calls, FAST_SAMPLE if count is None else count),
        check,
        reset=scenario.reset,
        env=cli_env(),
        cwd="/",
        every_kill_lands=True,
    )


def test_sigint_at_and_after_the_commit_rename_is_a_warning_and_the_import_stands(
    tmp_path: Path,
) -> None:
    """Ctrl-C delivered as config.toml was renamed into place ran the handler before the
    transaction knew it had committed: the rollback moved the workspace back out from under
    the new config and removed the journal, and exit 130 said 'cleaned up'. An interrupt from
    the commit on is a failure after the commit point (05 §2): exit 0, a warning, the import
    whole."""
    scenario = _scenario(tmp_path)
    calls = _calls(scenario, R1_SYSCALLS)
    commit = [c for c in calls if c.syscall in RENAME_SYSCALLS and "config.toml" in c.line][-1]
    for call in calls[calls.index(commit) : calls.index(commit) + 3]:
        run = run_with_fault(scenario.cmd, call.syscall, call.index, "SIGINT", env=cli_env())
        assert run.fired and "Traceback" not in run.stderr, (call.line, run.stderr)
        assert run.returncode == 0, (call.line, run.stderr)
        assert "interrupted" in run.stderr and "cleaned up" not in run.stderr, run.stderr
        assert SECRET not in run.stdout + run.stderr
        _assert_old_or_new_after_recover(scenario, call)
        assert state(scenario.install) == scenario.new, call.line
        scenario.reset()


def test_sigint_before_the_commit_rename_cleans_up(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    calls = _calls(scenario, R1_SYSCALLS)
    commit = [c for c in calls if c.syscall in RENAME_SYSCALLS and "config.toml" in c.line][-1]
    for call in calls[max(0, calls.index(commit) - 3) : calls.index(commit)]:
        run = run_with_fault(scenario.cmd, call.syscall, call.index, "SIGINT", env=cli_env())
        assert run.fired and run.returncode == 130 and one_error(run.stderr), run.stderr
        assert state(scenario.install) == scenario.old and _leftovers(scenario.install) == []
        scenario.reset()


def test_sigint_at_the_commit_rename_of_an_undo_is_a_warning_and_the_undo_stands(
    tmp_path: Path,
) -> None:
    scenario, cmd, _before, after = _undo_scenario(tmp_path)
    scenario.reset()
    done, calls = trace_calls(
        cmd, R1_SYSCALLS, env=cli_env(), cwd="/", relevant=str(scenario.install)
    )
    assert done.returncode == 0, done.stderr
    commit = [c for c in calls if c.syscall in RENAME_SYSCALLS and "config.toml" in c.line][-1]
    scenario.reset()
    run = run_with_fault(cmd, commit.syscall, commit.index, "SIGINT", env=cli_env(), cwd="/")
    assert run.fired and run.returncode == 0, (commit.line, run.stderr)
    assert "interrupted" in run.stderr and "cleaned up" not in run.stderr, run.stderr
    assert bundler("recover", "--install", str(scenario.install)).returncode == 0
    assert state(scenario.install) == after and _leftovers(scenario.install) == []


# --- Ctrl-C after the commit of an archive import, and Ctrl-C twice ------------------------------


def _archive_scenario(tmp_path: Path) -> Scenario:
    """The scenario with its bundle given as an archive (unpacked into the install first)."""
    scenario = _scenario(tmp_path)
    archive = tmp_path / "bundle.tar"
    packed = bundler("bundle", "pack", str(scenario.bundle), str(archive))
    assert packed.returncode == 0, packed.stderr
    return Scenario(scenario.install, scenario.pristine, archive, scenario.old, scenario.new)


def _every_leftover(install: Path) -> list[str]:
    return [name for name in os.listdir(install) if name.startswith((".bundler-", ".config.toml."))]


def test_sigint_after_an_archive_import_committed_is_a_warning_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """After the commit, an archive import still removes the folder it unpacked the archive
    into, and writes the receipt. An interrupt there ended with exit 130 and 'cleaned up',
    the import standing and the unpacked folder left in the install. From the commit on a
    signal is noted: the import finishes, exit 0, a warning."""
    scenario = _archive_scenario(tmp_path)
    calls = _calls(scenario, R1_SYSCALLS)
    commit = [c for c in calls if c.syscall in RENAME_SYSCALLS and "config.toml" in c.line][-1]
    after = calls[calls.index(commit) + 1 :]
    assert after, "nothing follows the commit"
    for call in sample(after, FAST_SAMPLE):
        run = run_with_fault(scenario.cmd, call.syscall, call.index, "SIGINT", env=cli_env())
        assert run.fired and "Traceback" not in run.stderr, (call.line, run.stderr)
        assert run.returncode == 0, (call.line, run.stderr)
        assert "interrupted" in run.stderr and "cleaned up" not in run.stderr, run.stderr
        assert state(scenario.install) == scenario.new, call.line
        assert _every_leftover(scenario.install) == [], call.line
        scenario.reset()


def test_a_second_sigint_during_the_rollback_still_cleans_up(tmp_path: Path) -> None:
    """Ctrl-C, then Ctrl-C again while the first one's rollback runs: the second one broke off
    the rollback, and exit 130 said 'cleaned up' with the staging folder left in the install.
    Now the clean-up the first signal started always finishes."""
    scenario = _archive_scenario(tmp_path)
    calls = _calls(scenario, R1_SYSCALLS)
    commit = [c for c in calls if c.syscall in RENAME_SYSCALLS and "config.toml" in c.line][-1]
    moves = [c for c in calls[: calls.index(commit)] if c.syscall in RENAME_SYSCALLS]
    assert moves, "the import moved nothing before its commit"
    for first in moves:
        # the second Ctrl-C at the first removal after the first one: inside the rollback
        removals = sum(1 for c in calls[: calls.index(first)] if c.syscall == "unlinkat")
        run = run_with_sigints(
            scenario.cmd, [(first.syscall, first.index), ("unlinkat", removals + 1)], env=cli_env()
        )
        assert run.fired, (first.line, run.stderr)
        assert run.returncode == 130 and one_error(run.stderr), (first.line, run.stderr)
        assert state(scenario.install) == scenario.old, first.line
        assert _every_leftover(scenario.install) == [], (first.line, run.stderr)
        scenario.reset()
