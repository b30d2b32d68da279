"""A CLI run forked from the test server is the run a fresh ``python -m bundler`` gives: the same
exit code, the same words on the same stream, in the environment, working folder and umask the
test gave it, with the stdin it was handed (tests/support/cliserver.py)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest
from support import kit
from support.cliserver import CliServer
from support.installs import make_install

Said = tuple[int, str, str]
"""A run's exit code, stdout and stderr."""


@pytest.fixture(scope="module")
def server() -> CliServer:
    return CliServer(kit.clean_env())


def fresh(args: list[str], env: dict[str, str], cwd: Path, text: str | None = None) -> Said:
    done = subprocess.run(
        [*kit.cli_command(), *args],
        input=text,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def forked(
    server: CliServer, args: list[str], env: dict[str, str], cwd: Path, text: str | None = None
) -> Said:
    argv = [*kit.cli_command(), *args]
    done = server.run(argv, args, env, str(cwd), text, None, 120)
    assert done.args == argv
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--help"],
        ["home", "verify-backup", "missing.zip"],
        ["home", "verify-backup", "missing.zip", "--json"],
        ["no-such-command"],
        ["bundle", "verify", "."],
    ],
)
def test_a_forked_run_says_what_a_fresh_one_says(
    server: CliServer, tmp_path: Path, args: list[str]
) -> None:
    env = kit.clean_env({"HOME": str(tmp_path)})
    assert server.usable(env)
    assert forked(server, args, env, tmp_path) == fresh(args, env, tmp_path)


def test_a_forked_run_works_in_the_folder_it_is_given(server: CliServer, tmp_path: Path) -> None:
    """A relative ``--project`` is found from the run's folder, not the server's."""
    project = tmp_path / "project"
    (project / "home").mkdir(parents=True)
    (project / "Agent.yaml").write_text("name: demo\ndata:\n  home: ./home\n")
    env = kit.clean_env({"HOME": str(tmp_path)})
    args = ["home", "volumes", "--project", "project", "--json"]
    done = forked(server, args, env, tmp_path)
    assert done == fresh(args, env, tmp_path)
    assert done[0] == 0


def test_a_run_given_other_interpreter_settings_is_started_afresh(server: CliServer) -> None:
    assert not server.usable({**kit.clean_env(), "PYTHONUTF8": "0", "LC_ALL": "C"})


@pytest.mark.parametrize("typed", ["", "model-from-stdin\n"])
def test_a_forked_run_reads_the_stdin_it_is_handed(
    server: CliServer, tmp_path: Path, typed: str
) -> None:
    """A value typed on stdin (or none: refused) reaches the run as it does a fresh one."""
    env = kit.clean_env({"HOME": str(tmp_path)})
    said = []
    for name, run in (("fresh", fresh), ("forked", functools.partial(forked, server))):
        install = make_install(tmp_path, name=name)
        args = ["--install", str(install), "config", "set", "providers.models.anthropic.main.model"]
        code, out, err = run(args, env, tmp_path, typed)
        said.append((code, out, err.replace(str(install), "INSTALL")))
        assert ("model-from-stdin" in (install / "config.toml").read_text()) == bool(typed)
    assert said[0] == said[1]
