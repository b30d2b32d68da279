"""JSON Schema checking of a config (rule 1 of 01 §5), findings at config paths.

Two engines produce the same findings: a checker compiled from the schema (fast: a config of
5,000 agents is checked in a fraction of the time jsonschema takes, and the CLI does not pay
jsonschema's import) and jsonschema itself, the reference. The compiled checker knows exactly
the keywords below; a schema using any other keyword falls back to jsonschema, so the schema
can grow without the checker silently ignoring a rule. A differential test keeps them equal.

Pure, and never raises on a malformed config. Every finding is built from the schema, never
from the value found: values may be secrets, and jsonschema's own messages quote them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Any, NamedTuple

from bundler.rules import schema
from bundler.rules.findings import (
    INVALID_FORMAT,
    INVALID_VALUE,
    REQUIRED_FIELD_EMPTY,
    Finding,
    describe,
)
from bundler.rules.paths import Segment, format_path

__all__ = [
    "Violation",
    "check_value",
    "compiled_check",
    "document_check",
    "run_check",
    "unsupported_keyword",
    "validator_of",
    "reference_violations",
    "schema_findings",
]


_ANNOTATIONS = frozenset({"$schema", "$id", "title", "description", "default", "examples"})
_BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _bound(node: Mapping[str, Any], keyword: str) -> str:
    words = {
        "minimum": "at least",
        "maximum": "at most",
        "exclusiveMinimum": "above",
        "exclusiveMaximum": "below",
    }
    return f"must be {words[keyword]} {node[keyword]}"


def _finding(
    keyword: str,
    segments: Sequence[Segment],
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


class Violation(NamedTuple):
    """One schema keyword failing at ``segments``: built from the schema, never from the value.

    ``key`` is set when a property name failed ``propertyNames``; ``missing`` names the
    property a ``required`` keyword misses.
    """

    keyword: str
    segments: tuple[Segment, ...]
    node: Mapping[str, Any]
    key: str | None = None
    missing: str | None = None

    def finding(self) -> Finding:
        """The config finding this violation is reported as."""
        return _finding(self.keyword, self.segments, self.node, key=self.key, missing=self.missing)


# a compiled check appends violations for ``value`` found at ``at``
_Check = Callable[[Any, tuple[Segment, ...], list[Violation]], None]


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


def _identity(value: Any) -> Any:
    """A hashable stand-in for ``value`` under JSON Schema equality (true is not 1, 1 is 1.0).

    ``uniqueItems`` compares through it in one pass: a pairwise comparison of a hostile array of
    a million items would never end.
    """
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_identity(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _identity(sub)) for key, sub in value.items()))
    return (type(value).__name__, value)


def unsupported_keyword(node: Mapping[str, Any]) -> str | None:
    """The first keyword anywhere below ``node`` the compiled checker does not implement.

    For tests: a schema the checker covers whole never falls back to jsonschema.
    """
    try:
        _compile(node)
    except _Unsupported as unsupported:
        return str(unsupported)
    for keyword, sub in node.items():
        if keyword == "properties":
            children: Iterable[Any] = sub.values()
        elif keyword in ("oneOf", "anyOf"):
            children = sub
        elif keyword in ("additionalProperties", "propertyNames", "items", "not"):
            children = [sub] if isinstance(sub, dict) else []
        else:
            continue
        for child in children:
            found = unsupported_keyword(child)
            if found is not None:
                return found
    return None


def _compile(node: Mapping[str, Any]) -> _Check:
    """Compile one schema node into a check, its keywords in the schema's order.

    Subschemas are compiled when a value first reaches them, so a small config pays for the part
    of a large schema it uses; a keyword of a subschema no value reaches constrains nothing.
    Raises :class:`_Unsupported` (then, or when a value reaches a subschema) on a keyword the
    checker does not implement: the caller then uses jsonschema for the whole value.
    """
    unknown = [k for k in node if k not in _COMPILED_KEYWORDS | _ANNOTATIONS and k[:2] != "x-"]
    if unknown:
        raise _Unsupported(unknown[0])
    if "type" in node and (not isinstance(node["type"], str) or node["type"] not in _TYPE_TESTS):
        raise _Unsupported("type")
    if "items" in node and not isinstance(node["items"], dict):
        raise _Unsupported("items")
    checks: list[_Check] = []
    for keyword in node:
        make = _KEYWORDS.get(keyword)
        if make is not None:
            checks.append(make(node))
    if "properties" not in node and "additionalProperties" in node:
        checks.append(_compile_object(node))

    def check(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        for one in checks:
            one(value, at, out)

    return check


def _lazy(node: Mapping[str, Any]) -> _Check:
    """``_compile(node)``, done on the first call."""
    compiled: list[_Check] = []

    def check(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if not compiled:
            compiled.append(_compile(node))
        compiled[0](value, at, out)

    return check


def _compile_type(node: Mapping[str, Any]) -> _Check:
    test = _TYPE_TESTS[node["type"]]

    def check_type(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if not test(value):
            out.append(Violation("type", at, node))

    return check_type


def _compile_choices(node: Mapping[str, Any], keyword: str) -> _Check:
    choices = list(node["enum"]) if keyword == "enum" else [node["const"]]

    def check_choices(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if not any(_same(value, choice) for choice in choices):
            out.append(Violation(keyword, at, node))

    return check_choices


def _compile_bound(node: Mapping[str, Any], keyword: str) -> _Check:
    limit = node[keyword]
    below = keyword == "minimum"

    def check_bound(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return  # bounds constrain numbers only; a wrong type is the type keyword's finding
        # NaN is neither below nor above anything, yet it is within no bound
        if value != value or ((value < limit) if below else (value > limit)):
            out.append(Violation(keyword, at, node))

    return check_bound


def _compile_length(node: Mapping[str, Any], keyword: str) -> _Check:
    limit = node[keyword]
    below = keyword == "minLength"

    def check_length(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if isinstance(value, str) and ((len(value) < limit) if below else (len(value) > limit)):
            out.append(Violation(keyword, at, node))

    return check_length


def _compile_pattern(node: Mapping[str, Any]) -> _Check:
    pattern = re.compile(node["pattern"])

    def check_pattern(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if isinstance(value, str) and not pattern.search(value):
            out.append(Violation("pattern", at, node))

    return check_pattern


def _compile_required(node: Mapping[str, Any]) -> _Check:
    required = list(node["required"])

    def check_required(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if isinstance(value, dict):
            for name in required:
                if name not in value:
                    out.append(Violation("required", at, node, missing=name))

    return check_required


def _compile_unique(node: Mapping[str, Any]) -> _Check:
    def check_unique(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if isinstance(value, list) and len({_identity(item) for item in value}) != len(value):
            out.append(Violation("uniqueItems", at, node))

    if node["uniqueItems"] is not True:
        return lambda value, at, out: None
    return check_unique


def _compile_object(node: Mapping[str, Any]) -> _Check:
    schemas: Mapping[str, Any] = node.get("properties", {})
    properties: dict[str, _Check] = {}
    extra_node = node.get("additionalProperties", True)
    extra: _Check | None = None if isinstance(extra_node, bool) else _lazy(extra_node)
    closed = extra_node is False

    def check_object(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if not isinstance(value, dict):
            return
        if closed and any(key not in schemas for key in value):
            # one violation for the object, as the reference gives: which keys is not said
            out.append(Violation("additionalProperties", at, node))
        for key, sub in value.items():
            known = properties.get(key)
            if known is None and key in schemas:
                known = properties[key] = _compile(schemas[key])
            if known is not None:
                known(sub, (*at, key), out)
            elif extra is not None:
                extra(sub, (*at, key), out)

    return check_object


def _compile_property_names(node: Mapping[str, Any]) -> _Check:
    names_node = node["propertyNames"]
    test = _lazy(names_node)

    def check_names(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if not isinstance(value, dict):
            return
        for key in value:
            scratch: list[Violation] = []
            test(key, at, scratch)
            # each keyword the name fails, at the object, the name said: as the reference
            out.extend(
                Violation(failed.keyword, at, names_node, key=str(key)) for failed in scratch
            )

    return check_names


def _compile_count(node: Mapping[str, Any]) -> _Check:
    most = node["maxProperties"]

    def check_count(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if isinstance(value, dict) and len(value) > most:
            out.append(Violation("maxProperties", at, node))

    return check_count


def _compile_not(node: Mapping[str, Any]) -> _Check:
    refused = _lazy(node["not"])

    def check_not(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        scratch: list[Violation] = []
        refused(value, at, scratch)
        if not scratch:
            out.append(Violation("not", at, node))

    return check_not


def _compile_items(node: Mapping[str, Any]) -> _Check:
    item_check = _lazy(node["items"])
    keyed_by = node.get("x-keyed-by")

    def check_items(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        if not isinstance(value, list):
            return
        for index, item in enumerate(value):
            item_check(item, (*at, _entry_segment(item, index, keyed_by)), out)

    return check_items


def _compile_combinator(node: Mapping[str, Any], keyword: str) -> _Check:
    options = [_lazy(sub) for sub in node[keyword]]
    wanted: Callable[[int], bool] = (lambda n: n == 1) if keyword == "oneOf" else (lambda n: n > 0)

    def check_combinator(value: Any, at: tuple[Segment, ...], out: list[Violation]) -> None:
        passing = 0
        for option in options:
            scratch: list[Violation] = []
            option(value, at, scratch)
            passing += not scratch
        if not wanted(passing):
            out.append(Violation(keyword, at, node))

    return check_combinator


# keyword -> the compiler of its check; properties and additionalProperties share one check
_KEYWORDS: dict[str, Callable[[Mapping[str, Any]], _Check]] = {
    "type": _compile_type,
    "enum": lambda node: _compile_choices(node, "enum"),
    "const": lambda node: _compile_choices(node, "const"),
    "minimum": lambda node: _compile_bound(node, "minimum"),
    "maximum": lambda node: _compile_bound(node, "maximum"),
    "minLength": lambda node: _compile_length(node, "minLength"),
    "maxLength": lambda node: _compile_length(node, "maxLength"),
    "pattern": _compile_pattern,
    "required": _compile_required,
    "uniqueItems": _compile_unique,
    "properties": _compile_object,
    "propertyNames": _compile_property_names,
    "maxProperties": _compile_count,
    "not": _compile_not,
    "items": _compile_items,
    "oneOf": lambda node: _compile_combinator(node, "oneOf"),
    "anyOf": lambda node: _compile_combinator(node, "anyOf"),
}
_COMPILED_KEYWORDS = frozenset({*_KEYWORDS, "additionalProperties"})


def _entry_segment(item: Any, index: int, keyed_by: Any) -> Segment:
    """How a config path names an array entry: by its key field when keyed, else by index."""
    if keyed_by and isinstance(item, dict):
        name = item.get(keyed_by)
        if isinstance(name, str) and name:
            return name
    return index


def compiled_check(node: Mapping[str, Any]) -> _Check | None:
    """The compiled check of ``node``, or None when ``node`` itself needs the reference engine.

    The check raises :class:`_Unsupported` when a value reaches a subschema it cannot compile;
    :func:`run_check` turns that into the reference engine's verdict.
    """
    try:
        return _compile(node)
    except _Unsupported:
        return None


def run_check(
    check: _Check | None,
    reference: Callable[[], Any],
    value: Any,
    base: Sequence[Segment],
    node: schema.Node,
) -> list[Violation]:
    """The violations of ``value``: by ``check``, or by jsonschema (``reference()``, the
    validator) when there is no check or the value reaches a keyword it does not implement."""
    if check is not None:
        found: list[Violation] = []
        try:
            check(value, tuple(base), found)
            return found
        except _Unsupported:
            pass
    return reference_violations(reference(), value, base, node)


@cache
def _compiled_config_check() -> _Check | None:
    return compiled_check(schema.config_schema())


@cache
def _reference_validator() -> Any:
    from jsonschema import Draft202012Validator  # the reference engine, imported only when used

    return Draft202012Validator(schema.config_schema())


def reference_violations(
    validator: Any, value: Any, base: Sequence[Segment], node: schema.Node | None
) -> list[Violation]:
    """What jsonschema's ``validator`` finds in ``value``, as violations in its order."""
    found = []
    # the names each object lacks, by (where it is, which "required" list): jsonschema gives one
    # error per name, in the list's order, and says the name only in its message's text
    lacking: dict[tuple[tuple[Any, ...], tuple[Any, ...]], list[str]] = {}
    for error in validator.iter_errors(value):
        segments = (*base, *_display_segments(value, error.absolute_path, node))
        error_node: Mapping[str, Any] = error.schema if isinstance(error.schema, dict) else {}
        keyword = str(error.validator)
        if "propertyNames" in error.schema_path:
            # the key is at fault; jsonschema reports it at the parent, so name it here
            found.append(Violation(keyword, segments, error_node, key=str(error.instance)))
        elif keyword == "required":
            # the name comes from the schema, not the config
            where = (tuple(error.absolute_path), tuple(error.schema_path))
            if where not in lacking:
                names = error.validator_value
                lacking[where] = [str(name) for name in names if name not in error.instance]
            found.append(Violation(keyword, segments, error_node, missing=lacking[where].pop(0)))
        else:
            found.append(Violation(keyword, segments, error_node))
    return found


