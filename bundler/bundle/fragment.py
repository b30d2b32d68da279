"""The "export form" of a bundle's ``config.toml`` (03 §1), pure: no file I/O.

A bundle's fragment is untrusted. An exporter writes exactly one agent and the entries it
reaches (02 §2), scrubbed (02 §5) and sanitised (02 §3); anything else in the fragment was put
there by someone else and could, once imported, grant more than the manifest admits. Every
function here reports *all* it finds as :class:`Problem` values instead of stopping at the first.

Raw-text limits (:data:`bundler.config.file.MAX_CONFIG_TOML_BYTES`, :func:`nesting_depth`) are
checked before parsing so a hostile file cannot exhaust the parser.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.errors import InvalidInput, UsageError
from bundler.rules import refs, schema
from bundler.rules.config_view import array, strings, table, table_at
from bundler.rules.credentials import mask_credentials
from bundler.rules.names import escape_display, non_portable_alias_reason, safe_relative_path
from bundler.rules.paths import Segment, format_path, parse_path
from bundler.rules.secrets import CIPHERTEXT_PREFIXES
from bundler.rules.skillfolder import skill_folder_problem, used_folders

MAX_NESTING = 64

# Top-level tables an export may write (02 §2); anything else was smuggled in.
CARRIED_TABLES = (
    "agents",
    "providers",
    "risk_profiles",
    "runtime_profiles",
    "skill_bundles",
    "knowledge_bundles",
    "mcp_bundles",
    "mcp",
)
# Agent fields an export always removes (02 §3): present in a bundle means not export's form.
_REMOVED_AGENT_FIELDS = ("channels", "delegates", "cron_jobs", "a2a")
_REMOVED_WORKSPACE_FIELDS = ("path", "access", "read_memory_from")
_BUNDLE_FIELDS = ("skill_bundles", "knowledge_bundles", "mcp_bundles")
# folders are compared install-relative, so any root serves for a fragment; never touched
_FRAGMENT_ROOT = Path("/nonexistent/bundler-fragment-install")


@dataclass(frozen=True)
class Problem:
    """One finding: ``path`` names the bundle entry or config path at fault (already escaped);
    ``concept`` is what kind of fault it is (a content that does not match its digest is
    :class:`~bundler.errors.Tampered`, a link :class:`~bundler.errors.Hostile`...), the error
    an operation that stops at it raises and the ``kind`` its ``--json`` reports."""

    path: str
    message: str
    concept: type[InvalidInput] = dataclasses.field(default=InvalidInput, compare=False)

    def error(self, message: str) -> InvalidInput:
        """The error that stops an operation at this finding, saying ``message``."""
        return self.concept(message, path=self.path)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def display_path(segments: Sequence[Segment]) -> str:
    """A config path for messages: formatted like ``config set`` takes it, control chars escaped."""
    return escape_display(format_path(segments))


# --------------------------------------------------------------------------- raw-text limits

_TOKEN = re.compile(r'"""|\'\'\'|["\'#\[\]{}=,.\n]')


def _skip_basic_string(text: str, pos: int, multiline: bool) -> int:
    """Index just past the closing quote of a basic string whose body starts at ``pos``."""
    closing = '"""' if multiline else '"'
    while True:
        end = text.find(closing, pos)
        if end < 0:
            return len(text)
        backslashes = 0
        while end - backslashes - 1 >= pos and text[end - backslashes - 1] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            end += len(closing)
            # TOML lets a multi-line string end with up to two extra quotes: """a"""""
            extra = 0
            while multiline and extra < 2 and text.startswith('"', end):
                end += 1
                extra += 1
            return end
        pos = end + 1


def _skip_literal_string(text: str, pos: int, multiline: bool) -> int:
    closing = "'''" if multiline else "'"
    end = text.find(closing, pos)
    if end < 0:
        return len(text)
    end += len(closing)
    extra = 0
    while multiline and extra < 2 and text.startswith("'", end):
        end += 1
        extra += 1
    return end


