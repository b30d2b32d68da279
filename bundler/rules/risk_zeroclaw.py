"""ZeroClaw's risk rules (02 §6.2), pure: the flags ZeroClaw's own exporter raises for a closure.

A bundle is held to the rules of the exporter that wrote it. ZeroClaw's exporter
(``collect_risk_flags``, agent_bundle.rs:653-775 of the pull request's copy, as its later revision
amends them) looks at fewer places than bundler's rule set (:mod:`bundler.rules.risk`): the root
agent's own risk profile, the agent's workspace, the carried MCP servers and the carried skill
bundles. A manifest ZeroClaw wrote lies only when it omits one of *these*; what bundler finds
beyond them is shown beside them and put to the operator, never held against the bundle.

Values are read as ZeroClaw reads its config: a key the fragment leaves out (ZeroClaw prunes
defaults) takes the schema's default. The ``detail`` wording is ZeroClaw's in substance; details
are never compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bundler.rules import schema
from bundler.rules.config_view import array, strings, table
from bundler.rules.credentials import mask_credentials
from bundler.rules.paths import format_path
from bundler.rules.risk import (
    APPROVAL_BYPASS,
    CARRIED_SKILLS,
    DELEGATION_ENABLED,
    ENV_PASSTHROUGH,
    EXTRA_FILESYSTEM_ROOTS,
    FILESYSTEM_ESCAPE,
    FULL_AUTONOMY,
    PROCESS_SPAWN,
    SANDBOX_DISABLED,
    UNTRUSTED_STARTUP_CONTEXT,
    RiskFlag,
    risk_sort_key,
)

__all__ = ["zeroclaw_risk_flags"]


def _setting(profile: Mapping[str, Any], key: str) -> Any:
    """``profile[key]``, or the schema's default where the fragment leaves it out."""
    if key in profile:
        return profile[key]
    return schema.default_of(schema.resolve(["risk_profiles", "*", key])[1])


def _profile_flags(alias: str, profile: Mapping[str, Any], out: list[RiskFlag]) -> None:
    """``collect_risk_flags`` over the root agent's risk profile (agent_bundle.rs:672-741)."""

    def add(kind: str, leaf: str, detail: str) -> None:
        out.append(RiskFlag(kind, format_path(["risk_profiles", alias, *leaf.split(".")]), detail))

    full = _setting(profile, "level") == "full"
    if full:  # :676
        add(FULL_AUTONOMY, "level", "the agent acts autonomously within policy bounds")
    # the later revision reads the effective policy (policy.rs:3397-3404): full autonomy turns
    # workspace_only off, and the flag is then bound to the level that did it
    if full:
        add(FILESYSTEM_ESCAPE, "level", "filesystem access is not confined to the workspace")
    elif _setting(profile, "workspace_only") is False:  # :685
        add(FILESYSTEM_ESCAPE, "workspace_only", "filesystem access is not confined")
    if profile.get("sandbox_enabled") is False:  # :692, an Option: only an explicit false
        add(SANDBOX_DISABLED, "sandbox_enabled", "shell execution runs unsandboxed on the host")
    if _setting(profile, "block_high_risk_commands") is False:  # :699
        add(APPROVAL_BYPASS, "block_high_risk_commands", "high-risk commands are not blocked")
    if _setting(profile, "require_approval_for_medium_risk") is False:  # :706
        add(
            APPROVAL_BYPASS,
            "require_approval_for_medium_risk",
            "medium-risk operations run without an approval prompt",
        )
    passthrough = strings(_setting(profile, "shell_env_passthrough"))
    if passthrough:  # :713
        add(
            ENV_PASSTHROUGH,
            "shell_env_passthrough",
            "host environment variables are forwarded into shell subprocesses: "
            + ", ".join(passthrough),
        )
    roots = strings(_setting(profile, "allowed_roots"))
    if roots:  # :723
        add(
            EXTRA_FILESYSTEM_ROOTS,
            "allowed_roots",
            "extra filesystem roots are granted beyond the workspace: " + ", ".join(roots),
        )
    if table(profile.get("delegation_policy")).get("mode") == "allow":  # :733, permits()
        add(
            DELEGATION_ENABLED,
            "delegation_policy.mode",
            "the agent may initiate delegation to other agents on the target install",
        )


def _server_flags(server: Mapping[str, Any], out: list[RiskFlag]) -> None:
    """``collect_risk_flags`` over one carried MCP server (agent_bundle.rs:751-772)."""
    name = server.get("name")
    if not isinstance(name, str):
        return
    if server.get("transport", "stdio") == "stdio":
        command = server.get("command")
        words = [command if isinstance(command, str) else "", *strings(server.get("args"))]
        out.append(
            RiskFlag(
                PROCESS_SPAWN,
                format_path(["mcp", "servers", name, "command"]),
                f"starts a local process on the target host: {' '.join(words)}",
            )
        )
    resources = strings(server.get("pinned_resources"))
    if resources:
        out.append(
            RiskFlag(
                UNTRUSTED_STARTUP_CONTEXT,
                format_path(["mcp", "servers", name, "pinned_resources"]),
                "server-controlled text is read into the system prompt at startup: "
                + ", ".join(resources),
            )
        )


def zeroclaw_risk_flags(
    fragment: Mapping[str, Any], carried_skill_bundles: Sequence[str], root_agent: str
) -> list[RiskFlag]:
    """The flags ZeroClaw's exporter raises for ``fragment``, sorted by path then kind.

    ``carried_skill_bundles`` are the skill bundles whose content the bundle holds
    (agent_bundle.rs:662-670); only the root agent's own risk profile counts (672-673), then its
    ``unrestricted_filesystem`` (743-749) and every carried MCP server (751-772). Never assumes
    the fragment is well formed: a value of the wrong type grants nothing here.
    """
    out: list[RiskFlag] = []
    for bundle in carried_skill_bundles:
        out.append(
            RiskFlag(
                CARRIED_SKILLS,
                format_path(["skill_bundles", bundle]),
                "the bundle carries this skill bundle's content from the exporting install",
            )
        )
    agent = table(table(fragment.get("agents")).get(root_agent))
    profile_alias = agent.get("risk_profile")
    if isinstance(profile_alias, str):
        profile = table(fragment.get("risk_profiles")).get(profile_alias.strip())
        if isinstance(profile, Mapping):
            _profile_flags(profile_alias.strip(), profile, out)
    if table(agent.get("workspace")).get("unrestricted_filesystem") is True:
        out.append(
            RiskFlag(
                FILESYSTEM_ESCAPE,
                format_path(["agents", root_agent, "workspace", "unrestricted_filesystem"]),
                "the agent can read and write anywhere the host filesystem permits",
            )
        )
    servers = table(fragment.get("mcp")).get("servers")
    for server in array(servers):
        if isinstance(server, Mapping):
            _server_flags(server, out)
    unique: dict[tuple[str, str], RiskFlag] = {}
    for flag in out:
        # shown beside bundler's flags: a detail never names a web address's credentials
        masked = RiskFlag(flag.kind, flag.path, mask_credentials(flag.detail))
        unique.setdefault((flag.path, flag.kind), masked)
    return sorted(unique.values(), key=risk_sort_key)
