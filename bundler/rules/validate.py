"""Validation of a config (01 §5): ``validate(config, install_root) -> (errors, warnings)``.

Pure: it reads the config dict and the schema, never the file system, so it runs the same on a
whole install, on a one-agent closure and on a fragment read from a hostile bundle. It never
raises on a malformed config (any value may have any type); every problem is a :class:`Finding`
naming the config path. Messages name the path and what was expected, never the value found:
values may be secrets, and validators that quote them (jsonschema does) are rewritten.

Rule 1 (JSON Schema) is :mod:`bundler.rules.schemacheck`; the findings and their kinds are
:mod:`bundler.rules.findings`; the fallback graph algorithms are
:mod:`bundler.rules.fallbackgraph`. This module holds rules 2-5 and the warnings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bundler.rules import layout, refs, schema
from bundler.rules.config_view import array, table
from bundler.rules.fallbackgraph import shortest_depths, strong_components

# the finding vocabulary and the schema checker live in their own modules; their names stay
# importable from here, where callers have always found them
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
    describe,
)
from bundler.rules.names import (
    PORTABLE_ALIAS_RE,
    is_portable_alias,
    non_portable_alias_reason,
    non_portable_skill_alias_reason,
)
from bundler.rules.paths import Segment, format_path
from bundler.rules.schemacheck import check_value, schema_findings

__all__ = [
    "DANGLING_REFERENCE",
    "FALLBACK_CYCLE",
    "FALLBACK_DANGLING",
    "FALLBACK_TOO_DEEP",
    "INVALID_FORMAT",
    "INVALID_VALUE",
    "MAX_FALLBACK_DEPTH",
    "NON_PORTABLE_ALIAS",
    "REQUIRED_FIELD_EMPTY",
    "UNKNOWN_MCP_SERVER",
    "Finding",
    "check_value",
    "describe",
    "schema_findings",
    "validate",
]

MAX_FALLBACK_DEPTH = 3

# backends whose stores keep no category per entry, so a category-restricted grant is unenforceable
_CATEGORYLESS_BACKENDS = frozenset({"markdown", "none"})


# --- helpers for a config whose every value may have any type ------------------------------


def _is_http_url(value: str) -> bool:
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return False
    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port_ok


class _Run:
    """One validation: collects findings, at most one error per config path."""

    def __init__(self, config: Mapping[str, Any], install_root: Path) -> None:
        self.config = config
        self.install_root = Path(os.path.abspath(install_root))
        self.errors: list[Finding] = []
        self.warnings: list[Finding] = []
        self._error_paths: set[str] = set()

    def error(self, kind: str, segments: Sequence[Segment], message: str) -> None:
        self.add_error(Finding(kind, format_path(segments), message))

    def add_error(self, finding: Finding) -> None:
        # the schema reports first; a rule that trips on the same path adds nothing new
        if finding.path not in self._error_paths:
            self._error_paths.add(finding.path)
            self.errors.append(finding)

    def warn(self, kind: str, segments: Sequence[Segment], message: str) -> None:
        self.warnings.append(Finding(kind, format_path(segments), message))

    # -- references ----------------------------------------------------------------------

    def provider_problem(self, category: str, ref: str) -> tuple[str, str] | None:
        """None when ``ref`` names an existing provider of ``category``, else (kind, message)."""
        parts = refs.split_provider_ref(ref)
        if parts is None:
            return INVALID_FORMAT, "must be <family>.<alias>"
        family, alias = parts
        if family not in refs.families(category):
            return INVALID_VALUE, f"names an unknown {category} provider family"
        providers = table(self.config.get("providers"))
        if alias not in table(table(providers.get(category)).get(family)):
            return DANGLING_REFERENCE, f"names no existing providers.{category} entry"
        return None

    def check_ref(self, ref: refs.Ref) -> None:
        value = ref.value
        if not isinstance(value, str):
            return  # the schema has reported the type
        target = ref.target
        if not value:
            # an empty scalar ref means "none" unless required; an empty list entry names nothing
            if ref.field.required:
                self.error(REQUIRED_FIELD_EMPTY, ref.path, f"is required (an entry of {target})")
            elif ref.position is not None:
                self.error(
                    DANGLING_REFERENCE, ref.path, f"is empty; must name an entry of {target}"
                )
            return
        if target.startswith("providers."):
            problem = self.provider_problem(target.split(".", 1)[1], value)
            if problem:
                self.error(problem[0], ref.path, problem[1])
        elif target == "channels":
            parts = refs.split_provider_ref(value)
            if parts is None:
                self.error(INVALID_FORMAT, ref.path, "must be <type>.<alias>")
            elif parts[1] not in table(table(self.config.get("channels")).get(parts[0])):
                self.error(DANGLING_REFERENCE, ref.path, "names no existing channels entry")
        elif value not in table(self.config.get(target)):
            self.error(DANGLING_REFERENCE, ref.path, f"names no existing {target} entry")

    def check_refs_of(self, kind: str, alias: str, entry: Mapping[str, Any]) -> None:
        for ref in refs.entry_refs(kind, alias, entry):
            self.check_ref(ref)

    # -- rule 2: agents -------------------------------------------------------------------

    def agents(self) -> None:
        agents = table(self.config.get("agents"))
        backend_default = schema.default_of(schema.resolve(["agents", "_", "memory", "backend"])[1])
        backends: dict[str, str | None] = {}
        for alias, entry in agents.items():
            # value_at answers None for anything but a table, an entry of the wrong type included
            backend = refs.value_at(entry, ("memory", "backend"))
            # a backend of the wrong type has its schema finding; here it matches nothing
            backends[alias] = (
                backend_default
                if backend is None
                else backend
                if isinstance(backend, str)
                else None
            )
        for alias, entry in agents.items():
            if not isinstance(entry, dict):
                continue
            self.check_refs_of("agents", alias, entry)
            enabled = entry.get("enabled", True)
            risk = entry.get("risk_profile", "")
            if enabled is not False and risk == "":
                self.error(
                    REQUIRED_FIELD_EMPTY,
                    ["agents", alias, "risk_profile"],
                    "is required when the agent is enabled",
                )
            self.delegates(agents, alias, entry)
            self.workspace_grants(agents, backends, alias, entry)
            if not is_portable_alias(alias):
                self.warn(NON_PORTABLE_ALIAS, ["agents", alias], _portable_message(alias))

    def delegates(self, agents: Mapping[str, Any], alias: str, entry: Mapping[str, Any]) -> None:
        seen: set[str] = set()
        for index, item in enumerate(array(entry.get("delegates"))):
            target = item.get("agent") if isinstance(item, dict) else item
            if not isinstance(target, str):
                continue
            segments = ["agents", alias, "delegates", str(index)]
            if target == alias:
                self.error(INVALID_VALUE, segments, "an agent cannot delegate to itself")
            elif target not in agents:
                self.error(DANGLING_REFERENCE, segments, "names no existing agents entry")
            elif target in seen:
                self.error(INVALID_VALUE, segments, "repeats an earlier delegate")
            seen.add(target)

    def workspace_grants(
        self,
        agents: Mapping[str, Any],
        backends: Mapping[str, Any],
        alias: str,
        entry: Mapping[str, Any],
    ) -> None:
        workspace = table(entry.get("workspace"))
        for target in table(workspace.get("access")):
            segments = ["agents", alias, "workspace", "access", target]
            if target == alias:
                self.error(INVALID_VALUE, segments, "an agent cannot grant access to itself")
            elif target not in agents:
                self.error(DANGLING_REFERENCE, segments, "is not an agent of this config")
        backend = backends.get(alias)
        for index, item in enumerate(array(workspace.get("read_memory_from"))):
            restricted = isinstance(item, dict)
            target = item.get("agent") if restricted else item
            if not isinstance(target, str):
                continue
            segments = ["agents", alias, "workspace", "read_memory_from", str(index)]
            if target == alias:
                self.error(
                    INVALID_VALUE, segments, "an agent cannot read its own memory through a grant"
                )
            elif target not in agents:
                self.error(DANGLING_REFERENCE, segments, "names no existing agents entry")
            elif backends.get(target) != backend:
                self.error(
                    INVALID_VALUE,
                    segments,
                    "the agent it names uses another memory backend than this agent",
                )
            elif restricted and backend in _CATEGORYLESS_BACKENDS:
                self.error(
                    INVALID_VALUE,
                    segments,
                    "a category-restricted entry needs a backend that records categories, "
                    f"not {backend}",
                )

    # -- rule 3: runtime profiles -----------------------------------------------------------

    def runtime_profiles(self) -> None:
        for alias, entry in table(self.config.get("runtime_profiles")).items():
            if isinstance(entry, dict):
                self.check_refs_of("runtime_profiles", alias, entry)

    # -- rule 4: skill bundles ----------------------------------------------------------------

    def skill_bundles(self) -> None:
        shared = layout.shared_dir(self.install_root)
        owners: dict[str, str] = {}
        for alias, entry in table(self.config.get("skill_bundles")).items():
            skill_problem = non_portable_skill_alias_reason(alias)
            if skill_problem is not None:
                self.warn(
                    NON_PORTABLE_ALIAS,
                    ["skill_bundles", alias],
                    _portable_skill_message(skill_problem),
                )
            if not isinstance(entry, dict):
                continue
            directory = entry.get("directory")
            segments = ["skill_bundles", alias] + (
                ["directory"] if isinstance(directory, str) and directory else []
            )
            folder = layout.normalise(
                layout.skill_bundle_dir(self.config, alias, self.install_root)
            )
            if not layout.lexically_inside(folder, shared, strict=True):
                self.error(
                    INVALID_VALUE,
                    segments,
                    "the bundle folder must lie inside <install>/shared/ (after .. normalisation)",
                )
                continue
            first = owners.setdefault(folder, alias)
            if first != alias:
                self.error(
                    INVALID_VALUE,
                    segments,
                    f"resolves to the same folder as skill_bundles.{format_path([first])}",
                )

    # -- rule 5: MCP ----------------------------------------------------------------------------

    def mcp(self) -> None:
        mcp = table(self.config.get("mcp"))
        servers = array(mcp.get("servers"))
        names = {
            entry.get("name")
            for entry in servers
            if isinstance(entry, dict) and isinstance(entry.get("name"), str)
        }
        for bundle, entry in table(self.config.get("mcp_bundles")).items():
            for index, name in enumerate(array(table(entry).get("servers"))):
                if isinstance(name, str) and name not in names:
                    self.warn(
                        UNKNOWN_MCP_SERVER,
                        ["mcp_bundles", bundle, "servers", str(index)],
                        "names no mcp.servers entry; it grants nothing",
                    )
        if mcp.get("enabled", True) is False:
            return
        first_of: dict[str, tuple[int, str]] = {}
        for index, server in enumerate(servers):
            if not isinstance(server, dict):
                continue
            name = server.get("name")
            if not isinstance(name, str):
                continue  # absent or of the wrong type: the schema reported it
            if not name:
                self.error(
                    REQUIRED_FIELD_EMPTY,
                    ["mcp", "servers", index, "name"],
                    "must not be empty",
                )
                continue
            base = ["mcp", "servers", name]
            first_index, first = first_of.setdefault(name.casefold(), (index, name))
            if first_index != index:
                self.error(
                    INVALID_VALUE,
                    [*base, "name"],
                    f"server {index} repeats the name of server {first_index} "
                    f"({format_path([first])}); names are unique ignoring case",
                )
            transport = server.get("transport", "stdio")
            if transport == "stdio":
                command = server.get("command", "")
                if isinstance(command, str) and not command.strip():
                    self.error(
                        REQUIRED_FIELD_EMPTY, [*base, "command"], "is required for a stdio server"
                    )
            elif transport in ("http", "sse"):
                url = server.get("url", "")
                if isinstance(url, str) and not url:
                    self.error(
                        REQUIRED_FIELD_EMPTY,
                        [*base, "url"],
                        f"is required for an {transport} server",
                    )
                elif isinstance(url, str) and not _is_http_url(url):
                    self.error(INVALID_FORMAT, [*base, "url"], "must be an http(s) URL with a host")
            # a CA certificate pins TLS, which only an https url uses (01 §3.6)
            ca_cert, url = server.get("tls_ca_cert_path"), server.get("url")
            https = isinstance(url, str) and url.lower().startswith("https://")
            if isinstance(ca_cert, str) and ca_cert and not https:
                self.error(
                    INVALID_VALUE,
                    [*base, "tls_ca_cert_path"],
                    "is allowed only with an https url",
                )

    # -- warnings: fallbacks --------------------------------------------------------------------

    def fallbacks(self) -> None:
        # the fallback graph: references between model providers (the graph refs.reach walks)
        kind = "providers.models"
        edges: dict[str, list[str]] = {}
        where: dict[str, list[str]] = {}
        fallback_refs: list[refs.Ref] = []
        for node, entry in refs.iter_entries(self.config, kind):
            edges[node] = []
            where[node] = [*refs.entry_segments(kind, node), "fallback"]
            fallback_refs += [r for r in refs.entry_refs(kind, node, entry) if r.target == kind]
        for ref in fallback_refs:
            if not isinstance(ref.value, str):
                continue
            if ref.value in edges and self.provider_problem("models", ref.value) is None:
                edges[ref.source[1]].append(ref.value)
            else:
                # addressed by index, as ZeroClaw writes it (fallback[0]): text that names no
                # provider is not echoed
                self.warnings.append(
                    Finding(
                        FALLBACK_DANGLING,
                        format_path(ref.path),
                        "names no existing model provider; the runtime skips it",
                    )
                )
        component = strong_components(edges)
        roots = self.model_roots()
        depth = shortest_depths(edges, roots)
        for node, targets in edges.items():
            for target in targets:
                if component[node] == component[target]:
                    self.warn(
                        FALLBACK_CYCLE,
                        where[node],
                        f"fallback {target} is on a cycle back to {node}; "
                        "the runtime skips the edge closing it",
                    )
                elif depth.get(node, -1) >= MAX_FALLBACK_DEPTH:
                    self.warn(
                        FALLBACK_TOO_DEEP,
                        where[node],
                        f"fallback {target} is deeper than MAX_FALLBACK_DEPTH = "
                        f"{MAX_FALLBACK_DEPTH} and is never tried",
                    )

    def model_roots(self) -> list[str]:
        """The model providers agents and runtime profiles name directly: fallback depth 0."""
        roots: list[str] = []
        fields = {
            kind: [
                f for f in refs.ref_fields(kind) if f.target == "providers.models" and not f.is_list
            ]
            for kind in ("agents", "runtime_profiles")
        }
        for kind in ("agents", "runtime_profiles"):
            for entry in table(self.config.get(kind)).values():
                for field in fields[kind]:
                    ref = refs.value_at(table(entry), field.segments)
                    if isinstance(ref, str) and ref:
                        roots.append(ref)
        return roots


def _portable_message(alias: str) -> str:
    # the reason, not only the pattern: "con" matches the pattern and is still refused
    reason = non_portable_alias_reason(alias) or f"must match {PORTABLE_ALIAS_RE.pattern}"
    return (
        f"is not a portable alias ({reason}); an export of this agent warns, and bundle verify "
        "and import refuse its bundle: rename the agent"
    )


def _portable_skill_message(reason: str) -> str:
    # 01 §3: such an alias is no folder name its skills could travel under, and nothing more
    return (
        f"is not a portable folder name ({reason}); an export keeps the entry but carries none "
        "of its skills (reported host_specific), and an import adds the entry without them: "
        "rename it for its skills to travel"
    )


def validate(config: Mapping[str, Any], install_root: Path) -> tuple[list[Finding], list[Finding]]:
    """Every rule of 01 §5: ``(errors, warnings)``, each a :class:`Finding` with a config path.

    Errors: JSON Schema (types, enums, ranges), references of agents and runtime profiles, the
    risk profile of an enabled agent, delegates and workspace grants, skill bundle folders
    (inside ``<install>/shared/``, one bundle per folder) and, when MCP is enabled, MCP servers.
    Warnings: fallback edges that dangle, form a cycle or go deeper than ``MAX_FALLBACK_DEPTH``;
    MCP bundles naming unknown servers; non-portable agent and skill bundle aliases.
    """
    run = _Run(config, install_root)
    for finding in schema_findings(config):
        run.add_error(finding)
    if not isinstance(config, dict):
        return run.errors, run.warnings
    run.agents()
    run.runtime_profiles()
    run.skill_bundles()
    run.mcp()
    run.fallbacks()
    return run.errors, run.warnings