def nesting_depth(text: str) -> int:
    """An upper bound of the nesting depth of TOML ``text``, computed without parsing it.

    Counts table-header segments, dotted-key segments (also inside inline tables) and open
    ``[``/``{`` brackets, skipping strings and comments. It never recurses, so it is safe on any
    input; malformed text yields some number and is then refused by the parser.
    """
    deepest = 0
    table_depth = 0
    stack: list[tuple[str, int]] = []  # (opener, depth of the container it opens)
    mode = "key"  # key | header | value | rest (ignore until newline)
    base = 0  # depth a value container opened now would sit below
    dots = 0
    aot = False
    arrays_seen = 0
    pos = 0
    while True:
        match = _TOKEN.search(text, pos)
        if match is None:
            return deepest
        token, pos = match.group(), match.end()
        if token in ('"""', "'''"):
            pos = (_skip_basic_string if token == '"""' else _skip_literal_string)(text, pos, True)
        elif token == '"':
            pos = _skip_basic_string(text, pos, False)
        elif token == "'":
            pos = _skip_literal_string(text, pos, False)
        elif token == "#":
            newline = text.find("\n", pos)
            pos = len(text) if newline < 0 else newline
        elif token == "\n":
            if not stack:
                mode, dots = "key", 0
        elif token == "." and mode in ("key", "header"):
            dots += 1
        elif token == "[" and not stack and mode == "key" and dots == 0:
            aot = text.startswith("[", pos)
            pos += 1 if aot else 0
            mode = "header"
        elif token == "]" and mode == "header":
            segments = dots + 1
            # A header below an earlier [[array]] lands inside its last element: one more level
            # per such prefix. Which prefixes match is not tracked, so count the worst case.
            table_depth = segments + min(segments - (1 if aot else 0), arrays_seen)
            if aot:
                table_depth += 1
                arrays_seen += 1
            deepest = max(deepest, table_depth)
            pos += 1 if aot and text.startswith("]", pos) else 0
            mode, dots = "rest", 0
        elif token == "=" and mode == "key":
            outer = stack[-1][1] if stack else table_depth
            base = outer + dots
            deepest = max(deepest, base)
            mode, dots = "value", 0
        elif token in "[{" and mode == "value":
            depth = base + 1
            deepest = max(deepest, depth)
            stack.append((token, depth))
            base = depth
            mode, dots = ("key" if token == "{" else "value"), 0
        elif token in "]}" and stack:
            stack.pop()
            base = stack[-1][1] if stack else table_depth
            mode = "value" if stack else "rest"
        elif token == "," and stack:
            mode, dots = ("key" if stack[-1][0] == "{" else "value"), 0
            base = stack[-1][1]


# --------------------------------------------------------------------------- walking


