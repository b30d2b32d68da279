"""06 §3 S4 end to end, on disk, through the library and the real CLI.

Random installs (``tests/support/strategies.py``: every secret is 16+ characters of an alphabet used
nowhere else) are written to disk with real workspace files, skill folders and hostile entries
(a symlink out to a secret-bearing file, a FIFO, a hard link, secrets in the uncarried memory
folder), and sometimes a secret planted in a carried file (raw, base64 or in its name). For
every agent:

* the export either succeeds, the bundle verifies and its ``config.toml`` validates alone, or
  it refuses naming a field or file (one line, non-empty ``path``);
* a planted secret always makes it refuse;
* no secret value of the source config appears in any byte or name of the bundle, in the
  CLI's stdout/stderr (human and ``--json``), or in the import receipt or install state;
* export -> import into an empty install (``--accept-risks``, every secret given from a 0600
  file) -> export gives the same ``config.toml`` and ``checksums.xxh3`` bytes.
"""

from __future__ import annotations

import base64
import copy
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from support.e2e_helpers import (
    FIXED_EPOCH,
    bundler_cli,
    leaks_in,
    tree_leaks,
    write_config,
    write_secrets_file,
)
from support.installs import opened_config
from support.kit import one_error
from support.strategies import Install, installs

from bundler.bundle.closure import plan_closure
from bundler.bundle.export import export_agent
from bundler.bundle.verify import verify_bundle
from bundler.errors import BundlerError, Refused
from bundler.install.import_types import ImportOptions
from bundler.install.importer import import_bundle
from bundler.rules import tomlcompat
from bundler.rules.layout import skill_bundle_dir, workspace_dir
from bundler.rules.validate import validate

ENV = {"SOURCE_DATE_EPOCH": FIXED_EPOCH}
DEFAULT_EXAMPLES = 6
# every example runs real exports, imports and processes: shrinking a failure would take many
# minutes, and the unshrunk example (printed in full) already names the files and config
NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
SLOW_EXAMPLES = int(os.environ.get("BUNDLER_SLOW_SAMPLE", "200"))

# names and bytes of ordinary carried files: lower case and digits only, so no secret
# (upper case, tests/strategies.SECRET_ALPHABET) can appear in them by chance
FILE_NAMES = [
    "notes/a.txt",
    "b.md",
    "deep/er/c.txt",
    "con.txt",  # not portable: copied and listed as a warning
    "notes/memory/x.txt",  # a nested memory/ travels (02 §7.1)
    "notes/MEMORY_SNAPSHOT.md",
    "empty.txt",
    "data.bin",
]
contents = st.binary(max_size=64).map(lambda b: b.hex().encode()) | st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz0123456789 \n", max_size=200
).map(str.encode)
PLANT_FORMS = ("raw", "base64", "name", "nested-name")


@dataclass
class Scenario:
    """A drawn install plus what to put on disk beside its config."""

    install: Install
    files: dict[str, dict[str, bytes]]  # agent -> relative path -> content
    plant: tuple[str, str, str] | None  # (agent, form, secret) for a carried file
    symlink_out: bool
    fifo: bool
    hard_link: bool
    memory_secret: bool
    plain: list[str] = field(default_factory=list)


def _plain_secrets(config: Any, secrets: set[str]) -> Iterator[str]:
    """Secret values held as plain text (not ``enc:``-wrapped) somewhere in ``config``."""
    if isinstance(config, dict):
        for value in config.values():
            yield from _plain_secrets(value, secrets)
    elif isinstance(config, list):
        for value in config:
            yield from _plain_secrets(value, secrets)
    elif isinstance(config, str) and config in secrets:
        yield config


