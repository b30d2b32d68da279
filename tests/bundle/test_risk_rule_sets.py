"""A bundle is held to the risk rules of the exporter that wrote it (02 §6.2).

ZeroClaw's exporter raises fewer flags than bundler (``collect_risk_flags``,
:mod:`bundler.rules.risk_zeroclaw`). A ZeroClaw-written manifest lies only when it omits one of
those; what bundler finds beyond them is "also found by bundler" — a warning on verify, a row of
inspect, a consent item on import, never a refusal. A bundler-written manifest must list every
flag bundler raises. The hand-written fixtures under ``tests/fixtures/zeroclaw/`` run from any
clone; the kit's golden bundles where ``../shared`` is present.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.kit import run_cli
from support.zeroclaw_golden import NAMES, golden_copy

from bundler.bundle.verify import verify_bundle
from bundler.rules import tomlcompat
from bundler.rules.paths import parse_path
from bundler.rules.risk_zeroclaw import zeroclaw_risk_flags

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "zeroclaw"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def fixture_copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def bundle_of(source: str, tmp_path: Path) -> Path:
    kind, name = source.split(":", 1)
    return fixture_copy(name, tmp_path) if kind == "fixture" else golden_copy(name, tmp_path)


ALL = [f"fixture:{n}" for n in FIXTURE_NAMES] + [f"golden:{n}" for n in NAMES]


def test_the_fixtures_the_issue_names_are_there() -> None:
    assert {"narrowed-auto-approve", "gemini-binary-path"} <= set(FIXTURE_NAMES)


@pytest.mark.parametrize("source", ALL)
def test_zeroclaws_rules_find_exactly_the_flags_its_manifest_lists(
    source: str, tmp_path: Path
) -> None:
    bundle = bundle_of(source, tmp_path)
    manifest = tomlcompat.loads((bundle / "zeroclaw-agent.toml").read_text(encoding="utf-8"))
    fragment = tomlcompat.loads((bundle / "config.toml").read_text(encoding="utf-8"))
    carried = (
        [p.name for p in sorted((bundle / "skills").iterdir())]
        if (bundle / "skills").is_dir()
        else []
    )
    carried = [name for name in manifest["skill_bundles"] if name in carried]
    found = zeroclaw_risk_flags(fragment, carried, manifest["root_agent"])
    assert {(f.kind, ".".join(parse_path(f.path))) for f in found} == {
        (f["kind"], f["path"]) for f in manifest["risk_flags"]
    }


@pytest.mark.parametrize("source", ALL)
def test_every_zeroclaw_bundle_verifies(source: str, tmp_path: Path) -> None:
    report = verify_bundle(bundle_of(source, tmp_path))
    assert report.ok, report.errors


def test_a_gemini_binary_path_is_also_found_by_bundler_not_a_lie(tmp_path: Path) -> None:
    bundle = fixture_copy("gemini-binary-path", tmp_path)
    result = run_cli(["bundle", "verify", str(bundle)])
    assert result.returncode == 0, result.stderr
    where = "providers.models.gemini_cli.local.binary_path"
    for kind in ("process_spawn", "host_path"):
        assert f"also found by bundler: {kind} at {where}" in result.stderr, result.stderr
    payload = json.loads(run_cli(["bundle", "verify", "--json", str(bundle)]).stdout)
    assert {(f["kind"], f["path"]) for f in payload["also_found_by_bundler"]} == {
        ("process_spawn", where),
        ("host_path", where),
    }


def test_inspect_shows_what_bundler_also_found(tmp_path: Path) -> None:
    bundle = fixture_copy("gemini-binary-path", tmp_path)
    result = run_cli(["bundle", "inspect", "--json", str(bundle)])
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    where = "providers.models.gemini_cli.local.binary_path"
    assert ("process_spawn", where) in {
        (f["kind"], f["path"]) for f in payload["also_found_by_bundler"]
    }
    text = run_cli(["bundle", "inspect", str(bundle)]).stdout
    assert "also found by bundler" in text


def test_a_zeroclaw_manifest_omitting_a_flag_zeroclaws_rules_raise_is_refused(
    tmp_path: Path,
) -> None:
    bundle = fixture_copy("narrowed-auto-approve", tmp_path)
    manifest = bundle / "zeroclaw-agent.toml"
    text = manifest.read_text(encoding="utf-8")
    manifest.write_text(text[: text.index("[[risk_flags]]")] + "risk_flags = []\n")
    result = run_cli(["bundle", "verify", str(bundle)])
    assert result.returncode == 3, result.stderr
    assert "omits process_spawn at mcp.servers.fetch.command" in result.stderr


def test_the_extra_findings_go_to_consent_at_import_never_refused_as_lies(
    tmp_path: Path,
) -> None:
    bundle = fixture_copy("gemini-binary-path", tmp_path)
    install = tmp_path / "install"
    asked = run_cli(["--install", str(install), "agents", "import", str(bundle)])
    # no terminal to ask: refused for want of consent, naming the way to give it
    assert asked.returncode == 1, asked.stderr
    assert "--accept-risks" in asked.stderr and "omits" not in asked.stderr
    done = run_cli(
        ["--install", str(install), "agents", "import", str(bundle), "--accept-risks", "--json"]
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    where = "providers.models.gemini_cli.local.binary_path"
    # listed even though --accept-risks consented without asking
    assert {(f["kind"], f["path"]) for f in payload["also_found_by_bundler"]} == {
        ("process_spawn", where),
        ("host_path", where),
    }
    assert ("process_spawn", where) in {(f["kind"], f["path"]) for f in payload["risk_flags"]}


def test_a_narrowed_auto_approve_grants_nothing_under_either_rule_set(tmp_path: Path) -> None:
    """Three of ZeroClaw's twelve default tools approve less than a default profile: no
    approval_bypass, neither ZeroClaw's nor bundler's (02 §6.1)."""
    report = verify_bundle(fixture_copy("narrowed-auto-approve", tmp_path))
    assert report.ok, report.errors
    assert report.also_found == []
    assert "approval_bypass" not in {f["kind"] for f in report.risk_flags}
