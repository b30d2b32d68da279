"""Crashes and I/O faults against an ``agents import`` that creates the install's ``.secret_key``
and seals the given secret under it (03 §3.2, §6).

The key and the sealed value are random, so the import's result is not compared byte for byte
with a reference run. After ``bundler recover --install``: ``config.toml`` is the old file or
the new one (every other file of the install as before or as after the reference import), every
``enc2:`` in it decrypts under ``.secret_key`` (the given secret among them), a key that exists
is whole and 0600 (a rolled-back import keeps the key it created, and recover says so), and no
temporary key, staging folder or staged config is left. The plain secret is in no file.

The full sweeps are ``slow``; ``BUNDLER_SLOW_SAMPLE`` caps how many call indexes they try.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.e2e_helpers import leaks_in
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
from support.installs import one_error, stored_secrets
from support.kit import FAULT_SYSCALLS, SWAP_SYSCALLS, clean_env, cli_command, run_cli

from bundler.config.secretcipher import decrypt
from bundler.config.secretkey import KEY_NAME, SecretKey
from bundler.rules.tomlcompat import loads

SECRET = "sk-ant-KEYCRASH-zqxjzqxjzqxjzqxjzq"
PATH = "providers.models.anthropic.main.api_key"
USER_CONFIG = '# mine\n[risk_profiles.strict]\nlevel = "readonly"   # kept\n'
REPO = Path(__file__).resolve().parents[2]
KILL_SYSCALLS = [*SWAP_SYSCALLS, "link", "linkat", "write"]
FAULTS = [*FAULT_SYSCALLS, "linkat"]
FAST_SAMPLE = 6

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


def _rest(install: Path) -> State:
    """Every entry but the config, the key and the lock; receipts by count."""
    out: State = {}
    receipts = 0
    for path in sorted(install.rglob("*")):
        rel = str(path.relative_to(install))
        if rel in (".config.lock", "config.toml", KEY_NAME):
            continue
        if rel.startswith("data/state/imports/"):
            receipts += 1
            continue
        out[rel] = None if path.is_dir() and not path.is_symlink() else path.read_bytes()
    out["<receipts>"] = str(receipts).encode()
    return out


def _public(text: str) -> object:
    """The config's data with every secret value blanked: equal for two runs of one import."""
    data = loads(text)
    for path in stored_secrets(text):
        node = data
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = "<secret>"
    return data


@dataclass
class Scenario:
    install: Path
    pristine: Path
    bundle: Path
    old_rest: State
    new_rest: State
    new_public: object

    @property
    def cmd(self) -> list[str]:
        return [*cli_command(), "--install", str(self.install), "agents", "import",
                str(self.bundle), "--accept-risks", "--secret", f"{PATH}={SECRET}"]  # fmt: skip

    def reset(self) -> None:
        shutil.rmtree(self.install)
        shutil.copytree(self.pristine, self.install, symlinks=True)


