"""The closure of an agent (02 §2–§5), pure: what an export carries, drops, scrubs and proves.

:func:`plan_closure` reads the loaded config (overrides applied) and decides everything before
a byte is copied; :func:`finish_plan` folds in what the copy found (skills that travelled, the
identity document) and proves the result: the rendered fragment must validate alone.

Cost grows with the closure, not the config: every lookup is a dictionary access into the
config, and the one list (``mcp.servers``) is scanned once, stopping when every granted name
is found.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple

from bundler.bundle.manifest import Dropped, dropped_sort_key, render_config
from bundler.errors import InvalidInput, Refused
from bundler.rules import layout, schema
from bundler.rules.names import is_portable_alias, is_portable_skill_alias, safe_relative_path
from bundler.rules.paths import format_path
from bundler.rules.risk import RiskFlag, compute_risk_flags
from bundler.rules.secrets import find_ciphertext, scrub
from bundler.rules.tomlcompat import TOMLDecodeError, loads
from bundler.rules.validate import validate

Node = dict[str, Any]

MAX_FALLBACK_DEPTH = 3

HOST_SPECIFIC = "host_specific"
RELATIONAL = "relational"
DEFAULT_CLOSED = "default_closed"
PRIVATE_DATA = "private_data"
NOT_YET_PORTABLE = "not_yet_portable"
SOURCE_MISSING = "source_missing"
_UNKNOWN_KEY_DETAIL = "the schema does not describe this key, so it cannot be checked for secrets"

__all__ = [
    "Dropped",
    "ExportPlan",
    "FinishedClosure",
    "SkillSource",
    "finish_plan",
    "plan_closure",
    "prove_closure",
]

REASONS = (
    HOST_SPECIFIC,
    RELATIONAL,
    DEFAULT_CLOSED,
    PRIVATE_DATA,
    NOT_YET_PORTABLE,
    SOURCE_MISSING,
)

# agent field -> provider category its reference points into (01 §3.1)
AGENT_PROVIDER_FIELDS = (
    ("model_provider", "models"),
    ("classifier_provider", "models"),
    ("summary_provider", "models"),
    ("tts_provider", "tts"),
    ("transcription_provider", "transcription"),
)
_BUNDLE_KINDS = ("skill_bundles", "knowledge_bundles", "mcp_bundles")

# agent fields removed from every export: (field, reason, why)
_REMOVED_AGENT_FIELDS = (
    (
        "channels",
        HOST_SPECIFIC,
        "channels are bindings of this host; connect the agent to the target's own",
    ),
    ("delegates", RELATIONAL, "delegates name other agents of this install"),
    ("cron_jobs", NOT_YET_PORTABLE, "cron jobs are not carried yet"),
)
_REMOVED_RISK_FIELDS = (
    ("approval_route", HOST_SPECIFIC, "it names an approval channel of this host"),
)
_REMOVED_WORKSPACE_FIELDS = (
    ("path", HOST_SPECIFIC, "the workspace goes to the target's default location"),
    ("access", RELATIONAL, "grants name other agents of this install"),
    ("read_memory_from", RELATIONAL, "grants name other agents of this install"),
)


@dataclass(frozen=True)
class SkillSource:
    """A carried skill bundle whose content is to be copied to ``skills/<alias>/``.

    ``directory`` is the bundle folder, lexically normalised; ``inside_shared`` tells the copier
    to open it by walking each component from the install root (02 §7.2). Bundles whose folder
    lies outside ``<install>/shared/`` or whose alias is not portable are not listed: they were
    reported in ``dropped`` already.
    """

    alias: str
    directory: Path
    include: list[str]
    exclude: list[str]
    inside_shared: bool = True

    def wants(self, skill_name: str) -> bool:
        """True when the bundle's filter admits ``skill_name`` (exclude always wins)."""
        if skill_name in self.exclude:
            return False
        return not self.include or skill_name in self.include


@dataclass
class ExportPlan:
    """What an export of ``alias`` carries, decided from the config alone.

    ``fragment`` is already sanitised, pruned and scrubbed. ``identity_path`` is the normalised
    ``aieos_path`` (relative to the workspace) that must exist after the copy, or None.
    """

    alias: str
    fragment: Node
    required_secrets: list[str]
    dropped: list[Dropped]
    workspace: Path
    workspace_is_default: bool
    skill_sources: list[SkillSource]
    identity_path: str | None
    warnings: list[str] = field(default_factory=list)


