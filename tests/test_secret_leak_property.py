"""The no-leak property (06 §3 S4) through the real CLI: wherever a secret is put, none leaks.

Random installs (``tests/support/strategies.py``: secrets are 16+ characters of an alphabet used
nowhere
else), one secret sometimes turned into a value holding a space (``Bearer <secret>``, as an
HTTP header is). Into the exported agent's workspace and skill folders go plants: the secret,
raw or encoded (base64 at each alignment, URL-encoded, JSON-escaped), as a file name, an empty
folder's name, a nested folder, a file's content, a skill folder, and as the name of an entry
that cannot be read (the export runs as an unprivileged user, so permissions bite).

For every example: ``agents export`` (human and ``--json``), then, when it published,
``bundle verify`` (human and ``--json``) and ``agents import`` into an empty install. No secret
of the source install, in any encoding, may appear in any byte or name of the bundle or the
target, nor in any stdout or stderr. A plant in the exported workspace makes the export refuse.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from support.e2e_helpers import FIXED_EPOCH, bundler_cli, leaks_in, tree_leaks
from support.kit import one_error, run_cli
from support.strategies import Install, installs

from bundler.config.secretcipher import encrypt
from bundler.config.secretkey import KEY_NAME, SecretKey
from bundler.config.secretstore import store_tree
from bundler.rules.layout import skill_bundle_dir, workspace_dir

DEFAULT_EXAMPLES = 5
SLOW_EXAMPLES = int(os.environ.get("BUNDLER_SLOW_SAMPLE", "150"))
NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
NOBODY = 65534
ROOT = os.geteuid() == 0

ENCODINGS = ("raw", "base64-0", "base64-1", "base64-2", "url", "json")
WORKSPACE_KINDS = (
    "file-name",
    "folder-name",
    "nested-folder",
    "content",
    "unreadable-file",
    "unreadable-folder",
    "unreadable-content",
)
SKILL_KINDS = ("skill-folder", "empty-folder-in-skill")


@dataclass
class Plant:
    """One secret put somewhere: where (kind), which value, in which encoding."""

    kind: str
    secret: str
    encoding: str


@dataclass
class Scenario:
    """A drawn install, the secrets to look for and what to plant."""

    install: Install
    secrets: set[str]
    plants: list[Plant] = field(default_factory=list)
    encrypted: bool = False
    """Whether the install is in ZeroClaw's default state: every secret field's value stored
    as ``enc2:`` under its ``.secret_key`` (the sweep must open them to find the plants)."""


def _plain(config: Any, secrets: set[str]) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every plain (not ``enc:``-wrapped) secret value in ``config``."""
    items = (
        config.items()
        if isinstance(config, dict)
        else enumerate(config)
        if isinstance(config, list)
        else []
    )
    for key, value in items:
        if isinstance(value, str) and value in secrets:
            yield config, key
        else:
            yield from _plain(value, secrets)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """An install, perhaps a secret holding a space, and 0-3 plants of its plain secrets."""
    install = draw(installs(max_agents=2))
    secrets = set(install.secrets)
    slots = list(_plain(install.config, secrets))
    if slots and draw(st.booleans()):
        container, key = draw(st.sampled_from(slots))
        container[key] = f"Bearer {container[key]}"
        secrets.add(container[key])  # the old value stays a target: it is inside the new one
    plain = sorted({container[key] for container, key in _plain(install.config, secrets)})
    plants = []
    if plain:
        for _ in range(draw(st.integers(0, 3))):
            plants.append(
                Plant(
                    draw(st.sampled_from(WORKSPACE_KINDS + SKILL_KINDS)),
                    draw(st.sampled_from(plain)),
                    draw(st.sampled_from(ENCODINGS)),
                )
            )
    return Scenario(install, secrets, plants)