def _scenario(tmp_path: Path) -> Scenario:
    bundle = bf.build_bundle(tmp_path / "bundle")
    for i in range(20):
        (bundle / "workspace" / "notes" / f"n{i:02d}.md").write_text(f"note {i}\n")
    bf.reseal(bundle)
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    (pristine / "config.toml").write_text(USER_CONFIG, encoding="utf-8")
    install = tmp_path / "install"
    shutil.copytree(pristine, install)
    old_rest = _rest(install)
    done = subprocess.run(
        [*cli_command(), "--install", str(install), "agents", "import", str(bundle),
         "--accept-risks", "--secret", f"{PATH}={SECRET}"],
        capture_output=True, text=True, env=cli_env(), cwd="/", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (install / KEY_NAME).is_file()
    scenario = Scenario(
        install, pristine, bundle, old_rest, _rest(install),
        _public((install / "config.toml").read_text()),
    )  # fmt: skip
    scenario.reset()
    return scenario


def _calls(scenario: Scenario, syscalls: list[str], *, of_key: bool = True) -> list[Call]:
    done, calls = trace_calls(
        scenario.cmd, syscalls, env=cli_env(), cwd="/", relevant=str(scenario.install)
    )
    assert done.returncode == 0, done.stderr
    scenario.reset()
    if of_key:
        assert any("secret_key" in c.line for c in calls), "the key's creation was not traced"
    return calls


def _leftovers(install: Path) -> list[str]:
    return [
        name
        for name in os.listdir(install)
        if name.startswith((".bundler-import-", ".config.toml.bundler-", ".secret_key.tmp-"))
    ]


def _assert_consistent(scenario: Scenario, call: Call) -> str:
    """The install is the old one or the new one, and the store opens: returns which."""
    install = scenario.install
    text = (install / "config.toml").read_text()
    key_path = install / KEY_NAME
    key = None
    if key_path.exists():
        assert stat.S_IMODE(key_path.stat().st_mode) == 0o600, call
        key = SecretKey(bytes.fromhex(key_path.read_text()))
    for name, data in ((n, p.read_bytes()) for n, p in _files(install)):
        assert leaks_in(data, [SECRET]) == [], (call, name)
    if text == USER_CONFIG:
        assert _rest(install) == scenario.old_rest, f"{call}: old config, yet not the old install"
        return "old"
    assert key is not None, f"{call}: a sealed config without its key"
    assert _public(text) == scenario.new_public, f"{call}: neither the old config nor the new"
    assert _rest(install) == scenario.new_rest, f"{call}: new config, yet not the new install"
    sealed = stored_secrets(text)
    assert sealed[PATH].startswith("enc2:")
    assert decrypt(sealed[PATH], key) == SECRET, call
    for value in sealed.values():
        if value.startswith("enc2:"):
            decrypt(value, key)
    assert stat.S_IMODE((install / "config.toml").stat().st_mode) == 0o600, call
    return "new"


def _files(root: Path) -> list[tuple[str, Path]]:
    return [(str(p.relative_to(root)), p) for p in sorted(root.rglob("*")) if p.is_file()]


def _recover_and_check(scenario: Scenario, call: Call) -> None:
    recovered = run_cli(["recover", "--install", str(scenario.install)], exact_env=cli_env(),
                        cwd="/")  # fmt: skip
    assert recovered.returncode == 0, f"{call}: {recovered.stderr}"
    assert _leftovers(scenario.install) == [], call
    which = _assert_consistent(scenario, call)
    rolled_back = which == "old" and "roll back" in recovered.stdout
    if rolled_back and (scenario.install / KEY_NAME).exists():
        assert "kept .secret_key" in recovered.stdout, (call, recovered.stdout)


def _kill_each(scenario: Scenario, calls: list[Call]) -> None:
    def check(call: Call, run: FaultRun) -> None:
        assert SECRET not in run.stdout + run.stderr
        _recover_and_check(scenario, call)

    kill_at_each(
        scenario.cmd, calls, check, reset=scenario.reset, env=cli_env(), cwd="/",
        every_kill_lands=True,
    )  # fmt: skip


def _key_calls(calls: list[Call]) -> list[Call]:
    """The calls around the key's publication first (they are the point), then the rest."""
    near = [c for c in calls if "secret_key" in c.line]
    return near + [c for c in calls if c not in near]


def test_sigkill_around_the_key_then_recover_gives_old_or_new_with_the_key(
    tmp_path: Path,
) -> None:
    scenario = _scenario(tmp_path)
    calls = _calls(scenario, KILL_SYSCALLS)
    near = [c for c in calls if "secret_key" in c.line]
    _kill_each(scenario, sample(near, FAST_SAMPLE))


def test_sigkill_at_the_commit_after_the_key_rolls_back_keeping_the_key(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    renames = [c for c in _calls(scenario, ["rename", "renameat", "renameat2"], of_key=False)
               if "config.toml" in c.line]  # fmt: skip
    commit = renames[-1]
    run = run_with_fault(scenario.cmd, commit.syscall, commit.index, "SIGKILL", env=cli_env(),
                         cwd="/")  # fmt: skip
    assert run.killed
    key = (scenario.install / KEY_NAME).read_bytes()
    recovered = run_cli(["recover", "--install", str(scenario.install)], exact_env=cli_env(),
                        cwd="/")  # fmt: skip
    assert recovered.returncode == 0, recovered.stderr
    assert "kept .secret_key" in recovered.stdout
    assert (scenario.install / "config.toml").read_text() == USER_CONFIG
    assert (scenario.install / KEY_NAME).read_bytes() == key


@pytest.mark.slow
def test_sigkill_at_every_call_then_recover_gives_old_or_new_with_the_key(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    calls = _key_calls(_calls(scenario, KILL_SYSCALLS))
    _kill_each(scenario, sample(calls, slow_sample_count()))


def _fail_each(scenario: Scenario, calls: list[Call], fault: str) -> None:
    for call in calls:
        scenario.reset()
        run = run_with_fault(scenario.cmd, call.syscall, call.index, fault, env=cli_env(), cwd="/")  # type: ignore[arg-type]
        if not run.fired:
            continue
        assert "Traceback" not in run.stderr, (call, run.stderr)
        assert SECRET not in run.stdout + run.stderr
        if run.returncode != 0:
            assert run.returncode == 1, (call, run.returncode, run.stderr)
            assert one_error(run.stderr), (call, run.stderr)
        _recover_and_check(scenario, call)


def test_enospc_around_the_key_fails_cleanly_or_completes(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    near = [c for c in _calls(scenario, FAULTS) if "secret_key" in c.line]
    _fail_each(scenario, sample(near, FAST_SAMPLE), "ENOSPC")


@pytest.mark.slow
def test_enospc_at_every_call_fails_cleanly_or_completes(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    calls = _key_calls(_calls(scenario, FAULTS))
    _fail_each(scenario, sample(calls, slow_sample_count() or len(calls)), "ENOSPC")
