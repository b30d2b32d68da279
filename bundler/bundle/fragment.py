"""The "export form" of a bundle's ``config.toml`` (03 §1), pure: no file I/O.

A bundle's fragment is untrusted. An exporter writes exactly one agent and the entries it
reaches (02 §2), scrubbed (02 §5) and sanitised (02 §3); anything else in the fragment was put
there by someone else and could, once imported, grant more than the manifest admits. Every
function here reports *all* it finds as :class:`Problem` values instead of stopping at the first.

Raw-text limits (:data:`bundler.config.file.MAX_CONFIG_BYTES`, :func:`nesting_depth`) are
checked before parsing so a hostile file cannot exhaust the parser.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bundler.errors import UsageError
from bundler.rules import schema
from bundler.rules.names import escape_display, is_portable_alias, safe_relative_path
from bundler.rules.paths import format_path, parse_path

MAX_NESTING = 64
MAX_FALLBACK_DEPTH = 3

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
_PROVIDER_FIELDS = {
    "model_provider": "models",
    "classifier_provider": "models",
    "summary_provider": "models",
    "tts_provider": "tts",
    "transcription_provider": "transcription",
}
_BUNDLE_FIELDS = ("skill_bundles", "knowledge_bundles", "mcp_bundles")
_CIPHERTEXT_PREFIXES = ("enc:", "enc2:")


@dataclass(frozen=True)
class Problem:
    """One finding: ``path`` names the bundle entry or config path at fault (already escaped)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def display_path(segments: Sequence[str]) -> str:
    """A config path for messages: formatted like ``config set`` takes it, control chars escaped."""
    return escape_display(format_path([str(s) for s in segments]))


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