def _encode(value: str, encoding: str) -> str:
    raw = value.encode()
    if encoding.startswith("base64"):
        pad = int(encoding[-1])
        return base64.b64encode(b"ab"[:pad] + raw).decode()
    if encoding == "url":
        return urllib.parse.quote(value, safe="")
    if encoding == "json":
        return json.dumps(value)[1:-1]
    return value


def _name(plant: Plant) -> str:
    """A relative path spelling the encoded secret; a base64 "/" becomes a folder boundary."""
    return _encode(plant.secret, plant.encoding).strip("/").replace("//", "/x/")


def _plant(plant: Plant, index: int, workspace: Path, skills: list[Path]) -> list[Path]:
    """Put ``plant`` on disk; returns the entries to make unreadable."""
    name = _name(plant)
    kind = plant.kind
    if kind in SKILL_KINDS:
        if not skills:
            return []
        folder = skills[index % len(skills)]
        target = folder / name if kind == "skill-folder" else folder / "skill-a" / name
        target.mkdir(parents=True, exist_ok=True)
        if kind == "skill-folder":
            (target / "SKILL.md").write_text("# planted\n")
        return []
    if kind == "file-name":
        target = workspace / f"p{index}" / f"{name}.txt"
    elif kind == "folder-name":
        target = workspace / f"p{index}" / name
    elif kind == "nested-folder":
        target = workspace / f"p{index}" / "a" / name / "b"
    elif kind == "content" or kind == "unreadable-content":
        target = workspace / f"p{index}" / "held.txt"
    elif kind == "unreadable-file":
        target = workspace / f"p{index}" / f"u-{name}"
    else:  # unreadable-folder
        target = workspace / f"p{index}" / name
    if kind in ("folder-name", "nested-folder"):
        target.mkdir(parents=True, exist_ok=True)
        return []
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "unreadable-folder":
        target.mkdir(parents=True, exist_ok=True)
        (target / "inside.txt").write_text("harmless\n")
        return [target]
    content = f"x {_encode(plant.secret, plant.encoding)} y\n" if "content" in kind else "ok\n"
    target.write_text(content)
    return [target] if kind.startswith("unreadable") else []


def _build(base: Path, scenario: Scenario) -> tuple[Path, str, list[Path]]:
    """The install under ``base``; returns its root, the agent to export, entries to lock."""
    config = scenario.install.config
    root = base / "install"
    for alias, agent in config["agents"].items():
        if isinstance(agent.get("workspace"), dict) and "path" in agent["workspace"]:
            agent["workspace"]["path"] = str(base / "elsewhere" / alias)
    root.mkdir()
    stored = _sealed(config, root) if scenario.encrypted else config
    (root / "config.toml").write_bytes(tomli_w.dumps(stored).encode())
    alias = next(iter(config["agents"]))
    workspace = workspace_dir(config, alias, root)
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.md").write_text("ordinary notes\n")
    skills = []
    wanted = config["agents"][alias].get("skill_bundles")
    for bundle in wanted if isinstance(wanted, list) else []:
        folder = skill_bundle_dir(config, bundle, root)
        if not folder.is_relative_to(base):
            continue  # e.g. /opt/skills: not ours to create
        (folder / "skill-a").mkdir(parents=True, exist_ok=True)
        (folder / "skill-a" / "SKILL.md").write_text("# skill a\n")
        skills.append(folder)
    locked = []
    for index, plant in enumerate(scenario.plants):
        locked += _plant(plant, index, workspace, skills)
    return root, alias, locked


def _sealed(config: dict[str, Any], root: Path) -> Any:
    """``config`` as ZeroClaw stores it by default: every non-empty secret string sealed under
    a new ``<root>/.secret_key`` (values already ``enc:``/``op://`` left as they are)."""
    key = SecretKey(os.urandom(32))
    (root / KEY_NAME).write_text(key.raw.hex())
    os.chmod(root / KEY_NAME, 0o600)

    def seal(text: str, _path: str) -> str:
        if not text or text.startswith(("enc:", "enc2:", "op://")):
            return text
        return encrypt(text, key)

    return store_tree(config, [], seal)