def _walk_leaves(value: Any, segments: list[Segment]) -> Iterator[tuple[list[Segment], Any]]:
    """Every leaf of a parsed TOML value with its path (array items by index)."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _walk_leaves(sub, [*segments, key])
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _walk_leaves(sub, [*segments, index])
    else:
        yield segments, value


def _server_segments(index: int, server: object) -> list[Segment]:
    """An MCP server is addressed by its name (01 §6); by index when it has no usable name."""
    name = table(server).get("name")
    return ["mcp", "servers", name if isinstance(name, str) and name else index]


def _schema_problems(
    value: Any, node: schema.Node | None, segments: list[Segment], secret: bool
) -> Iterator[Problem]:
    """Unknown keys and non-empty secrets below ``value`` whose schema is ``node``."""
    if node is not None and node.get("x-opaque"):
        return  # kept as is: a free-form value (a table, or a list of them) describes itself
    if isinstance(value, dict):
        secret_map = bool(node and node.get("x-secret") and node.get("type") == "object")
        for key, sub in value.items():
            sub_node = (
                schema.child(node, key)
                if node is not None and node.get("type") != "array"
                else None
            )
            path: list[Segment] = [*segments, key]
            if sub_node is None:
                yield Problem(
                    display_path(path),
                    "a key the schema does not know (an export never writes one)",
                )
                continue
            yield from _schema_problems(
                sub, sub_node, path, secret or secret_map or bool(sub_node.get("x-secret"))
            )
    elif isinstance(value, list):
        items = node.get("items") if node is not None else None
        keyed = bool(node and node.get("x-keyed-by"))
        for index, sub in enumerate(value):
            path = _server_segments(index, sub) if keyed else [*segments, index]
            yield from _schema_problems(
                sub, items if isinstance(items, dict) else None, path, secret
            )
    elif secret and value != "":
        yield Problem(
            display_path(segments), 'secret field is not empty (an export leaves every secret "")'
        )


def _ciphertext_problems(fragment: Mapping[str, Any]) -> Iterator[Problem]:
    for segments, leaf in _walk_leaves(fragment, []):
        if isinstance(leaf, str) and leaf.startswith(CIPHERTEXT_PREFIXES):
            yield Problem(
                display_path(segments),
                "holds an encrypted value (enc:/enc2:), which an export never writes",
            )


# --------------------------------------------------------------------------- references


def _unresolved(what: str, ref: object) -> str:
    return f"{what} {escape_display(str(ref))!r} does not resolve inside the bundle's fragment"


def _unresolved_problem(ref: refs.Ref) -> Problem:
    if ref.target in _BUNDLE_FIELDS:
        message = f"bundle {escape_display(str(ref.value))!r} is not in the bundle's fragment"
    else:  # fallback edges are warnings (fragment_warnings), never problems
        message = _unresolved("reference", ref.value)
    return Problem(display_path(ref.path), message)


@dataclass
class _Closure:
    """What the root agent reaches inside the fragment, and the references that do not resolve."""

    entries: set[tuple[str, ...]]
    problems: list[Problem]


def _reach(
    fragment: Mapping[str, Any],
    root: str,
    agent: Mapping[str, Any],
    fallback_depth: int | None = None,
) -> _Closure:
    """The closure :func:`~bundler.rules.refs.reach` finds, as entry paths, with export-form rules.

    An export writes bundle lists trimmed, unique and without empty names; every reference it
    writes resolves inside the fragment, but for fallback edges, which ZeroClaw's exporter keeps
    when they resolve on its install: those are warnings (:func:`fragment_warnings`). Fallback
    chains are followed at any depth and round cycles unless ``fallback_depth`` limits them:
    ZeroClaw's exporter keeps such edges too, and the runtime skips what it cannot use.
    """
    problems: list[Problem] = []
    for field in _BUNDLE_FIELDS:
        names = array(agent.get(field))
        for index, name in enumerate(names):
            if (
                not isinstance(name, str)
                or not name
                or name != name.strip()
                or names.index(name) != index
            ):
                problems.append(
                    Problem(
                        display_path(["agents", root, field, str(index)]),
                        "an export writes bundle lists trimmed, unique, without empty names",
                    )
                )
    found = refs.reach(fragment, root, agent, fallback_depth=fallback_depth)
    problems += [_unresolved_problem(ref) for ref in found.unresolved if not ref.is_fallback]
    reached: set[tuple[str, ...]] = {("agents", root)}
    reached.update(tuple(refs.entry_segments(*key)) for key in found.entries)
    reached.update(("mcp", "servers", name) for name in found.granted)
    return _Closure(reached, problems)


def reached_entries(config: Mapping[str, Any], root: str) -> set[tuple[str, ...]]:
    """Every entry agent ``root`` reaches in ``config`` (the closure an export would carry).

    Keys are segment tuples: ``("agents", root)``, ``("providers", category, family, alias)``,
    ``("risk_profiles", alias)``, ``("mcp", "servers", name)``… References that resolve nowhere
    are left out.
    """
    agent = table(table(config.get("agents")).get(root))
    return _reach(config, root, agent, refs.MAX_FALLBACK_DEPTH).entries


def indexed_path(segments: Sequence[str], index: int) -> str:
    """A list element's config path as ZeroClaw writes it: ``...fallback[0]`` (escaped)."""
    return display_path([*segments, index])


@dataclass(frozen=True)
class Unresolved:
    """A name in the fragment that resolves to nothing the bundle carries.

    ``segments`` is the list holding it (a provider's ``fallback`` or an MCP bundle's
    ``servers``), ``index`` its position, ``ref`` the name as written; ``depth`` is, for a
    fallback edge, the fallback distance of the provider it leaves (0 for a server name).
    """

    segments: tuple[str, ...]
    index: int
    ref: Any
    depth: int = 0

    @property
    def path(self) -> str:
        """``<list path>[<index>]``, escaped for display."""
        return indexed_path(self.segments, self.index)