def _walk_leaves(value: Any, segments: list[str]) -> Iterator[tuple[list[str], Any]]:
    """Every leaf of a parsed TOML value with its path (array items by index)."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _walk_leaves(sub, [*segments, key])
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _walk_leaves(sub, [*segments, str(index)])
    else:
        yield segments, value


def _server_segments(index: int, server: Any) -> list[str]:
    """An MCP server is addressed by its name (01 §6); by index when it has no usable name."""
    name = server.get("name") if isinstance(server, dict) else None
    return ["mcp", "servers", name if isinstance(name, str) and name else f"[{index}]"]


def _schema_problems(
    value: Any, node: schema.Node | None, segments: list[str], secret: bool
) -> Iterator[Problem]:
    """Unknown keys and non-empty secrets below ``value`` whose schema is ``node``."""
    if isinstance(value, dict):
        if node is not None and node.get("x-opaque"):
            return
        secret_map = bool(node and node.get("x-secret") and node.get("type") == "object")
        for key, sub in value.items():
            sub_node = (
                schema.child(node, key)
                if node is not None and node.get("type") != "array"
                else None
            )
            path = [*segments, key]
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
            path = _server_segments(index, sub) if keyed else [*segments, str(index)]
            yield from _schema_problems(
                sub, items if isinstance(items, dict) else None, path, secret
            )
    elif secret and value != "":
        yield Problem(
            display_path(segments), 'secret field is not empty (an export leaves every secret "")'
        )


def _ciphertext_problems(fragment: Mapping[str, Any]) -> Iterator[Problem]:
    for segments, leaf in _walk_leaves(fragment, []):
        if isinstance(leaf, str) and leaf.startswith(_CIPHERTEXT_PREFIXES):
            yield Problem(
                display_path(segments),
                "holds an encrypted value (enc:/enc2:), which an export never writes",
            )


# --------------------------------------------------------------------------- references


def _unresolved(what: str, ref: Any) -> str:
    return f"{what} {escape_display(str(ref))!r} does not resolve inside the bundle's fragment"


def _split_provider_ref(ref: Any) -> tuple[str, str] | None:
    if not isinstance(ref, str) or "." not in ref:
        return None
    family, alias = ref.split(".", 1)
    return (family, alias) if family and alias else None


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _provider_entry(fragment: Mapping[str, Any], category: str, ref: Any) -> tuple[str, str] | None:
    """The (family, alias) of ``ref`` when it names a provider of the fragment, else None."""
    parts = _split_provider_ref(ref)
    if parts is None:
        return None
    family, alias = parts
    families = _table(_table(fragment.get("providers")).get(category))
    return parts if isinstance(_table(families.get(family)).get(alias), dict) else None


def granted_servers(mcp_bundles: Mapping[str, Any], bundle_names: Sequence[str]) -> list[str]:
    """The server names the named MCP bundles grant (01 §3.5): exclude wins across all bundles."""
    excluded: set[str] = set()
    for name in bundle_names:
        excluded.update(
            s for s in _table(mcp_bundles.get(name)).get("exclude", []) if isinstance(s, str)
        )
    granted: list[str] = []
    for name in bundle_names:
        for server in _table(mcp_bundles.get(name)).get("servers", []):
            if isinstance(server, str) and server not in excluded and server not in granted:
                granted.append(server)
    return granted


@dataclass
class _Closure:
    """What the root agent reaches inside the fragment, and the references that do not resolve."""

    entries: set[tuple[str, ...]]
    problems: list[Problem]


def _reach(fragment: Mapping[str, Any], root: str, agent: Mapping[str, Any]) -> _Closure:
    reached: set[tuple[str, ...]] = {("agents", root)}
    problems: list[Problem] = []
    model_roots: list[tuple[str, str]] = []

    def provider(category: str, ref: Any, path: list[str]) -> None:
        if ref in ("", None):
            return
        entry = _provider_entry(fragment, category, ref)
        if entry is None:
            problems.append(
                Problem(
                    display_path(path),
                    _unresolved("reference", ref),
                )
            )
            return
        reached.add(("providers", category, *entry))
        if category == "models":
            model_roots.append(entry)

    for field, category in _PROVIDER_FIELDS.items():
        provider(category, agent.get(field, ""), ["agents", root, field])
    for field in ("risk_profile", "runtime_profile"):
        ref = agent.get(field, "")
        table = f"{field}s"
        if ref in ("", None):
            continue
        if isinstance(ref, str) and isinstance(_table(fragment.get(table)).get(ref), dict):
            reached.add((table, ref))
        else:
            problems.append(
                Problem(
                    display_path(["agents", root, field]),
                    _unresolved("reference", ref),
                )
            )
    runtime = _table(_table(fragment.get("runtime_profiles")).get(agent.get("runtime_profile", "")))
    if runtime:
        provider(
            "models",
            _table(runtime.get("context_compression")).get("summary_provider", ""),
            [
                "runtime_profiles",
                str(agent.get("runtime_profile")),
                "context_compression",
                "summary_provider",
            ],
        )
    for field in _BUNDLE_FIELDS:
        names = agent.get(field, [])
        for index, name in enumerate(names if isinstance(names, list) else []):
            path = ["agents", root, field, str(index)]
            if (
                not isinstance(name, str)
                or not name
                or name != name.strip()
                or names.index(name) != index
            ):
                problems.append(
                    Problem(
                        display_path(path),
                        "an export writes bundle lists trimmed, unique, without empty names",
                    )
                )
            if isinstance(name, str) and isinstance(_table(fragment.get(field)).get(name), dict):
                reached.add((field, name))
            else:
                problems.append(
                    Problem(
                        display_path(path),
                        f"bundle {escape_display(str(name))!r} is not in the bundle's fragment",
                    )
                )
    _reach_fallbacks(fragment, model_roots, reached, problems)
    mcp_names = (
        [n for n in agent.get("mcp_bundles", []) if isinstance(n, str)]
        if isinstance(agent.get("mcp_bundles"), list)
        else []
    )
    for name in granted_servers(_table(fragment.get("mcp_bundles")), mcp_names):
        reached.add(("mcp", "servers", name))
    return _Closure(reached, problems)


def _reach_fallbacks(
    fragment: Mapping[str, Any],
    roots: list[tuple[str, str]],
    reached: set[tuple[str, ...]],
    problems: list[Problem],
) -> None:
    """Every model provider ``fallback`` reaches inside the fragment from the roots, any depth.

    ZeroClaw's exporter keeps an edge that resolves on the exporting install even past its
    ``MAX_FALLBACK_DEPTH`` and on a cycle, so a bundle may carry such chains: the runtime skips
    what it cannot use, and :func:`fragment_warnings` says so. Edges that resolve nowhere in the
    fragment are warnings too (:func:`unresolved_edges`), never a problem here.
    """
    del problems  # dangling edges are warnings, reported by fragment_warnings
    models = _table(_table(fragment.get("providers")).get("models"))
    seen: set[tuple[str, str]] = set()
    frontier = []
    for entry in roots:
        if entry not in seen:
            seen.add(entry)
            frontier.append(entry)
    while frontier:
        following: list[tuple[str, str]] = []
        for family, alias in frontier:
            edges = _table(_table(models.get(family)).get(alias)).get("fallback", [])
            for ref in edges if isinstance(edges, list) else []:
                target = _provider_entry(fragment, "models", ref)
                if target is not None and target not in seen:
                    seen.add(target)
                    following.append(target)
        frontier = following
    reached.update(("providers", "models", *entry) for entry in seen)


def indexed_path(segments: Sequence[str], index: int) -> str:
    """A list element's config path as ZeroClaw writes it: ``...fallback[0]`` (escaped)."""
    return f"{display_path(segments)}[{index}]"


