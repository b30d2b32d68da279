"""Validation of a config (01 §5): ``validate(config, install_root) -> (errors, warnings)``.

Pure: it reads the config dict and the schema, never the file system, so it runs the same on a
whole install, on a one-agent closure and on a fragment read from a hostile bundle. It never
raises on a malformed config (any value may have any type); every problem is a :class:`Finding`
naming the config path. Messages name the path and what was expected, never the value found:
values may be secrets, and validators that quote them (jsonschema does) are rewritten here.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bundler import layout, schema
from bundler.configpath import format_path
from bundler.names import PORTABLE_ALIAS_RE, is_portable_alias

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

# error kinds (01 §5)
REQUIRED_FIELD_EMPTY = "required_field_empty"
INVALID_FORMAT = "invalid_format"
DANGLING_REFERENCE = "dangling_reference"
INVALID_VALUE = "invalid_value"
# warning kinds
NON_PORTABLE_ALIAS = "non_portable_alias"
FALLBACK_DANGLING = "fallback_dangling"
FALLBACK_CYCLE = "fallback_cycle"
FALLBACK_TOO_DEEP = "fallback_too_deep"
UNKNOWN_MCP_SERVER = "unknown_mcp_server"

# backends whose stores keep no category per entry, so a category-restricted grant is unenforceable
_CATEGORYLESS_BACKENDS = frozenset({"markdown", "none"})


@dataclass(frozen=True)
class Finding:
    """One validation error or warning: its kind, the config path at fault, and what is wrong."""

    kind: str
    path: str
    message: str

    def line(self) -> str:
        """The ``<kind> <path>: <message>`` line ``config validate`` prints."""
        return f"{self.kind} {self.path}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        """The ``{"kind", "path", "message"}`` object of ``--json`` output."""
        return {"kind": self.kind, "path": self.path, "message": self.message}


# --- describing what the schema expects (never what was found) ------------------------------

_TYPE_WORDS = {
    "string": "a string",
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
    "array": "an array",
    "object": "a table",
    "null": "null",
}


def _with_article(text: str) -> str:
    return ("an " if text[:1].lower() in "aeioh" else "a ") + text


def describe(node: Mapping[str, Any]) -> str:
    """What a schema node accepts, in words: ``an array of strings``, ``one of read, write``."""
    if "enum" in node:
        return "one of " + ", ".join(str(choice) for choice in node["enum"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in node:
            return " or ".join(describe(sub) for sub in node[combinator])
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(_TYPE_WORDS.get(str(k), str(k)) for k in kind)
    if kind == "array" and isinstance(node.get("items"), Mapping):
        return "an array of " + _plural(describe(node["items"]))
    if kind == "object" and node.get("required"):
        return "a table with " + ", ".join(str(name) for name in node["required"])
    if "x-format" in node:
        return _with_article(str(node["x-format"]))
    return _TYPE_WORDS.get(str(kind), "a value")


def _plural(words: str) -> str:
    for article in ("a ", "an "):
        if words.startswith(article) and " or " not in words:
            return words[len(article) :] + "s"
    return words


def _bound(node: Mapping[str, Any], keyword: str) -> str:
    words = {
        "minimum": "at least",
        "maximum": "at most",
        "exclusiveMinimum": "above",
        "exclusiveMaximum": "below",
    }
    return f"must be {words[keyword]} {node[keyword]}"


# --- JSON Schema ----------------------------------------------------------------------------
#
# Two engines produce the same findings: a checker compiled from the schema (fast: a config of
# 5,000 agents is checked in a fraction of the time jsonschema takes, and the CLI does not pay
# jsonschema's import) and jsonschema itself, the reference. The compiled checker knows exactly
# the keywords below; a schema using any other keyword falls back to jsonschema, so the schema
# can grow without the checker silently ignoring a rule. A differential test keeps them equal.

_ANNOTATIONS = frozenset({"$schema", "$id", "title", "description", "default", "examples"})
_COMPILED_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "properties",
        "additionalProperties",
        "propertyNames",
        "required",
        "items",
        "oneOf",
        "minimum",
        "maximum",
        "pattern",
    }
)
_BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _finding(
    keyword: str,
    segments: Sequence[str],
    node: Mapping[str, Any],
    *,
    key: str | None = None,
    missing: str | None = None,
) -> Finding:
    """The finding for ``keyword`` failing at ``segments``; built from the schema, not the value.

    ``key`` is set when a property name failed ``propertyNames``; ``missing`` names the
    property a ``required`` keyword misses.
    """
    if key is not None:
        if keyword == "enum":
            message = "is not a known provider family (" + describe(node) + ")"
            return Finding(INVALID_VALUE, format_path([*segments, key]), message)
        if node.get("pattern") == "^[^.]+$":
            return Finding(
                INVALID_FORMAT, format_path([*segments, key]), "an alias must not contain '.'"
            )
        return Finding(INVALID_FORMAT, format_path([*segments, key]), "is not an allowed name")
    if keyword == "required":
        return Finding(
            REQUIRED_FIELD_EMPTY, format_path([*segments, missing or "?"]), "is required"
        )
    path = format_path(segments) if segments else "(top level)"
    if keyword == "pattern":
        return Finding(INVALID_FORMAT, path, "must be " + describe(node))
    if keyword in _BOUND_KEYWORDS:
        return Finding(INVALID_VALUE, path, _bound(node, keyword))
    if keyword in ("type", "enum", "oneOf", "anyOf"):
        return Finding(INVALID_VALUE, path, "must be " + describe(node))
    return Finding(INVALID_VALUE, path, f"does not satisfy the schema ({keyword})")


# a compiled check appends findings for ``value`` found at ``segments``
_Check = Callable[[Any, list[str], list[Finding]], None]


class _Unsupported(Exception):
    """The schema uses a keyword the compiled checker does not implement."""


def _is_integer(value: Any) -> bool:
    # JSON Schema counts 1.0 as an integer; bool is never a number
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": _is_integer,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _same(a: Any, b: Any) -> bool:
    # JSON Schema equality: true is not 1
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _compile(node: Mapping[str, Any]) -> _Check:
    """Compile one schema node into a check; raises :class:`_Unsupported` on unknown keywords."""
    unknown = [
        k for k in node if k not in _COMPILED_KEYWORDS | _ANNOTATIONS and not k.startswith("x-")
    ]
    if unknown:
        raise _Unsupported(unknown[0])
    checks: list[_Check] = []
    if "type" in node:
        kind = node["type"]
        if not isinstance(kind, str) or kind not in _TYPE_TESTS:
            raise _Unsupported("type")
        test = _TYPE_TESTS[kind]

        def check_type(value: Any, at: list[str], out: list[Finding]) -> None:
            if not test(value):
                out.append(_finding("type", at, node))

        checks.append(check_type)
    if "enum" in node:
        choices = list(node["enum"])

        def check_enum(value: Any, at: list[str], out: list[Finding]) -> None:
            if not any(_same(value, choice) for choice in choices):
                out.append(_finding("enum", at, node))

        checks.append(check_enum)
    for keyword in ("minimum", "maximum"):
        if keyword in node:
            checks.append(_compile_bound(node, keyword))
    if "pattern" in node:
        pattern = re.compile(node["pattern"])

        def check_pattern(value: Any, at: list[str], out: list[Finding]) -> None:
            if isinstance(value, str) and not pattern.search(value):
                out.append(_finding("pattern", at, node))

        checks.append(check_pattern)
    if "required" in node:
        required = list(node["required"])

        def check_required(value: Any, at: list[str], out: list[Finding]) -> None:
            if isinstance(value, dict):
                for name in required:
                    if name not in value:
                        out.append(_finding("required", at, node, missing=name))

        checks.append(check_required)
    if "properties" in node or "additionalProperties" in node:
        checks.append(_compile_object(node))
    if "propertyNames" in node:
        checks.append(_compile_property_names(node["propertyNames"]))
    if "items" in node:
        checks.append(_compile_items(node))
    if "oneOf" in node:
        options = [_compile(sub) for sub in node["oneOf"]]

        def check_one_of(value: Any, at: list[str], out: list[Finding]) -> None:
            passing = 0
            for option in options:
                scratch: list[Finding] = []
                option(value, at, scratch)
                passing += not scratch
            if passing != 1:
                out.append(_finding("oneOf", at, node))

        checks.append(check_one_of)

    def check(value: Any, at: list[str], out: list[Finding]) -> None:
        for one in checks:
            one(value, at, out)

    return check


def _compile_bound(node: Mapping[str, Any], keyword: str) -> _Check:
    limit = node[keyword]
    below = keyword == "minimum"

    def check_bound(value: Any, at: list[str], out: list[Finding]) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return  # bounds constrain numbers only; a wrong type is the type keyword's finding
        if (value < limit) if below else (value > limit):
            out.append(_finding(keyword, at, node))

    return check_bound


def _compile_object(node: Mapping[str, Any]) -> _Check:
    properties = {name: _compile(sub) for name, sub in node.get("properties", {}).items()}
    extra_node = node.get("additionalProperties", True)
    if isinstance(extra_node, bool):
        if not extra_node:
            raise _Unsupported("additionalProperties: false")
        extra: _Check | None = None
    else:
        extra = _compile(extra_node)

    def check_object(value: Any, at: list[str], out: list[Finding]) -> None:
        if not isinstance(value, dict):
            return
        for key, sub in value.items():
            known = properties.get(key)
            if known is not None:
                known(sub, [*at, key], out)
            elif extra is not None:
                extra(sub, [*at, key], out)

    return check_object


def _compile_property_names(names_node: Mapping[str, Any]) -> _Check:
    test = _compile(names_node)

    def check_names(value: Any, at: list[str], out: list[Finding]) -> None:
        if not isinstance(value, dict):
            return
        for key in value:
            scratch: list[Finding] = []
            test(key, at, scratch)
            if scratch:
                keyword = "enum" if "enum" in names_node else "pattern"
                out.append(_finding(keyword, at, names_node, key=str(key)))

    return check_names


def _compile_items(node: Mapping[str, Any]) -> _Check:
    items_node = node["items"]
    if not isinstance(items_node, dict):
        raise _Unsupported("items")
    item_check = _compile(items_node)
    keyed_by = node.get("x-keyed-by")

    def check_items(value: Any, at: list[str], out: list[Finding]) -> None:
        if not isinstance(value, list):
            return
        for index, item in enumerate(value):
            item_check(item, [*at, _entry_segment(item, index, keyed_by)], out)

    return check_items


def _entry_segment(item: Any, index: int, keyed_by: Any) -> str:
    """How a config path names an array entry: by its key field when keyed, else by index."""
    if keyed_by and isinstance(item, dict):
        name = item.get(keyed_by)
        if isinstance(name, str) and name:
            return name
    return str(index)


@cache
def _compiled_config_check() -> _Check | None:
    try:
        return _compile(schema.config_schema())
    except _Unsupported:
        return None


@cache
def _reference_validator() -> Any:
    from jsonschema import Draft202012Validator  # the reference engine, imported only when used

    return Draft202012Validator(schema.config_schema())


def _reference_findings(
    validator: Any, value: Any, base: Sequence[str], node: schema.Node | None
) -> list[Finding]:
    findings = []
    for error in validator.iter_errors(value):
        segments = [*base, *_display_segments(value, error.absolute_path, node)]
        error_node: Mapping[str, Any] = error.schema if isinstance(error.schema, dict) else {}
        keyword = str(error.validator)
        if "propertyNames" in error.schema_path:
            # the key is at fault; jsonschema reports it at the parent, so name it here
            findings.append(_finding(keyword, segments, error_node, key=str(error.instance)))
        elif keyword == "required":
            # "'name' is a required property": the name comes from the schema, not the config
            missing = ast.literal_eval(error.message.split(" is a required property")[0])
            findings.append(_finding(keyword, segments, error_node, missing=str(missing)))
        else:
            findings.append(_finding(keyword, segments, error_node))
    return findings


def _display_segments(
    value: Any, instance_path: Iterable[str | int], node: schema.Node | None
) -> list[str]:
    """Config-path segments for a jsonschema instance path: keyed array entries by name."""
    segments: list[str] = []
    for step in instance_path:
        if isinstance(step, int):
            entry = value[step] if isinstance(value, list) and step < len(value) else None
            segments.append(_entry_segment(entry, step, node.get("x-keyed-by") if node else None))
            value = entry
        else:
            segments.append(step)
            value = value.get(step) if isinstance(value, dict) else None
        node = schema.child(node, segments[-1])
    return segments


def schema_findings(config: Any, *, reference: bool = False) -> list[Finding]:
    """Rule 1 of 01 §5 alone: JSON Schema findings at their config paths.

    ``reference=True`` uses jsonschema instead of the compiled checker (for differential tests).
    """
    check = None if reference else _compiled_config_check()
    if check is None:
        return _reference_findings(_reference_validator(), config, (), schema.config_schema())
    out: list[Finding] = []
    check(config, [], out)
    return out


def check_value(node: schema.Node, value: Any, segments: Sequence[str]) -> list[Finding]:
    """Check one value against the schema node at ``segments`` (overrides, ``config set``)."""
    try:
        check = _compile(node)
    except _Unsupported:
        from jsonschema import Draft202012Validator

        return _reference_findings(Draft202012Validator(node), value, segments, node)
    out: list[Finding] = []
    check(value, list(segments), out)
    return out


# --- helpers for a config whose every value may have any type ------------------------------


def _table(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _families(category: str) -> frozenset[str]:
    node = schema.config_schema()["properties"]["providers"]["properties"][category]
    return frozenset(node["propertyNames"]["enum"])


@dataclass(frozen=True)
class _RefField:
    """A reference field of an entry, read from the schema's ``x-ref`` marks."""

    segments: tuple[str, ...]  # below the entry
    target: str  # the map it points into: ``providers.models``, ``risk_profiles``...
    is_list: bool
    required: bool  # in its table's ``required``: an empty value is an error


