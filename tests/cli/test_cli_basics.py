"""05 §1-3 through the real program: help, exit codes, the --json envelope, option placement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLE_INSTALL
from support.installs import run_cli

from bundler import __version__
from bundler.cli import HANDLERS


def test_help_lists_every_group() -> None:
    result = run_cli(["--help"])
    assert result.returncode == 0
    for group in ("agents", "bundle", "recover", "config", "home", "doctor"):
        assert group in result.stdout
    for option in ("--install", "--json", "--quiet", "--no-progress"):
        assert option in result.stdout


@pytest.mark.parametrize("words", sorted(HANDLERS), ids=" ".join)
def test_every_command_has_help(words: tuple[str, ...]) -> None:
    result = run_cli([*words, "--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: bundler " + " ".join(words))


def test_version() -> None:
    result = run_cli(["--version"])
    assert (result.returncode, result.stdout) == (0, f"bundler {__version__}\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate"],
        ["config", "frobnicate"],
        ["config", "get"],
        ["config", "validate", "--bogus"],
    ],
)
def test_usage_errors_exit_2_with_one_error_line(argv: list[str]) -> None:
    result = run_cli(argv)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.splitlines()) == 1
    assert result.stdout == ""


def test_no_command_is_a_usage_error() -> None:
    assert run_cli([]).returncode == 2


def test_json_usage_error_prints_the_envelope() -> None:
    result = run_cli(["--json", "frobnicate"])
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert document["error"]["code"] == 2
    assert set(document["error"]) == {"code", "kind", "message", "path"}
    assert document["error"]["kind"] == "usage_error"


LOOKED_AT = (
    " (the install bundler looked at); to use another install, give --install DIR or set "
    "ZEROCLAW_CONFIG_DIR"
)


def test_json_failure_envelope_names_the_missing_config(tmp_path: Path) -> None:
    result = run_cli(["config", "validate", "--json", "--install", str(tmp_path)])
    assert result.returncode == 1
    assert result.stderr == ""
    assert json.loads(result.stdout) == {
        "ok": False,
        "error": {
            "code": 1,
            "kind": "not_found",
            "message": f"no config.toml in {tmp_path}{LOOKED_AT}",
            "path": str(tmp_path / "config.toml"),
        },
    }


def test_missing_config_error_line(tmp_path: Path) -> None:
    result = run_cli(["--install", str(tmp_path), "agents", "list"])
    assert (result.returncode, result.stderr) == (
        1,
        f"error: no config.toml in {tmp_path}{LOOKED_AT}\n",
    )
    assert list(tmp_path.iterdir()) == []  # asking creates nothing


def test_install_from_environment(tmp_path: Path) -> None:
    result = run_cli(["agents", "list"], env={"ZEROCLAW_CONFIG_DIR": str(EXAMPLE_INSTALL)})
    assert result.returncode == 0
    assert "researcher" in result.stdout


def test_example_install_validates() -> None:
    result = run_cli(["--install", str(EXAMPLE_INSTALL), "config", "validate"])
    assert result.returncode == 0, result.stdout + result.stderr
    # the example's deliberate cycle is reported as warnings, never as errors
    *findings, verdict = result.stdout.splitlines()
    assert all(line.startswith("warning: fallback_cycle ") for line in findings)
    assert verdict.startswith("config valid (")


def test_global_options_after_the_command() -> None:
    before = run_cli(["--install", str(EXAMPLE_INSTALL), "--json", "config", "validate"])
    after = run_cli(["config", "validate", "--install", str(EXAMPLE_INSTALL), "--json"])
    assert before.returncode == after.returncode == 0
    assert json.loads(before.stdout) == json.loads(after.stdout)
    document = json.loads(after.stdout)
    assert document["ok"] is True and document["errors"] == []
    assert {w["kind"] for w in document["warnings"]} == {"fallback_cycle"}


def test_agents_list_json() -> None:
    result = run_cli(["agents", "list", "--json", "--install", str(EXAMPLE_INSTALL)])
    assert json.loads(result.stdout) == {
        "ok": True,
        "agents": [
            {"alias": "researcher", "enabled": True, "model_provider": "anthropic.main"},
            {"alias": "writer", "enabled": True, "model_provider": "openai.backup"},
            {"alias": "ops", "enabled": True, "model_provider": "groq.fast"},
        ],
    }


def test_agents_list_escapes_control_characters(tmp_path: Path) -> None:
    root = tmp_path / "install"
    root.mkdir()
    (root / "config.toml").write_text(
        '[agents."evil\\u001b[2Jname\\u202e"]\nmodel_provider = "x.y"\nenabled = false\n'
    )
    result = run_cli(["--install", str(root), "agents", "list"])
    assert result.returncode == 0
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "evil\\x1b[2Jname\\u202e" in result.stdout


def test_config_validate_text_lines_use_kind_path_message(tmp_path: Path) -> None:
    root = tmp_path / "install"
    root.mkdir()
    (root / "config.toml").write_text('[agents.a]\nmodel_provider = "openai"\n')
    result = run_cli(["--install", str(root), "config", "validate"])
    assert result.returncode == 3
    assert result.stdout.splitlines() == [
        "invalid_format agents.a.model_provider: must be <family>.<alias>",
        "required_field_empty agents.a.risk_profile: is required when the agent is enabled",
    ]
    assert result.stderr == f"error: 2 error(s) in {root / 'config.toml'}\n"
