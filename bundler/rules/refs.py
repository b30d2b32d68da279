"""Which config entry references which (01 §3), read from the schema's ``x-ref`` marks. Pure.

The config schema marks every reference field with ``"x-ref": "<table>"``; the table names are
those of ZeroClaw's reference newtypes (``ModelProviderRef`` → ``providers.models``,
``RiskProfileRef`` → ``risk_profiles``, ``ChannelRef`` → ``channels``…) and of its
``AliasSource`` (``skill_bundles``, ``mcp_bundles``…), plus ``mcp.servers`` for the server
names an MCP bundle lists. No other module keeps a list of reference fields: the export closure,
verify's recomputation of it, validation's dangling-reference check and the import merge's
rewriting all read them here, so they cannot disagree about what references what.

Entries are keyed ``(kind, name)`` (:data:`EntryKey`): ``kind`` is the table holding them and
``name`` is exactly the string a reference uses for them: ``anthropic.main`` for a provider, the
bare alias otherwise, the ``name`` field for an MCP server.

Two rules live here and nowhere else: how a dotted reference (``family.alias``) is split
(:func:`split_provider_ref`), and which servers a set of MCP bundles grants, exclude winning
(:func:`granted_servers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import repeat
from typing import Any, NamedTuple

from bundler.rules import schema
from bundler.rules.config_view import array, table

EntryKey = tuple[str, str]

MAX_FALLBACK_DEPTH = 3

# every table an entry can live in, in the order an import appends new entries: referents
# first, agents (appended last by the merge) not listed
ENTRY_KINDS: tuple[str, ...] = (
    "risk_profiles",
    "runtime_profiles",
    "providers.models",
    "providers.tts",
    "providers.transcription",
    "skill_bundles",
    "knowledge_bundles",
    "mcp_bundles",
    "mcp.servers",
)
PROVIDER_KINDS = frozenset({"providers.models", "providers.tts", "providers.transcription"})
# tables whose references are ``<type>.<alias>`` (ZeroClaw's ``AliasSource::is_two_tier``)
TWO_TIER = PROVIDER_KINDS | {"channels"}
# the tables an agent's closure carries through references (02 §2); MCP servers are reached by
# the grant rule instead, channels and cron never travel
CARRIED_TARGETS = frozenset(
    {
        *PROVIDER_KINDS,
        "risk_profiles",
        "runtime_profiles",
        "skill_bundles",
        "knowledge_bundles",
        "mcp_bundles",
    }
)


# --- the split -------------------------------------------------------------------------------


def split_provider_ref(ref: object) -> tuple[str, str] | None:
    """``"<family>.<alias>"`` as ``(family, alias)``; None when ``ref`` is not of that form.

    The one place a dotted reference is split (providers and channels alike). Exactly one dot
    with text on both sides: aliases a reference splits on ``.`` contain no ``.`` (01 §3), so
    ``a.b.c`` names nothing and is malformed, not family ``a`` with alias ``b.c``.
    """
    if not isinstance(ref, str):
        return None
    family, dot, alias = ref.partition(".")
    if not dot or not family or not alias or "." in alias:
        return None
    return family, alias


def split_ref(target: str, ref: object) -> tuple[str, ...] | None:
    """The key below table ``target`` that ``ref`` names, or None when it names nothing.

    ``(family, alias)`` for a two-tier table (providers, channels), ``(alias,)`` otherwise; an
    empty string or a value that is not a string names nothing.
    """
    if target in TWO_TIER:
        return split_provider_ref(ref)
    if not isinstance(ref, str) or not ref:
        return None
    return (ref,)


@cache
def families(category: str) -> frozenset[str]:
    """The provider families the schema knows in ``providers.<category>`` (a closed set)."""
    node = schema.config_schema()["properties"]["providers"]["properties"].get(category, {})
    return frozenset(table(node.get("properties")))


# --- entries ---------------------------------------------------------------------------------


def entry_segments(kind: str, name: str) -> list[str]:
    """Config path segments of entry ``name`` of ``kind`` (a provider name is ``family.alias``)."""
    if kind in PROVIDER_KINDS:
        parts = split_provider_ref(name)
        if parts is not None:
            return [*kind.split("."), *parts]
    return [*kind.split("."), name]


def iter_entries(config: Mapping[str, Any], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(name, entry)`` for every entry of ``kind`` in ``config``, in file order.

    Only well-formed entries (tables) are yielded; a duplicated server name yields its first
    entry only, as the runtime resolves it (01 §3.5). A provider whose alias holds a ``.`` is
    not yielded: no reference can name it (01 §3), and its name would not split back.
    """
    if kind == "mcp.servers":
        seen: set[str] = set()
        for server in array(table(config.get("mcp")).get("servers")):
            if (
                isinstance(server, dict)
                and isinstance(server.get("name"), str)
                and server["name"] not in seen
            ):
                seen.add(server["name"])
                yield server["name"], server
        return
    node: object = config
    for part in kind.split("."):
        node = table(node).get(part)
    if not isinstance(node, dict):
        return
    if kind in PROVIDER_KINDS:
        for family, aliases in node.items():
            if isinstance(aliases, dict):
                for alias, entry in aliases.items():
                    if isinstance(entry, dict) and split_provider_ref(f"{family}.{alias}"):
                        yield f"{family}.{alias}", entry
        return
    for alias, entry in node.items():
        if isinstance(entry, dict):
            yield alias, entry


