"""Risk flags (02 §6), pure: bundler's rule set, what a fragment lets an agent do on a host.

One function, :func:`compute_risk_flags`, serves export (flags written to the manifest) and
verify/import (flags recomputed from an untrusted bundle's ``config.toml``), so the two can only
disagree when the bundle was altered. ZeroClaw's own exporter follows a narrower rule set,
:mod:`bundler.rules.risk_zeroclaw`; a bundle it wrote is held to that one (02 §6.2). It reads
only the fragment and the list of skill bundles whose content is present, and never assumes the
fragment is well formed: a value of the wrong type is treated as if it granted nothing here, and
the fragment checks reject it elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bundler.rules import schema
from bundler.rules.config_view import array, array_of_tables, strings, table
from bundler.rules.credentials import mask_credentials
from bundler.rules.paths import format_path

FULL_AUTONOMY = "full_autonomy"
FILESYSTEM_ESCAPE = "filesystem_escape"
SANDBOX_DISABLED = "sandbox_disabled"
APPROVAL_BYPASS = "approval_bypass"
COMMAND_ALLOWLIST = "command_allowlist"
ENV_PASSTHROUGH = "env_passthrough"
EXTRA_FILESYSTEM_ROOTS = "extra_filesystem_roots"
DELEGATION_ENABLED = "delegation_enabled"
PROCESS_SPAWN = "process_spawn"
REMOTE_TOOLS = "remote_tools"
CUSTOM_ENDPOINT = "custom_endpoint"
UNTRUSTED_STARTUP_CONTEXT = "untrusted_startup_context"
HOST_PATH = "host_path"
EXTERNAL_AUTH = "external_auth"
CARRIED_SKILLS = "carried_skills"
CARRIED_MEMORY = "carried_memory"

KINDS = (
    FULL_AUTONOMY,
    FILESYSTEM_ESCAPE,
    SANDBOX_DISABLED,
    APPROVAL_BYPASS,
    COMMAND_ALLOWLIST,
    ENV_PASSTHROUGH,
    EXTRA_FILESYSTEM_ROOTS,
    DELEGATION_ENABLED,
    PROCESS_SPAWN,
    REMOTE_TOOLS,
    CUSTOM_ENDPOINT,
    UNTRUSTED_STARTUP_CONTEXT,
    HOST_PATH,
    EXTERNAL_AUTH,
    CARRIED_SKILLS,
    CARRIED_MEMORY,
)

_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class RiskFlag:
    """A capability that widens the receiving install's trust boundary, and the path granting it."""

    kind: str
    path: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        """The ``{kind, path, detail}`` table of the manifest's ``[[risk_flags]]``."""
        return {"kind": self.kind, "path": self.path, "detail": self.detail}


def risk_sort_key(flag: RiskFlag) -> tuple[str, str]:
    """Risk flags are sorted by path, then kind (02 §6)."""
    return (flag.path, flag.kind)


def _nonempty(value: object) -> bool:
    return isinstance(value, list) and len(value) > 0


def _listing(value: object) -> str:
    return ", ".join(strings(value))


def _host_path(path: str, value: str) -> RiskFlag:
    """The ``host_path`` flag: one wording for every field that names a file of this host."""
    return RiskFlag(HOST_PATH, path, f"names a file of the exporting host: {value}")


def default_auto_approve() -> list[str]:
    """ZeroClaw's ``default_auto_approve()``: the tools every profile approves unless it says
    otherwise, read from the generated schema's default (never kept by hand)."""
    node = schema.resolve(["risk_profiles", "*", "auto_approve"])[1]
    return [str(name) for name in schema.default_of(node) or []]


# the one profile ZeroClaw merges the defaults back into at load (ensure_default_auto_approve)
DEFAULT_PROFILE = "default"


def effective_auto_approve(alias: str, profile: Mapping[str, Any]) -> list[str]:
    """The tools profile ``alias`` approves without asking, as ZeroClaw computes them.

    An absent ``auto_approve`` is ``default_auto_approve()``; the profile named ``default`` gets
    the defaults merged into its list at load (``ensure_default_auto_approve``); ``always_ask``
    takes precedence over both. In the order ZeroClaw holds them.
    """
    defaults = default_auto_approve()
    listed = profile.get("auto_approve", defaults)
    names = strings(listed)
    if alias == DEFAULT_PROFILE:
        names += [name for name in defaults if name not in names]
    asked = set(strings(profile.get("always_ask")))
    return [name for name in dict.fromkeys(names) if name not in asked]