@cache
def _ref_fields(kind: str) -> tuple[_RefField, ...]:
    """The ``x-ref`` fields of an ``agents`` or ``runtime_profiles`` entry.

    Read from the schema, so a new reference field needs no code here.
    """
    entry = schema.config_schema()["properties"][kind]["additionalProperties"]
    found: list[_RefField] = []

    def walk(node: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        required = node.get("required", [])
        for name, sub in node.get("properties", {}).items():
            if "x-ref" in sub:
                is_list = sub.get("type") == "array"
                found.append(_RefField((*prefix, name), sub["x-ref"], is_list, name in required))
            elif sub.get("type") == "object":
                walk(sub, (*prefix, name))

    walk(entry, ())
    return tuple(found)


@cache
def _ref_fields_by_key(kind: str) -> dict[str, tuple[_RefField, ...]]:
    """:func:`_ref_fields` grouped by their first segment (the key in the entry)."""
    grouped: dict[str, list[_RefField]] = {}
    for field in _ref_fields(kind):
        grouped.setdefault(field.segments[0], []).append(field)
    return {key: tuple(fields) for key, fields in grouped.items()}


def _get(entry: Mapping[str, Any], segments: Sequence[str]) -> Any:
    value: Any = entry
    for segment in segments:
        if not isinstance(value, dict) or segment not in value:
            return None
        value = value[segment]
    return value


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
        self.families = {
            category: _families(category) for category in ("models", "tts", "transcription")
        }

    def error(self, kind: str, segments: Sequence[str], message: str) -> None:
        self.add_error(Finding(kind, format_path(segments), message))

    def add_error(self, finding: Finding) -> None:
        # the schema reports first; a rule that trips on the same path adds nothing new
        if finding.path not in self._error_paths:
            self._error_paths.add(finding.path)
            self.errors.append(finding)

    def warn(self, kind: str, segments: Sequence[str], message: str) -> None:
        self.warnings.append(Finding(kind, format_path(segments), message))

    # -- references ----------------------------------------------------------------------

    def provider_problem(self, category: str, ref: str) -> tuple[str, str] | None:
        """None when ``ref`` names an existing provider of ``category``, else (kind, message)."""
        parts = ref.split(".")
        if len(parts) != 2 or not all(parts):
            return INVALID_FORMAT, "must be <family>.<alias>"
        family, alias = parts
        if family not in self.families[category]:
            return INVALID_VALUE, f"names an unknown {category} provider family"
        providers = _table(self.config.get("providers"))
        if alias not in _table(_table(providers.get(category)).get(family)):
            return DANGLING_REFERENCE, f"names no existing providers.{category} entry"
        return None

    def check_ref(self, segments: list[str], field: _RefField, ref: Any, in_list: bool) -> None:
        if not isinstance(ref, str):
            return  # the schema has reported the type
        target = field.target
        if not ref:
            # an empty scalar ref means "none" unless required; an empty list entry names nothing
            if field.required:
                self.error(REQUIRED_FIELD_EMPTY, segments, f"is required (an entry of {target})")
            elif in_list:
                self.error(
                    DANGLING_REFERENCE, segments, f"is empty; must name an entry of {target}"
                )
            return
        if target.startswith("providers."):
            problem = self.provider_problem(target.split(".", 1)[1], ref)
            if problem:
                self.error(problem[0], segments, problem[1])
        elif target == "channels":
            parts = ref.split(".")
            if len(parts) != 2 or not all(parts):
                self.error(INVALID_FORMAT, segments, "must be <type>.<alias>")
            elif parts[1] not in _table(_table(self.config.get("channels")).get(parts[0])):
                self.error(DANGLING_REFERENCE, segments, "names no existing channels entry")
        elif ref not in _table(self.config.get(target)):
            self.error(DANGLING_REFERENCE, segments, f"names no existing {target} entry")

    def check_refs_of(self, kind: str, alias: str, entry: Mapping[str, Any]) -> None:
        by_key = _ref_fields_by_key(kind)
        # walk the keys the entry has, not every reference field the schema knows: an agent
        # sets a few of its seventeen, and this runs once per agent of a 5,000-agent config
        for key in entry:
            for field in by_key.get(key, ()):
                self.check_field(kind, alias, entry, field)

    def check_field(
        self, kind: str, alias: str, entry: Mapping[str, Any], field: _RefField
    ) -> None:
        value = _get(entry, field.segments)
        base = [kind, alias, *field.segments]
        if field.is_list:
            for index, ref in enumerate(_list(value)):
                self.check_ref([*base, str(index)], field, ref, in_list=True)
        elif value is not None:  # absent: the default applies, or ``required`` reported it
            self.check_ref(base, field, value, in_list=False)

    # -- rule 2: agents -------------------------------------------------------------------

    def agents(self) -> None:
        agents = _table(self.config.get("agents"))
        backend_default = schema.default_of(schema.resolve(["agents", "_", "memory", "backend"])[1])
        backends: dict[str, str | None] = {}
        for alias, entry in agents.items():
            backend = _get(entry, ("memory", "backend")) if isinstance(entry, dict) else None
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
                self.warn(NON_PORTABLE_ALIAS, ["agents", alias], _portable_message())

    def delegates(self, agents: Mapping[str, Any], alias: str, entry: Mapping[str, Any]) -> None:
        seen: set[str] = set()
        for index, item in enumerate(_list(entry.get("delegates"))):
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
        workspace = _table(entry.get("workspace"))
        for target in _table(workspace.get("access")):
            segments = ["agents", alias, "workspace", "access", target]
            if target == alias:
                self.error(INVALID_VALUE, segments, "an agent cannot grant access to itself")
            elif target not in agents:
                self.error(DANGLING_REFERENCE, segments, "is not an agent of this config")
        backend = backends.get(alias)
        for index, item in enumerate(_list(workspace.get("read_memory_from"))):
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
        for alias, entry in _table(self.config.get("runtime_profiles")).items():
            if isinstance(entry, dict):
                self.check_refs_of("runtime_profiles", alias, entry)

    # -- rule 4: skill bundles ----------------------------------------------------------------

    def skill_bundles(self) -> None:
        shared = layout.shared_dir(self.install_root)
        owners: dict[str, str] = {}
        for alias, entry in _table(self.config.get("skill_bundles")).items():
            if not is_portable_alias(alias):
                self.warn(NON_PORTABLE_ALIAS, ["skill_bundles", alias], _portable_message())
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
        mcp = _table(self.config.get("mcp"))
        servers = _list(mcp.get("servers"))
        names = {
            entry.get("name")
            for entry in servers
            if isinstance(entry, dict) and isinstance(entry.get("name"), str)
        }
        for bundle, entry in _table(self.config.get("mcp_bundles")).items():
            for index, name in enumerate(_list(_table(entry).get("servers"))):
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
                    ["mcp", "servers", str(index), "name"],
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
        models = _table(_table(self.config.get("providers")).get("models"))
        edges: dict[str, list[str]] = {}
        where: dict[str, list[str]] = {}
        for family, entries in models.items():
            for alias in _table(entries):
                node = f"{family}.{alias}"
                edges[node] = []
                where[node] = ["providers", "models", family, alias, "fallback"]
        for node, segments in where.items():
            entry = _get(models, segments[2:4])
            for index, ref in enumerate(_list(_table(entry).get("fallback"))):
                if not isinstance(ref, str):
                    continue
                if ref in edges and self.provider_problem("models", ref) is None:
                    edges[node].append(ref)
                else:
                    # addressed by index: text that names no provider is not echoed
                    self.warn(
                        FALLBACK_DANGLING,
                        [*segments, str(index)],
                        "names no existing model provider; the runtime skips it",
                    )
        component = _strong_components(edges)
        roots = self.model_roots()
        depth = _shortest_depths(edges, roots)
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
        for kind in ("agents", "runtime_profiles"):
            for entry in _table(self.config.get(kind)).values():
                for field in _ref_fields(kind):
                    if field.target != "providers.models" or field.is_list:
                        continue
                    ref = _get(_table(entry), field.segments)
                    if isinstance(ref, str) and ref:
                        roots.append(ref)
        return roots


def _portable_message() -> str:
    return (
        f"is not a portable alias ({PORTABLE_ALIAS_RE.pattern}); "
        "export reports it and import refuses it"
    )


def _shortest_depths(edges: Mapping[str, list[str]], roots: Iterable[str]) -> dict[str, int]:
    depth: dict[str, int] = {}
    frontier = [root for root in dict.fromkeys(roots) if root in edges]
    for root in frontier:
        depth[root] = 0
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in edges[node]:
                if target not in depth:
                    depth[target] = depth[node] + 1
                    following.append(target)
        frontier = following
    return depth


def _strong_components(edges: Mapping[str, list[str]]) -> dict[str, int]:
    """Tarjan's algorithm, iterative (a fallback chain may be longer than Python's stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    component: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    for start in edges:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges[target])))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = index[node]
                    if member == node:
                        break
    return component


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