def _display_segments(
    value: Any, instance_path: Iterable[str | int], node: schema.Node | None
) -> list[Segment]:
    """Config-path segments for a jsonschema instance path: keyed array entries by name."""
    segments: list[Segment] = []
    for step in instance_path:
        if isinstance(step, int):
            entry = value[step] if isinstance(value, list) and step < len(value) else None
            segments.append(_entry_segment(entry, step, node.get("x-keyed-by") if node else None))
            value = entry
        else:
            segments.append(step)
            value = value.get(step) if isinstance(value, dict) else None
        node = schema.child(node, str(segments[-1]))
    return segments


def schema_findings(config: Any, *, reference: bool = False) -> list[Finding]:
    """Rule 1 of 01 §5 alone: JSON Schema findings at their config paths.

    ``reference=True`` uses jsonschema instead of the compiled checker (for differential tests).
    """
    check = None if reference else _compiled_config_check()
    found = run_check(check, _reference_validator, config, (), schema.config_schema())
    return [violation.finding() for violation in found]


def validator_of(node: schema.Node) -> Callable[[], Any]:
    """A maker of jsonschema's validator of ``node``: jsonschema is imported when it is called."""

    def make() -> Any:
        from jsonschema import Draft202012Validator  # the reference engine, only when used

        return Draft202012Validator(node)

    return make


def document_check(
    node: schema.Node, *, reference: bool = False
) -> Callable[[Any], list[Violation]]:
    """The check of a whole document against ``node``: compiled, jsonschema only should the
    document reach a keyword the checker does not implement (``reference=True``: jsonschema
    alone, for differential tests)."""
    check = None if reference else compiled_check(node)
    make = validator_of(node)
    return lambda document: run_check(check, make, document, (), node)


def check_value(node: schema.Node, value: Any, segments: Sequence[Segment]) -> list[Finding]:
    """Check one value against the schema node at ``segments`` (overrides, ``config set``)."""
    found = run_check(compiled_check(node), validator_of(node), value, segments, node)
    return [violation.finding() for violation in found]