@st.composite
def scenarios(draw: st.DrawFn, hostile: bool = False) -> Scenario:
    """An install with files; each agent gets a few ordinary files, some get hostile extras."""
    install = draw(installs(max_agents=3, hostile=hostile))
    files = {
        alias: draw(st.dictionaries(st.sampled_from(FILE_NAMES), contents, max_size=4))
        for alias in install.agents
    }
    plain = sorted(set(_plain_secrets(install.config, install.secrets)))
    plant = None
    wants_plant: bool = draw(st.booleans())
    if plain and wants_plant:
        plant = (
            draw(st.sampled_from(install.agents)),
            draw(st.sampled_from(PLANT_FORMS)),
            draw(st.sampled_from(plain)),
        )
    return Scenario(
        install,
        files,
        plant,
        symlink_out=draw(st.booleans()),
        fifo=draw(st.booleans()),
        hard_link=draw(st.booleans()),
        memory_secret=draw(st.booleans()),
        plain=plain,
    )


def _planted_file(form: str, secret: str) -> tuple[str, bytes]:
    if form == "raw":
        return "notes/keys.txt", b"token: " + secret.encode() + b"\n"
    if form == "base64":
        blob = base64.b64encode(b"Authorization: Bearer " + secret.encode() + b"\n")
        return "notes/blob.b64", blob
    if form == "name":
        return f"key-{secret}.txt", b"harmless\n"
    return f"nested/{secret}/readme.txt", b"harmless\n"