def unresolved_edges(fragment: Mapping[str, Any], root_agent: str) -> list[Unresolved]:
    """Fallback edges and MCP bundle server names the root agent reaches that resolve nowhere.

    Read off :func:`~bundler.rules.refs.reach` (the one reference graph and grant rule).
    ZeroClaw's exporter keeps both (an edge that resolves on the exporting install, a server
    name nothing configures). On import they are removed rather than bound to a same-named
    entry the target happens to have, which would change the agent's endpoint, credentials or
    tools without the bundle saying so.
    """
    agent = table(table(fragment.get("agents")).get(root_agent))
    found = refs.reach(fragment, root_agent, agent, fallback_depth=None)
    out: list[Unresolved] = []
    for ref in found.unresolved:
        if ref.is_fallback and ref.position is not None:
            depth = found.depth.get(ref.source, 0)
            out.append(Unresolved(tuple(ref.path[:-1]), ref.position, ref.value, depth))
    unconfigured = set(found.unconfigured)
    carried = strings(agent.get("mcp_bundles"))
    bundles = table(fragment.get("mcp_bundles"))
    for bundle_name in dict.fromkeys(carried):
        listed = array(table(bundles.get(bundle_name)).get("servers"))
        for index, server_name in enumerate(listed):
            if isinstance(server_name, str) and server_name in unconfigured:
                out.append(Unresolved(("mcp_bundles", bundle_name, "servers"), index, server_name))
    return out


def without_unresolved(
    fragment: Mapping[str, Any], root_agent: str
) -> tuple[dict[str, Any], list[Unresolved]]:
    """A copy of ``fragment`` with every :func:`unresolved_edges` item removed, and the items.

    A ``fallback`` list left empty is removed, as ZeroClaw drops an empty ``fallback``.
    """
    out: dict[str, Any] = copy.deepcopy(dict(fragment))
    removed = unresolved_edges(out, root_agent)
    for item in sorted(removed, key=lambda i: i.index, reverse=True):
        *parent_segments, key = item.segments
        parent: Any = out
        for segment in parent_segments:
            parent = parent[segment]
        del parent[key][item.index]
    for item in removed:
        *parent_segments, key = item.segments
        parent = out
        for segment in parent_segments:
            parent = parent[segment]
        if key == "fallback" and parent.get(key) == []:
            del parent[key]
    return out, removed


def fragment_warnings(fragment: Mapping[str, Any], root_agent: str) -> list[Problem]:
    """What ZeroClaw's ``collect_warnings`` would say of the fragment's dangling names.

    Each unresolved fallback edge or MCP server name is a warning: ``verify`` accepts it and
    ``agents import`` removes it (see :func:`unresolved_edges`). A dangling edge leaving a
    provider at the depth limit is past the limit too, whatever the target install holds.
    """
    problems: list[Problem] = []
    deep: list[Problem] = []
    for item in unresolved_edges(fragment, root_agent):
        if item.segments[0] == "providers":
            message = (
                f"fallback {escape_display(str(item.ref))!r} is not in the bundle; "
                "import removes the edge rather than bind it to a same-named target provider"
            )
            if item.depth >= refs.MAX_FALLBACK_DEPTH:
                node = f"{item.segments[2]}.{item.segments[3]}"
                deep.append(
                    Problem(
                        display_path(item.segments),
                        f"max_fallback_depth_exceeded: {escape_display(node)} is at depth "
                        f"{item.depth}; the runtime follows fallback to MAX_FALLBACK_DEPTH = "
                        f"{refs.MAX_FALLBACK_DEPTH} and never tries this edge",
                    )
                )
        else:
            message = (
                f"server {escape_display(str(item.ref))!r} is neither carried nor configured; "
                "import removes the name rather than grant a same-named target server"
            )
        problems.append(Problem(item.path, message))
    return problems + deep


def _present_entries(fragment: Mapping[str, Any]) -> Iterator[tuple[str, ...]]:
    """Every entry the fragment holds, as the key tuple :func:`_reach` produces."""
    for kind in ("agents", "risk_profiles", "runtime_profiles", *_BUNDLE_FIELDS):
        for alias in table(fragment.get(kind)):
            yield (kind, alias)
    for category, families in table(fragment.get("providers")).items():
        for family, aliases in table(families).items():
            for alias in table(aliases):
                yield ("providers", category, family, alias)


# --------------------------------------------------------------------------- the checks