@dataclass(frozen=True)
class Unresolved:
    """A name in the fragment that resolves to nothing the bundle carries.

    ``segments`` is the list holding it (a provider's ``fallback`` or an MCP bundle's
    ``servers``), ``index`` its position, ``ref`` the name as written.
    """

    segments: tuple[str, ...]
    index: int
    ref: Any

    @property
    def path(self) -> str:
        """``<list path>[<index>]``, escaped for display."""
        return indexed_path(self.segments, self.index)


def unresolved_edges(fragment: Mapping[str, Any], root_agent: str) -> list[Unresolved]:
    """Fallback edges and MCP bundle server names that do not resolve inside the fragment.

    ZeroClaw's exporter keeps both (an edge that resolves on the exporting install, a server
    name nothing configures). On import they are removed rather than bound to a same-named
    entry the target happens to have, which would change the agent's endpoint, credentials or
    tools without the bundle saying so.
    """
    out: list[Unresolved] = []
    models = _table(_table(fragment.get("providers")).get("models"))
    for family, entries in models.items():
        for alias, entry in _table(entries).items():
            edges = _table(entry).get("fallback", [])
            for index, ref in enumerate(edges if isinstance(edges, list) else []):
                if _provider_entry(fragment, "models", ref) is None:
                    segments = ("providers", "models", family, alias, "fallback")
                    out.append(Unresolved(segments, index, ref))
    agent = _table(_table(fragment.get("agents")).get(root_agent))
    names = agent.get("mcp_bundles", [])
    carried = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
    servers = _table(fragment.get("mcp")).get("servers", [])
    present = {
        s.get("name") for s in (servers if isinstance(servers, list) else []) if isinstance(s, dict)
    }
    bundles = _table(fragment.get("mcp_bundles"))
    excluded = {
        s for n in carried for s in _table(bundles.get(n)).get("exclude", []) if isinstance(s, str)
    }
    for bundle_name in dict.fromkeys(carried):
        listed = _table(bundles.get(bundle_name)).get("servers", [])
        for index, server_name in enumerate(listed if isinstance(listed, list) else []):
            if server_name not in present and server_name not in excluded:
                out.append(Unresolved(("mcp_bundles", bundle_name, "servers"), index, server_name))
    return out


