"""Round trip: export every agent of ``examples/install``, import each into an empty
install with ``--accept-risks`` and every secret given, export again: ``config.toml`` and
``checksums.xxh3`` are byte-identical, and no given secret value appears in any output, receipt
or bundle."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.installs import copy_example, opened_config
from support.kit import run_cli

from bundler.rules import tomlcompat

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "install"


def bundler(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"SOURCE_DATE_EPOCH": "1700000000", "PYTHONDONTWRITEBYTECODE": "1"}
    return run_cli(args, env=env, timeout=300)


def example_agents() -> list[str]:
    config = tomlcompat.loads((EXAMPLE / "config.toml").read_text(encoding="utf-8"))
    return sorted(config["agents"])


@pytest.mark.parametrize("alias", example_agents())
def test_export_import_export_gives_identical_config_and_checksums(
    alias: str, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    # exporting records its destination in the install's state folder: export from a copy, so
    # the example (the README's demo) is never written by a test
    source = copy_example(tmp_path)
    exported = bundler("--install", str(source), "agents", "export", alias, "--out", str(first))
    assert exported.returncode == 0, exported.stderr
    manifest = tomlcompat.loads((first / "zeroclaw-agent.toml").read_text(encoding="utf-8"))
    secrets = {
        path: f"roundtrip-{index:02d}-zqxjzqxjzqxjzqxj"
        for index, path in enumerate(manifest["required_secrets"])
    }
    secrets_file = tmp_path / "secrets.toml"
    secrets_file.write_text(
        "".join(f"{json.dumps(path)} = {json.dumps(value)}\n" for path, value in secrets.items())
    )
    os.chmod(secrets_file, 0o600)

    target = tmp_path / "target"
    target.mkdir()
    imported = bundler(
        "--install",
        str(target),
        "agents",
        "import",
        str(first),
        "--accept-risks",
        "--secrets-file",
        str(secrets_file),
        "--json",
    )
    assert imported.returncode == 0, imported.stderr
    document = json.loads(imported.stdout)
    assert document["secrets_missing"] == [] and document["renamed"] == {}

    second = tmp_path / "second"
    again = bundler("--install", str(target), "agents", "export", alias, "--out", str(second))
    assert again.returncode == 0, again.stderr
    assert (second / "config.toml").read_bytes() == (first / "config.toml").read_bytes()
    assert (second / "checksums.xxh3").read_bytes() == (first / "checksums.xxh3").read_bytes()

    seen = [imported.stdout, imported.stderr, again.stdout, again.stderr]
    seen += [p.read_text(errors="replace") for p in (target / "data").rglob("*") if p.is_file()]
    seen += [p.read_text(errors="replace") for p in second.rglob("*") if p.is_file()]
    blob = "\n".join(seen)
    assert not [path for path, value in secrets.items() if value in blob]
    # stored as ZeroClaw stores them by default: sealed, each opening to the value given
    installed = (target / "config.toml").read_text(encoding="utf-8")
    assert not [path for path, value in secrets.items() if value in installed]
    opened = json.dumps(opened_config(target))
    assert all(json.dumps(value) in opened for value in secrets.values())