def _top_level_problems(fragment: Mapping[str, Any]) -> Iterator[Problem]:
    for key, value in fragment.items():
        if key not in CARRIED_TABLES:
            yield Problem(display_path([key]), "a table an export never carries")
        elif not isinstance(value, dict):
            yield Problem(display_path([key]), "must be a table")
    mcp = fragment.get("mcp")
    if isinstance(mcp, dict):
        for key in mcp:
            if key != "servers":
                yield Problem(
                    display_path(["mcp", key]),
                    "a global [mcp] setting, which an export never carries",
                )
        servers = mcp.get("servers", [])
        if not isinstance(servers, list):
            yield Problem("mcp.servers", "must be an array of tables")


def _agent_problems(root: str, agent: Mapping[str, Any]) -> Iterator[Problem]:
    for field in _REMOVED_AGENT_FIELDS:
        if field in agent:
            yield Problem(display_path(["agents", root, field]), "a field an export always removes")
    workspace = agent.get("workspace")
    if isinstance(workspace, dict):
        for field in _REMOVED_WORKSPACE_FIELDS:
            if field in workspace:
                yield Problem(
                    display_path(["agents", root, "workspace", field]),
                    "a field an export always removes",
                )
    if agent.get("delegate_same_risk_profile", True) is not False:
        yield Problem(
            display_path(["agents", root, "delegate_same_risk_profile"]),
            "must be false (an export always sets it so)",
        )
    identity = agent.get("identity")
    aieos_path = table(identity).get("aieos_path", "")
    if isinstance(aieos_path, str) and aieos_path:
        normal = safe_relative_path(aieos_path)
        if (
            normal is None
            or normal != aieos_path
            or normal == "memory"
            or normal.startswith("memory/")
        ):
            yield Problem(
                display_path(["agents", root, "identity", "aieos_path"]),
                "identity path is not a portable relative path outside memory/",
            )


def _risk_profile_problems(fragment: Mapping[str, Any]) -> Iterator[Problem]:
    for alias, profile in table(fragment.get("risk_profiles")).items():
        if isinstance(profile, dict) and "approval_route" in profile:
            yield Problem(
                display_path(["risk_profiles", alias, "approval_route"]),
                "a field an export always removes",
            )


def _skill_directory_problems(fragment: Mapping[str, Any]) -> Iterator[Problem]:
    """A carried ``directory`` must be a fresh child of the skills root (:mod:`skillfolder`)."""
    for alias, bundle in table(fragment.get("skill_bundles")).items():
        directory = table(bundle).get("directory", "")
        if not isinstance(directory, str) or not directory:
            continue
        used = used_folders(fragment, _FRAGMENT_ROOT, except_bundle=alias)
        reason = skill_folder_problem(directory, used)
        if reason is not None:
            yield Problem(display_path(["skill_bundles", alias, "directory"]), reason)


def _server_problems(fragment: Mapping[str, Any], agent: Mapping[str, Any]) -> Iterator[Problem]:
    servers = array(table(fragment.get("mcp")).get("servers"))
    names: list[str] = []
    for index, server in enumerate(servers):
        name = table(server).get("name")
        if not isinstance(name, str) or not name:
            yield Problem(display_path(["mcp", "servers", index]), "an MCP server without a name")
            continue
        if name in names:
            yield Problem(
                display_path(["mcp", "servers", name]), "a second MCP server with the same name"
            )
        names.append(name)
    bundles = table(fragment.get("mcp_bundles"))
    carried = strings(agent.get("mcp_bundles"))
    # a listed server name that names no carried server is a warning (fragment_warnings):
    # ZeroClaw's exporter keeps it; a name that is not a string is no name at all
    for bundle_name in carried:
        listed = table(bundles.get(bundle_name)).get("servers", [])
        for index, server_name in enumerate(array(listed)):
            if not isinstance(server_name, str):
                path = ["mcp_bundles", bundle_name, "servers", str(index)]
                yield Problem(
                    display_path(path),
                    f"server {escape_display(str(server_name))!r} is not a server name",
                )


