"""06 §3 S3: every hostile Agent.yaml is refused with exit 3 and a one-line error naming the
key path, by the library and by the real CLI, with no traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.hostile_agent_yaml import CASES, Case, clean_env, materialise, run_cli, snapshot_tree

from bundler.cli import main
from bundler.errors import InvalidInput
from bundler.home.volumes import load_volumes


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_agent_yaml_refused_by_cli_exit_3_one_line(tmp_path: Path, case: Case) -> None:
    project, env = materialise(tmp_path, case)
    before = snapshot_tree(tmp_path)
    result = run_cli("home", "volumes", "--project", str(project), env=env)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Agent.yaml" in lines[0]
    assert case.expect in lines[0]
    assert result.stdout == ""
    assert snapshot_tree(tmp_path) == before


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_agent_yaml_refused_by_library_and_json(
    tmp_path: Path, case: Case, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project, env = materialise(tmp_path, case)
    with pytest.raises(InvalidInput) as raised:
        load_volumes(project, environ=env)
    assert case.expect in raised.value.message
    assert raised.value.path
    for key in [k for k in os.environ if k.startswith("BXAGENTS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", env["HOME"])
    code = main(["home", "volumes", "--project", str(project), "--json"])
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert code == 3
    assert document["ok"] is False
    assert document["error"]["code"] == 3
    assert case.expect in document["error"]["message"]
    assert document["error"]["path"]


def test_agent_yaml_fifo_refused_without_blocking(tmp_path: Path) -> None:
    user, project = tmp_path / "user", tmp_path / "project"
    user.mkdir()
    project.mkdir()
    os.mkfifo(project / "Agent.yaml")
    result = run_cli("home", "show", "--project", str(project), env=clean_env(user))
    assert result.returncode == 3
    assert "Agent.yaml: is not a regular file" in result.stderr


def test_agent_yaml_folder_refused(tmp_path: Path) -> None:
    user, project = tmp_path / "user", tmp_path / "project"
    user.mkdir()
    (project / "Agent.yaml").mkdir(parents=True)
    result = run_cli("home", "volumes", "--project", str(project), env=clean_env(user))
    assert result.returncode == 3
    assert result.stderr.startswith("error: Agent.yaml")
