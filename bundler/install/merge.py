"""The import merge planner (03 §3.1 points 2-6), pure: no file I/O, no clock, no randomness.

Given the target install's config, a verified bundle fragment and what the user said on the
command line, :func:`plan_merge` decides for every entry of the fragment whether it is
**added** (absent on the target), **reused** (identical once defaults are filled in and
references rewritten), **renamed** (namespaced ``<agent>-<alias>``, ``-2``, ``-3``… until free)
or **bound** (``--bind``: a local entry is used instead). Renaming an entry rewrites every
reference to it inside the fragment, which can make the referrers differ in turn, so the
decision is iterated to a fixpoint. :func:`render_config_text` then appends the new entries to
the user's ``config.toml`` text without changing a byte of what is there.

Entries are keyed ``(kind, name)``: ``kind`` is the dotted map holding them
(``providers.models``, ``risk_profiles``, ``mcp.servers``…) and ``name`` is exactly the string a
reference uses for them: ``anthropic.main`` for a provider, the bare alias otherwise, the
``name`` field for an MCP server. A reference is therefore rewritten by one dictionary lookup.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tomli_w
import tomlkit
import tomlkit.items

from bundler.config.file import toml_error_reason
from bundler.errors import (
    DestinationExists,
    InvalidConfig,
    NotFound,
    PolicyRefused,
    UsageError,
)
from bundler.rules import hints, refs, schema, tomlcompat
from bundler.rules.names import (
    did_you_mean,
    escape_display,
    is_portable_skill_alias,
    non_portable_alias_reason,
)
from bundler.rules.paths import format_path, format_segment, parse_path

# the order new entries are appended in (agents last, so a reader meets the referents first)
ENTRY_KINDS = refs.ENTRY_KINDS
_PROVIDER_KINDS = refs.PROVIDER_KINDS
EntryKey = refs.EntryKey
Config = dict[str, Any]


@dataclass(frozen=True)
class NewEntry:
    """One entry the import writes: where it goes and its final content (secrets included)."""

    kind: str
    name: str
    value: dict[str, Any]

    @property
    def segments(self) -> list[str]:
        """The entry's config path segments (``mcp.servers`` entries addressed by name)."""
        return entry_segments(self.kind, self.name)

    @property
    def path(self) -> str:
        """The entry's config path."""
        return format_path(self.segments)


@dataclass(frozen=True)
class SkillPlacement:
    """What happens to the content of one skill bundle the bundle carries.

    ``action`` is ``added``/``renamed`` (content copied to the merged config's folder of
    ``target_alias``), ``reused`` (local content kept) or ``bound`` (local entry used).
    """

    source_alias: str
    target_alias: str
    action: str


@dataclass
class MergePlan:
    """Everything :func:`plan_merge` decided; paths are config paths, never values."""

    agent: str
    source_agent: str
    added: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    bound: dict[str, str] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)
    reused_with_secrets: list[str] = field(default_factory=list)
    secrets_filled: list[str] = field(default_factory=list)
    secrets_missing: list[str] = field(default_factory=list)
    secret_sources: dict[str, str] = field(default_factory=dict)
    new_entries: list[NewEntry] = field(default_factory=list)
    agent_entry: dict[str, Any] = field(default_factory=dict)
    skills: list[SkillPlacement] = field(default_factory=list)
    merged: Config = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The plan as the ``--json`` fields of 05 §3 (no secret values anywhere in it)."""
        return {
            "agent": self.agent,
            "added": list(self.added),
            "reused": list(self.reused),
            "renamed": dict(self.renamed),
            "bound": dict(self.bound),
            "secrets_missing": list(self.secrets_missing),
        }


# ---------------------------------------------------------------------------------------------
# entries and references


entry_segments = refs.entry_segments


def entry_path(kind: str, name: str) -> str:
    """The config path of an entry, as reports and ``--bind`` spell it."""
    return format_path(entry_segments(kind, name))


def split_entry_path(segments: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """``(kind, name, rest)`` for a config path inside an entry, or None when it names no entry."""
    for kind in ENTRY_KINDS:
        head = kind.split(".")
        width = len(head) + (2 if kind in _PROVIDER_KINDS else 1)
        if list(segments[: len(head)]) == head and len(segments) >= width:
            name = ".".join(segments[len(head) : width])
            return kind, name, list(segments[width:])
    return None


iter_entries = refs.iter_entries
value_at = refs.value_at


def _lookup(config: Mapping[str, Any], kind: str, name: str) -> dict[str, Any] | None:
    """The target's entry that ``name`` would collide with (server names case-insensitively)."""
    if kind == "mcp.servers":
        folded = name.casefold()
        return next(
            (entry for other, entry in iter_entries(config, kind) if other.casefold() == folded),
            None,
        )
    return next((entry for other, entry in iter_entries(config, kind) if other == name), None)


