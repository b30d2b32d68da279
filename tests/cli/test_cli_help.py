"""Help and typos, through the real CLI: every positional is explained, every
command has examples, global options are shown once, options are never abbreviated, usage errors
point to the command's own help, and a near-miss name gets a "did you mean"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.installs import copy_example, one_error, run_cli

from bundler.cli import HANDLERS

COMMANDS = sorted(HANDLERS)
GLOBALS = ("--install", "--json", "--quiet", "--no-progress")


def _section(text: str, title: str) -> list[str]:
    """The lines of one ``title:`` section of argparse help."""
    lines = text.splitlines()
    if f"{title}:" not in lines:
        return []
    start = lines.index(f"{title}:") + 1
    out = []
    for line in lines[start:]:
        if not line.startswith(" "):
            break
        out.append(line)
    return out


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_every_command_help_explains_its_positionals_and_has_examples(
    words: tuple[str, ...],
) -> None:
    done = run_cli([*words, "--help"])
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for line in _section(text, "positional arguments"):
        entry = line.strip()
        if line.startswith("    ") and not line.startswith("    {"):
            continue  # the wrapped rest of a help text
        # "NAME   what it is": a name alone on its line has no help text
        assert re.match(r"^\S+\s{2,}\S", entry) or entry.startswith("{"), text
    examples = text.split("examples:", 1)
    assert len(examples) == 2, text
    assert f"bundler {' '.join(words)}" in examples[1], text


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_global_options_are_shown_once_not_in_every_command(words: tuple[str, ...]) -> None:
    done = run_cli([*words, "--help"])
    usage = done.stdout.split("\n\n", 1)[0]
    for option in GLOBALS:
        assert option not in usage, done.stdout
    assert "see 'bundler --help'" in done.stdout
    top = run_cli(["--help"])
    for option in GLOBALS:
        assert top.stdout.count(option) >= 1, top.stdout


def test_global_options_still_work_after_the_command(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    done = run_cli(["agents", "list", "--install", str(install), "--json"])
    assert done.returncode == 0, done.stderr
    assert '"researcher"' in done.stdout


def test_abbreviated_options_are_refused(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "install"
    done = run_cli(["--install", str(install), "agents", "import", str(bundle), "--acc"])
    assert done.returncode == 2, done.stdout
    assert one_error(done.stderr) and "--acc" in done.stderr
    assert not (install / "config.toml").exists()
    top = run_cli(["--inst", str(install), "agents", "list"])
    assert top.returncode == 2 and one_error(top.stderr)


def test_usage_errors_point_to_the_subcommand_help(tmp_path: Path) -> None:
    done = run_cli(["agents", "import", str(tmp_path), "--bogus"])
    assert done.returncode == 2
    assert one_error(done.stderr)
    assert "see 'bundler agents import --help'" in done.stderr, done.stderr
    missing = run_cli(["config", "get"])
    assert "see 'bundler config get --help'" in missing.stderr, missing.stderr


def test_home_skills_list_lists_the_skills(tmp_path: Path) -> None:
    project = copy_example(tmp_path, "project")
    listed = run_cli(["home", "skills", "list", "--project", str(project)])
    assert listed.returncode == 0, listed.stderr
    plain = run_cli(["home", "skills", "--project", str(project)])
    assert listed.stdout == plain.stdout and "weekly-report" in listed.stdout


def test_export_of_a_misspelt_alias_suggests_the_close_one(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    done = run_cli(
        ["--install", str(install), "agents", "export", "resarcher", "--out", str(tmp_path / "o")]
    )
    assert done.returncode == 1
    assert one_error(done.stderr) and "did you mean researcher?" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "close"),
    [
        (["config", "get", "agents.researcher.enabld"], "agents.researcher.enabled"),
        (["config", "get", "agents.resarcher.enabled"], "agents.researcher.enabled"),
        (["config", "set", "agents.researcher.enabld", "true"], "agents.researcher.enabled"),
        (["config", "unset", "agnts.researcher.enabled"], "agents.researcher.enabled"),
    ],
)
def test_a_misspelt_config_path_suggests_the_close_one(
    tmp_path: Path, args: list[str], close: str
) -> None:
    install = copy_example(tmp_path)
    done = run_cli(["--install", str(install), *args])
    assert f"did you mean {close}?" in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_misspelt_secret_path_suggests_the_required_one(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "install"
    done = run_cli(
        [
            "--install",
            str(install),
            "agents",
            "import",
            str(bundle),
            "--accept-risks",
            "--secret",
            "providers.models.anthropic.mian.api_key=sk-typo-value",
        ]
    )
    assert done.returncode == 2
    assert one_error(done.stderr)
    assert "did you mean providers.models.anthropic.main.api_key?" in done.stderr, done.stderr
    assert "sk-typo-value" not in done.stderr


def test_a_wrong_path_in_a_secrets_file_names_the_file_not_the_option(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    secrets = tmp_path / "my secrets.toml"
    secrets.write_text('"providers.models.anthropic.mian.api_key" = "sk-x"\n', encoding="utf-8")
    secrets.chmod(0o600)
    install = tmp_path / "install"
    done = run_cli(
        [
            "--install",
            str(install),
            "agents",
            "import",
            str(bundle),
            "--accept-risks",
            "--secrets-file",
            str(secrets),
        ]
    )
    assert done.returncode == 2
    assert one_error(done.stderr)
    assert str(secrets) in done.stderr and "--secret " not in done.stderr, done.stderr
    assert "did you mean providers.models.anthropic.main.api_key?" in done.stderr


@pytest.mark.parametrize(
    "content",
    [
        '"providers.models.anthropic.main.api_key" = 42\n',
        '"providers..main" = "sk-x"\n',
    ],
    ids=["not a string", "not a path"],
)
def test_a_malformed_secrets_file_is_named_in_the_error(tmp_path: Path, content: str) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    secrets = tmp_path / "my secrets.toml"
    secrets.write_text(content, encoding="utf-8")
    secrets.chmod(0o600)
    done = run_cli(
        [
            "--install",
            str(tmp_path / "install"),
            "agents",
            "import",
            str(bundle),
            "--accept-risks",
            "--secrets-file",
            str(secrets),
        ]
    )
    assert done.returncode in (2, 3)
    assert one_error(done.stderr)
    assert f"secrets file {secrets}" in done.stderr and "--secret " not in done.stderr
    assert "sk-x" not in done.stderr


@pytest.mark.parametrize("words", [[], ["agents"], ["bundle"], ["config"], ["home"]], ids=str)
def test_every_command_group_explains_its_command_positional(words: list[str]) -> None:
    done = run_cli([*words, "--help"])
    assert done.returncode == 0, done.stderr
    first = _section(done.stdout, "positional arguments")[0]
    assert re.match(r"^  COMMAND\s{2,}\S", first), done.stdout


@pytest.mark.parametrize(
    "args",
    [["--json", "--version"], ["--json", "--help"], ["--json", "bundle", "verify", "--help"]],
)
def test_help_and_version_under_json_are_one_json_object(args: list[str]) -> None:
    """05 §3: --json prints exactly one JSON object; --help and --version printed text."""
    done = run_cli(args)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["ok"] is True
    assert document["text"].startswith(("bundler ", "usage: bundler"))
    plain = run_cli([arg for arg in args if arg != "--json"])
    assert plain.stdout == document["text"]


def test_json_after_the_end_of_options_is_an_operand_not_the_output_mode() -> None:
    """After ``--`` every word is an operand: a ``--json`` there does not make a usage error
    JSON (it is an agent's name, which is refused as one)."""
    done = run_cli(["agents", "export", "--", "--json"])
    assert done.returncode == 2 and one_error(done.stderr), done.stderr
    assert done.stderr.startswith("error: ") and done.stdout == ""
    under_json = run_cli(["--json", "agents", "export", "--", "--json"])
    assert under_json.returncode == 2 and json.loads(under_json.stdout)["ok"] is False
