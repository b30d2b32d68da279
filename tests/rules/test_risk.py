"""Risk flags (02 §6): one test per kind and per granting path, plus ordering and recomputation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bundler.bundle.closure import finish_plan, plan_closure
from bundler.bundle.manifest import render_config
from bundler.rules import schema
from bundler.rules.risk import (
    KINDS,
    RiskFlag,
    compute_risk_flags,
    default_auto_approve,
    effective_auto_approve,
)
from bundler.rules.tomlcompat import loads


def fragment(**tables: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "agents": {"a": {"model_provider": "anthropic.main", "risk_profile": "p"}}
    }
    out.update(tables)
    return out


def flags(frag: dict[str, Any], skills: tuple[str, ...] = (), version: int = 1) -> list[RiskFlag]:
    return compute_risk_flags(frag, list(skills), version, "a")


def pairs(frag: dict[str, Any], **kwargs: Any) -> set[tuple[str, str]]:
    return {(f.kind, f.path) for f in flags(frag, **kwargs)}


def profile(**values: Any) -> dict[str, Any]:
    return fragment(risk_profiles={"p": values})


def test_safe_fragment_has_no_flags() -> None:
    assert flags(profile(level="supervised", workspace_only=True, sandbox_enabled=True)) == []


def test_full_autonomy_and_filesystem_escape_from_level_full() -> None:
    assert pairs(profile(level="full")) == {
        ("full_autonomy", "risk_profiles.p.level"),
        ("filesystem_escape", "risk_profiles.p.level"),
    }


def test_filesystem_escape_from_workspace_only_false() -> None:
    assert pairs(profile(workspace_only=False)) == {
        ("filesystem_escape", "risk_profiles.p.workspace_only")
    }


def test_filesystem_escape_from_unrestricted_filesystem() -> None:
    frag = fragment()
    frag["agents"]["a"]["workspace"] = {"unrestricted_filesystem": True}
    assert pairs(frag) == {("filesystem_escape", "agents.a.workspace.unrestricted_filesystem")}


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"sandbox_enabled": False}, "risk_profiles.p.sandbox_enabled"),
        ({"sandbox_backend": "none"}, "risk_profiles.p.sandbox_backend"),
        ({"firejail_args": ["--noprofile"]}, "risk_profiles.p.firejail_args"),
    ],
)
def test_sandbox_disabled(values: dict[str, Any], path: str) -> None:
    assert pairs(profile(**values)) == {("sandbox_disabled", path)}


def test_default_sandbox_settings_raise_nothing() -> None:
    assert flags(profile(sandbox_backend="", firejail_args=[])) == []


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"block_high_risk_commands": False}, "risk_profiles.p.block_high_risk_commands"),
        (
            {"require_approval_for_medium_risk": False},
            "risk_profiles.p.require_approval_for_medium_risk",
        ),
        ({"auto_approve": ["shell"]}, "risk_profiles.p.auto_approve"),  # not a default tool
    ],
)
def test_approval_bypass(values: dict[str, Any], path: str) -> None:
    assert pairs(profile(**values)) == {("approval_bypass", path)}


def test_command_allowlist_lists_the_commands() -> None:
    (flag,) = flags(profile(allowed_commands=["git", "make"]))
    assert (flag.kind, flag.path) == ("command_allowlist", "risk_profiles.p.allowed_commands")
    assert "git, make" in flag.detail


def test_env_passthrough_lists_the_names() -> None:
    (flag,) = flags(profile(shell_env_passthrough=["PATH", "HOME"]))
    assert (flag.kind, flag.path) == ("env_passthrough", "risk_profiles.p.shell_env_passthrough")
    assert "PATH, HOME" in flag.detail


def test_extra_filesystem_roots_lists_them() -> None:
    (flag,) = flags(profile(allowed_roots=["/data", "/srv"]))
    assert (flag.kind, flag.path) == ("extra_filesystem_roots", "risk_profiles.p.allowed_roots")
    assert "/data, /srv" in flag.detail


def test_delegation_enabled() -> None:
    assert pairs(profile(delegation_policy={"mode": "allow"})) == {
        ("delegation_enabled", "risk_profiles.p.delegation_policy.mode")
    }
    assert flags(profile(delegation_policy={"mode": "forbidden"})) == []


def test_process_spawn_repeats_command_and_args_verbatim() -> None:
    frag = fragment(
        mcp={
            "servers": [
                {
                    "name": "github",
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-github", "--flag=a b"],
                }
            ]
        }
    )
    (flag,) = flags(frag)
    assert flag == RiskFlag(
        "process_spawn",
        "mcp.servers.github.command",
        "starts a local process on the target host: "
        "npx -y @modelcontextprotocol/server-github --flag=a b",
    )


def test_process_spawn_for_explicit_stdio_and_odd_server_name() -> None:
    frag = fragment(
        mcp={"servers": [{"name": "my server.v2", "transport": "stdio", "command": "run"}]}
    )
    assert pairs(frag) == {("process_spawn", 'mcp.servers."my server.v2".command')}


def test_remote_tools_for_http_and_sse_servers() -> None:
    frag = fragment(
        mcp={
            "servers": [
                {"name": "web", "transport": "http", "url": "https://tools.example/mcp"},
                {"name": "events", "transport": "sse", "url": "https://sse.example/"},
            ]
        }
    )
    got = flags(frag)
    assert [(f.kind, f.path) for f in got] == [
        ("remote_tools", "mcp.servers.events.url"),
        ("remote_tools", "mcp.servers.web.url"),
    ]
    assert "https://tools.example/mcp" in got[1].detail


def test_untrusted_startup_context_for_pinned_resources() -> None:
    frag = fragment(
        mcp={"servers": [{"name": "s", "command": "x", "pinned_resources": ["file:///notes.md"]}]}
    )
    assert ("untrusted_startup_context", "mcp.servers.s.pinned_resources") in pairs(frag)


def test_custom_endpoint_for_each_provider_with_uri() -> None:
    frag = fragment(
        providers={
            "models": {"openai": {"proxy": {"uri": "https://proxy.example/v1"}}},
            "tts": {"openai": {"speech": {"uri": "https://tts.example"}}},
        }
    )
    got = {f.path: f for f in flags(frag)}
    assert got["providers.models.openai.proxy.uri"].kind == "custom_endpoint"
    assert "https://proxy.example/v1" in got["providers.models.openai.proxy.uri"].detail
    assert got["providers.tts.openai.speech.uri"].kind == "custom_endpoint"


def test_binary_path_is_process_spawn_and_host_path() -> None:
    frag = fragment(
        providers={"models": {"gemini_cli": {"g": {"binary_path": "/usr/local/bin/gemini"}}}}
    )
    assert pairs(frag) == {
        ("host_path", "providers.models.gemini_cli.g.binary_path"),
        ("process_spawn", "providers.models.gemini_cli.g.binary_path"),
    }


def test_host_path_for_tls_ca_cert_paths() -> None:
    frag = fragment(
        providers={"models": {"openai": {"o": {"tls_ca_cert_path": "/etc/ca.pem"}}}},
        mcp={
            "servers": [
                {
                    "name": "web",
                    "transport": "http",
                    "url": "https://x",
                    "tls_ca_cert_path": "/etc/mcp-ca.pem",
                }
            ]
        },
    )
    got = pairs(frag)
    assert ("host_path", "providers.models.openai.o.tls_ca_cert_path") in got
    assert ("host_path", "mcp.servers.web.tls_ca_cert_path") in got


def test_host_path_for_local_knowledge_sources_only() -> None:
    frag = fragment(
        knowledge_bundles={
            "docs": {"sources": ["https://example.org/a", "/home/me/papers", "notes/local.md"]}
        }
    )
    assert pairs(frag) == {
        ("host_path", "knowledge_bundles.docs.sources[1]"),
        ("host_path", "knowledge_bundles.docs.sources[2]"),
    }


def test_external_auth_for_requires_openai_auth() -> None:
    # ZeroClaw has no openai_codex family: Codex auth is this flag on an openai entry
    frag = fragment(providers={"models": {"openai": {"c": {"requires_openai_auth": True}}}})
    assert pairs(frag) == {("external_auth", "providers.models.openai.c.requires_openai_auth")}


def test_carried_skills_one_per_bundle_that_travelled() -> None:
    frag = fragment(skill_bundles={"tools": {}, "empty": {}})
    assert pairs(frag, skills=("tools",)) == {("carried_skills", "skill_bundles.tools")}


def test_carried_memory_only_in_format_2() -> None:
    assert pairs(fragment(), version=2) == {("carried_memory", "agents.a.memory")}
    assert flags(fragment(), version=1) == []


def test_flags_sorted_by_path_then_kind_one_per_path_and_kind() -> None:
    frag = fragment(
        risk_profiles={"p": {"level": "full", "workspace_only": False, "allowed_commands": ["ls"]}},
        mcp={"servers": [{"name": "z", "command": "z"}, {"name": "a", "command": "a"}]},
    )
    got = flags(frag, skills=("s",), version=2)
    keys = [(f.path, f.kind) for f in got]
    assert keys == sorted(keys) and len(keys) == len(set(keys))
    assert {f.kind for f in got} <= set(KINDS)


def test_hostile_types_raise_nothing_and_do_not_crash() -> None:
    frag: dict[str, Any] = {
        "agents": {"a": "x"},
        "risk_profiles": {"p": ["level"]},
        "mcp": {"servers": "nope"},
        "providers": {"models": {"openai": {"o": 3}}},
        "knowledge_bundles": {"k": {"sources": "x"}},
    }
    assert flags(frag) == []


def test_export_flags_equal_flags_recomputed_from_the_rendered_fragment() -> None:
    config: dict[str, Any] = {
        "agents": {
            "a": {
                "model_provider": "gemini_cli.g",
                "risk_profile": "p",
                "mcp_bundles": ["m"],
                "skill_bundles": ["s"],
                "workspace": {"unrestricted_filesystem": True},
            }
        },
        "providers": {
            "models": {
                "gemini_cli": {"g": {"binary_path": "/usr/bin/gemini", "uri": "https://g.example"}}
            }
        },
        "risk_profiles": {
            "p": {
                "level": "full",
                "auto_approve": ["x"],
                "approval_route": {"on_no_approver": "deny"},
            }
        },
        "skill_bundles": {"s": {}},
        "mcp_bundles": {"m": {"servers": ["gh"]}},
        "mcp": {
            "servers": [
                {
                    "name": "gh",
                    "command": "npx",
                    "args": ["-y", "gh"],
                    "pinned_resources": ["r://x"],
                }
            ]
        },
    }
    plan = plan_closure(config, "a", Path("/srv/i"))
    finished = finish_plan(plan, ["s"], True, [], 1)
    reparsed = loads(render_config(finished.fragment).decode())
    assert compute_risk_flags(reparsed, ["s"], 1, "a") == finished.risk_flags
    assert {f.kind for f in finished.risk_flags} >= {
        "full_autonomy",
        "filesystem_escape",
        "approval_bypass",
        "process_spawn",
        "host_path",
        "custom_endpoint",
        "untrusted_startup_context",
        "carried_skills",
    }


# --- auto_approve by its meaning (02 §6.1) -----------------------------------------------------

DEFAULTS = schema.default_of(schema.resolve(["risk_profiles", "*", "auto_approve"])[1])


def test_default_auto_approve_is_zeroclaws_twelve_from_the_generated_schema() -> None:
    facts = Path(__file__).resolve().parents[1] / "fixtures" / "zeroclaw" / "config-facts.json"
    assert (
        default_auto_approve() == DEFAULTS == json.loads(facts.read_text())["default_auto_approve"]
    )
    assert len(DEFAULTS) == 12 and {"file_read", "browser_open", "tool_search"} <= set(DEFAULTS)


@pytest.mark.parametrize(
    "listed",
    [
        ["file_read", "memory_recall", "calculator"],  # narrowed: fewer than the defaults
        [],  # none at all
        DEFAULTS,  # the defaults written out
    ],
)
def test_auto_approve_within_the_defaults_grants_no_approval_bypass(listed: list[str]) -> None:
    assert flags(profile(auto_approve=listed)) == []


def test_an_absent_auto_approve_is_the_defaults_and_grants_nothing() -> None:
    assert effective_auto_approve("p", {}) == DEFAULTS
    assert flags(profile(level="supervised")) == []


def test_only_names_outside_the_defaults_are_a_bypass_and_the_detail_names_them() -> None:
    (flag,) = flags(profile(auto_approve=["file_read", "shell", "file_write"]))
    assert (flag.kind, flag.path) == ("approval_bypass", "risk_profiles.p.auto_approve")
    assert flag.detail.endswith(": shell, file_write")
    assert "file_read" not in flag.detail


def test_the_default_profile_gets_the_defaults_merged_into_its_list() -> None:
    """ensure_default_auto_approve: only a profile named ``default``."""
    assert effective_auto_approve("default", {"auto_approve": ["shell"]}) == ["shell", *DEFAULTS]
    assert effective_auto_approve("other", {"auto_approve": ["shell"]}) == ["shell"]


def test_always_ask_takes_precedence_over_both() -> None:
    assert "weather" not in effective_auto_approve("default", {"always_ask": ["weather"]})
    assert (
        flags(fragment(risk_profiles={"p": {"auto_approve": ["shell"], "always_ask": ["shell"]}}))
        == []
    )