def _entry_schema(kind: str, name: str) -> schema.Node | None:
    return schema.resolve(entry_segments(kind, name))[1]


def references(kind: str, name: str, entry: Mapping[str, Any]) -> Iterator[EntryKey]:
    """Every entry ``entry`` (``name`` of ``kind``) references, as ``(kind, name)``."""
    for ref in refs.entry_refs(kind, name, entry):
        if isinstance(ref.value, str) and ref.value:
            yield ref.target, ref.value


def rewrite_references(
    kind: str, name: str, entry: Mapping[str, Any], mapping: Mapping[EntryKey, str]
) -> dict[str, Any]:
    """A copy of ``entry`` with every reference found in ``mapping`` replaced by its new name."""
    out = copy.deepcopy(dict(entry))
    for ref in refs.entry_refs(kind, name, entry):
        new = mapping.get((ref.target, ref.value)) if isinstance(ref.value, str) else None
        if new is None:
            continue
        at = value_at(out, ref.field.segments)
        if ref.position is None:
            _set(out, ref.field.segments, new)
        else:
            at[ref.position] = new
    return out


def _set(entry: dict[str, Any], rel: Sequence[str], value: Any) -> None:
    node = entry
    for part in rel[:-1]:
        node = node.setdefault(part, {})
    node[rel[-1]] = value