def auto_approve_beyond_defaults(alias: str, profile: Mapping[str, Any]) -> list[str]:
    """The effective auto-approved tools outside ``default_auto_approve()``: what a profile
    approves that a default install would ask about (the ``approval_bypass`` it grants)."""
    defaults = set(default_auto_approve())
    return [name for name in effective_auto_approve(alias, profile) if name not in defaults]


def _risk_profile_flags(alias: str, profile: Mapping[str, Any], out: list[RiskFlag]) -> None:
    def add(kind: str, key: str, detail: str) -> None:
        out.append(RiskFlag(kind, format_path(["risk_profiles", alias, *key.split("/")]), detail))

    if profile.get("level") == "full":
        add(FULL_AUTONOMY, "level", "the agent acts without asking (level = full)")
        add(
            FILESYSTEM_ESCAPE,
            "level",
            "level = full lets the agent reach files outside its workspace",
        )
    if profile.get("workspace_only") is False:
        add(
            FILESYSTEM_ESCAPE,
            "workspace_only",
            "the agent may reach files outside its workspace (workspace_only = false)",
        )
    if profile.get("sandbox_enabled") is False:
        add(
            SANDBOX_DISABLED,
            "sandbox_enabled",
            "commands run without a sandbox (sandbox_enabled = false)",
        )
    backend = profile.get("sandbox_backend")
    if isinstance(backend, str) and backend:
        add(SANDBOX_DISABLED, "sandbox_backend", f"a non-default sandbox backend: {backend}")
    if _nonempty(profile.get("firejail_args")):
        add(
            SANDBOX_DISABLED,
            "firejail_args",
            f"custom sandbox arguments: {' '.join(strings(profile.get('firejail_args')))}",
        )
    if profile.get("block_high_risk_commands") is False:
        add(APPROVAL_BYPASS, "block_high_risk_commands", "high-risk commands are not blocked")
    if profile.get("require_approval_for_medium_risk") is False:
        add(
            APPROVAL_BYPASS,
            "require_approval_for_medium_risk",
            "medium-risk commands run without approval",
        )
    beyond = auto_approve_beyond_defaults(alias, profile)
    if beyond:
        add(
            APPROVAL_BYPASS,
            "auto_approve",
            "approved without asking, beyond ZeroClaw's default tools: " + ", ".join(beyond),
        )
    if _nonempty(profile.get("allowed_commands")):
        add(
            COMMAND_ALLOWLIST,
            "allowed_commands",
            f"commands the agent may run: {_listing(profile.get('allowed_commands'))}",
        )
    if _nonempty(profile.get("shell_env_passthrough")):
        add(
            ENV_PASSTHROUGH,
            "shell_env_passthrough",
            "environment variables passed to commands: "
            + _listing(profile.get("shell_env_passthrough")),
        )
    if _nonempty(profile.get("allowed_roots")):
        add(
            EXTRA_FILESYSTEM_ROOTS,
            "allowed_roots",
            "folders outside the workspace the agent may use: "
            + _listing(profile.get("allowed_roots")),
        )
    if table(profile.get("delegation_policy")).get("mode") == "allow":
        add(
            DELEGATION_ENABLED,
            "delegation_policy/mode",
            "the agent may delegate work to other agents",
        )


def _server_flags(server: Mapping[str, Any], out: list[RiskFlag]) -> None:
    name = server.get("name")
    if not isinstance(name, str):
        return

    def path(key: str) -> str:
        return format_path(["mcp", "servers", name, key])

    transport = server.get("transport", "stdio")
    if transport == "stdio":
        command = server.get("command")
        words = [command if isinstance(command, str) else "", *strings(server.get("args"))]
        out.append(
            RiskFlag(
                PROCESS_SPAWN,
                path("command"),
                f"starts a local process on the target host: {' '.join(words)}",
            )
        )
    elif transport in ("http", "sse"):
        url = server.get("url")
        out.append(
            RiskFlag(
                REMOTE_TOOLS,
                path("url"),
                f"tools served from {url if isinstance(url, str) else ''}",
            )
        )
    if _nonempty(server.get("pinned_resources")):
        out.append(
            RiskFlag(
                UNTRUSTED_STARTUP_CONTEXT,
                path("pinned_resources"),
                f"read into the prompt at start: {_listing(server.get('pinned_resources'))}",
            )
        )
    cert = server.get("tls_ca_cert_path")
    if isinstance(cert, str) and cert:
        out.append(_host_path(path("tls_ca_cert_path"), cert))


