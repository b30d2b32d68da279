"""Agent aliases that become folder names must be portable aliases (01 §3), through the real CLI.

01 §3: an alias matching ``[A-Za-z0-9_][A-Za-z0-9_-]{0,63}`` that is not a Windows reserved
device name (``con``, ``nul``, ``lpt1``…, any case) is portable; ``validate()`` warns about one
that is not, **export reports it**, and import refuses it. Reporting is a warning (stderr, and
``warnings`` under ``--json``): the alias is not an omission (no ``dropped`` row), and the export
is not refused, but the report must say that this bundle will not verify or import as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.export_kit import bundler, check_bundle, export_cmd, run

from bundler.rules.tomlcompat import loads

CONFIG = """\
[agents.{alias}]
model_provider = "anthropic.main"
risk_profile = "safe"

[agents.researcher]
model_provider = "anthropic.main"
risk_profile = "safe"

[providers.models.anthropic.main]
api_key = "sk-ant-FAKE-alias-Zq8Xw3Vb7Nm2Lk5Jh9"
model = "claude-test"

[risk_profiles.safe]
level = "supervised"
"""


def _install(tmp_path: Path, alias: str) -> Path:
    root = tmp_path / "install"
    (root / "agents" / alias / "workspace").mkdir(parents=True)
    (root / "agents" / alias / "workspace" / "notes.md").write_text("notes\n")
    (root / "config.toml").write_text(CONFIG.format(alias=alias))
    return root


@pytest.mark.parametrize("alias", ["con", "NUL", "Lpt1", "com9", "aux", "prn"])
def test_export_reports_a_root_alias_that_is_a_reserved_device_name(
    tmp_path: Path, alias: str
) -> None:
    install = _install(tmp_path, alias)
    out = tmp_path / "bundle"
    done = run(export_cmd(install, out, alias=alias))
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, done.stderr
    assert f"agent alias {alias} is not a portable alias" in warnings[0]
    assert "reserved Windows device name" in warnings[0]
    # what to do: the bundle as it is will not verify, so the advice is to rename and re-export
    assert "rename the agent" in warnings[0]
    check_bundle(out)
    manifest = loads((out / "zeroclaw-agent.toml").read_text())
    assert manifest["root_agent"] == alias
    assert not any(row["path"] == f"agents.{alias}" for row in manifest.get("dropped", []))
    # the warning tells the truth: the receiving side refuses this bundle
    verified = bundler("bundle", "verify", str(out))
    assert verified.returncode == 3 and "root_agent" in verified.stderr


def test_export_json_lists_the_non_portable_root_alias_in_warnings(tmp_path: Path) -> None:
    install = _install(tmp_path, "con")
    done = run(export_cmd(install, tmp_path / "bundle", "--json", alias="con"))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["ok"] is True
    assert [w for w in payload["warnings"] if "agent alias con is not a portable alias" in w]
    assert done.stderr == ""


def test_export_of_a_portable_alias_has_no_alias_warning(tmp_path: Path) -> None:
    install = _install(tmp_path, "console")
    done = run(export_cmd(install, tmp_path / "bundle", "--json", alias="console"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["warnings"] == []


def test_validate_and_import_say_why_a_device_name_is_not_a_portable_alias(tmp_path: Path) -> None:
    """``con`` matches the alias pattern: quoting only the pattern would not tell the user why."""
    install = _install(tmp_path, "con")
    checked = bundler("--install", str(install), "config", "validate")
    line = next(x for x in checked.stdout.splitlines() + checked.stderr.splitlines() if "con" in x)
    assert "con is a reserved Windows device name" in line
    out = tmp_path / "bundle"
    assert run(export_cmd(install, out, alias="researcher")).returncode == 0
    target = tmp_path / "target"
    target.mkdir()
    imported = bundler(
        "--install", str(target), "agents", "import", str(out), "--as", "Nul", "--dry-run"
    )
    assert imported.returncode == 1, imported.stderr
    assert "agent alias Nul is not a portable alias" in imported.stderr
    assert "Nul is a reserved Windows device name" in imported.stderr
    assert not (target / "agents").exists()


@pytest.mark.parametrize("alias", ["nul", "Con", "LPT1"])
def test_skill_bundle_alias_that_is_a_device_name_stays_in_config_and_carries_no_content(
    tmp_path: Path, alias: str
) -> None:
    """01 §3: kept so a person can rename it, reported ``host_specific``, no content copied."""
    install = _install(tmp_path, "writer")
    config = (
        (install / "config.toml")
        .read_text()
        .replace("[agents.researcher]\n", f'[agents.researcher]\nskill_bundles = ["{alias}"]\n')
    )
    (install / "config.toml").write_text(config + f"\n[skill_bundles.{alias}]\n")
    skill = install / "shared" / "skills" / alias / "search"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("# search\n")
    out = tmp_path / "bundle"
    done = run(export_cmd(install, out, "--json", alias="researcher"))
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["skill_bundles"] == []
    rows = {(row["path"], row["reason"]) for row in payload["dropped"]}
    assert (f"skill_bundles.{alias}", "host_specific") in rows
    assert not (out / "skills").exists()
    assert alias in loads((out / "config.toml").read_text())["skill_bundles"]