def _delete(entry: dict[str, Any], rel: Sequence[str]) -> None:
    node: Any = entry
    for part in rel[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        node = node[part]
    if isinstance(node, dict):
        node.pop(rel[-1], None)


# ---------------------------------------------------------------------------------------------
# comparison


def with_defaults(value: Any, node: schema.Node | None) -> Any:
    """``value`` with every absent schema default filled in, recursively (a fresh copy)."""
    if not isinstance(value, dict) or node is None:
        return copy.deepcopy(value)
    out = {key: with_defaults(sub, schema.child(node, key)) for key, sub in value.items()}
    for name, sub_node in node.get("properties", {}).items():
        if name not in out and schema.has_default(sub_node):
            out[name] = with_defaults(schema.default_of(sub_node), sub_node)
    return out


def same_content(
    incoming: Mapping[str, Any],
    existing: Mapping[str, Any],
    node: schema.Node | None,
    ignored: Sequence[Sequence[str]],
) -> bool:
    """True when two entries are identical with defaults filled in and ``ignored`` paths removed."""
    left, right = with_defaults(dict(incoming), node), with_defaults(dict(existing), node)
    for rel in ignored:
        _delete(left, rel)
        _delete(right, rel)
    return tomlcompat.same_data(left, right)


def secret_leaves(value: Any, segments: list[str]) -> Iterator[tuple[list[str], Any]]:
    """``(path segments, value)`` of every secret leaf below ``segments`` (schema-marked)."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from secret_leaves(sub, [*segments, key])
    elif schema.is_secret(segments):
        yield segments, value


# ---------------------------------------------------------------------------------------------
# the planner


def _canonical(path: str, what: str) -> tuple[str, ...]:
    try:
        segments = parse_path(path)
    except UsageError as err:
        raise UsageError(f"{what} {escape_display(path)}: {err.message}", path=path) from None
    return tuple(schema.resolve(segments)[0])


def _fragment_agent(fragment: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    agents = fragment.get("agents")
    if not isinstance(agents, dict) or len(agents) != 1:
        raise InvalidConfig("bundle config.toml must hold exactly one agent", path="config.toml")
    ((alias, entry),) = agents.items()
    if not isinstance(entry, dict):
        raise InvalidConfig(f"agents.{escape_display(alias)} is not a table", path="config.toml")
    return alias, entry


def _parse_binds(
    binds: Mapping[str, str], fragment_keys: set[EntryKey], target: Mapping[str, Any], where: str
) -> dict[EntryKey, str]:
    """``--bind KIND_PATH=LOCAL`` as ``{fragment entry: local name}``; a missing side is refused."""
    out: dict[EntryKey, str] = {}
    for raw_path, local in binds.items():
        located = split_entry_path(_canonical(raw_path, "--bind"))
        if located is None or located[2]:
            raise UsageError(
                f"--bind {escape_display(raw_path)}: not an entry path such as "
                "risk_profiles.<alias> or providers.models.<family>.<alias>",
                path=raw_path,
            )
        kind, name, _ = located
        if (kind, name) not in fragment_keys:
            raise NotFound(
                f"--bind {escape_display(raw_path)}: the bundle has no such entry "
                "(see 'bundler bundle inspect')",
                path=raw_path,
            )
        if not any(other == local for other, _ in iter_entries(target, kind)):
            raise NotFound(
                f"--bind {escape_display(raw_path)}={escape_display(local)}: bind to an existing "
                f"entry; there is no {kind} entry {escape_display(local)} in {where}",
                path=raw_path,
            )
        out[(kind, name)] = local
    return out


def _parse_secrets(
    secrets: Mapping[str, str], required: Sequence[str], origins: Mapping[str, str]
) -> tuple[dict[tuple[str, ...], str], list[tuple[str, ...]]]:
    """Given secrets keyed by canonical segments, and the canonical required paths in order.

    ``origins`` names where a path came from when not ``--secret`` (``secrets file F``)."""
    required_canonical = [_canonical(path, "required secret") for path in required]
    given: dict[tuple[str, ...], str] = {}
    for path, value in secrets.items():
        origin = origins.get(path)
        canonical = _canonical(path, origin or "--secret")
        if canonical not in required_canonical:
            close = did_you_mean(path, [format_path(list(c)) for c in required_canonical])
            shown = escape_display(path)
            where = f"{origin}: {shown} is" if origin else f"--secret {shown}:"
            raise UsageError(
                f"{where} not a required secret of this bundle (its manifest lists them){close}",
                path=path,
            )
        given[canonical] = value
    return given, required_canonical


def _reachable(
    start: list[EntryKey], entries: Mapping[EntryKey, dict[str, Any]], bound: Mapping[EntryKey, str]
) -> set[EntryKey]:
    """Fragment entries reachable from ``start``; a bound entry is used locally, so not walked."""
    seen: set[EntryKey] = set()
    stack = list(start)
    while stack:
        key = stack.pop()
        if key in seen or key not in entries:
            continue
        seen.add(key)
        if key in bound:
            continue
        stack.extend(references(*key, entries[key]))
    return seen


def _free_name(kind: str, name: str, agent: str, taken: set[str], avoid: set[str]) -> str:
    """``<agent>-<alias>`` (the alias part of a provider), then ``-2``, ``-3``… until free."""
    family, alias = (
        (refs.split_provider_ref(name) or ("", name)) if kind in _PROVIDER_KINDS else ("", name)
    )
    base = f"{agent}-{alias}"
    counter = 1
    while True:
        candidate_alias = base if counter == 1 else f"{base}-{counter}"
        candidate = f"{family}.{candidate_alias}" if family else candidate_alias
        folded = candidate.casefold() if kind == "mcp.servers" else candidate
        if folded not in taken and folded not in avoid:
            return candidate
        counter += 1


def plan_merge(
    target_config: Mapping[str, Any],
    fragment: Mapping[str, Any],
    required_secrets: Sequence[str],
    *,
    as_alias: str | None = None,
    binds: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
    secret_origins: Mapping[str, str] | None = None,
    install_root: str | None = None,
) -> MergePlan:
    """Decide how ``fragment`` (a verified bundle's config) merges into ``target_config``.

    ``required_secrets`` are the manifest's paths; ``binds`` maps a fragment entry path to a
    local reference (``providers.models.anthropic.main`` → ``anthropic.prod``); ``secrets``
    maps required secret paths (as the manifest writes them) to values, and ``secret_origins``
    says where a path not from ``--secret`` came from (``secrets file F``) for errors. Raises
    :class:`Refused` (exit 1) for a taken or non-portable agent alias, a bind to a missing
    local entry or a namespaced skill alias that is not portable; :class:`UsageError` (exit 2)
    for a malformed ``--bind``/``--secret`` path. The returned plan's ``merged`` is the whole
    merged config, ready for ``validate()``. ``install_root`` names the target in refusals
    that the install itself causes (a taken alias, a missing local entry).
    """
    where = hints.looked_at(install_root) if install_root else "this install"
    source_agent, agent_entry = _fragment_agent(fragment)
    agent = as_alias if as_alias is not None else source_agent
    alias_problem = non_portable_alias_reason(agent)
    if alias_problem is not None:
        raise PolicyRefused(
            f"agent alias {escape_display(agent)} is not a portable alias "
            f"({escape_display(alias_problem)}); choose another with --as",
            path=f"agents.{format_segment(agent)}",
        )
    target_agents = target_config.get("agents")
    if isinstance(target_agents, dict) and agent in target_agents:
        hint = "choose another with --as NEW" if as_alias is None else "choose a free one"
        raise DestinationExists(
            f"agent alias {escape_display(agent)} is taken ({hint}) in {where}",
            path=f"agents.{format_segment(agent)}",
        )

    entries: dict[EntryKey, dict[str, Any]] = {
        (kind, name): entry for kind in ENTRY_KINDS for name, entry in iter_entries(fragment, kind)
    }
    bound = _parse_binds(binds or {}, set(entries), target_config, where)
    given, required = _parse_secrets(secrets or {}, required_secrets, secret_origins or {})
    sources = dict(zip(required, required_secrets, strict=True))

    # secret paths grouped by the entry holding them: (canonical path, path inside the entry)
    scrubbed: dict[EntryKey, list[tuple[tuple[str, ...], list[str]]]] = {}
    for canonical in required:
        located = split_entry_path(canonical)
        if located is not None:
            scrubbed.setdefault((located[0], located[1]), []).append((canonical, located[2]))

    needed = _reachable(list(references("agents", source_agent, agent_entry)), entries, bound)
    order = [key for key in entries if key in needed and key not in bound]

    def incoming(key: EntryKey, mapping: Mapping[EntryKey, str]) -> dict[str, Any]:
        value = rewrite_references(*key, entries[key], mapping)
        for canonical, rest in scrubbed.get(key, []):
            if canonical in given:
                _set(value, rest, given[canonical])
        return value

    def ignored(key: EntryKey) -> list[list[str]]:
        return [rest for canonical, rest in scrubbed.get(key, []) if canonical not in given]

    taken: dict[str, set[str]] = {}
    for kind in ENTRY_KINDS:
        names = {name for name, _ in iter_entries(target_config, kind)} | {
            name for k, name in entries if k == kind
        }
        taken[kind] = {name.casefold() for name in names} if kind == "mcp.servers" else names
    avoid_servers = {
        name.casefold()
        for _, entry in iter_entries(fragment, "mcp_bundles")
        for name in entry.get("exclude", [])
        if isinstance(name, str)
    }

    renamed: dict[EntryKey, str] = {}
    changed = True
    while changed:  # a rename is never undone, so this ends after at most len(order) rounds
        changed = False
        mapping: dict[EntryKey, str] = {**bound, **renamed}
        for key in order:
            if key in renamed:
                continue
            existing = _lookup(target_config, *key)
            if existing is None:
                continue
            if same_content(incoming(key, mapping), existing, _entry_schema(*key), ignored(key)):
                continue
            kind = key[0]
            new_name = _free_name(
                kind, key[1], agent, taken[kind], avoid_servers if kind == "mcp.servers" else set()
            )
            taken[kind].add(new_name.casefold() if kind == "mcp.servers" else new_name)
            renamed[key] = new_name
            mapping[key] = new_name
            changed = True

    mapping = {**bound, **renamed}
    plan = MergePlan(agent=agent, source_agent=source_agent)
    plan.merged = copy.deepcopy(dict(target_config))
    for key in entries:
        kind, name = key
        if key in bound:
            plan.bound[entry_path(kind, name)] = entry_path(kind, bound[key])
            if kind == "skill_bundles":
                plan.skills.append(SkillPlacement(name, bound[key], "bound"))
            continue
        if key not in needed:
            plan.unused.append(entry_path(kind, name))
            continue
        existing = _lookup(target_config, kind, name)
        if existing is not None and key not in renamed:
            plan.reused.append(entry_path(kind, name))
            if any(value for _, value in secret_leaves(existing, entry_segments(kind, name))):
                plan.reused_with_secrets.append(entry_path(kind, name))
            if kind == "skill_bundles":
                plan.skills.append(SkillPlacement(name, name, "reused"))
            continue
        final = renamed.get(key, name)
        value = incoming(key, mapping)
        if kind == "mcp.servers":
            value["name"] = final
        if kind == "skill_bundles":
            _place_skill(plan, name, final, value, key in renamed)
        for canonical, rest in scrubbed.get(key, []):
            final_path = format_path([*entry_segments(kind, final), *rest])
            plan.secret_sources[final_path] = sources[canonical]
            (plan.secrets_filled if canonical in given else plan.secrets_missing).append(final_path)
        if key in renamed:
            plan.renamed[entry_path(kind, name)] = entry_path(kind, final)
        else:
            plan.added.append(entry_path(kind, name))
        new = NewEntry(kind, final, value)
        plan.new_entries.append(new)
        _insert(plan.merged, new)
    plan.agent_entry = rewrite_references("agents", source_agent, agent_entry, mapping)
    plan.merged.setdefault("agents", {})[agent] = copy.deepcopy(plan.agent_entry)
    plan.added.append(f"agents.{format_segment(agent)}")
    plan.secrets_missing.sort()
    plan.secrets_filled.sort()
    return plan


def _place_skill(plan: MergePlan, old: str, new: str, value: dict[str, Any], renamed: bool) -> None:
    """Record where a skill bundle's content goes; a renamed one's directory follows its alias."""
    # an unportable alias arrives only as the bundle wrote it, without content (verify refuses
    # content under it); a rename must still give a folder name
    if renamed and not is_portable_skill_alias(new):
        raise PolicyRefused(
            f"skill bundle alias {escape_display(new)} is not a portable alias; "
            "import with a shorter --as",
            path=f"skill_bundles.{format_segment(new)}",
        )
    directory = value.get("directory")
    if renamed and isinstance(directory, str) and directory:
        # only the last component is namespaced, the same way the alias was (03 §3.1 point 4)
        head, _, last = directory.rstrip("/").rpartition("/")
        suffix = new[len(plan.agent) + 1 + len(old) :]
        leaf = f"{plan.agent}-{last}{suffix}"
        value["directory"] = f"{head}/{leaf}" if head else leaf
    plan.skills.append(SkillPlacement(old, new, "renamed" if renamed else "added"))


def _insert(config: dict[str, Any], new: NewEntry) -> None:
    """Put ``new`` into a plain-dict config (servers appended to the array)."""
    if new.kind == "mcp.servers":
        config.setdefault("mcp", {}).setdefault("servers", []).append(copy.deepcopy(new.value))
        return
    node = config
    for part in new.segments[:-1]:
        node = node.setdefault(part, {})
    node[new.segments[-1]] = copy.deepcopy(new.value)


# ---------------------------------------------------------------------------------------------
# editing the user's config.toml text


def _render_table(
    segments: Sequence[str], value: Mapping[str, Any], *, array_item: bool = False
) -> str:
    """A ``[header]`` (or ``[[header]]``) table with sub-tables as their own headers below it."""
    header = ".".join(format_segment(segment) for segment in segments)
    plain = {
        key: sub
        for key, sub in value.items()
        if not isinstance(sub, dict) and not _array_of_tables(sub)
    }
    out = [f"[[{header}]]\n" if array_item else f"[{header}]\n", tomli_w.dumps(plain)]
    for key, sub in value.items():
        if isinstance(sub, dict):
            out.append("\n" + _render_table([*segments, key], sub))
        elif _array_of_tables(sub):
            # tomli_w would write ``[[key]]`` from the document root: give it its full header
            for item in sub:
                out.append("\n" + _render_table([*segments, key], item, array_item=True))
    return "".join(out)


def _array_of_tables(value: Any) -> bool:
    """True for a non-empty list holding only tables (ZeroClaw's ``tool_filter_groups``)."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _inline_parent(doc: tomlkit.TOMLDocument, new: NewEntry) -> list[str] | None:
    """The path of an existing inline table or static array that must hold ``new``, if any."""
    container: Any = doc
    parents = ["mcp", "servers"] if new.kind == "mcp.servers" else new.segments[:-1]
    for depth, part in enumerate(parents):
        if not isinstance(container, dict) or part not in container:
            return None
        container = container[part]
        if isinstance(container, tomlkit.items.InlineTable) or (
            isinstance(container, tomlkit.items.Array)
            and not isinstance(container, tomlkit.items.AoT)
        ):
            return parents[: depth + 1]
    return None


def _inline(value: Any) -> Any:
    """``value`` as tomlkit inline items: what an inline table or static array may hold."""
    if isinstance(value, dict):
        table = tomlkit.inline_table()
        for key, sub in value.items():
            table[key] = _inline(sub)
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        for sub in value:
            array.append(_inline(sub))
        return array
    return value


def render_config_text(old_text: str, plan: MergePlan) -> tuple[str, list[str]]:
    """The new ``config.toml`` text and notes about values that had to be rewritten.

    The existing text is kept byte for byte and the new entries are appended after it, except
    where an existing parent is an inline table or a static array (TOML cannot extend those
    from outside): only that value is rewritten, through tomlkit, and a note names it. The
    result is parsed again and must equal ``plan.merged``.
    """
    doc = tomlkit.parse(old_text)
    notes: list[str] = []
    appended: list[str] = []
    rewritten = False
    entries = [*plan.new_entries, NewEntry("agents", plan.agent, plan.agent_entry)]
    for new in entries:
        parent = _inline_parent(doc, new)
        if parent is None:
            if new.kind == "mcp.servers":
                appended.append(_render_table(["mcp", "servers"], new.value, array_item=True))
            else:
                appended.append(_render_table(new.segments, new.value))
            continue
        rewritten = True
        note = (
            f"{format_path(parent)} is an inline table or static array in config.toml: "
            "that value is rewritten"
        )
        if note not in notes:
            notes.append(note)
        container: Any = doc
        if new.kind == "mcp.servers":
            container["mcp"]["servers"].append(_inline(new.value))
            continue
        for part in new.segments[:-1]:
            if part not in container:
                container[part] = tomlkit.inline_table()
            container = container[part]
        container[new.segments[-1]] = _inline(new.value)
    text = tomlkit.dumps(doc) if rewritten else old_text
    if text and not text.endswith("\n"):
        text += "\n"
    if appended:
        text += ("\n" if text else "") + "\n".join(appended)
    try:
        reparsed = tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as err:
        raise PolicyRefused(
            f"config.toml: cannot append the imported entries ({toml_error_reason(err)}); "
            "nothing changed",
            path="config.toml",
        ) from None
    if not tomlcompat.same_data(reparsed, plan.merged):
        raise PolicyRefused(
            "config.toml: the edited file would not equal the merged config; nothing changed",
            path="config.toml",
        )
    return text, notes