def without_unresolved(
    fragment: Mapping[str, Any], root_agent: str
) -> tuple[dict[str, Any], list[Unresolved]]:
    """A copy of ``fragment`` with every :func:`unresolved_edges` item removed, and the items.

    A ``fallback`` list left empty is removed, as ZeroClaw drops an empty ``fallback``.
    """
    import copy

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
    ``agents import`` removes it (see :func:`unresolved_edges`).
    """
    problems: list[Problem] = []
    for item in unresolved_edges(fragment, root_agent):
        if item.segments[0] == "providers":
            message = (
                f"fallback {escape_display(str(item.ref))!r} is not in the bundle; "
                "import removes the edge rather than bind it to a same-named target provider"
            )
        else:
            message = (
                f"server {escape_display(str(item.ref))!r} is neither carried nor configured; "
                "import removes the name rather than grant a same-named target server"
            )
        problems.append(Problem(item.path, message))
    problems += _deep_dangling_warnings(fragment, root_agent)
    return problems


def _deep_dangling_warnings(fragment: Mapping[str, Any], root_agent: str) -> list[Problem]:
    """A dangling edge leaving a provider the runtime reaches only at its depth limit.

    ``validate`` warns of resolved edges past the limit; an edge that leaves the fragment from
    there is past it too, whatever the target install holds.
    """
    from bundler.rules.fallbackgraph import shortest_depths

    models = _table(_table(fragment.get("providers")).get("models"))
    edges: dict[str, list[str]] = {}
    for family, entries in models.items():
        for alias, entry in _table(entries).items():
            refs = _table(entry).get("fallback", [])
            edges[f"{family}.{alias}"] = [
                r
                for r in (refs if isinstance(refs, list) else [])
                if _provider_entry(fragment, "models", r) is not None
            ]
    agent = _table(_table(fragment.get("agents")).get(root_agent))
    roots = [
        ref
        for field, category in _PROVIDER_FIELDS.items()
        if category == "models" and isinstance(ref := agent.get(field), str)
    ]
    depth = shortest_depths(edges, roots)
    out: list[Problem] = []
    for item in unresolved_edges(fragment, root_agent):
        if item.segments[0] != "providers":
            continue
        node = f"{item.segments[2]}.{item.segments[3]}"
        if depth.get(node, -1) >= MAX_FALLBACK_DEPTH:
            out.append(
                Problem(
                    display_path(item.segments),
                    f"max_fallback_depth_exceeded: {escape_display(node)} is at depth "
                    f"{depth[node]}; the runtime follows fallback to MAX_FALLBACK_DEPTH = "
                    f"{MAX_FALLBACK_DEPTH} and never tries this edge",
                )
            )
    return out


def _present_entries(fragment: Mapping[str, Any]) -> Iterator[tuple[str, ...]]:
    """Every entry the fragment holds, as the key tuple :func:`_reach` produces."""
    for table in ("agents", "risk_profiles", "runtime_profiles", *_BUNDLE_FIELDS):
        for alias in _table(fragment.get(table)):
            yield (table, alias)
    for category, families in _table(fragment.get("providers")).items():
        for family, aliases in _table(families).items():
            for alias in _table(aliases):
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
    aieos_path = identity.get("aieos_path", "") if isinstance(identity, dict) else ""
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
    for alias, profile in _table(fragment.get("risk_profiles")).items():
        if isinstance(profile, dict) and "approval_route" in profile:
            yield Problem(
                display_path(["risk_profiles", alias, "approval_route"]),
                "a field an export always removes",
            )


def _skill_directory_problems(fragment: Mapping[str, Any]) -> Iterator[Problem]:
    for alias, bundle in _table(fragment.get("skill_bundles")).items():
        directory = bundle.get("directory", "") if isinstance(bundle, dict) else ""
        if not isinstance(directory, str) or not directory:
            continue
        normal = posixpath.normpath(directory)
        if (
            directory.startswith(("/", "~"))
            or "\\" in directory
            or not normal.startswith("shared/")
        ):
            yield Problem(
                display_path(["skill_bundles", alias, "directory"]),
                "absolute or outside shared/ (an export removes such a directory)",
            )


def _server_problems(fragment: Mapping[str, Any], agent: Mapping[str, Any]) -> Iterator[Problem]:
    servers = _table(fragment.get("mcp")).get("servers", [])
    names: list[str] = []
    for index, server in enumerate(servers if isinstance(servers, list) else []):
        name = server.get("name") if isinstance(server, dict) else None
        if not isinstance(name, str) or not name:
            yield Problem(f"mcp.servers[{index}]", "an MCP server without a name")
            continue
        if name in names:
            yield Problem(
                display_path(["mcp", "servers", name]), "a second MCP server with the same name"
            )
        names.append(name)
    # a bundle's server names that name no carried server are warnings (fragment_warnings)
    del agent


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
    agents = _table(fragment.get("agents"))
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
        servers = _table(fragment.get("mcp")).get("servers", [])
        for index, server in enumerate(servers if isinstance(servers, list) else []):
            name = server.get("name") if isinstance(server, dict) else None
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


def agent_of(fragment: Mapping[str, Any], root_agent: str) -> dict[str, Any]:
    """The root agent's table, or an empty one."""
    return _table(_table(fragment.get("agents")).get(root_agent))