def check_form(fragment: Mapping[str, Any], root_agent: str) -> list[Problem]:
    """Every way ``fragment`` differs from what an export of ``root_agent`` writes (03 §1).

    Reports: foreign top-level tables and global ``[mcp]`` keys; a missing root agent or any
    other agent; entries the agent does not reach (other profiles, providers, bundles, servers);
    references that do not resolve inside the fragment (but fallback edges and MCP bundle server
    names, which ZeroClaw keeps: :func:`fragment_warnings`); keys the schema does not know;
    fields an export always removes; ``delegate_same_risk_profile`` not false; ``enc:``/``enc2:``
    strings; non-empty secrets.
    """
    problems: list[Problem] = list(_top_level_problems(fragment))
    agents = table(fragment.get("agents"))
    for alias in agents:
        if alias != root_agent:
            problems.append(
                Problem(
                    display_path(["agents", alias]),
                    f"a second agent (the bundle carries only {escape_display(root_agent)!r})",
                )
            )
    agent = agents.get(root_agent)
    if not isinstance(agent, dict):
        problems.append(
            Problem(
                display_path(["agents", root_agent]),
                "the manifest's root agent is not in config.toml",
            )
        )
        agent = {}
    else:
        problems += _agent_problems(root_agent, agent)
        closure = _reach(fragment, root_agent, agent)
        problems += closure.problems
        for entry in _present_entries(fragment):
            if entry[0] != "agents" and entry not in closure.entries:
                problems.append(
                    Problem(
                        display_path(list(entry)),
                        f"not in the closure of agents.{escape_display(root_agent)}",
                    )
                )
        servers = array(table(fragment.get("mcp")).get("servers"))
        for index, server in enumerate(servers):
            name = table(server).get("name")
            if isinstance(name, str) and name and ("mcp", "servers", name) not in closure.entries:
                problems.append(
                    Problem(
                        display_path(_server_segments(index, server)),
                        "not granted by the agent's MCP bundles (an export carries only those)",
                    )
                )
        problems += _server_problems(fragment, agent)
    problems += _risk_profile_problems(fragment)
    problems += _skill_directory_problems(fragment)
    carried = {key: value for key, value in fragment.items() if key in CARRIED_TABLES}
    problems += _schema_problems(carried, schema.config_schema(), [], False)
    problems += _ciphertext_problems(fragment)
    return problems


# --------------------------------------------------------------------------- lookups


def lookup(fragment: Mapping[str, Any], segments: Sequence[str]) -> tuple[bool, Any]:
    """(found, value) at config path ``segments``; arrays keyed by name are searched by name."""
    current: Any = fragment
    node: schema.Node | None = schema.config_schema()
    for segment in segments:
        name = schema.field_name(node, segment)
        if isinstance(current, dict):
            if name not in current:
                return False, None
            current = current[name]
        elif isinstance(current, list) and node is not None and node.get("x-keyed-by"):
            key = str(node["x-keyed-by"])
            matches = [
                item for item in current if isinstance(item, dict) and item.get(key) == segment
            ]
            if not matches:
                return False, None
            current = matches[0]
        else:
            return False, None
        node = schema.child(node, name)
    return True, current


def resolve_raw_path(fragment: Mapping[str, Any], path: str) -> list[str] | None:
    """The segments of a config path ZeroClaw joined raw, matched against the fragment's keys.

    ZeroClaw writes paths with every segment joined by ``.`` unquoted, and its ``config set``
    takes a secret map's key as the whole rest of the path (``headers.X-Org.Id``) and a map
    section's key by longest match. So each step here takes the longest run of segments that is
    a key of the table reached; arrays keyed by name match a name the same way. None when the
    path reaches nothing.
    """
    parts = path.split(".")
    current: Any = fragment
    node: schema.Node | None = schema.config_schema()
    out: list[str] = []
    i = 0
    while i < len(parts):
        for end in range(len(parts), i, -1):
            key = ".".join(parts[i:end])
            if isinstance(current, dict):
                name = schema.field_name(node, key)
                if name in current:
                    out.append(name)
                    current = current[name]
                    break
            elif isinstance(current, list) and node is not None and node.get("x-keyed-by"):
                field = str(node["x-keyed-by"])
                matches = [c for c in current if isinstance(c, dict) and c.get(field) == key]
                if matches:
                    name = key
                    out.append(key)
                    current = matches[0]
                    break
        else:
            return None
        node = schema.child(node, name)
        i = end
    return out