def _export(args: list[str]) -> Any:
    """``bundler ARGS`` as user 65534 when we are root (so a mode 000 entry is unreadable)."""
    if not ROOT:
        return bundler_cli(args)
    env = {"SOURCE_DATE_EPOCH": FIXED_EPOCH, "PYTHONDONTWRITEBYTECODE": "1"}
    return run_cli(args, env=env, cwd="/", as_nobody=True)


def _no_leak(result: Any, secrets: set[str], what: str) -> None:
    for stream in (result.stdout, result.stderr):
        assert leaks_in(stream, secrets) == [], (what, stream)
    assert "Traceback" not in result.stderr, (what, result.stderr)


def _check(scenario: Scenario, base: Path) -> None:
    root, alias, locked = _build(base, scenario)
    secrets = scenario.secrets
    if ROOT:
        for folder, dirs, files in os.walk(base):
            for entry in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(entry, NOBODY, NOBODY, follow_symlinks=False)
    for entry in locked:
        os.chmod(entry, 0)
    args = ["--install", str(root), "agents", "export", alias]
    human = _export([*args, "--out", str(base / "bundle")])
    machine = _export([*args, "--out", str(base / "bundle-json"), "--json"])
    _no_leak(human, secrets, "export")
    _no_leak(machine, secrets, "export --json")
    document = json.loads(machine.stdout)
    assert document["ok"] == (machine.returncode == 0)
    assert human.returncode == machine.returncode, (human.stderr, machine.stdout)
    in_workspace = [p for p in scenario.plants if p.kind in WORKSPACE_KINDS]
    if in_workspace:
        assert human.returncode != 0, f"export carried a planted secret: {in_workspace}"
    event(f"export exit {human.returncode}, secrets {'sealed' if scenario.encrypted else 'plain'}")
    for entry in locked:
        os.chmod(entry, 0o700)
    if human.returncode != 0:
        assert one_error(human.stderr), human.stderr
        assert not (base / "bundle").exists()
        return
    bundle = base / "bundle"
    assert tree_leaks(bundle, secrets) == []
    for extra in ([], ["--json"]):
        verified = bundler_cli(["bundle", "verify", str(bundle), *extra])
        _no_leak(verified, secrets, "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
    target = base / "target"
    imported = bundler_cli(
        ["--install", str(target), "agents", "import", str(bundle), "--accept-risks", "--json"]
    )
    _no_leak(imported, secrets, "import")
    json.loads(imported.stdout)
    event(f"import exit {imported.returncode}")
    assert tree_leaks(target, secrets) == []


def _run(scenario: Scenario) -> None:
    base = Path(tempfile.mkdtemp(prefix="bundler-s4-leaks-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        _check(scenario, base)
    finally:
        for folder, dirs, _files in os.walk(base):
            for name in dirs:
                os.chmod(os.path.join(folder, name), 0o700)
        shutil.rmtree(base)


_QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@pytest.mark.parametrize("stored", ["plain", "encrypted"])
@settings(
    max_examples=DEFAULT_EXAMPLES, deadline=None, phases=NO_SHRINK, suppress_health_check=_QUIET
)
@given(scenario=scenarios())
def test_no_secret_placed_anywhere_leaks_from_export_verify_or_import(
    scenario: Scenario, stored: str
) -> None:
    scenario.encrypted = stored == "encrypted"
    _run(scenario)


@pytest.mark.slow
@pytest.mark.parametrize("stored", ["plain", "encrypted"])
@settings(max_examples=SLOW_EXAMPLES, deadline=None, phases=NO_SHRINK, suppress_health_check=_QUIET)
@given(scenario=scenarios())
def test_no_secret_placed_anywhere_leaks_from_export_verify_or_import_at_scale(
    scenario: Scenario, stored: str
) -> None:
    scenario.encrypted = stored == "encrypted"
    _run(scenario)
