"""What ZeroClaw master adds travels: a ``grok_cli`` provider and an MCP server's CA path (02 §6).

An install whose agent uses ``grok_cli`` with every key the family has, and an MCP server with a
``tls_ca_cert_path``, exports with every key carried (secrets scrubbed), nothing of them dropped,
and the keys that bind the host flagged: ``working_directory`` and ``binary_path`` (host paths,
``binary_path`` also a process), ``env_passthrough`` (environment given to a subprocess),
``extra_args`` (flags that can relax ZeroClaw's sandbox defaults) and the server's
``tls_ca_cert_path``. The bundle verifies, imports and the merged config validates; a
``working_directory`` missing on the target is a warning. Real CLI, real processes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.installs import make_install, run_cli

from bundler.rules import schema, tomlcompat

GROK_KEY = "xai-FAKE-grok-0123456789abcdef"
HEADER = "hdr-FAKE-0123456789abcdef0123"


def bundler(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={"SOURCE_DATE_EPOCH": "1700000000"}, timeout=300)


def grok_config(work: Path, ca: Path) -> str:
    return f"""\
[agents.coder]
model_provider = "grok_cli.main"
risk_profile = "guarded"
mcp_bundles = ["internal"]

[risk_profiles.guarded]
level = "supervised"

[mcp_bundles.internal]
servers = ["corp"]

[[mcp.servers]]
name = "corp"
transport = "http"
url = "https://mcp.corp.example/v1"
tls_ca_cert_path = "{ca}"

[providers.models.anthropic.backup]
api_key = "sk-FAKE-backup-0123456789abcdef"
model = "claude"

[providers.models.grok_cli.main]
api_key = "{GROK_KEY}"
kind = "grok"
uri = "https://api.x.ai/v1"
model = "grok-4"
fallback = ["anthropic.backup"]
fallback_models = ["grok-3"]
temperature = 0.3
timeout_secs = 90
wire_api = "chat_completions"
requires_openai_auth = true
max_tokens = 4096
merge_system_into_user = true
provider_extra = {{ region = "eu" }}
pricing = {{ input = 0.5, output = 1.5 }}
replay_assistant_reasoning = true
live_pricing = true
native_tools = true
think = true
vision = true
chat_template_kwargs = {{ enable_thinking = true }}
context_window = 131072
tls_ca_cert_path = "{ca}"
binary_path = "/opt/grok/bin/grok"
working_directory = "{work}"
env_passthrough = ["XAI_API_KEY"]
extra_args = ["--sandbox", "off", "--permission-mode=acceptEdits"]
max_acp_stdout_bytes = 8388608

[providers.models.grok_cli.main.extra_headers]
X-Team = "{HEADER}"
"""


GROK = "providers.models.grok_cli.main"


def test_the_config_above_sets_every_key_grok_cli_has() -> None:
    """So that "every key carried" below means every key of the family."""
    family = schema.resolve(["providers", "models", "grok_cli", "main"])[1]
    assert family is not None
    config = tomlcompat.loads(grok_config(Path("/w"), Path("/c.pem")))
    assert set(config["providers"]["models"]["grok_cli"]["main"]) == set(family["properties"])


def test_grok_cli_and_an_mcp_ca_path_export_carried_flagged_and_import(tmp_path: Path) -> None:
    work = tmp_path / "grok-work"
    work.mkdir()
    ca = tmp_path / "corp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    source = make_install(tmp_path, grok_config(work, ca), name="source")
    bundle = tmp_path / "bundle"
    exported = bundler("--install", str(source), "agents", "export", "coder", "--out", str(bundle))
    assert exported.returncode == 0, exported.stderr

    manifest = tomlcompat.loads((bundle / "zeroclaw-agent.toml").read_text())
    carried = tomlcompat.loads((bundle / "config.toml").read_text())
    source_entry = tomlcompat.loads((source / "config.toml").read_text())["providers"]["models"][
        "grok_cli"
    ]["main"]
    entry = carried["providers"]["models"]["grok_cli"]["main"]
    assert set(entry) == set(source_entry)  # every key carried
    assert entry["api_key"] == "" and entry["extra_headers"] == {"X-Team": ""}
    assert {k: v for k, v in entry.items() if k not in ("api_key", "extra_headers")} == {
        k: v for k, v in source_entry.items() if k not in ("api_key", "extra_headers")
    }
    server = carried["mcp"]["servers"][0]
    assert server["tls_ca_cert_path"] == str(ca)
    dropped = [row["path"] for row in manifest.get("dropped", [])]
    assert not [p for p in dropped if p.startswith((GROK, "mcp.servers"))], dropped
    assert f"{GROK}.api_key" in manifest["required_secrets"]
    assert f"{GROK}.extra_headers.X-Team" in manifest["required_secrets"]
    flags = {(f["kind"], f["path"]) for f in manifest["risk_flags"]}
    assert {
        ("host_path", f"{GROK}.working_directory"),
        ("host_path", f"{GROK}.binary_path"),
        ("process_spawn", f"{GROK}.binary_path"),
        ("env_passthrough", f"{GROK}.env_passthrough"),
        ("sandbox_disabled", f"{GROK}.extra_args"),
        ("host_path", "mcp.servers.corp.tls_ca_cert_path"),
    } <= flags
    for text in (bundle / "config.toml", bundle / "zeroclaw-agent.toml"):
        assert GROK_KEY not in text.read_text() and HEADER not in text.read_text()

    verified = bundler("bundle", "verify", str(bundle))
    assert verified.returncode == 0, verified.stderr

    target = tmp_path / "target"
    imported = bundler("--install", str(target), "agents", "import", str(bundle), "--accept-risks")
    assert imported.returncode == 0, imported.stderr
    # the paths exist on this host: nothing to warn about
    assert "is not a folder on this host" not in imported.stderr
    assert "is not a file on this host" not in imported.stderr
    merged = tomlcompat.loads((target / "config.toml").read_text())
    assert merged["providers"]["models"]["grok_cli"]["main"]["working_directory"] == str(work)
    assert merged["mcp"]["servers"][0]["tls_ca_cert_path"] == str(ca)
    validated = bundler("--install", str(target), "config", "validate")
    assert validated.returncode == 0, validated.stdout + validated.stderr


def test_a_grok_working_directory_missing_on_the_target_is_an_import_warning(
    tmp_path: Path,
) -> None:
    work = tmp_path / "grok-work"
    work.mkdir()
    ca = tmp_path / "corp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    source = make_install(tmp_path, grok_config(work, ca), name="source")
    bundle = tmp_path / "bundle"
    exported = bundler("--install", str(source), "agents", "export", "coder", "--out", str(bundle))
    assert exported.returncode == 0, exported.stderr
    work.rmdir()
    ca.unlink()  # the "target" is this host, where neither exists any more
    target = tmp_path / "target"
    imported = bundler(
        "--install", str(target), "agents", "import", str(bundle), "--accept-risks", "--json"
    )
    assert imported.returncode == 0, imported.stderr
    warnings = json.loads(imported.stdout)["warnings"]
    assert any(
        f"{GROK}.working_directory: {work} is not a folder on this host" in w for w in warnings
    ), warnings
    assert any(
        f"mcp.servers.corp.tls_ca_cert_path: {ca} is not a file on this host" in w for w in warnings
    ), warnings
    assert any(f"{GROK}.tls_ca_cert_path: {ca}" in w for w in warnings), warnings
