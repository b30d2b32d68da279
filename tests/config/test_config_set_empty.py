"""``config set`` never turns "nothing was given" into an empty value (01 §6).

Only a closed stdin was refused: ``</dev/null``, ``echo -n |``, a cron job or a CI step with no
input printed ``set …``, exited 0 and wrote ``api_key = ""`` over a working key. Nothing read
from standard input is refused, naming ``config unset``; an empty secret is refused even when
given as ``''`` (clearing a secret is ``config unset``); ``''`` for a field that is not secret
is a deliberate value and is set.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.hostile_configs import HOSTILE_SET_INPUTS, HostileSetInput
from support.installs import copy_example
from support.kit import Terminal, clean_env, cli_command, one_error, run_cli

SECRET = "providers.models.anthropic.main.api_key"
PLAIN = "providers.models.anthropic.main.model"


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return copy_example(tmp_path)


def _run(install: Path, case: HostileSetInput) -> subprocess.CompletedProcess[str]:
    path = SECRET if case.secret else PLAIN
    args = ["--install", str(install), "config", "set", path]
    if case.value is not None:
        args.append(case.value)
    done = subprocess.run(
        [*cli_command(), *args],
        input=case.stdin,
        stdin=subprocess.DEVNULL if case.stdin is None else None,
        capture_output=True,
        env=clean_env(),
        timeout=120,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@pytest.mark.parametrize("case", HOSTILE_SET_INPUTS, ids=lambda case: case.name)
def test_config_set_refuses_an_input_that_gives_no_value(
    install: Path, case: HostileSetInput
) -> None:
    before = (install / "config.toml").read_bytes()
    done = _run(install, case)
    assert done.returncode == 2 and one_error(done.stderr), done.stderr
    path = SECRET if case.secret else PLAIN
    assert f"config unset {path}" in done.stderr
    if case.value is None:
        assert "no value read from standard input" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert (install / "config.toml").read_bytes() == before


def test_an_empty_argument_for_a_field_that_is_not_secret_is_set(install: Path) -> None:
    done = run_cli(["--install", str(install), "config", "set", PLAIN, ""])
    assert done.returncode == 0, done.stderr
    got = run_cli(["--install", str(install), "config", "get", PLAIN, "--json"])
    assert '"value": ""' in got.stdout


def test_nothing_typed_at_a_terminal_changes_nothing(install: Path) -> None:
    before = (install / "config.toml").read_bytes()
    with Terminal(["--install", str(install), "config", "set", SECRET]) as tty:
        tty.answer(b"not echoed", b"\n")
        status, _out, err = tty.finish()
    text = err.decode()
    assert status == 2 and one_error(text), text
    assert f"config unset {SECRET}" in text
    assert (install / "config.toml").read_bytes() == before


def test_config_unset_still_clears_a_secret(install: Path) -> None:
    done = run_cli(["--install", str(install), "config", "unset", SECRET])
    assert done.returncode == 0, done.stderr
    assert "sk-FAKE-anthropic" not in (install / "config.toml").read_text()