class FinishedClosure(NamedTuple):
    """The final fragment, the ``dropped`` rows (sorted) and the risk flags (sorted)."""

    fragment: Node
    dropped: list[Dropped]
    risk_flags: list[RiskFlag]


# --- small helpers -----------------------------------------------------------------------------


def _table(value: Any) -> Mapping[str, Any]:
    # a wrong type anywhere means "not there"; validation of the closure reports it
    return value if isinstance(value, Mapping) else {}


def is_populated(value: Any) -> bool:
    """True when ``value`` says something: not absent, ``""``, ``[]``, ``{}`` or ``false``."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict)):
        return len(value) > 0
    return True


def _aliases(value: Any) -> list[str] | None:
    """A bundle list trimmed, de-duplicated, without empty names; None when it is not a list."""
    if not isinstance(value, list):
        return None
    out: list[str] = []
    seen: set[str] = set()
    for item in value:
        if not isinstance(item, str):
            return None
        name = item.strip()
        if name and name not in seen:
            seen.add(name)
            out.append(name)
    return out


def split_provider_ref(ref: Any) -> tuple[str, str] | None:
    """``"<family>.<alias>"`` as ``(family, alias)``; None when it is not that form."""
    if not isinstance(ref, str):
        return None
    family, dot, alias = ref.partition(".")
    if not dot or not family or not alias or "." in alias:
        return None
    return family, alias


def _same(value: Any, default: Any) -> bool:
    """Equal including type: ``1`` is not ``true`` and ``10.0`` is not ``10`` for pruning."""
    if type(value) is not type(default):
        return False
    if isinstance(value, dict):
        return value.keys() == default.keys() and all(_same(value[k], default[k]) for k in value)
    if isinstance(value, list):
        return len(value) == len(default) and all(
            _same(a, b) for a, b in zip(value, default, strict=True)
        )
    return bool(value == default)


def prune_defaults(entry: Node, node: Node | None) -> None:
    """Remove, in place and recursively, values equal to their schema default (02 §4).

    A sub-table left empty is removed too (its default is ``{}``); ``entry`` itself stays.
    """
    if node is None:
        return
    for key in list(entry):
        sub_node = schema.child(node, key)
        value = entry[key]
        if sub_node is None:
            continue
        if (
            isinstance(value, dict)
            and sub_node.get("type") == "object"
            and not sub_node.get("x-secret")
        ):
            prune_defaults(value, sub_node)
            if not value:
                del entry[key]
                continue
        if schema.has_default(sub_node) and _same(value, sub_node["default"]):
            del entry[key]


# --- the planner -------------------------------------------------------------------------------


class _Planner:
    """One planning run: the config, the fragment being built and the rows being collected."""

    def __init__(self, config: Mapping[str, Any], alias: str, install_root: Path) -> None:
        self.config = config
        self.alias = alias
        self.install_root = install_root
        self.root_schema = schema.config_schema()
        self.dropped: list[Dropped] = []
        self.warnings: list[str] = []
        self.fragment: Node = {}

    def drop(
        self, segments: Sequence[str], reason: str, detail: str, index: int | None = None
    ) -> None:
        path = format_path(segments)
        if index is not None:
            path = f"{path}[{index}]"
        self.dropped.append(Dropped(path, reason, detail))

    def node(self, *segments: str) -> Node | None:
        return schema.resolve(segments)[1]

    def remove_unknown(self, entry: Node, node: Node | None, segments: tuple[str, ...]) -> None:
        """Drop keys the schema does not describe, recursively, reporting populated ones."""
        if node is None:
            return
        for key in list(entry):
            sub_node = schema.child(node, key)
            if sub_node is None:
                value = entry.pop(key)
                if is_populated(value):
                    self.drop(
                        (*segments, key),
                        NOT_YET_PORTABLE,
                        _UNKNOWN_KEY_DETAIL,
                    )
            elif (
                isinstance(entry[key], dict)
                and sub_node.get("type") == "object"
                and not sub_node.get("x-secret")
            ):
                self.remove_unknown(entry[key], sub_node, (*segments, key))

    def carry(
        self,
        kind: str,
        alias: str,
        *,
        prune: bool,
        removed: Sequence[tuple[str, str, str]] = (),
    ) -> Node | None:
        """A copy of ``<kind>.<alias>`` without unknown keys (pruned unless told otherwise).

        ``removed`` lists ``(key, reason, why)`` of fields that never travel; they are taken
        out first, so nothing inside them is reported a second time as an unknown key.
        """
        source = _table(self.config.get(kind)).get(alias)
        if not isinstance(source, Mapping):
            return None
        entry = copy.deepcopy(dict(source))
        for key, reason, why in removed:
            if is_populated(entry.pop(key, None)):
                self.drop((kind, alias, key), reason, why)
        node = self.node(kind, alias)
        self.remove_unknown(entry, node, (kind, alias))
        if prune:
            prune_defaults(entry, node)
        self.fragment.setdefault(kind, {})[alias] = entry
        return entry

    # -- the agent (02 §3) --

    def agent(self) -> Node:
        source = _table(self.config.get("agents")).get(self.alias)
        if not isinstance(source, Mapping):
            raise Refused(
                f"unknown agent {format_path([self.alias])}: the config has no such agent",
                path=format_path(["agents", self.alias]),
            )
        entry = copy.deepcopy(dict(source))
        base = ("agents", self.alias)
        # removed fields first, so nothing inside them is reported a second time as unknown
        for name, reason, why in _REMOVED_AGENT_FIELDS:
            if is_populated(entry.pop(name, None)):
                self.drop((*base, name), reason, why)
        a2a = entry.pop("a2a", None)
        if isinstance(a2a, Mapping):
            a2a_open = is_populated(a2a.get("published")) or is_populated(a2a.get("exposed_skills"))
        else:
            a2a_open = is_populated(a2a)
        if a2a_open:
            self.drop(
                (*base, "a2a"),
                DEFAULT_CLOSED,
                "agent-to-agent publishing is off in a bundle; turn it on again on the target",
            )
        if entry.get("delegate_same_risk_profile", True) is not False:
            self.drop(
                (*base, "delegate_same_risk_profile"),
                RELATIONAL,
                "set to false: the delegates it relates to stay behind",
            )
        entry["delegate_same_risk_profile"] = False
        workspace = entry.get("workspace")
        if isinstance(workspace, dict):
            for name, reason, why in _REMOVED_WORKSPACE_FIELDS:
                if is_populated(workspace.pop(name, None)):
                    self.drop((*base, "workspace", name), reason, why)
        self.remove_unknown(entry, self.node(*base), base)
        for kind in _BUNDLE_KINDS:
            if kind in entry:
                cleaned = _aliases(entry[kind])
                if cleaned is not None:
                    entry[kind] = cleaned
        self.fragment["agents"] = {self.alias: entry}
        return entry

    def identity(self, entry: Node) -> str | None:
        identity = entry.get("identity")
        if not isinstance(identity, dict):
            return None
        raw = identity.get("aieos_path")
        if not isinstance(raw, str) or not raw:
            return None
        safe = safe_relative_path(raw)
        if safe is None or safe == "memory" or safe.startswith("memory/"):
            del identity["aieos_path"]
            why = "the identity path is not a relative path of portable names outside memory/"
            self.drop(("agents", self.alias, "identity", "aieos_path"), HOST_SPECIFIC, why)
            return None
        identity["aieos_path"] = safe
        return safe

    # -- references --

    def family_known(self, category: str, family: str) -> bool:
        families = _table(
            _table(self.root_schema["properties"]["providers"]["properties"]).get(category)
        ).get("properties", {})
        return family in families

    def provider_root(
        self, category: str, ref: Any, where: Sequence[str]
    ) -> tuple[str, str] | None:
        """A provider reference the closure needs, checked for a known family."""
        if not isinstance(ref, str) or not ref:
            return None
        parts = split_provider_ref(ref)
        if parts is None:
            return None  # malformed: carried as is, and validation of the closure names it
        if not self.family_known(category, parts[0]):
            raise InvalidInput(
                f"{format_path(where)}: unknown provider family "
                f"{format_path([parts[0]])} in providers.{category}",
                path=format_path(where),
            )
        return parts

    def provider_entry(self, category: str, family: str, alias: str) -> Mapping[str, Any] | None:
        entry = _table(_table(_table(self.config.get("providers")).get(category)).get(family)).get(
            alias
        )
        return entry if isinstance(entry, Mapping) else None

    def carry_provider(self, category: str, family: str, alias: str) -> Node | None:
        source = self.provider_entry(category, family, alias)
        if source is None:
            return None
        models = (
            self.fragment.setdefault("providers", {})
            .setdefault(category, {})
            .setdefault(family, {})
        )
        if alias in models:
            existing: Node = models[alias]
            return existing
        entry = copy.deepcopy(dict(source))
        base = ("providers", category, family, alias)
        self.remove_unknown(entry, self.node(*base), base)
        models[alias] = entry  # providers are never pruned (02 §4)
        return entry

    def model_fallbacks(self, roots: list[tuple[str, str]]) -> None:
        """Carry every model provider reachable from ``roots`` and cut the unusable edges (2.7)."""
        distance: dict[tuple[str, str], int] = {}
        queue: deque[tuple[str, str]] = deque()
        for root in roots:
            if root not in distance and self.provider_entry("models", *root) is not None:
                distance[root] = 0
                queue.append(root)
        while queue:
            source = queue.popleft()
            entry = self.carry_provider("models", *source)
            if entry is None:
                continue
            edges = entry.get("fallback")
            if not isinstance(edges, list):
                continue
            kept: list[Any] = []
            path = ("providers", "models", *source, "fallback")
            for i, ref in enumerate(edges):
                target = split_provider_ref(ref)
                resolves = (
                    target is not None
                    and self.family_known("models", target[0])
                    and self.provider_entry("models", *target) is not None
                )
                if not resolves or target is None:
                    self.drop(
                        path,
                        SOURCE_MISSING,
                        "target missing: the fallback names no model provider of this install",
                        index=i,
                    )
                    continue
                if distance[source] >= MAX_FALLBACK_DEPTH:
                    self.drop(
                        path,
                        SOURCE_MISSING,
                        f"beyond MAX_FALLBACK_DEPTH ({MAX_FALLBACK_DEPTH}): "
                        "the runtime never follows it",
                        index=i,
                    )
                    continue
                kept.append(ref)
                if target not in distance:
                    distance[target] = distance[source] + 1
                    queue.append(target)
            if kept:
                entry["fallback"] = kept
            else:
                # ZeroClaw's serializer skips an empty fallback; writing `fallback = []` would
                # make the two exporters' fragments differ for no meaning
                del entry["fallback"]

    # -- bundles and MCP servers --

    def bundles(self, agent: Node) -> list[SkillSource]:
        sources: list[SkillSource] = []
        for kind in _BUNDLE_KINDS:
            names = agent.get(kind)
            if not isinstance(names, list):
                continue
            for name in names:
                if not isinstance(name, str):
                    continue
                if kind == "skill_bundles":
                    source = self.skill_bundle(name)
                    if source is not None:
                        sources.append(source)
                else:
                    self.carry(kind, name, prune=True)
        return sources

    def skill_bundle(self, name: str) -> SkillSource | None:
        raw = _table(self.config.get("skill_bundles")).get(name)
        if not isinstance(raw, Mapping):
            return None
        folder = Path(
            layout.normalise(layout.skill_bundle_dir(self.config, name, self.install_root))
        )
        inside = layout.lexically_inside(folder, layout.shared_dir(self.install_root), strict=True)
        entry = self.carry("skill_bundles", name, prune=False)
        assert entry is not None
        directory = entry.get("directory")
        if (
            isinstance(directory, str)
            and directory
            and (Path(directory).is_absolute() or directory.startswith("~") or not inside)
        ):
            del entry["directory"]
            self.drop(
                ("skill_bundles", name, "directory"),
                HOST_SPECIFIC,
                "an absolute folder, or one outside shared/, names this host",
            )
        prune_defaults(entry, self.node("skill_bundles", name))
        if not is_portable_skill_alias(name):
            self.drop(
                ("skill_bundles", name),
                HOST_SPECIFIC,
                "the alias is not a portable folder name: rename the bundle; "
                "its content was not copied",
            )
            return None
        if not inside:
            # a bundle path, not a config path: written with "/" like the copier's rows
            why = "the bundle's folder lies outside shared/: its content was not copied"
            self.dropped.append(Dropped(f"skills/{name}", HOST_SPECIFIC, why))
            return None
        include = [item for item in _list(raw.get("include")) if isinstance(item, str)]
        exclude = [item for item in _list(raw.get("exclude")) if isinstance(item, str)]
        return SkillSource(name, folder, include, exclude, True)

    def mcp_servers(self) -> None:
        """Carry the servers the carried MCP bundles grant (01 §3.5) and cut unknown names (2.4)."""
        bundles = _table(self.fragment.get("mcp_bundles"))
        if not bundles:
            return
        excluded: set[str] = set()
        for entry in bundles.values():
            excluded.update(s for s in _list(entry.get("exclude")) if isinstance(s, str))
        granted: list[str] = []
        seen: set[str] = set()
        for entry in bundles.values():
            for name in _list(entry.get("servers")):
                if isinstance(name, str) and name not in excluded and name not in seen:
                    seen.add(name)
                    granted.append(name)
        found = self.first_servers(seen)
        carried: list[Node] = []
        for name in granted:
            server = found.get(name)
            if server is None:
                continue
            entry = copy.deepcopy(dict(server))
            base = ("mcp", "servers", name)
            node = self.node("mcp", "servers", name)
            self.remove_unknown(entry, node, base)
            prune_defaults(entry, node)
            entry["name"] = name
            carried.append(entry)
        if carried:
            self.fragment["mcp"] = {"servers": carried}
        for alias, entry in bundles.items():
            servers = entry.get("servers")
            if not isinstance(servers, list):
                continue
            kept = []
            for i, name in enumerate(servers):
                if isinstance(name, str) and name not in excluded and name not in found:
                    self.drop(
                        ("mcp_bundles", alias, "servers"),
                        SOURCE_MISSING,
                        "names no MCP server of this install; removed so a same-named "
                        "server on the target is not granted by accident",
                        index=i,
                    )
                    continue
                kept.append(name)
            entry["servers"] = kept
            prune_defaults(entry, self.node("mcp_bundles", alias))

    def first_servers(self, wanted: set[str]) -> dict[str, Mapping[str, Any]]:
        """The first ``mcp.servers`` entry of each wanted name (01 §3.5).

        This is the one scan over a config-sized list, so it runs in C: the names are read by
        ``map(dict.get, ...)`` and each wanted name is located by ``list.index``, which stops
        at the first entry with exactly that name.
        """
        found: dict[str, Mapping[str, Any]] = {}
        servers = _list(_table(self.config.get("mcp")).get("servers"))
        if not wanted or not servers:
            return found
        try:
            names: list[Any] = list(map(dict.get, servers, repeat("name")))
        except TypeError:  # an entry that is not a table: read the names one by one
            names = [s.get("name") if isinstance(s, dict) else None for s in servers]
        for name in wanted:
            try:
                found[name] = servers[names.index(name)]
            except ValueError:
                continue
        return found

    # -- the whole plan --

    def plan(self) -> ExportPlan:
        agent = self.agent()
        base = ("agents", self.alias)
        if not is_portable_alias(self.alias):
            self.warnings.append(
                f"agent alias {format_path([self.alias])} is not a portable alias: the target "
                "will refuse to import it under this name (use --as)"
            )
        identity_path = self.identity(agent)
        risk = agent.get("risk_profile")
        if isinstance(risk, str) and risk:
            self.carry("risk_profiles", risk, prune=False, removed=_REMOVED_RISK_FIELDS)
        runtime = agent.get("runtime_profile")
        model_roots: list[tuple[str, str]] = []
        for name, category in AGENT_PROVIDER_FIELDS:
            parts = self.provider_root(category, agent.get(name), (*base, name))
            if parts is None:
                continue
            if category == "models":
                model_roots.append(parts)
            else:
                self.carry_provider(category, *parts)
        if isinstance(runtime, str) and runtime:
            profile = self.carry("runtime_profiles", runtime, prune=True)
            if profile is not None:
                summary = _table(profile.get("context_compression")).get("summary_provider")
                where = ("runtime_profiles", runtime, "context_compression", "summary_provider")
                parts = self.provider_root("models", summary, where)
                if parts is not None:
                    model_roots.append(parts)
        self.model_fallbacks(model_roots)
        skill_sources = self.bundles(agent)
        self.mcp_servers()
        prune_defaults(agent, self.node(*base))
        required = scrub(self.fragment)
        ciphertext = find_ciphertext(self.fragment)
        if ciphertext:
            raise Refused(
                f"{ciphertext[0]} holds an encrypted value (enc:/enc2:) outside a secret field: "
                "it cannot travel; clear or move it and export again",
                path=ciphertext[0],
            )
        workspace_path = _table(agent_source_workspace(self.config, self.alias)).get("path")
        return ExportPlan(
            alias=self.alias,
            fragment=self.fragment,
            required_secrets=required,
            dropped=sorted(self.dropped, key=dropped_sort_key),
            workspace=layout.workspace_dir(self.config, self.alias, self.install_root),
            workspace_is_default=not (isinstance(workspace_path, str) and workspace_path),
            skill_sources=skill_sources,
            identity_path=identity_path,
            warnings=self.warnings,
        )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def agent_source_workspace(config: Mapping[str, Any], alias: str) -> Any:
    """The ``workspace`` table of agent ``alias`` in the source config (anything, unchecked)."""
    return _table(_table(config.get("agents")).get(alias)).get("workspace")


def plan_closure(config: Mapping[str, Any], alias: str, install_root: Path) -> ExportPlan:
    """Plan the export of agent ``alias`` (02 §2–§5): the fragment and everything around it.

    Raises :class:`Refused` for an unknown alias or ciphertext outside a secret field, and
    :class:`InvalidInput` for a reference to a provider family the schema does not know.
    """
    return _Planner(config, alias, install_root).plan()


# --- after the copy ----------------------------------------------------------------------------


def memory_rows(format_version: int) -> list[Dropped]:
    """The rows format 1 always reports: memory does not travel (02 §3)."""
    if format_version != 1:
        return []
    return [
        Dropped(
            "workspace/memory",
            NOT_YET_PORTABLE,
            "memory stores travel only with --include-memory (format 2)",
        ),
        Dropped(
            "workspace/MEMORY_SNAPSHOT.md",
            PRIVATE_DATA,
            "the core-memory export travels only with --include-memory (format 2)",
        ),
    ]


def finish_plan(
    plan: ExportPlan,
    carried_skill_bundles: Sequence[str],
    identity_present: bool,
    extra_dropped: Sequence[Dropped],
    format_version: int,
) -> FinishedClosure:
    """The final fragment, ``dropped`` and risk flags once the files are copied, proven valid.

    ``carried_skill_bundles`` are the bundles whose content actually travelled, in the agent's
    order; ``extra_dropped`` are the copier's rows (skills, live SQLite stores). A planned
    identity path that was not copied is removed and reported ``source_missing``. The fragment
    is rendered and proven with :func:`prove_closure` (exit 3 naming the first error).
    """
    fragment = copy.deepcopy(plan.fragment)
    dropped = [*plan.dropped, *extra_dropped, *memory_rows(format_version)]
    if plan.identity_path is not None and not identity_present:
        agent = fragment["agents"][plan.alias]
        identity = agent.get("identity")
        if isinstance(identity, dict):
            identity.pop("aieos_path", None)
            if not identity:
                del agent["identity"]
        dropped.append(
            Dropped(
                format_path(["agents", plan.alias, "identity", "aieos_path"]),
                SOURCE_MISSING,
                "the identity document is not in the workspace as a regular file",
            )
        )
    prove_closure(render_config(fragment))
    flags = compute_risk_flags(fragment, carried_skill_bundles, format_version, plan.alias)
    return FinishedClosure(fragment, sorted(set(dropped), key=dropped_sort_key), flags)


PROOF_ROOT = Path("/bundler-empty-install")


def prove_closure(fragment_bytes: bytes) -> None:
    """Parse a rendered fragment again and validate it alone on an empty install (02 §2).

    Raises :class:`InvalidInput` ``closure invalid: <path>: <message>`` for the first error.
    """
    try:
        parsed = loads(fragment_bytes.decode("utf-8"))
    except (UnicodeDecodeError, TOMLDecodeError) as exc:
        raise InvalidInput(
            f"closure invalid: config.toml does not parse back: {exc}", path="config.toml"
        ) from None
    agents = _table(parsed.get("agents"))
    if len(agents) != 1:
        raise InvalidInput(
            f"closure invalid: agents: the fragment holds {len(agents)} agents, not exactly one",
            path="agents",
        )
    errors, _warnings = validate(parsed, PROOF_ROOT)
    if errors:
        first = errors[0]
        raise InvalidInput(f"closure invalid: {first.path}: {first.message}", path=first.path)
