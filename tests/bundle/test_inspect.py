"""``bundler bundle inspect`` (03 §2): what a bundle holds and grants, recomputed, escaped."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import clean_env, cli_command, run_cli

from bundler.bundle.fragment import family_default_endpoint, secret_endpoint
from bundler.bundle.inspect import inspect_bundle

SERVER_COMMAND = "npx -y @modelcontextprotocol/server-github"


def run_inspect(bundle: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["bundle", "inspect", str(bundle), *extra])


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    return bf.export_bundle(install, tmp_path / "bundle")


def test_inspect_json_lists_closure_secrets_flags_and_dropped(bundle: Path) -> None:
    result = run_inspect(bundle, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is True
    assert document["root_agent"] == bf.ROOT_AGENT
    assert document["format_version"] == 1
    assert document["provenance"]["exporter"].startswith("bundler ")
    assert document["entries"]["provider (models)"] == ["anthropic.main", "openai.backup"]
    assert document["entries"]["mcp server"] == ["github"]
    endpoints = {row["path"]: row["endpoint"] for row in document["required_secrets"]}
    assert endpoints == {
        "mcp.servers.github.env.GITHUB_TOKEN": "local process: " + SERVER_COMMAND,
        "providers.models.anthropic.main.api_key": "https://api.anthropic.com",
        "providers.models.openai.backup.api_key": "https://api.openai.com/v1",
    }
    assert {flag["kind"] for flag in document["risk_flags"]} == {
        "process_spawn",
        "command_allowlist",
        "carried_skills",
    }
    assert {row["path"] for row in document["dropped"]} >= {
        "agents.researcher.channels",
        "workspace/memory",
    }


def test_inspect_plain_text_off_a_terminal(bundle: Path) -> None:
    result = run_inspect(bundle)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "root agent: researcher" in lines
    assert "verified: yes" in lines
    assert "  providers.models.anthropic.main.api_key  https://api.anthropic.com" in lines
    assert "\x1b" not in result.stdout  # no colours or tables when piped


def test_inspect_shows_recomputed_flags_not_the_manifests(bundle: Path) -> None:
    bf.edit_config(bundle, lambda d: d["risk_profiles"]["guarded"].update(level="full"))
    bf.edit_manifest(bundle, lambda m: m.update(risk_flags=[]))
    result = run_inspect(bundle, "--json")
    assert result.returncode == 3
    document = json.loads(result.stdout)
    assert document["ok"] is False
    kinds = {flag["kind"] for flag in document["risk_flags"]}
    assert "full_autonomy" in kinds and "filesystem_escape" in kinds
    assert any("risk_flags" in error["path"] for error in document["errors"])


def test_custom_endpoint_is_where_the_secret_goes(bundle: Path) -> None:
    bf.edit_config(
        bundle,
        lambda d: d["providers"]["models"]["openai"]["backup"].update(
            uri="https://collector.example/v1"
        ),
    )
    bf.recompute_flags(bundle)
    report = inspect_bundle(bundle)
    assert report.verify.ok, report.verify.errors
    assert (
        "providers.models.openai.backup.api_key",
        "https://collector.example/v1",
    ) in report.secrets
    assert any(flag["kind"] == "custom_endpoint" for flag in report.risk_flags)


def test_endpoint_of_http_server_and_filled_family_defaults() -> None:
    fragment = {
        "providers": {
            "models": {
                "azure": {"a": {"resource": "contoso", "deployment": "gpt4"}},
                "bedrock": {"b": {"region": "eu-west-1"}},
            }
        },
        "mcp": {
            "servers": [{"name": "remote", "transport": "http", "url": "https://tools.example/mcp"}]
        },
    }
    assert (
        secret_endpoint(fragment, ["mcp", "servers", "remote", "headers", "Authorization"])
        == "https://tools.example/mcp"
    )
    assert (
        secret_endpoint(fragment, ["providers", "models", "azure", "a", "api_key"])
        == "https://contoso.openai.azure.com/openai/deployments/gpt4"
    )
    assert secret_endpoint(fragment, ["providers", "models", "bedrock", "b", "api_key"]) == (
        "https://bedrock-runtime.eu-west-1.amazonaws.com"
    )


def test_every_family_of_the_schema_has_a_default_endpoint() -> None:
    from bundler.rules import schema

    providers = schema.config_schema()["properties"]["providers"]["properties"]
    for category, node in providers.items():
        for family in node["properties"]:
            endpoint = family_default_endpoint(category, family, {})
            assert endpoint, (category, family)
            assert "{" not in endpoint and "\x00" not in endpoint, (category, family)
    # a family choosing among endpoints by its endpoint field (ZeroClaw's MoonshotEndpoint)
    assert family_default_endpoint("models", "moonshot", {"endpoint": "cn"}) == (
        "https://api.moonshot.cn/v1"
    )
    assert family_default_endpoint("models", "moonshot", {}) == "https://api.moonshot.ai/v1"
    assert family_default_endpoint("models", "moonshot", {"endpoint": "mars"}) is None


def test_bundle_strings_are_escaped(bundle: Path) -> None:
    bf.edit_manifest(bundle, lambda m: m["provenance"].update(exporter="evil\x1b[2J\u202etool"))
    bf.edit_config(
        bundle, lambda d: d["mcp"]["servers"][0].update(args=["-y", "pkg\x1b]0;owned\x07"])
    )
    bf.recompute_flags(bundle)
    for extra in ((), ("--json",)):
        result = run_inspect(bundle, *extra)
        assert result.returncode == 0, result.stderr
        assert (
            "\x1b" not in result.stdout
            and "\u202e" not in result.stdout
            and "\x07" not in result.stdout
        )
        assert "\\x1b" in result.stdout


def test_inspect_on_a_terminal_draws_tables(bundle: Path) -> None:
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [*cli_command(), "bundle", "inspect", str(bundle)],
        stdout=slave,
        stderr=subprocess.PIPE,
        env=clean_env({"COLUMNS": "200", "TERM": "xterm"}),
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert process.wait(timeout=60) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "required secrets" in screen and "https://api.anthropic.com" in screen
    assert "┃" in screen or "|" in screen  # a table, not plain lines


def test_inspect_of_a_folder_without_manifest_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = run_inspect(tmp_path / "empty")
    assert result.returncode == 3
    assert result.stderr.startswith(f"error: {tmp_path / 'empty'}: zeroclaw-agent.toml")
