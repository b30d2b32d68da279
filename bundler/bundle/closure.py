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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from bundler.bundle.manifest import Dropped, dropped_sort_key, render_config
from bundler.errors import InvalidConfig, Malformed, NotFound, SecretFound
from bundler.rules import layout, refs, schema
from bundler.rules.config_view import array, table
from bundler.rules.names import (
    did_you_mean,
    is_portable_skill_alias,
    non_portable_alias_reason,
    safe_relative_path,
)
from bundler.rules.paths import format_path
from bundler.rules.risk import RiskFlag, compute_risk_flags
from bundler.rules.secrets import find_ciphertext, scrub
from bundler.rules.skillfolder import skill_folder_problem, used_folders
from bundler.rules.tomlcompat import TOMLDecodeError, loads
from bundler.rules.validate import validate

Node = dict[str, Any]

HOST_SPECIFIC = "host_specific"
RELATIONAL = "relational"
DEFAULT_CLOSED = "default_closed"
PRIVATE_DATA = "private_data"
NOT_YET_PORTABLE = "not_yet_portable"
SOURCE_MISSING = "source_missing"
_DUPLICATE_ALIAS_DETAIL = (
    "another spelling of a field that is also set: the field's own value travels"
)

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


def is_populated(value: object) -> bool:
    """True when ``value`` says something: not absent, ``""``, ``[]``, ``{}`` or ``false``."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict)):
        return len(value) > 0
    return True


def _aliases(value: object) -> list[str] | None:
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


# --- pruning (02 §4) ----------------------------------------------------------------------------


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


# --- drops ------------------------------------------------------------------------------------


class _Drops:
    """The ``dropped`` rows of one plan (02 §3), and the removal of keys the schema lacks."""

    def __init__(self) -> None:
        self.rows: list[Dropped] = []

    def drop(
        self, segments: Sequence[str], reason: str, detail: str, index: int | None = None
    ) -> None:
        path = format_path([*segments, *([] if index is None else [index])])
        self.rows.append(Dropped(path, reason, detail))

    def remove_unknown(self, entry: Node, node: Node | None, segments: tuple[str, ...]) -> None:
        """Drop keys the schema does not describe, recursively, reporting populated ones.

        A serde alias (``allowed_paths``) is renamed to its field (``allowed_roots``), as
        ZeroClaw reads and writes it back; beside the field itself it is a duplicate ZeroClaw
        refuses, so it is dropped.
        """
        if node is None:
            return
        for key in list(entry):
            sub_node = schema.child(node, key)
            field = schema.alias_target(node, key) if sub_node is None else None
            if field is not None and field not in entry:
                entry[field] = entry.pop(key)
                key, sub_node = field, schema.child(node, field)
            if sub_node is None:
                value = entry.pop(key)
                if is_populated(value):
                    self.drop(
                        (*segments, key),
                        NOT_YET_PORTABLE,
                        _unknown_key_detail() if field is None else _DUPLICATE_ALIAS_DETAIL,
                    )
            elif (
                isinstance(entry[key], dict)
                and sub_node.get("type") == "object"
                and not sub_node.get("x-secret")
            ):
                self.remove_unknown(entry[key], sub_node, (*segments, key))

    def removed_fields(
        self, entry: Node, fields: Sequence[tuple[str, str, str]], base: Sequence[str]
    ) -> None:
        """Take out ``(key, reason, why)`` fields that never travel, reporting populated ones."""
        for name, reason, why in fields:
            if is_populated(entry.pop(name, None)):
                self.drop((*base, name), reason, why)


def _unknown_key_detail() -> str:
    """Why a key the schema lacks stays behind, naming the ZeroClaw revision the schema follows:
    a key ZeroClaw added after it is unknown until the schema is regenerated from a newer one."""
    revision = schema.config_schema().get("x-zeroclaw-revision")
    since = f" (ZeroClaw {revision})" if isinstance(revision, str) else ""
    return (
        f"the config schema{since} does not describe this key, so it cannot be checked for "
        "secrets: a ZeroClaw revision after that one added it, or it is misspelt"
    )


def _node(*segments: str) -> Node | None:
    return schema.resolve(segments)[1]


def _check_root_families(found: refs.Reach) -> None:
    """Refuse a provider reference of the agent or its profile into an unknown family.

    Such a reference cannot be carried nor cut (it is not a fallback edge): the user must fix
    it. A malformed or dangling one is carried as is and validation of the closure names it.
    """
    for ref in found.unresolved:
        key = ref.key
        if ref.target not in refs.PROVIDER_KINDS or ref.source[0] in refs.PROVIDER_KINDS:
            continue
        category = ref.target.split(".", 1)[1]
        if key is not None and key[0] not in refs.families(category):
            where = format_path(ref.path)
            raise InvalidConfig(
                f"{where}: unknown provider family {format_path([key[0]])} in {ref.target}",
                path=where,
            )


# --- the agent (02 §3) -------------------------------------------------------------------------


def _sanitised_agent(source: Mapping[str, Any], alias: str, drops: _Drops) -> Node:
    """A copy of agent ``alias`` as it travels (02 §3), what it loses reported in ``drops``.

    Host bindings and relations to other agents are removed, agent-to-agent publishing is
    closed, ``delegate_same_risk_profile`` is false, keys the schema lacks are dropped, bundle
    lists are trimmed and de-duplicated, and the identity path is kept only when portable.
    """
    entry = copy.deepcopy(dict(source))
    base = ("agents", alias)
    # removed fields first, so nothing inside them is reported a second time as unknown
    drops.removed_fields(entry, _REMOVED_AGENT_FIELDS, base)
    a2a = entry.pop("a2a", None)
    if isinstance(a2a, Mapping):
        a2a_open = is_populated(a2a.get("published")) or is_populated(a2a.get("exposed_skills"))
    else:
        a2a_open = is_populated(a2a)
    if a2a_open:
        drops.drop(
            (*base, "a2a"),
            DEFAULT_CLOSED,
            "agent-to-agent publishing is off in a bundle; turn it on again on the target",
        )
    if entry.get("delegate_same_risk_profile", True) is not False:
        drops.drop(
            (*base, "delegate_same_risk_profile"),
            RELATIONAL,
            "set to false: the delegates it relates to stay behind",
        )
    entry["delegate_same_risk_profile"] = False
    workspace = entry.get("workspace")
    if isinstance(workspace, dict):
        drops.removed_fields(workspace, _REMOVED_WORKSPACE_FIELDS, (*base, "workspace"))
    drops.remove_unknown(entry, _node(*base), base)
    for kind in _BUNDLE_KINDS:
        if kind in entry:
            cleaned = _aliases(entry[kind])
            if cleaned is not None:
                entry[kind] = cleaned
    return entry


def _portable_identity(entry: Node, alias: str, drops: _Drops) -> str | None:
    """The agent's ``identity.aieos_path`` normalised, or None; a host-specific one is removed.

    Kept only as a relative path of portable names outside ``memory/`` (02 §3).
    """
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
        drops.drop(("agents", alias, "identity", "aieos_path"), HOST_SPECIFIC, why)
        return None
    identity["aieos_path"] = safe
    return safe


# --- the planner -------------------------------------------------------------------------------


class _Planner:
    """One planning run: the config, the fragment being built and the rows being collected.

    What the agent reaches is :func:`bundler.rules.refs.reach` (verify recomputes it the same way);
    the planner copies each reached entry, cuts what must not travel and prunes defaults.
    """

    def __init__(self, config: Mapping[str, Any], alias: str, install_root: Path) -> None:
        self.config = config
        self.alias = alias
        self.install_root = install_root
        self.drops = _Drops()
        self.warnings: list[str] = []
        self.fragment: Node = {}

    def carry(
        self,
        kind: str,
        name: str,
        source: Mapping[str, Any],
        *,
        prune: bool,
        removed: Sequence[tuple[str, str, str]] = (),
    ) -> Node:
        """A copy of entry ``name`` of ``kind`` without unknown keys (pruned if told so).

        ``removed`` lists ``(key, reason, why)`` of fields that never travel; they are taken
        out first, so nothing inside them is reported a second time as an unknown key.
        Providers are never pruned (02 §4).
        """
        base = tuple(refs.entry_segments(kind, name))
        entry = copy.deepcopy(dict(source))
        self.drops.removed_fields(entry, removed, base)
        node = _node(*base)
        self.drops.remove_unknown(entry, node, base)
        if prune:
            prune_defaults(entry, node)
        table = self.fragment
        for part in base[:-1]:
            table = table.setdefault(part, {})
        table[base[-1]] = entry
        return entry

    def agent(self) -> Node:
        agents = table(self.config.get("agents"))
        source = agents.get(self.alias)
        if not isinstance(source, Mapping):
            close = did_you_mean(self.alias, [str(alias) for alias in agents])
            raise NotFound(
                f"unknown agent {format_path([self.alias])}: the config has no such agent{close}",
                path=format_path(["agents", self.alias]),
            )
        entry = _sanitised_agent(source, self.alias, self.drops)
        self.fragment["agents"] = {self.alias: entry}
        return entry

    # -- what the agent reaches (02 §2) --

    def carry_reached(self, found: refs.Reach) -> list[SkillSource]:
        """Carry every entry the agent reaches; the skill bundles whose content is to travel."""
        sources: list[SkillSource] = []
        for (kind, name), source in found.entries.items():
            if kind == "skill_bundles":
                skill = self.skill_bundle(name, source)
                if skill is not None:
                    sources.append(skill)
            elif kind == "risk_profiles":
                self.carry(kind, name, source, prune=False, removed=_REMOVED_RISK_FIELDS)
            else:
                self.carry(kind, name, source, prune=kind not in refs.PROVIDER_KINDS)
        return sources

    def cut_fallbacks(self, found: refs.Reach) -> None:
        """Remove the fallback edges that do not resolve or go too deep (02 §2 point 7)."""
        missing = "target missing: the fallback names no model provider of this install"
        too_deep = (
            f"beyond MAX_FALLBACK_DEPTH ({refs.MAX_FALLBACK_DEPTH}): the runtime never follows it"
        )
        cut: dict[refs.EntryKey, set[int]] = {}
        for refs_of, why in ((found.unresolved, missing), (found.too_deep, too_deep)):
            for ref in refs_of:
                if ref.source[0] in refs.PROVIDER_KINDS and ref.position is not None:
                    cut.setdefault(ref.source, set()).add(ref.position)
                    self.drops.drop(ref.path[:-1], SOURCE_MISSING, why, index=ref.position)
        for (kind, name), indices in cut.items():
            family, alias = refs.entry_segments(kind, name)[-2:]
            entry = self.fragment["providers"][kind.split(".", 1)[1]][family][alias]
            edges = entry["fallback"]
            entry["fallback"] = [ref for i, ref in enumerate(edges) if i not in indices]
        for kind, name in found.entries:
            if kind in refs.PROVIDER_KINDS:
                family, alias = refs.entry_segments(kind, name)[-2:]
                entry = self.fragment["providers"][kind.split(".", 1)[1]][family][alias]
                if entry.get("fallback") == []:
                    # ZeroClaw's serializer skips an empty fallback; writing `fallback = []`
                    # would make the two exporters' fragments differ for no meaning
                    del entry["fallback"]

    # -- bundles and MCP servers --

    def skill_bundle(self, name: str, raw: Mapping[str, Any]) -> SkillSource | None:
        folder = Path(
            layout.normalise(layout.skill_bundle_dir(self.config, name, self.install_root))
        )
        inside = layout.lexically_inside(folder, layout.shared_dir(self.install_root), strict=True)
        entry = self.carry("skill_bundles", name, raw, prune=False)
        directory = entry.get("directory")
        # only what verify accepts travels (one rule, bundler.rules.skillfolder); the content of a
        # bundle elsewhere in shared/ is still carried and lands in the target's default folder
        # the folders of every other entry are gathered only when there is a directory to
        # check: in a 5,000-agent install that walk would dominate planning (P5)
        if (
            isinstance(directory, str)
            and directory
            and skill_folder_problem(
                directory, used_folders(self.config, self.install_root, except_bundle=name)
            )
            is not None
        ):
            del entry["directory"]
            self.drops.drop(
                ("skill_bundles", name, "directory"),
                HOST_SPECIFIC,
                "only a folder shared/skills/<name> travels; this one names this host's layout",
            )
        prune_defaults(entry, _node("skill_bundles", name))
        if not is_portable_skill_alias(name):
            self.drops.drop(
                ("skill_bundles", name),
                HOST_SPECIFIC,
                "the alias is not a portable folder name: rename the bundle; "
                "its content was not copied",
            )
            return None
        if not inside:
            # a bundle path, not a config path: written with "/" like the copier's rows
            why = "the bundle's folder lies outside shared/: its content was not copied"
            self.drops.rows.append(Dropped(f"skills/{name}", HOST_SPECIFIC, why))
            return None
        include = [item for item in array(raw.get("include")) if isinstance(item, str)]
        exclude = [item for item in array(raw.get("exclude")) if isinstance(item, str)]
        return SkillSource(name, folder, include, exclude, True)

    def mcp_servers(self, found: refs.Reach) -> None:
        """Carry the servers the carried MCP bundles grant (01 §3.5) and cut unknown names (2.4)."""
        bundles = table(self.fragment.get("mcp_bundles"))
        if not bundles:
            return
        carried: list[Node] = []
        for name in found.granted:
            server = found.servers.get(name)
            if server is None:
                continue
            entry = copy.deepcopy(dict(server))
            base = ("mcp", "servers", name)
            node = _node(*base)
            self.drops.remove_unknown(entry, node, base)
            prune_defaults(entry, node)
            entry["name"] = name
            carried.append(entry)
        if carried:
            self.fragment["mcp"] = {"servers": carried}
        # a granted name no server answers to: a same-named server on the target must not
        # be granted by accident (an excluded name grants nothing, so it may stay)
        unknown = set(found.granted) - set(found.servers)
        for alias, entry in bundles.items():
            servers = entry.get("servers")
            if not isinstance(servers, list):
                continue
            kept = []
            for i, name in enumerate(servers):
                if isinstance(name, str) and name in unknown:
                    self.drops.drop(
                        ("mcp_bundles", alias, "servers"),
                        SOURCE_MISSING,
                        "names no MCP server of this install; removed so a same-named "
                        "server on the target is not granted by accident",
                        index=i,
                    )
                    continue
                kept.append(name)
            entry["servers"] = kept
            prune_defaults(entry, _node("mcp_bundles", alias))

    # -- the whole plan --

    def plan(self) -> ExportPlan:
        agent = self.agent()
        base = ("agents", self.alias)
        alias_problem = non_portable_alias_reason(self.alias)
        if alias_problem is not None:
            # 01 §3: export reports it; verify and import refuse such a bundle whatever --as says
            self.warnings.append(
                f"agent alias {format_path([self.alias])} is not a portable alias "
                f"({alias_problem}): bundle verify and import refuse this bundle; rename the "
                "agent and export again"
            )
        identity_path = _portable_identity(agent, self.alias, self.drops)
        found = refs.reach(self.config, self.alias, agent)
        _check_root_families(found)
        skill_sources = self.carry_reached(found)
        self.cut_fallbacks(found)
        self.mcp_servers(found)
        prune_defaults(agent, _node(*base))
        required = scrub(self.fragment)
        ciphertext = find_ciphertext(self.fragment)
        if ciphertext:
            raise SecretFound(
                f"{ciphertext[0]} holds an encrypted value (enc:/enc2:) outside a secret field: "
                "it cannot travel; clear or move it and export again",
                path=ciphertext[0],
            )
        workspace_path = table(agent_source_workspace(self.config, self.alias)).get("path")
        return ExportPlan(
            alias=self.alias,
            fragment=self.fragment,
            required_secrets=required,
            dropped=sorted(self.drops.rows, key=dropped_sort_key),
            workspace=layout.workspace_dir(self.config, self.alias, self.install_root),
            workspace_is_default=not (isinstance(workspace_path, str) and workspace_path),
            skill_sources=skill_sources,
            identity_path=identity_path,
            warnings=self.warnings,
        )


def agent_source_workspace(config: Mapping[str, Any], alias: str) -> Any:
    """The ``workspace`` table of agent ``alias`` in the source config (anything, unchecked)."""
    return table(table(config.get("agents")).get(alias)).get("workspace")


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
        raise Malformed(
            f"closure invalid: config.toml does not parse back: {exc}", path="config.toml"
        ) from None
    agents = table(parsed.get("agents"))
    if len(agents) != 1:
        raise InvalidConfig(
            f"closure invalid: agents: the fragment holds {len(agents)} agents, not exactly one",
            path="agents",
        )
    errors, _warnings = validate(parsed, PROOF_ROOT)
    if errors:
        first = errors[0]
        raise InvalidConfig(f"closure invalid: {first.path}: {first.message}", path=first.path)
