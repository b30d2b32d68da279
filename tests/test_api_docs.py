"""docs/api.md's examples run as written: each ``<!-- example: NAME -->`` code block is saved
as a program and run with the real interpreter against a real registry and real installs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.installs import make_install, opened_config
from support.kit import clean_env
from support.registry_server import Registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -->\n```python\n(.*?)```", re.S)


def _examples() -> dict[str, str]:
    return dict(EXAMPLE.findall(DOC.read_text(encoding="utf-8")))


def _run(tmp_path: Path, name: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    program = tmp_path / f"{name}.py"
    program.write_text(_examples()[name], encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(program), *map(str, args)],
        capture_output=True,
        text=True,
        env=clean_env({"REGISTRY_PLAIN_HTTP": "1", "TMPDIR": os.environ["TMPDIR"]}),
        timeout=300,
    )


def test_the_doc_has_the_examples_the_test_runs() -> None:
    assert sorted(_examples()) == ["deploy", "progress", "publish"]


def test_publish_then_deploy_to_a_fleet_and_undo_where_the_check_fails(
    registry: Registry, tmp_path: Path
) -> None:
    source = bf.write_install(tmp_path / "source")
    published = _run(tmp_path, "publish", source, bf.ROOT_AGENT, registry.ref("agents/r:v3"))
    assert published.returncode == 0, published.stderr
    pinned = published.stdout.strip()
    assert re.fullmatch(re.escape(registry.ref("agents/r")) + r"@sha256:[0-9a-f]{64}", pinned)

    required = bf.read_manifest(bf.export_bundle(source, tmp_path / "same"))["required_secrets"]
    assert required, "the deploy must fill secrets for the test to mean anything"
    secrets = tmp_path / "secrets.toml"
    secrets.write_text("".join(f'"{p}" = "fleet-value-{i}"\n' for i, p in enumerate(required)))
    secrets.chmod(0o600)

    hosts = [tmp_path / "host-a", tmp_path / "host-b"]
    deployed = _run(tmp_path, "deploy", pinned, secrets, "true", *hosts)
    assert deployed.returncode == 0, deployed.stderr
    for host in hosts:
        config = (host / "config.toml").read_text(encoding="utf-8")
        assert f"[agents.{bf.ROOT_AGENT}]" in config
        # stored under the host's policy (enc2: by default), so read as ZeroClaw reads it
        assert "fleet-value-0" not in config
        assert "fleet-value-0" in str(opened_config(host))
        assert f"{host}: imported {bf.ROOT_AGENT}" in deployed.stdout

    # an install whose check fails is left as it was
    failing = make_install(tmp_path / "host-c", "")
    before = (failing / "config.toml").read_bytes()
    undone = _run(tmp_path, "deploy", pinned, secrets, "false", failing)
    assert undone.returncode == 1
    assert f"{failing}: check failed; undone" in undone.stdout
    assert (failing / "config.toml").read_bytes() == before

    # a tag is refused: every host must get the same bytes
    by_tag = _run(tmp_path, "deploy", registry.ref("agents/r:v3"), secrets, "true", hosts[0])
    assert by_tag.returncode == 1 and "deploy a digest" in by_tag.stderr


@pytest.mark.parametrize("form", ["folder", "archive"])
def test_the_progress_example_verifies_and_prints_the_cli_s_json(
    form: str, exported: Path, packed: Path, tmp_path: Path
) -> None:
    import json

    from support.kit import run_cli

    bundle = exported if form == "folder" else packed
    shown = _run(tmp_path, "progress", bundle)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == json.loads(
        run_cli(["bundle", "verify", str(bundle), "--json"]).stdout
    )
    assert "verifying:" in shown.stderr and "done:" in shown.stderr
