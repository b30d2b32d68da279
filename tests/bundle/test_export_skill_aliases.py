"""Skill-bundle aliases follow ZeroClaw on export (spec bundle-format-1 "Portable names").

The source install is the one ZeroClaw's golden bundle g was exported from
(``tests/fixtures/zeroclaw-golden/g-skill-aliases/source-config.toml``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from support.installs import run_cli
from support.zeroclaw_golden import GOLDEN

from bundler.bundle.verify import verify_bundle
from bundler.rules import tomlcompat


def g_install(tmp_path: Path) -> Path:
    source = GOLDEN / "g-skill-aliases"
    install = tmp_path / "install"
    (install / "agents" / "librarian").mkdir(parents=True)
    shutil.copy(source / "source-config.toml", install / "config.toml")
    shutil.copytree(source / "workspace", install / "agents" / "librarian" / "workspace")
    skills = install / "shared" / "skills"
    shutil.copytree(source / "skills" / "research.tools", skills / "research.tools")
    for unsafe in ("con", "notes."):
        (skills / unsafe / "planted").mkdir(parents=True)
        (skills / unsafe / "planted" / "SKILL.md").write_text("must not travel\n")
    return install


def test_dotted_alias_travels_and_unsafe_aliases_stay_without_content(tmp_path: Path) -> None:
    install = g_install(tmp_path)
    out = tmp_path / "bundle"
    result = run_cli(
        ["--install", str(install), "agents", "export", "librarian", "--out", str(out)]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in (out / "skills").iterdir()) == ["research.tools"]
    fragment = tomlcompat.loads((out / "config.toml").read_text())
    assert set(fragment["skill_bundles"]) == {"research.tools", "con", "notes."}
    manifest = tomlcompat.loads((out / "zeroclaw-agent.toml").read_text())
    assert manifest["skill_bundles"] == ["research.tools"]
    dropped = {(row["path"], row["reason"]) for row in manifest["dropped"]}
    assert ("skill_bundles.con", "host_specific") in dropped
    assert ('skill_bundles."notes."', "host_specific") in dropped
    report = verify_bundle(out)
    assert report.ok, report.errors
    assert {(f["kind"], f["path"]) for f in report.risk_flags} >= {
        ("carried_skills", 'skill_bundles."research.tools"')
    }
