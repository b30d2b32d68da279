"""A standard stream the caller closed (``<&-``, ``>&-``, ``2>&-``, as some daemons and cron
jobs start a program) changes nothing but what can be read or shown: the command runs as it
would with the stream on /dev/null, and one that needs to read stdin says it could not.

Python makes a closed stream None, and code asked it ``isatty()``: every command that may draw
progress died silently with stderr closed, nothing done."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.installs import copy_example
from support.kit import clean_env, cli_command, one_error

REDIRECTION = {"stdin": "<&-", "stdout": ">&-", "stderr": "2>&-"}


def run_closed(stream: str, args: Sequence[str], home: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI in a process started with ``stream`` closed (by the shell, as a user
    would); the other two are captured."""
    script = f'exec "$@" {REDIRECTION[stream]}'
    return subprocess.run(
        ["sh", "-c", script, "sh", *cli_command(), *args],
        capture_output=True,
        text=True,
        env=clean_env({"HOME": str(home)}),
        timeout=120,
    )


def export_args(install: Path, bundle: Path) -> list[str]:
    return ["--install", str(install), "agents", "export", "researcher", "--out", str(bundle)]


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return copy_example(tmp_path)


def test_a_closed_stderr_silences_the_command_and_nothing_else(
    tmp_path: Path, install: Path
) -> None:
    bundle = tmp_path / "out.bundle"
    done = run_closed("stderr", export_args(install, bundle), tmp_path)
    assert done.returncode == 0
    assert (bundle / "zeroclaw-agent.toml").is_file()
    assert str(bundle) in done.stdout


def test_a_closed_stdout_only_drops_the_output(tmp_path: Path, install: Path) -> None:
    bundle = tmp_path / "out.bundle"
    made = run_closed("stdout", export_args(install, bundle), tmp_path)
    assert made.returncode == 0, made.stderr
    # inspect asked stdout whether it is a terminal (a table) or not (plain lines)
    for args in (["bundle", "inspect", str(bundle)], ["--install", str(install), "agents", "list"]):
        done = run_closed("stdout", args, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr


def test_an_import_with_stdin_closed_asks_nothing(tmp_path: Path, install: Path) -> None:
    bundle = tmp_path / "out.bundle"
    made = run_closed("stdin", export_args(install, bundle), tmp_path)
    assert made.returncode == 0, made.stderr
    target = copy_example(tmp_path / "target")
    done = run_closed(
        "stdin",
        ["--install", str(target), "agents", "import", str(bundle), "--as", "r2", "--accept-risks"],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "[agents.r2]" in (target / "config.toml").read_text()
    # without --accept-risks it is refused as any import nobody can answer, in one line
    refused = run_closed(
        "stdin", ["--install", str(target), "agents", "import", str(bundle), "--as", "r3"], tmp_path
    )
    assert refused.returncode == 1 and one_error(refused.stderr), refused.stderr


def test_config_set_with_stdin_closed_says_no_value_could_be_read(
    tmp_path: Path, install: Path
) -> None:
    before = (install / "config.toml").read_bytes()
    path = "providers.models.anthropic.main.api_key"
    done = run_closed("stdin", ["--install", str(install), "config", "set", path], tmp_path)
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "standard input is closed" in done.stderr and path in done.stderr
    # not an empty value set in its place
    assert (install / "config.toml").read_bytes() == before