def _provider_flags(
    category: str, family: str, alias: str, provider: Mapping[str, Any], out: list[RiskFlag]
) -> None:
    def path(key: str) -> str:
        return format_path(["providers", category, family, alias, key])

    uri = provider.get("uri")
    if isinstance(uri, str) and uri:
        out.append(
            RiskFlag(
                CUSTOM_ENDPOINT,
                path("uri"),
                f"the secret entered for this provider is sent to {uri}",
            )
        )
    binary = provider.get("binary_path")
    if isinstance(binary, str) and binary:
        out.append(
            RiskFlag(
                PROCESS_SPAWN,
                path("binary_path"),
                f"starts a local process on the target host: {binary}",
            )
        )
        out.append(_host_path(path("binary_path"), binary))
    cert = provider.get("tls_ca_cert_path")
    if isinstance(cert, str) and cert:
        out.append(_host_path(path("tls_ca_cert_path"), cert))
    # a CLI family's subprocess (grok_cli): where it runs, what it inherits, how it is started
    folder = provider.get("working_directory")
    if isinstance(folder, str) and folder:
        out.append(_host_path(path("working_directory"), folder))
    if _nonempty(provider.get("env_passthrough")):
        out.append(
            RiskFlag(
                ENV_PASSTHROUGH,
                path("env_passthrough"),
                "environment variables passed to the provider's subprocess: "
                + _listing(provider.get("env_passthrough")),
            )
        )
    if _nonempty(provider.get("extra_args")):
        out.append(
            RiskFlag(
                SANDBOX_DISABLED,
                path("extra_args"),
                "flags given to the provider's subprocess, which can relax ZeroClaw's sandbox "
                "defaults (--sandbox, --permission-mode): "
                + " ".join(strings(provider.get("extra_args"))),
            )
        )
    if provider.get("requires_openai_auth") is True:
        out.append(
            RiskFlag(
                EXTERNAL_AUTH,
                path("requires_openai_auth"),
                "uses the target host's own OpenAI auth store",
            )
        )


def compute_risk_flags(
    fragment: Mapping[str, Any],
    carried_skill_bundles: Sequence[str],
    format_version: int,
    root_agent: str,
) -> list[RiskFlag]:
    """Every risk flag of 02 §6 that ``fragment`` grants, sorted by path then kind.

    ``carried_skill_bundles`` are the skill bundles whose content is present in the bundle;
    ``format_version`` 2 adds ``carried_memory`` for ``root_agent``. One flag per granting path
    and kind; ``process_spawn`` repeats the server's ``command args…`` verbatim, except that in
    every detail the credentials of a web address are masked
    (:func:`bundler.rules.credentials.mask_credentials`).
    """
    out: list[RiskFlag] = []
    for alias, profile in table(fragment.get("risk_profiles")).items():
        if isinstance(profile, Mapping):
            _risk_profile_flags(str(alias), profile, out)
    for alias, agent in table(fragment.get("agents")).items():
        if (
            isinstance(agent, Mapping)
            and table(agent.get("workspace")).get("unrestricted_filesystem") is True
        ):
            out.append(
                RiskFlag(
                    FILESYSTEM_ESCAPE,
                    format_path(["agents", str(alias), "workspace", "unrestricted_filesystem"]),
                    "the agent may use the whole filesystem (unrestricted_filesystem = true)",
                )
            )
    for server in array_of_tables(table(fragment.get("mcp")).get("servers")):
        _server_flags(server, out)
    for category, families in table(fragment.get("providers")).items():
        for family, providers in table(families).items():
            for alias, provider in table(providers).items():
                if isinstance(provider, Mapping):
                    _provider_flags(str(category), str(family), str(alias), provider, out)
    for alias, bundle in table(fragment.get("knowledge_bundles")).items():
        for i, source in enumerate(array(table(bundle).get("sources"))):
            if isinstance(source, str) and source and not _URL_SCHEME.match(source):
                out.append(
                    _host_path(format_path(["knowledge_bundles", str(alias), "sources", i]), source)
                )
    for bundle in carried_skill_bundles:
        out.append(
            RiskFlag(
                CARRIED_SKILLS,
                format_path(["skill_bundles", bundle]),
                "skill files (scripts, references, assets) travel in the bundle "
                "and can run on the target",
            )
        )
    if format_version == 2:
        out.append(
            RiskFlag(
                CARRIED_MEMORY,
                format_path(["agents", root_agent, "memory"]),
                "the agent's memory store travels in the bundle",
            )
        )
    unique: dict[tuple[str, str], RiskFlag] = {}
    for flag in out:
        # a detail is shown to the operator and written to manifests and receipts: it names
        # where a request goes, never with which credential (a uri's password, a ?token=)
        masked = RiskFlag(flag.kind, flag.path, mask_credentials(flag.detail))
        unique.setdefault((flag.path, flag.kind), masked)
    return sorted(unique.values(), key=risk_sort_key)
