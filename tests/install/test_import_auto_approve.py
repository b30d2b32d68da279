"""An import that renames a profile called ``default`` says what it stops approving (02 §6.1).

ZeroClaw merges its default auto-approved tools into the profile named ``default`` only
(``ensure_default_auto_approve``): namespacing the bundle's ``default`` profile narrows what the
agent may do without asking, and the import plan says so, naming the tools. Real CLI.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.installs import make_install, run_cli

from bundler.rules import schema

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "zeroclaw" / "gemini-binary-path"
DEFAULTS = schema.default_of(schema.resolve(["risk_profiles", "*", "auto_approve"])[1])


def bundle_with_default_profile(tmp_path: Path, listed: str) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURE, bundle)
    config = bundle / "config.toml"
    config.write_text(
        config.read_text().replace(
            "[risk_profiles.default]\n", f"[risk_profiles.default]\nauto_approve = {listed}\n"
        )
    )
    return bundle


def test_a_renamed_default_profile_names_the_tools_it_will_ask_about(tmp_path: Path) -> None:
    bundle = bundle_with_default_profile(tmp_path, '["file_read"]')
    install = make_install(tmp_path, '[risk_profiles.default]\nlevel = "readonly"\n')
    plan = run_cli(["--install", str(install), "agents", "import", str(bundle), "--dry-run"])
    assert plan.returncode == 0, plan.stderr
    assert "approves less: risk_profiles.default is imported as" in plan.stdout, plan.stdout
    done = run_cli(
        ["--install", str(install), "agents", "import", str(bundle), "--accept-risks", "--json"]
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    (final,) = payload["renamed"].values()
    (change,) = payload["approval_changes"]
    assert change.startswith(f"risk_profiles.default is imported as {final}:"), change
    assert change.endswith(", ".join(name for name in DEFAULTS if name != "file_read")), change


def test_a_default_profile_imported_under_its_own_name_changes_nothing(tmp_path: Path) -> None:
    bundle = bundle_with_default_profile(tmp_path, '["file_read"]')
    install = make_install(tmp_path, '[risk_profiles.other]\nlevel = "readonly"\n')
    done = run_cli(
        ["--install", str(install), "agents", "import", str(bundle), "--accept-risks", "--json"]
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["approval_changes"] == []
