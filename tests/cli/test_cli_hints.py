"""Paste-this hints: every ``bundler …`` command the CLI prints stands on a line
of its own, is shell-quoted, and runs against the install the printing command used: the
``--install DIR`` given on the command line is repeated, an install found through
``$ZEROCLAW_CONFIG_DIR`` or the default is not. Each hint is pasted back into a real process."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.installs import opened_config
from support.kit import run_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

NEEDED = [
    "mcp.servers.github.env.GITHUB_TOKEN",
    "providers.models.anthropic.main.api_key",
    "providers.models.openai.backup.api_key",
]


def cli(
    args: list[str], *, env: dict[str, str], cwd: Path, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env=env, cwd=cwd, input_text=input_text)


def paste(
    line: str, *, env: dict[str, str], cwd: Path, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a printed hint line as a shell would: split it, swap ``bundler`` for this Python."""
    words = shlex.split(line)
    assert words[0] == "bundler", line
    return cli(words[1:], env=env, cwd=cwd, input_text=input_text)


def command_lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.strip().startswith("bundler ")]


@pytest.fixture
def homes(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A HOME with a ``~/.zeroclaw`` decoy: a hint that drops ``--install`` would edit it."""
    home = tmp_path / "home"
    decoy = home / ".zeroclaw"
    decoy.mkdir(parents=True)
    (decoy / "config.toml").write_text("# the user's everyday install\n", encoding="utf-8")
    return home, {"HOME": str(home), "COLUMNS": "40"}


def test_import_hints_repeat_the_install_given_on_the_command_line(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    home, env = homes
    bundle = bf.build_bundle(tmp_path / "bundle")
    work = tmp_path / "work"
    work.mkdir()
    # a relative --install with a space: the hint must still find it from anywhere
    done = cli(
        ["--install", "new install", "agents", "import", str(bundle), "--accept-risks"],
        env=env,
        cwd=work,
    )
    assert done.returncode == 0, done.stderr
    install = work / "new install"
    lines = command_lines(done.stdout)
    flag = shlex.join(["--install", str(install)])
    for path in NEEDED:
        assert f"bundler {flag} config set {path}" in lines, done.stdout
    receipt = next((install / "data" / "state" / "imports").glob("*.toml"))
    assert f"bundler {flag} agents import --undo {shlex.quote(str(receipt))}" in lines
    decoy_before = (home / ".zeroclaw" / "config.toml").read_bytes()
    elsewhere = tmp_path
    for line in lines:
        if " config set providers.models.openai.backup.api_key" in line:
            set_done = paste(line, env=env, cwd=elsewhere, input_text="sk-pasted-value-123\n")
            assert set_done.returncode == 0, set_done.stderr
    # stored under the install's policy (enc2: by default): read as ZeroClaw reads it
    config = opened_config(install)
    assert config["providers"]["models"]["openai"]["backup"]["api_key"] == "sk-pasted-value-123"
    assert (home / ".zeroclaw" / "config.toml").read_bytes() == decoy_before
    undo_line = next(line for line in lines if "--undo" in line)
    undone = paste(undo_line, env=env, cwd=elsewhere)
    assert undone.returncode == 0, undone.stderr
    # the install had no config.toml before the import: undoing it removes the file again
    assert not (install / "config.toml").exists()
    assert (home / ".zeroclaw" / "config.toml").read_bytes() == decoy_before


def test_import_hints_omit_the_install_found_through_the_environment(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    _home, env = homes
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "target"
    env = {**env, "ZEROCLAW_CONFIG_DIR": str(install)}
    done = cli(["agents", "import", str(bundle), "--accept-risks"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = command_lines(done.stdout)
    for path in NEEDED:
        assert f"bundler config set {path}" in lines, done.stdout
    assert any(line.startswith("bundler agents import --undo ") for line in lines), done.stdout


def test_dry_run_hints_stand_on_their_own_lines_unwrapped(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    _home, env = homes
    bundle = bf.build_bundle(tmp_path / "bundle")
    install = tmp_path / "a folder with a long name so that forty columns are not enough"
    install.mkdir()
    done = cli(
        ["--install", str(install), "agents", "import", str(bundle), "--dry-run"],
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    flag = shlex.join(["--install", str(install)])
    assert command_lines(done.stdout) == [f"bundler {flag} config set {p}" for p in NEEDED]


def test_export_summary_hints_are_quoted_lines_of_their_own(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    _home, env = homes
    install = bf.write_install(tmp_path / "source")
    config = install / "config.toml"
    # a provider whose name needs quoting: pasted unquoted, the shell would eat the quotes
    config.write_text(
        config.read_text(encoding="utf-8")
        .replace("providers.models.openai.backup", 'providers.models.openai."my backup"')
        .replace('"openai.backup"', '"openai.my backup"'),
        encoding="utf-8",
    )
    done = cli(
        ["--install", str(install), "agents", "export", bf.ROOT_AGENT, "--out", "out"],
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = command_lines(done.stdout)
    # the receiver runs these in their own install: the exporter's --install is not repeated
    assert "bundler config set 'providers.models.openai.\"my backup\".api_key'" in lines, (
        done.stdout
    )
    assert all("--install" not in line for line in lines)


def test_doctor_recover_hint_pasted_clears_the_leftover(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    _home, env = homes
    install = bf.write_install(tmp_path / "my install")
    (install / ".bundler-import-AbCdEfGhIjKl").mkdir()
    done = cli(["--install", str(install), "doctor"], env=env, cwd=tmp_path)
    assert done.returncode == 3
    lines = command_lines(done.stdout)
    assert lines == [shlex.join(["bundler", "recover", "--install", str(install)])]
    fixed = paste(lines[0], env=env, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert not (install / ".bundler-import-AbCdEfGhIjKl").exists()
    assert cli(["--install", str(install), "doctor"], env=env, cwd=tmp_path).returncode == 0


def test_recover_scan_hints_are_quoted_lines_of_their_own(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    _home, env = homes
    parent = tmp_path / "my exports"
    parent.mkdir()
    (parent / ".zeroclaw-export-Tok3nTok3nAB").mkdir()
    (parent / ".zeroclaw-export-Tok3nTok3nAB.target").write_bytes(b"the bundle\n")
    done = cli(["recover", "--scan", str(parent)], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = command_lines(done.stdout)
    # the staging folder and its record are named as one run: one command clears both
    assert set(lines) == {shlex.join(["bundler", "recover", str(parent / "the bundle")])}
    fixed = paste(lines[0], env=env, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert sorted(os.listdir(parent)) == []


def test_error_hint_follows_the_one_error_line_and_pastes(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    from support.hostile_zips import make_project

    from bundler.home.backup import backup_home
    from bundler.home.restore_journal import STAGING_PREFIX

    home_dir, env = homes
    project, home = make_project(tmp_path / "my project")
    zip_path = backup_home(project, to=tmp_path / "b.zip", environ={"HOME": str(home_dir)}).path
    # a dead restore that had begun its swap: the next restore refuses and names recover
    (home / f"{STAGING_PREFIX}abcdefabcdef").mkdir()
    (home / f"{STAGING_PREFIX}abcdefabcdef" / "journal.toml").write_text(
        'format = 1\ntoken = "abcdefabcdef"\nstate = "swapping"\nstep = -1\nmoves = []\n'
    )
    done = cli(["home", "restore", str(zip_path), "--project", str(project)], env=env, cwd=tmp_path)
    assert done.returncode == 1
    first, second, *rest = done.stderr.splitlines()
    assert first.startswith("error: ") and first.endswith("; run:") and rest == []
    assert second == "  " + shlex.join(["bundler", "recover", "--home", str(home)])
    as_json = cli(
        ["home", "restore", str(zip_path), "--project", str(project), "--json"],
        env=env,
        cwd=tmp_path,
    )
    assert json.loads(as_json.stdout)["error"]["fix"] == second.strip()
    fixed = paste(second.strip(), env=env, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert not (home / f"{STAGING_PREFIX}abcdefabcdef").exists()


def test_doctor_home_init_hint_names_the_project_and_pastes(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    _home, env = homes
    project = tmp_path / "my project"
    shutil.copytree(EXAMPLES / "project", project)
    shutil.rmtree(project / "data-home", ignore_errors=True)
    done = cli(["doctor", "--project", str(project)], env=env, cwd=tmp_path)
    lines = command_lines(done.stdout)
    assert lines == [shlex.join(["bundler", "home", "init", "--project", str(project)])]
    # pasted from another folder, it makes this project's home, not one under the cwd
    assert paste(lines[0], env=env, cwd=tmp_path).returncode == 0
    assert (project / "data-home").is_dir()


def test_hint_for_a_path_with_control_characters_is_escaped_and_pastes_into_bash(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    _home, env = homes
    parent = tmp_path / "ex\x1b[2Jports 'q'"
    parent.mkdir()
    (parent / ".zeroclaw-export-Tok3nTok3nAB").mkdir()
    (parent / ".zeroclaw-export-Tok3nTok3nAB.target").write_bytes(b"bundle\n")
    done = cli(["recover", "--scan", str(parent)], env=env, cwd=tmp_path)
    assert "\x1b" not in done.stdout
    (line,) = set(command_lines(done.stdout))
    assert "\\x1b[2Jports" in line and line.startswith("bundler recover $'")
    # the shell parses the printed line; 'bundler' is this Python's module
    shim = 'bundler() { "$BUNDLER_PYTHON" -m bundler "$@"; }\n'
    pasted = subprocess.run(
        ["bash", "-c", shim + line],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "BUNDLER_PYTHON": sys.executable},
        cwd=tmp_path,
        timeout=120,
    )
    assert pasted.returncode == 0, pasted.stderr
    assert os.listdir(parent) == []


def test_risk_refusal_names_the_inspect_command_for_this_bundle(
    tmp_path: Path, homes: tuple[Path, dict[str, str]]
) -> None:
    _home, env = homes
    bundle = bf.build_bundle(tmp_path / "the bundle")
    done = cli(["--install", "target", "agents", "import", "the bundle"], env=env, cwd=tmp_path)
    assert done.returncode == 1
    first, second = done.stderr.splitlines()
    assert first.startswith("error: the bundle carries") and first.endswith("; run:")
    assert second == "  " + shlex.join(["bundler", "bundle", "inspect", str(bundle)])
    assert paste(second.strip(), env=env, cwd=tmp_path / "..").returncode == 0
