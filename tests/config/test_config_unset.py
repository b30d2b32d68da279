"""``bundler config unset PATH`` through the real CLI: a value set by mistake can be taken back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.installs import MINIMAL_CONFIG, copy_example, make_install, run_cli

CONFIG = MINIMAL_CONFIG.replace(
    'model = "claude"\n', 'model = "claude"   # keep me\ntemperature = 0.5\n'
)


def test_config_unset_removes_one_value_and_keeps_the_rest_byte_for_byte(tmp_path: Path) -> None:
    install = make_install(tmp_path, CONFIG)
    done = run_cli(
        [
            "--install",
            str(install),
            "config",
            "unset",
            "providers.models.anthropic.main.temperature",
        ]
    )
    assert done.returncode == 0, done.stderr
    assert "unset providers.models.anthropic.main.temperature" in done.stdout
    text = (install / "config.toml").read_text(encoding="utf-8")
    assert text == CONFIG.replace("temperature = 0.5\n", "")


def test_config_unset_of_a_value_not_set_changes_nothing(tmp_path: Path) -> None:
    install = make_install(tmp_path, CONFIG)
    done = run_cli(
        ["--install", str(install), "config", "unset", "agents.researcher.temperature", "--json"]
    )
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["removed"] is False
    assert (install / "config.toml").read_text(encoding="utf-8") == CONFIG


def test_config_unset_refuses_a_result_that_would_be_invalid(tmp_path: Path) -> None:
    install = make_install(tmp_path, CONFIG)
    done = run_cli(["--install", str(install), "config", "unset", "risk_profiles.default"])
    assert done.returncode == 3, done.stderr
    assert "config unset risk_profiles.default refused" in done.stderr
    assert "Traceback" not in done.stderr
    assert (install / "config.toml").read_text(encoding="utf-8") == CONFIG


@pytest.mark.parametrize(
    ("path", "heading"),
    [("agents.ops", "# --- model providers"), ("mcp.servers.docs", "# --- opaque sections")],
)
def test_config_unset_of_a_table_keeps_the_comments_that_head_the_next_section(
    tmp_path: Path, path: str, heading: str
) -> None:
    """tomlkit counts the comment lines after a table's last key as the table's own: unset
    took '# --- model providers ---' and the lines under it along with agents.ops."""
    install = copy_example(tmp_path)
    before = (install / "config.toml").read_text()
    block = before[before.index(heading) :].split("\n[")[0]
    done = run_cli(["--install", str(install), "config", "unset", path])
    assert done.returncode == 0, done.stderr
    after = (install / "config.toml").read_text()
    assert block in after and after.count(heading) == 1


def test_config_unset_of_a_list_item_moves_the_next_ones_up(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    done = run_cli(
        ["--install", str(install), "config", "unset", "risk_profiles.careful.forbidden_paths[0]"]
    )
    assert done.returncode == 0, done.stderr
    got = run_cli(
        ["--install", str(install), "config", "get", "risk_profiles.careful.forbidden_paths"]
    )
    assert got.stdout.strip() == '["~/.ssh"]', got.stdout