def required_secret_problems(fragment: Mapping[str, Any], paths: Sequence[Any]) -> list[Problem]:
    """Each ``required_secrets`` path must name an x-secret field of the fragment holding ``""``.

    A malformed path is reported, not raised.
    """
    problems: list[Problem] = []
    for index, path in enumerate(paths):
        where = f"required_secrets[{index}]"
        shown = escape_display(str(path))
        try:
            segments = parse_path(str(path))
        except UsageError:
            problems.append(Problem(where, f"{shown!r} is not a config path"))
            continue
        if not schema.is_secret(segments):
            problems.append(Problem(where, f"{shown!r} is not a secret field of the schema"))
            continue
        found, value = lookup(fragment, segments)
        if not found:
            problems.append(Problem(where, f"{shown!r} is not in config.toml"))
        elif value != "":
            problems.append(Problem(where, f'{shown!r} does not hold "" in config.toml'))
    return problems


def agent_of(fragment: Mapping[str, Any], root_agent: str) -> Mapping[str, Any]:
    """The root agent's table, or an empty one."""
    return table_at(fragment, "agents", root_agent)


def portable_alias_problems(root_agent: str) -> list[Problem]:
    """The root agent's alias becomes a folder name on import: it must be a portable alias."""
    reason = non_portable_alias_reason(root_agent)
    if reason is None:
        return []
    return [
        Problem(
            "root_agent",
            f"{escape_display(root_agent)!r} is not a portable alias ({escape_display(reason)}; "
            "it becomes a folder name)",
        )
    ]


# --------------------------------------------------------------------------- endpoints


def family_default_endpoint(category: str, family: str, entry: Mapping[str, Any]) -> str | None:
    """The endpoint a provider family uses when the entry sets no ``uri``, or None if unknown.

    ``category`` is ``models``, ``tts`` or ``transcription``. Read from the schema, which takes
    it from ZeroClaw's own endpoint tables (``x-default-endpoint``, or per ``endpoint`` choice
    ``x-endpoint-uris``), so the import's secret prompt and the export's report never disagree
    with each other or with the runtime. A template's ``{resource}``/``{region}`` is filled from
    the entry; a local program or an operator-supplied endpoint is said in words.
    """
    node = schema.resolve(["providers", category, family, "-"])[1]
    if node is None or not isinstance(node.get("x-default-endpoint"), str):
        return None
    default: str = node["x-default-endpoint"]
    choice = entry.get("endpoint")
    choices = table(table(node.get("properties")).get("endpoint")).get("x-endpoint-uris")
    if isinstance(choice, str) and isinstance(choices, dict):
        if choice not in choices:
            return None
        default = str(choices[choice])
    if default.startswith("subprocess://"):
        return f"a local program ({default.removeprefix('subprocess://')}, binary_path)"
    if "://" not in default:
        return "(no default endpoint: the entry's uri)"

    def fill(match: re.Match[str]) -> str:
        value = entry.get(match.group(1))
        return value if isinstance(value, str) and value else f"<{match.group(1)}>"

    return re.sub(r"\{(\w+)\}", fill, default)


def secret_endpoint(fragment: Mapping[str, Any], segments: Sequence[str]) -> str:
    """Where the secret at config path ``segments`` will be sent, for a person to judge.

    A provider secret goes to the entry's ``uri``, else its family's default endpoint (azure
    and bedrock defaults filled from ``resource``/``region``); an MCP server secret goes to the
    server's ``url`` (http/sse) or to the local process it starts (``command args…``). An
    address is shown with its credentials masked (:func:`bundler.rules.credentials.
    mask_credentials`): the person judges where a secret goes, not with what else. The result
    holds strings from the config: escape it before printing.
    """
    return mask_credentials(_secret_endpoint(fragment, segments))


def _secret_endpoint(fragment: Mapping[str, Any], segments: Sequence[str]) -> str:
    if len(segments) >= 5 and segments[0] == "providers":
        category, family, alias = segments[1], segments[2], segments[3]
        entry = table(lookup(fragment, ["providers", category, family, alias])[1])
        uri = entry.get("uri")
        if isinstance(uri, str) and uri:
            return uri
        return family_default_endpoint(category, family, entry) or "(unknown family)"
    if len(segments) >= 4 and list(segments[:2]) == ["mcp", "servers"]:
        found, server = lookup(fragment, segments[:3])
        if not found or not isinstance(server, dict):
            return "(no such server)"
        if server.get("transport", "stdio") in ("http", "sse"):
            return str(server.get("url", ""))
        args = array(server.get("args"))
        words = [str(server.get("command", ""))] + [str(a) for a in args]
        return "local process: " + " ".join(words)
    return "(unknown)"