def value_at(entry: object, rel: Sequence[str]) -> Any:
    """The value at ``rel`` below ``entry``, or None when a step is missing."""
    node: object = entry
    for part in rel:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


# --- reference fields, from the schema -------------------------------------------------------


@dataclass(frozen=True)
class RefField:
    """A reference field of an entry, read from the schema's ``x-ref`` marks."""

    segments: tuple[str, ...]  # below the entry
    target: str  # the table it points into: ``providers.models``, ``risk_profiles``...
    is_list: bool
    required: bool  # in its table's ``required``: an empty value is an error


def _entry_schema(kind: str, family: str) -> schema.Node | None:
    if kind in PROVIDER_KINDS:
        return schema.resolve([*kind.split("."), family, "_"])[1]
    return schema.resolve([*kind.split("."), "_"])[1]


@cache
def ref_fields(kind: str, family: str = "") -> tuple[RefField, ...]:
    """The ``x-ref`` fields of an entry of ``kind`` (a provider's also depend on its family).

    Read from the schema, so a new reference field needs no code anywhere.
    """
    found: list[RefField] = []

    def walk(node: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        required = node.get("required", [])
        for name, sub in node.get("properties", {}).items():
            if "x-ref" in sub:
                is_list = sub.get("type") == "array"
                target = str(sub["x-ref"])
                found.append(RefField((*prefix, name), target, is_list, name in required))
            elif sub.get("type") == "object":
                walk(sub, (*prefix, name))

    node = _entry_schema(kind, family)
    if node is not None:
        walk(node, ())
    return tuple(found)


@cache
def _fields_by_key(kind: str, family: str) -> dict[str, tuple[RefField, ...]]:
    grouped: dict[str, list[RefField]] = {}
    for ref_field in ref_fields(kind, family):
        grouped.setdefault(ref_field.segments[0], []).append(ref_field)
    return {key: tuple(fields) for key, fields in grouped.items()}


class Ref(NamedTuple):
    """One reference: entry ``source`` names ``value`` in table ``field.target``.

    ``position`` is the index in a list field, None for a scalar one. ``value`` is as found,
    any type: a wrong type names nothing (the schema check reports it).
    """

    source: EntryKey
    field: RefField
    position: int | None
    value: Any

    @property
    def target(self) -> str:
        """The table the reference points into."""
        return self.field.target

    @property
    def path(self) -> list[str]:
        """Config path segments of the referencing value (a list item by index)."""
        tail = [] if self.position is None else [str(self.position)]
        return [*entry_segments(*self.source), *self.field.segments, *tail]

    @property
    def key(self) -> tuple[str, ...] | None:
        """The key below the target table, split by :func:`split_ref`; None if malformed."""
        return split_ref(self.target, self.value)

    @property
    def is_none(self) -> bool:
        """True for an empty scalar reference, which means "none" (01 §3.1), not a dangling one."""
        return self.position is None and self.value == ""

    @property
    def is_fallback(self) -> bool:
        """True for a fallback edge: a reference from one provider to another (01 §3.2)."""
        return self.source[0] in PROVIDER_KINDS

    @property
    def target_key(self) -> EntryKey | None:
        """The ``(kind, name)`` of the entry it names when well formed, else None."""
        return None if self.key is None else (self.target, self.value)


def entry_refs(kind: str, name: str, entry: Mapping[str, Any]) -> Iterator[Ref]:
    """Every reference entry ``name`` of ``kind`` makes, in the entry's key order.

    Absent fields yield nothing; a list field that is not a list yields nothing.
    """
    family = ""
    if kind in PROVIDER_KINDS:
        parts = split_provider_ref(name)
        family = parts[0] if parts else ""
    by_key = _fields_by_key(kind, family)
    source = (kind, name)
    # walk the keys the entry has, not every reference field the schema knows: an agent sets
    # a few of its dozen, and this runs once per agent of a 5,000-agent config
    for key in entry:
        fields = by_key.get(key)
        if fields is None:
            continue
        for ref_field in fields:
            segments = ref_field.segments
            value = entry[key] if len(segments) == 1 else value_at(entry, segments)
            if ref_field.is_list:
                for index, item in enumerate(array(value)):
                    yield Ref(source, ref_field, index, item)
            elif value is not None:
                yield Ref(source, ref_field, None, value)


def references(config: Mapping[str, Any]) -> Iterator[Ref]:
    """Every reference of every entry of ``config``: agents first, then :data:`ENTRY_KINDS`."""
    for kind in ("agents", *ENTRY_KINDS):
        for name, entry in iter_entries(config, kind):
            yield from entry_refs(kind, name, entry)


def entry_of(
    config: Mapping[str, Any], target: str, key: Sequence[str]
) -> Mapping[str, Any] | None:
    """The table ``key`` names in ``target`` of ``config``, or None.

    A provider of a family the schema does not know resolves to nothing (families are closed);
    an MCP server name resolves to the first server with exactly that name (01 §3.5).
    """
    if target == "mcp.servers":
        return first_servers(config, set(key[:1])).get(key[0]) if key else None
    if target in PROVIDER_KINDS and key[0] not in families(target.split(".", 1)[1]):
        return None
    node: object = config
    for part in (*target.split("."), *key):
        node = table(node).get(part)
    return node if isinstance(node, Mapping) else None


# --- MCP grants ------------------------------------------------------------------------------


def granted_servers(mcp_bundles: Mapping[str, Any], bundle_names: Iterable[Any]) -> list[str]:
    """The server names the named MCP bundles grant (01 §3.5): exclude wins across all bundles.

    Every ``exclude`` of every named bundle is collected first; then the union of their
    ``servers`` in first-seen order, without duplicates and without excluded names. An unknown
    bundle, a list that is not a list and a name that is not a string grant nothing.
    """
    bundles = [table(mcp_bundles.get(n)) for n in bundle_names if isinstance(n, str)]
    excluded = {s for b in bundles for s in array(b.get("exclude")) if isinstance(s, str)}
    granted: dict[str, None] = {}
    for bundle in bundles:
        for server in array(bundle.get("servers")):
            if isinstance(server, str) and server not in excluded:
                granted.setdefault(server)
    return list(granted)


def first_servers(config: Mapping[str, Any], wanted: set[str]) -> dict[str, Mapping[str, Any]]:
    """The first ``mcp.servers`` entry of each wanted name (01 §3.5).

    This is the one scan over a config-sized list, so it runs in C: the names are read by
    ``map(dict.get, ...)`` and each wanted name is located by ``list.index``, which stops at
    the first entry with exactly that name.
    """
    found: dict[str, Mapping[str, Any]] = {}
    servers = array(table(config.get("mcp")).get("servers"))
    if not wanted or not servers:
        return found
    try:
        names: list[Any] = list(map(dict.get, servers, repeat("name")))
    except TypeError:  # an entry that is not a table: read the names one by one
        names = [table(s).get("name") for s in servers]
    for name in wanted:
        try:
            found[name] = servers[names.index(name)]
        except ValueError:
            continue
    return found


# --- the closure of an agent -----------------------------------------------------------------


@dataclass
class Reach:
    """What agent ``root`` reaches through references (02 §2), and the edges that do not count.

    ``entries`` maps each reached entry (not the agent) to its table, in discovery order;
    ``unresolved`` are references into carried tables that name no entry (malformed ones
    included); ``too_deep`` are resolving fallback edges of a provider at ``MAX_FALLBACK_DEPTH``,
    which the runtime never follows; ``depth`` is each reached provider's fallback distance from
    the providers reached otherwise (0); ``granted`` are the server names the agent's MCP
    bundles grant and ``servers`` the first entry of each that exists.
    """

    entries: dict[EntryKey, Mapping[str, Any]] = field(default_factory=dict)
    unresolved: list[Ref] = field(default_factory=list)
    too_deep: list[Ref] = field(default_factory=list)
    depth: dict[EntryKey, int] = field(default_factory=dict)
    granted: list[str] = field(default_factory=list)
    servers: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def unconfigured(self) -> list[str]:
        """The granted server names no ``mcp.servers`` entry has, in grant order."""
        return [name for name in self.granted if name not in self.servers]


def reach(
    config: Mapping[str, Any],
    root: str,
    agent: Mapping[str, Any],
    *,
    fallback_depth: int | None = MAX_FALLBACK_DEPTH,
) -> Reach:
    """The closure of agent ``root`` (whose entry is ``agent``) inside ``config`` (02 §2).

    Every reference into a carried table is followed from the agent, except that references
    between providers are fallback edges, walked breadth-first from the providers reached
    otherwise (depth 0) and never from one at ``MAX_FALLBACK_DEPTH`` (01 §3.2). MCP servers are
    reached by :func:`granted_servers` over the agent's ``mcp_bundles``. The export planner and
    verify both call this, so an exported fragment's closure is the planner's by construction.

    ``fallback_depth`` None follows fallback edges at any depth (``too_deep`` stays empty): a
    bundle ZeroClaw wrote keeps every edge that resolved on its install, past the runtime's
    limit and round cycles, and verify accepts that (ZeroClaw's bundles must verify); the
    export cuts at the limit.
    """
    out = Reach()
    queue: list[tuple[str, str, Mapping[str, Any]]] = [("agents", root, agent)]
    for kind, name, entry in queue:  # grows while it is walked: breadth first
        if kind in PROVIDER_KINDS:
            continue  # its references are fallback edges, walked below
        for ref in entry_refs(kind, name, entry):
            if ref.target in CARRIED_TARGETS and not ref.is_none:
                found = _follow(config, ref, out)
                if found is not None:
                    queue.append((ref.target, ref.value, found))
    _fallbacks(config, out, fallback_depth)
    names = array(agent.get("mcp_bundles"))
    out.granted = granted_servers(table(config.get("mcp_bundles")), names)
    out.servers = first_servers(config, set(out.granted))
    return out


def _follow(config: Mapping[str, Any], ref: Ref, out: Reach) -> Mapping[str, Any] | None:
    """Record where ``ref`` leads; the entry when it is reached for the first time."""
    key = ref.key
    found = None if key is None else entry_of(config, ref.target, key)
    if found is None:
        out.unresolved.append(ref)
        return None
    target = (ref.target, ref.value)
    if target in out.entries:
        return None
    out.entries[target] = found
    return found


def _fallbacks(config: Mapping[str, Any], out: Reach, limit: int | None) -> None:
    """Breadth-first over the provider-to-provider edges, from every provider reached so far."""
    distance = out.depth
    distance.update((key, 0) for key in out.entries if key[0] in PROVIDER_KINDS)
    frontier = list(distance)
    while frontier:
        following: list[EntryKey] = []
        for source in frontier:
            for ref in entry_refs(*source, out.entries[source]):
                if ref.target not in CARRIED_TARGETS:
                    continue
                key = ref.key
                found = None if key is None else entry_of(config, ref.target, key)
                if found is None:
                    out.unresolved.append(ref)
                elif limit is not None and distance[source] >= limit:
                    out.too_deep.append(ref)
                elif (ref.target, ref.value) not in distance:
                    target = (ref.target, ref.value)
                    distance[target] = distance[source] + 1
                    out.entries[target] = found
                    following.append(target)
        frontier = following
