"""One test per rule of 01 §5, named after the rule, on pure config dicts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from support.hostile_configs import BASE_SECRETS, CANARY, base_config

from bundler.rules.findings import (
    DANGLING_REFERENCE,
    FALLBACK_CYCLE,
    FALLBACK_DANGLING,
    FALLBACK_TOO_DEEP,
    INVALID_FORMAT,
    INVALID_VALUE,
    NON_PORTABLE_ALIAS,
    REQUIRED_FIELD_EMPTY,
    UNKNOWN_MCP_SERVER,
    Finding,
)
from bundler.rules.validate import MAX_FALLBACK_DEPTH, validate

ROOT = Path("/srv/install")


def run(config: dict[str, Any], root: Path = ROOT) -> tuple[list[Finding], list[Finding]]:
    return validate(config, root)


def errors_at(config: dict[str, Any], path: str) -> list[Finding]:
    return [finding for finding in run(config)[0] if finding.path == path]


def kinds_at(config: dict[str, Any], path: str) -> set[str]:
    return {finding.kind for finding in errors_at(config, path)}


@pytest.fixture
def config() -> dict[str, Any]:
    return copy.deepcopy(base_config())


def test_base_config_is_valid(config: dict[str, Any]) -> None:
    assert run(config) == ([], [])


def test_empty_config_is_valid() -> None:
    assert run({}) == ([], [])


# --- rule 1: JSON Schema -------------------------------------------------------------------------


def test_schema_type_error_reported_at_offending_path(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["enabled"] = "yes"
    [finding] = errors_at(config, "agents.researcher.enabled")
    assert finding.kind == INVALID_VALUE
    assert finding.message == "must be true or false"


def test_schema_enum_error_names_choices_not_value(config: dict[str, Any]) -> None:
    config["risk_profiles"]["careful"]["level"] = CANARY
    [finding] = errors_at(config, "risk_profiles.careful.level")
    assert "readonly, supervised, full" in finding.message
    assert CANARY not in finding.message


def test_schema_range_error(config: dict[str, Any]) -> None:
    config["providers"]["models"]["openai"]["backup"]["temperature"] = 2.5
    [finding] = errors_at(config, "providers.models.openai.backup.temperature")
    assert finding.message == "must be at most 2.0"


def test_schema_error_on_secret_field_never_quotes_the_secret(config: dict[str, Any]) -> None:
    config["providers"]["models"]["anthropic"]["main"]["api_key"] = [CANARY]
    config["mcp"]["servers"][0]["env"]["GITHUB_TOKEN"] = {"nested": CANARY}
    errors, _ = run(config)
    assert {f.path for f in errors} >= {
        "providers.models.anthropic.main.api_key",
        "mcp.servers.gh.env.GITHUB_TOKEN",
    }
    assert all(CANARY not in f.message and CANARY not in f.path for f in errors)


def test_schema_error_in_mcp_server_is_addressed_by_name(config: dict[str, Any]) -> None:
    config["mcp"]["servers"][1]["tool_timeout_secs"] = 0
    assert kinds_at(config, "mcp.servers.web.tool_timeout_secs") == {INVALID_VALUE}


def test_schema_pattern_error_is_invalid_format(config: dict[str, Any]) -> None:
    config["providers"]["models"]["openai"]["backup"]["uri"] = "file:///etc/passwd"
    [finding] = errors_at(config, "providers.models.openai.backup.uri")
    assert finding.kind == INVALID_FORMAT
    assert finding.message == "must be an http(s) URL"


def test_schema_alias_with_dot_is_refused(config: dict[str, Any]) -> None:
    config["risk_profiles"]["a.b"] = {}
    assert kinds_at(config, 'risk_profiles."a.b"') == {INVALID_FORMAT}


def test_unknown_provider_family_is_an_error(config: dict[str, Any]) -> None:
    config["providers"]["models"]["skynet"] = {"x": {}}
    assert kinds_at(config, "providers.models.skynet") == {INVALID_VALUE}


def test_unknown_keys_are_allowed(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["my_own_note"] = "kept"
    config["experimental"] = {"flag": True}
    assert run(config)[0] == []


# --- rule 2: per agent ---------------------------------------------------------------------------


def test_model_provider_required_non_empty(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["model_provider"] = ""
    assert kinds_at(config, "agents.researcher.model_provider") == {REQUIRED_FIELD_EMPTY}
    del config["agents"]["researcher"]["model_provider"]
    assert kinds_at(config, "agents.researcher.model_provider") == {REQUIRED_FIELD_EMPTY}


def test_model_provider_must_be_dotted(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["model_provider"] = "anthropic"
    assert kinds_at(config, "agents.researcher.model_provider") == {INVALID_FORMAT}


def test_model_provider_known_family(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["model_provider"] = "skynet.main"
    assert kinds_at(config, "agents.researcher.model_provider") == {INVALID_VALUE}


def test_model_provider_existing_entry(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["model_provider"] = "anthropic.other"
    assert kinds_at(config, "agents.researcher.model_provider") == {DANGLING_REFERENCE}


@pytest.mark.parametrize(
    ("field", "ref"),
    [
        ("classifier_provider", "openai.nope"),
        ("summary_provider", "groq.nope"),
        ("tts_provider", "elevenlabs.nope"),
        ("transcription_provider", "deepgram.nope"),
    ],
)
def test_other_provider_refs_empty_or_existing_in_their_category(
    config: dict[str, Any], field: str, ref: str
) -> None:
    config["agents"]["researcher"][field] = ""
    assert errors_at(config, f"agents.researcher.{field}") == []
    config["agents"]["researcher"][field] = ref
    assert kinds_at(config, f"agents.researcher.{field}") == {DANGLING_REFERENCE}


def test_provider_ref_checked_against_its_own_category(config: dict[str, Any]) -> None:
    # anthropic.main exists among models, but anthropic is no transcription family
    config["agents"]["researcher"]["transcription_provider"] = "anthropic.main"
    assert kinds_at(config, "agents.researcher.transcription_provider") == {INVALID_VALUE}


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("risk_profile", "nope", "agents.researcher.risk_profile"),
        ("runtime_profile", "nope", "agents.researcher.runtime_profile"),
        ("skill_bundles", ["sb", "nope"], "agents.researcher.skill_bundles[1]"),
        ("knowledge_bundles", ["nope"], "agents.researcher.knowledge_bundles[0]"),
        ("mcp_bundles", ["nope"], "agents.researcher.mcp_bundles[0]"),
        ("cron_jobs", ["nope"], "agents.researcher.cron_jobs[0]"),
    ],
)
def test_profile_and_bundle_refs_must_exist(
    config: dict[str, Any], field: str, value: Any, path: str
) -> None:
    config["agents"]["researcher"][field] = value
    assert kinds_at(config, path) == {DANGLING_REFERENCE}


def test_channels_entry_dotted_and_existing(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["channels"] = ["slack", "slack.nope", "slack.team"]
    assert kinds_at(config, "agents.researcher.channels[0]") == {INVALID_FORMAT}
    assert kinds_at(config, "agents.researcher.channels[1]") == {DANGLING_REFERENCE}
    assert errors_at(config, "agents.researcher.channels[2]") == []


def test_risk_profile_required_when_enabled(config: dict[str, Any]) -> None:
    del config["agents"]["writer"]["risk_profile"]
    assert kinds_at(config, "agents.writer.risk_profile") == {REQUIRED_FIELD_EMPTY}
    config["agents"]["writer"]["enabled"] = False
    assert errors_at(config, "agents.writer.risk_profile") == []


def test_delegates_exist_not_self_no_repeats(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["delegates"] = [
        "writer",
        "researcher",
        {"agent": "ghost", "mode": "sync"},
        {"agent": "writer"},
    ]
    assert errors_at(config, "agents.researcher.delegates[0]") == []
    assert kinds_at(config, "agents.researcher.delegates[1]") == {INVALID_VALUE}
    assert kinds_at(config, "agents.researcher.delegates[2]") == {DANGLING_REFERENCE}
    assert kinds_at(config, "agents.researcher.delegates[3]") == {INVALID_VALUE}


def test_workspace_access_targets_exist_and_are_not_self(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["workspace"]["access"] = {
        "writer": "read_write",
        "researcher": "read",
        "ghost": "write",
    }
    assert errors_at(config, "agents.researcher.workspace.access.writer") == []
    assert kinds_at(config, "agents.researcher.workspace.access.researcher") == {INVALID_VALUE}
    assert kinds_at(config, "agents.researcher.workspace.access.ghost") == {DANGLING_REFERENCE}


def test_read_memory_from_targets_exist_and_are_not_self(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["workspace"]["read_memory_from"] = ["researcher", "ghost"]
    assert kinds_at(config, "agents.researcher.workspace.read_memory_from[0]") == {INVALID_VALUE}
    assert kinds_at(config, "agents.researcher.workspace.read_memory_from[1]") == {
        DANGLING_REFERENCE
    }


def test_read_memory_from_requires_same_backend(config: dict[str, Any]) -> None:
    config["agents"]["writer"]["memory"] = {"backend": "qdrant"}
    assert kinds_at(config, "agents.researcher.workspace.read_memory_from[0]") == {INVALID_VALUE}
    config["agents"]["researcher"]["memory"] = {"backend": "qdrant"}
    assert errors_at(config, "agents.researcher.workspace.read_memory_from[0]") == []


@pytest.mark.parametrize("backend", ["markdown", "none"])
def test_restricted_read_memory_from_refused_for_categoryless_backend(
    config: dict[str, Any], backend: str
) -> None:
    for alias in ("researcher", "writer"):
        config["agents"][alias]["memory"] = {"backend": backend}
    workspace = config["agents"]["researcher"]["workspace"]
    workspace["read_memory_from"] = ["writer"]
    assert errors_at(config, "agents.researcher.workspace.read_memory_from[0]") == []
    workspace["read_memory_from"] = [{"agent": "writer", "categories": ["facts"]}]
    assert kinds_at(config, "agents.researcher.workspace.read_memory_from[0]") == {INVALID_VALUE}


def test_restricted_read_memory_from_allowed_for_sqlite(config: dict[str, Any]) -> None:
    config["agents"]["researcher"]["workspace"]["read_memory_from"] = [
        {"agent": "writer", "categories": ["facts"]}
    ]
    assert run(config)[0] == []


# --- rule 3: runtime profiles --------------------------------------------------------------------


def test_runtime_profile_summary_provider_empty_or_existing(config: dict[str, Any]) -> None:
    compression = config["runtime_profiles"]["rt"]["context_compression"]
    compression["summary_provider"] = ""
    assert run(config)[0] == []
    compression["summary_provider"] = "openai"
    path = "runtime_profiles.rt.context_compression.summary_provider"
    assert kinds_at(config, path) == {INVALID_FORMAT}
    compression["summary_provider"] = "openai.gone"
    assert kinds_at(config, path) == {DANGLING_REFERENCE}


# --- rule 4: skill bundles -----------------------------------------------------------------------


def test_skill_bundle_folder_inside_shared_after_dotdot_normalisation(
    config: dict[str, Any],
) -> None:
    bundle = config["skill_bundles"]["sb"]
    bundle["directory"] = "shared/skills/../../shared/skills/sb"  # climbs out and back: inside
    assert run(config)[0] == []
    bundle["directory"] = "shared/skills/../../etc"
    assert kinds_at(config, "skill_bundles.sb.directory") == {INVALID_VALUE}
    bundle["directory"] = str(ROOT / "shared" / "skills" / "x")  # absolute, inside
    assert run(config)[0] == []
    bundle["directory"] = "/srv/install/shared-evil/x"  # a sibling sharing the prefix
    assert kinds_at(config, "skill_bundles.sb.directory") == {INVALID_VALUE}


def test_skill_bundle_alias_with_dotdot_cannot_escape_by_default_folder(
    config: dict[str, Any],
) -> None:
    config["skill_bundles"][".."] = {}
    errors, warnings = run(config)
    assert [f.path for f in errors] == ['skill_bundles.".."']
    assert NON_PORTABLE_ALIAS in {w.kind for w in warnings}


def test_skill_bundle_tilde_directory_is_outside(config: dict[str, Any]) -> None:
    config["skill_bundles"]["sb"]["directory"] = "~/skills"
    assert kinds_at(config, "skill_bundles.sb.directory") == {INVALID_VALUE}


def test_skill_bundle_folders_unique(config: dict[str, Any]) -> None:
    config["skill_bundles"]["second"] = {"directory": "shared/skills/./sb"}
    [finding] = run(config)[0]
    assert finding.path == "skill_bundles.second.directory"
    assert "skill_bundles.sb" in finding.message


# --- rule 5: MCP ---------------------------------------------------------------------------------


def test_mcp_server_name_required(config: dict[str, Any]) -> None:
    config["mcp"]["servers"].append({"name": "", "command": "x"})
    assert kinds_at(config, "mcp.servers[2].name") == {REQUIRED_FIELD_EMPTY}


def test_mcp_server_names_unique_case_insensitively(config: dict[str, Any]) -> None:
    config["mcp"]["servers"].append({"name": "Gh", "command": "x"})
    [finding] = errors_at(config, "mcp.servers.Gh.name")
    assert finding.kind == INVALID_VALUE
    assert "server 0" in finding.message


def test_mcp_stdio_needs_command(config: dict[str, Any]) -> None:
    del config["mcp"]["servers"][0]["command"]
    assert kinds_at(config, "mcp.servers.gh.command") == {REQUIRED_FIELD_EMPTY}


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_mcp_http_and_sse_need_http_url(config: dict[str, Any], transport: str) -> None:
    server = config["mcp"]["servers"][1]
    server["transport"] = transport
    del server["url"]
    assert kinds_at(config, "mcp.servers.web.url") == {REQUIRED_FIELD_EMPTY}
    server["url"] = "https://"
    assert kinds_at(config, "mcp.servers.web.url") == {INVALID_FORMAT}
    server["url"] = "http://localhost:8080/mcp"
    assert errors_at(config, "mcp.servers.web.url") == []


def test_mcp_rules_only_when_mcp_enabled(config: dict[str, Any]) -> None:
    config["mcp"]["enabled"] = False
    del config["mcp"]["servers"][0]["command"]
    config["mcp"]["servers"].append({"name": "GH", "transport": "http"})
    assert run(config)[0] == []


# --- warnings ------------------------------------------------------------------------------------


def _chain(length: int) -> dict[str, Any]:
    config = copy.deepcopy(base_config())
    models = config["providers"]["models"]
    models["groq"] = {f"p{i}": {"fallback": [f"groq.p{i + 1}"]} for i in range(length)}
    models["groq"][f"p{length}"] = {}
    config["agents"]["writer"]["model_provider"] = "groq.p0"
    return config


def test_fallback_dangling_is_a_warning(config: dict[str, Any]) -> None:
    config["providers"]["models"]["openai"]["backup"]["fallback"] = ["groq.missing"]
    errors, warnings = run(config)
    assert errors == []
    assert [(w.kind, w.path) for w in warnings] == [
        (FALLBACK_DANGLING, "providers.models.openai.backup.fallback[0]")
    ]


def test_fallback_cycle_is_a_warning(config: dict[str, Any]) -> None:
    config["providers"]["models"]["openai"]["backup"]["fallback"] = ["anthropic.main"]
    errors, warnings = run(config)
    assert errors == []
    assert {(w.kind, w.path) for w in warnings} == {
        (FALLBACK_CYCLE, "providers.models.openai.backup.fallback"),
        (FALLBACK_CYCLE, "providers.models.anthropic.main.fallback"),
    }


def test_fallback_self_loop_is_a_cycle(config: dict[str, Any]) -> None:
    config["providers"]["models"]["openai"]["backup"]["fallback"] = ["openai.backup"]
    assert [w.kind for w in run(config)[1]] == [FALLBACK_CYCLE]


def test_fallback_depth_beyond_max_is_a_warning() -> None:
    errors, warnings = run(_chain(MAX_FALLBACK_DEPTH))
    assert errors == [] and warnings == []
    errors, warnings = run(_chain(MAX_FALLBACK_DEPTH + 1))
    assert errors == []
    assert [(w.kind, w.path) for w in warnings] == [
        (FALLBACK_TOO_DEEP, f"providers.models.groq.p{MAX_FALLBACK_DEPTH}.fallback")
    ]


def test_fallback_depth_uses_shortest_distance_from_a_root() -> None:
    config = _chain(MAX_FALLBACK_DEPTH + 1)
    # a second agent starts halfway down the chain: every edge is now within reach
    config["agents"]["researcher"]["model_provider"] = "groq.p2"
    assert run(config)[1] == []


def test_mcp_bundle_naming_unknown_server_is_a_warning(config: dict[str, Any]) -> None:
    config["mcp_bundles"]["mb"]["servers"] = ["gh", "nope"]
    errors, warnings = run(config)
    assert errors == []
    assert [(w.kind, w.path) for w in warnings] == [
        (UNKNOWN_MCP_SERVER, "mcp_bundles.mb.servers[1]")
    ]


def test_non_portable_agent_and_skill_bundle_aliases_warn(config: dict[str, Any]) -> None:
    config["agents"]["con dé"] = {"model_provider": "openai.backup", "risk_profile": "careful"}
    config["skill_bundles"]["x" * 65] = {}
    errors, warnings = run(config)
    assert errors == []
    assert {(w.kind, w.path) for w in warnings} == {
        (NON_PORTABLE_ALIAS, 'agents."con dé"'),
        (NON_PORTABLE_ALIAS, "skill_bundles." + "x" * 65),
    }


# --- robustness ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "section",
    [
        "agents",
        "providers",
        "risk_profiles",
        "runtime_profiles",
        "skill_bundles",
        "mcp",
        "mcp_bundles",
    ],
)
@pytest.mark.parametrize("junk", [5, "x", [1, {"a": None}], True, 1.5])
def test_any_type_anywhere_gives_findings_not_exceptions(section: str, junk: Any) -> None:
    config = copy.deepcopy(base_config())
    config[section] = junk
    errors, _ = run(config)
    assert any(f.path == section for f in errors)


def test_messages_never_contain_secret_values(config: dict[str, Any]) -> None:
    # break every reference at once so every rule speaks
    config["agents"]["researcher"].update(
        model_provider="x", risk_profile="", delegates=["researcher"], channels=["a"]
    )
    config["mcp"]["servers"].append({"name": "GH", "transport": "http", "url": "ftp://x"})
    errors, warnings = run(config)
    text = "\n".join(f.line() for f in [*errors, *warnings])
    assert errors
    assert not any(secret in text for secret in BASE_SECRETS)


def test_validates_a_one_agent_fragment() -> None:
    fragment = {
        "agents": {"solo": {"model_provider": "ollama.local", "risk_profile": "r"}},
        "providers": {"models": {"ollama": {"local": {"uri": "http://127.0.0.1:11434"}}}},
        "risk_profiles": {"r": {}},
    }
    assert run(fragment) == ([], [])


def test_relative_install_root_compares_lexically() -> None:
    config = {"skill_bundles": {"a": {"directory": "shared/skills/a"}, "b": {}}}
    assert validate(config, Path("relative/install"))[0] == []


def test_mcp_tls_ca_cert_only_with_https_url(config: dict[str, Any]) -> None:
    web = config["mcp"]["servers"][1]
    web["tls_ca_cert_path"] = "/etc/ssl/ca.pem"
    assert run(config)[0] == []  # https://mcp.example.com
    web["url"] = "http://mcp.example.com"
    assert kinds_at(config, "mcp.servers.web.tls_ca_cert_path") == {INVALID_VALUE}
    config["mcp"]["servers"][0]["tls_ca_cert_path"] = "/etc/ssl/ca.pem"  # stdio: no url at all
    assert kinds_at(config, "mcp.servers.gh.tls_ca_cert_path") == {INVALID_VALUE}


def test_messages_never_echo_a_reference_value(config: dict[str, Any]) -> None:
    # a secret pasted into a reference field by mistake must not be printed back
    agent = config["agents"]["researcher"]
    agent.update(
        model_provider=f"anthropic.{CANARY}",
        tts_provider=f"elevenlabs.{CANARY}",
        risk_profile=CANARY,
        skill_bundles=[CANARY],
        channels=[f"slack.{CANARY}"],
        delegates=[CANARY, "writer", "writer"],
    )
    agent["workspace"]["read_memory_from"] = [CANARY]
    config["providers"]["models"]["openai"]["backup"]["fallback"] = [CANARY, f"groq.{CANARY}"]
    config["mcp_bundles"]["mb"]["servers"] = [CANARY]
    errors, warnings = run(config)
    assert len(errors) >= 8 and len(warnings) == 3
    assert not any(CANARY in f.message for f in [*errors, *warnings])