def portable_alias_problems(root_agent: str) -> list[Problem]:
    """The root agent's alias becomes a folder name on import: it must be a portable alias."""
    if is_portable_alias(root_agent):
        return []
    return [
        Problem(
            "root_agent",
            f"{escape_display(root_agent)!r} is not a portable alias (it becomes a folder name)",
        )
    ]


# --------------------------------------------------------------------------- endpoints

# Where a provider family sends its key when the entry sets no ``uri`` (03 §2, §3.1 rule 6).
# The one table of family defaults: inspect and the import prompt both read it.
FAMILY_DEFAULT_ENDPOINTS: dict[str, dict[str, str]] = {
    "models": {
        "openai": "https://api.openai.com/v1",
        "anthropic": "https://api.anthropic.com",
        "azure": "https://<resource>.openai.azure.com",
        "gemini": "https://generativelanguage.googleapis.com",
        "ollama": "http://localhost:11434",
        "openrouter": "https://openrouter.ai/api/v1",
        "groq": "https://api.groq.com/openai/v1",
        "mistral": "https://api.mistral.ai/v1",
        "deepseek": "https://api.deepseek.com",
        "xai": "https://api.x.ai/v1",
        "bedrock": "https://bedrock-runtime.<region>.amazonaws.com",
        "together": "https://api.together.xyz/v1",
        "fireworks": "https://api.fireworks.ai/inference/v1",
        "custom": "(no default endpoint: the entry's uri)",
        "openai_codex": "https://chatgpt.com/backend-api/codex",
        "gemini_cli": "the local gemini CLI program (binary_path)",
        "kilocli": "the local kilo CLI program (binary_path)",
    },
    "tts": {
        "openai": "https://api.openai.com/v1",
        "elevenlabs": "https://api.elevenlabs.io",
        "google": "https://texttospeech.googleapis.com",
        "edge": "https://speech.platform.bing.com",
        "piper": "a local program (no network)",
    },
    "transcription": {
        "groq": "https://api.groq.com/openai/v1",
        "openai": "https://api.openai.com/v1",
        "deepgram": "https://api.deepgram.com",
        "assemblyai": "https://api.assemblyai.com",
        "google": "https://speech.googleapis.com",
        "local_whisper": "a local whisper server (the entry's uri)",
    },
}


def family_default_endpoint(category: str, family: str, entry: Mapping[str, Any]) -> str | None:
    """The endpoint a provider family uses when the entry sets no ``uri``, or None if unknown.

    ``category`` is ``models``, ``tts`` or ``transcription``; azure and bedrock defaults are
    filled from the entry's ``resource``/``region``. The one table of defaults: the import's
    secret prompt and the export's report both read it, so they never disagree.
    """
    default = FAMILY_DEFAULT_ENDPOINTS.get(category, {}).get(family)
    if default is None:
        return None
    for placeholder, key in (("<resource>", "resource"), ("<region>", "region")):
        value = entry.get(key)
        if placeholder in default and isinstance(value, str) and value:
            default = default.replace(placeholder, value)
    return default


def secret_endpoint(fragment: Mapping[str, Any], segments: Sequence[str]) -> str:
    """Where the secret at config path ``segments`` will be sent, for a person to judge.

    A provider secret goes to the entry's ``uri``, else its family's default endpoint (azure
    and bedrock defaults filled from ``resource``/``region``); an MCP server secret goes to the
    server's ``url`` (http/sse) or to the local process it starts (``command args…``). The
    result holds strings from the bundle: escape it before printing.
    """
    if len(segments) >= 5 and segments[0] == "providers":
        category, family, alias = segments[1], segments[2], segments[3]
        entry = _table(lookup(fragment, ["providers", category, family, alias])[1])
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
        args = server.get("args", [])
        args = args if isinstance(args, list) else []
        words = [str(server.get("command", ""))] + [str(a) for a in args]
        return "local process: " + " ".join(words)
    return "(unknown)"