def _build(tmp: Path, scenario: Scenario) -> Path:
    """Write the scenario under ``tmp``; returns the install root."""
    config = scenario.install.config
    root = tmp / "install"
    for alias, agent in config["agents"].items():
        # configured workspaces point into tmp (the drawn /srv/... paths are not ours to make)
        if isinstance(agent.get("workspace"), dict) and "path" in agent["workspace"]:
            agent["workspace"]["path"] = str(tmp / "elsewhere" / alias)
    write_config(root, config)
    outside = tmp / "outside-secrets"
    outside.mkdir()
    some_secret = scenario.plain[0] if scenario.plain else "no-secret-here"
    (outside / "secret.txt").write_text(some_secret)
    for index, alias in enumerate(scenario.install.agents):
        workspace = workspace_dir(config, alias, root)
        workspace.mkdir(parents=True, exist_ok=True)
        for rel, data in scenario.files[alias].items():
            (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (workspace / rel).write_bytes(data)
        if scenario.plant and scenario.plant[0] == alias:
            rel, data = _planted_file(scenario.plant[1], scenario.plant[2])
            (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (workspace / rel).write_bytes(data)
        if scenario.symlink_out:
            (workspace / "link-out.txt").symlink_to(outside / "secret.txt")
        if scenario.fifo:
            os.mkfifo(workspace / "pipe")
        if scenario.hard_link:
            os.link(outside / "secret.txt", workspace / f"hard-{index}.txt")
        if scenario.memory_secret:
            (workspace / "memory").mkdir(exist_ok=True)
            (workspace / "memory" / "notes.txt").write_text(some_secret)
            (workspace / "MEMORY_SNAPSHOT.md").write_text(some_secret)
    for bundle in config.get("skill_bundles", {}):
        folder = skill_bundle_dir(config, bundle, root)
        if not folder.is_relative_to(tmp):
            continue  # e.g. /opt/skills: not ours to create
        skill = folder / f"skill-{bundle}"
        (skill / "scripts").mkdir(parents=True, exist_ok=True)
        (skill / "SKILL.md").write_text(f"# {bundle}\nlower case only\n")
        (skill / "scripts" / "run.sh").write_text("echo hi\n")
        (folder / "loose.txt").write_text("not a skill\n")
    return root


def _assert_refusal_names_a_field(err: BundlerError, secrets: set[str]) -> None:
    assert err.path, f"refusal without a path: {err.message}"
    assert "\n" not in err.message
    assert not leaks_in(err.message, secrets), err.path
    assert not leaks_in(err.path, secrets)


def _fresh_secrets(required: list[str], tag: str) -> dict[str, str]:
    # "I" and "O" are absent from SECRET_ALPHABET: these never equal a source secret
    return {path: f"IOIOIOIO-{tag}-{index:03d}-OIOIOIOI" for index, path in enumerate(required)}


def _check_bundle(bundle: Path, alias: str, scenario: Scenario, tmp: Path) -> dict[str, Any]:
    secrets = scenario.install.secrets
    report = verify_bundle(bundle)
    assert report.ok, [str(problem) for problem in report.errors]
    assert tree_leaks(bundle, secrets) == []
    fragment = tomlcompat.loads((bundle / "config.toml").read_text(encoding="utf-8"))
    assert list(fragment["agents"]) == [alias]
    errors, _ = validate(fragment, tmp / "an-empty-install")
    assert errors == []
    return tomlcompat.loads((bundle / "zeroclaw-agent.toml").read_text(encoding="utf-8"))


def _refused_for_a_kept_host_specific_entry(
    code: int, document: dict[str, Any], manifest: dict[str, Any]
) -> bool:
    """True when import refused (exit 1) exactly an entry the export kept but flagged.

    Export keeps a skill bundle whose alias is not portable (``con``) "so a person can rename
    it" and lists it in ``dropped``; import refuses such an alias (01 §3). That refusal must
    name the very entry the manifest flagged.
    """
    if code != Refused.code:
        return False
    flagged = {
        row["path"] for row in manifest.get("dropped", []) if row["reason"] == "host_specific"
    }
    return bool(document["error"]["path"] in flagged)


def _round_trip(
    bundle: Path,
    alias: str,
    manifest: dict[str, Any],
    tmp: Path,
    via_cli: bool,
    source_secrets: set[str],
) -> None:
    """Import into an empty install, export again: same config.toml and checksums."""
    given = _fresh_secrets(list(manifest["required_secrets"]), alias)
    secrets_file = write_secrets_file(tmp / f"secrets-{alias}.toml", given)
    target = tmp / f"target-{alias}"
    again = tmp / f"again-{alias}"
    if via_cli:
        imported = bundler_cli(
            [
                "--install", str(target), "agents", "import", str(bundle),
                "--accept-risks", "--secrets-file", str(secrets_file), "--json",
            ]
        )  # fmt: skip
        document = json.loads(imported.stdout)
        assert not leaks_in(imported.stdout + imported.stderr, given.values())
        if _refused_for_a_kept_host_specific_entry(imported.returncode, document, manifest):
            event("import refused a kept non-portable skill bundle alias")
            return
        assert imported.returncode == 0, imported.stdout + imported.stderr
        assert document["ok"] and document["secrets_missing"] == []
        assert not leaks_in(imported.stdout + imported.stderr, given.values())
        # --json on success here (the first export used the human output)
        exported = bundler_cli(
            ["--install", str(target), "agents", "export", alias, "--out", str(again), "--json"]
        )
        assert exported.returncode == 0, exported.stderr
        assert json.loads(exported.stdout)["required_secrets"] == manifest["required_secrets"]
        assert not leaks_in(exported.stdout + exported.stderr, given.values())
    else:
        try:
            report = import_bundle(
                target, bundle, ImportOptions(secrets_file=secrets_file, accept_risks=True)
            )
        except BundlerError as err:
            assert not leaks_in(err.message, given.values())
            envelope = {"error": {"code": err.code, "path": err.path}}
            if _refused_for_a_kept_host_specific_entry(err.code, envelope, manifest):
                event("import refused a kept non-portable skill bundle alias")
                return
            raise
        assert report.plan.summary()["secrets_missing"] == []
        assert not leaks_in(json.dumps(report.as_json()), given.values())
        export_agent(target, alias, again, environ=ENV)
    assert (again / "config.toml").read_bytes() == (bundle / "config.toml").read_bytes()
    assert (again / "checksums.xxh3").read_bytes() == (bundle / "checksums.xxh3").read_bytes()
    # the given values live only in the target's config.toml: not in receipts, journals, logs
    # stored sealed under the target's key (ZeroClaw's default), each opening to the value given
    installed = (target / "config.toml").read_text(encoding="utf-8")
    assert not [value for value in given.values() if value in installed]
    opened = json.dumps(opened_config(target))
    assert all(json.dumps(value) in opened for value in given.values())
    others = [
        leak for leak in tree_leaks(target, given.values()) if not leak.startswith("config.toml:")
    ]
    assert others == []
    assert tree_leaks(again, given.values()) == []
    # nothing of the source install reached the target (the bundle held none of it)
    assert tree_leaks(target, source_secrets) == []
    assert not [p for p in target.iterdir() if p.name.startswith(".bundler-import-")]
    assert list((target / "data" / "state" / "imports").glob("*.toml"))
    event("round trip byte-identical")


def _export_cli(root: Path, alias: str, out: Path, secrets: set[str]) -> BundlerError | None:
    """Export through the real CLI, human and --json; returns the refusal, if any."""
    human = bundler_cli(["--install", str(root), "agents", "export", alias, "--out", str(out)])
    assert not leaks_in(human.stdout + human.stderr, secrets)
    assert "Traceback" not in human.stderr
    if human.returncode == 0:
        return None
    assert human.returncode in (1, 3), human.stderr
    assert one_error(human.stderr), human.stderr
    machine = bundler_cli(
        ["--install", str(root), "agents", "export", alias, "--out", str(out), "--json"]
    )
    assert not leaks_in(machine.stdout + machine.stderr, secrets)
    document = json.loads(machine.stdout)
    assert document["ok"] is False and document["error"]["code"] == human.returncode
    error = document["error"]
    return BundlerError(error["message"], path=error["path"], code=error["code"])


def _check_scenario(scenario: Scenario, tmp: Path, *, cli: bool = True) -> None:
    scenario = copy.deepcopy(scenario)  # _build edits the config; Hypothesis may replay it
    root = _build(tmp, scenario)
    secrets = scenario.install.secrets
    loaded = tomlcompat.loads((root / "config.toml").read_text(encoding="utf-8"))
    for position, alias in enumerate(scenario.install.agents):
        out = tmp / f"bundle-{alias}"
        via_cli = cli and position == 0
        try:
            plan_closure(loaded, alias, root)
            plannable = True
        except BundlerError:
            plannable = False
        refusal: BundlerError | None
        if via_cli:
            refusal = _export_cli(root, alias, out, secrets)
        else:
            try:
                report = export_agent(root, alias, out, environ=ENV)
                assert leaks_in(json.dumps(report.as_json()), secrets) == []
                refusal = None
            except BundlerError as err:
                refusal = err
        planted = scenario.plant is not None and scenario.plant[0] == alias
        event(f"export refused (exit {refusal.code})" if refusal else "exported")
        if planted:
            event("planted secret " + ("refused" if refusal else "CARRIED"))
        if refusal is not None:
            _assert_refusal_names_a_field(refusal, secrets)
            assert not out.exists() or not any(out.iterdir())
            # a refused export leaves no staging folder beside the destination (02 §8.4)
            assert not list(tmp.glob(".zeroclaw-export-*"))
            if planted and plannable:
                # the sweep's refusal (exit 1), not some other complaint
                assert refusal.code == Refused.code, refusal.message
            continue
        assert not planted, (
            f"export carried a planted secret: {scenario.plant and scenario.plant[1]}"
        )
        manifest = _check_bundle(out, alias, scenario, tmp)
        if via_cli:
            inspected = bundler_cli(["bundle", "inspect", str(out), "--json"])
            assert inspected.returncode == 0, inspected.stderr
            assert not leaks_in(inspected.stdout + inspected.stderr, secrets)
        _round_trip(out, alias, manifest, tmp, via_cli, secrets)


@settings(
    max_examples=DEFAULT_EXAMPLES,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=scenarios())
def test_export_verifies_or_refuses_leaks_nothing_and_round_trips(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _check_scenario(scenario, tmp_path_factory.mktemp("s4"))


@settings(
    max_examples=DEFAULT_EXAMPLES,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=scenarios(hostile=True))
def test_hostile_configs_refuse_naming_a_field_and_leak_nothing(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _check_scenario(scenario, tmp_path_factory.mktemp("s4h"), cli=False)


@pytest.mark.slow
@settings(
    max_examples=SLOW_EXAMPLES,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenario=scenarios() | scenarios(hostile=True))
def test_export_verifies_or_refuses_leaks_nothing_and_round_trips_at_scale(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _check_scenario(scenario, tmp_path_factory.mktemp("s4slow"))
