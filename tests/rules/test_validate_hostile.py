"""06 S3: every hostile config gives an error naming the path, exit 3, no traceback, no secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.hostile_configs import BASE_SECRETS, CANARY, HostileConfig, hostile_configs
from support.installs import make_install, run_cli

CASES = list(hostile_configs())


def test_corpus_has_at_least_thirty_hostile_configs() -> None:
    assert len(CASES) >= 30
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_config_refused_by_config_validate(tmp_path: Path, case: HostileConfig) -> None:
    root = make_install(tmp_path, case.text)
    result = run_cli(["--install", str(root), "config", "validate"])
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert "Traceback" not in output
    assert CANARY not in output
    assert not any(secret in output for secret in BASE_SECRETS)
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.splitlines()) == 1
    if case.kind:
        lines = result.stdout.splitlines()
        assert any(line.startswith(f"{case.kind} {case.path}: ") for line in lines), lines
    else:
        # bad TOML: the one error line names the file, with line and column
        assert str(root / case.path) in result.stderr
        assert "line" in result.stderr or "end of document" in result.stderr


@pytest.mark.parametrize("case", CASES[:8], ids=[case.name for case in CASES[:8]])
def test_hostile_config_json_envelope_names_the_path(tmp_path: Path, case: HostileConfig) -> None:
    root = make_install(tmp_path, case.text)
    result = run_cli(["config", "validate", "--install", str(root), "--json"])
    assert result.returncode == 3
    assert result.stderr == ""
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert document["error"]["code"] == 3
    assert {"kind": case.kind, "path": case.path} in [
        {"kind": e["kind"], "path": e["path"]} for e in document["errors"]
    ]
    assert CANARY not in result.stdout
