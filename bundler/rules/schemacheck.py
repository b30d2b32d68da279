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

import ast
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from bundler.rules import schema
from bundler.rules.findings import (
    INVALID_FORMAT,
    INVALID_VALUE,
    REQUIRED_FIELD_EMPTY,
    Finding,
    describe,
)
from bundler.rules.paths import Segment, format_path

__all__ = ["check_value", "schema_findings"]


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


# a compiled check appends findings for ``value`` found at ``segments``
_Check = Callable[[Any, list[Segment], list[Finding]], None]


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

        def check_type(value: Any, at: list[Segment], out: list[Finding]) -> None:
            if not test(value):
                out.append(_finding("type", at, node))

        checks.append(check_type)
    if "enum" in node:
        choices = list(node["enum"])

        def check_enum(value: Any, at: list[Segment], out: list[Finding]) -> None:
            if not any(_same(value, choice) for choice in choices):
                out.append(_finding("enum", at, node))

        checks.append(check_enum)
    for keyword in ("minimum", "maximum"):
        if keyword in node:
            checks.append(_compile_bound(node, keyword))
    if "pattern" in node:
        pattern = re.compile(node["pattern"])

        def check_pattern(value: Any, at: list[Segment], out: list[Finding]) -> None:
            if isinstance(value, str) and not pattern.search(value):
                out.append(_finding("pattern", at, node))

        checks.append(check_pattern)
    if "required" in node:
        required = list(node["required"])

        def check_required(value: Any, at: list[Segment], out: list[Finding]) -> None:
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

        def check_one_of(value: Any, at: list[Segment], out: list[Finding]) -> None:
            passing = 0
            for option in options:
                scratch: list[Finding] = []
                option(value, at, scratch)
                passing += not scratch
            if passing != 1:
                out.append(_finding("oneOf", at, node))

        checks.append(check_one_of)

    def check(value: Any, at: list[Segment], out: list[Finding]) -> None:
        for one in checks:
            one(value, at, out)

    return check


def _compile_bound(node: Mapping[str, Any], keyword: str) -> _Check:
    limit = node[keyword]
    below = keyword == "minimum"

    def check_bound(value: Any, at: list[Segment], out: list[Finding]) -> None:
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

    def check_object(value: Any, at: list[Segment], out: list[Finding]) -> None:
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

    def check_names(value: Any, at: list[Segment], out: list[Finding]) -> None:
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

    def check_items(value: Any, at: list[Segment], out: list[Finding]) -> None:
        if not isinstance(value, list):
            return
        for index, item in enumerate(value):
            item_check(item, [*at, _entry_segment(item, index, keyed_by)], out)

    return check_items


def _entry_segment(item: Any, index: int, keyed_by: Any) -> Segment:
    """How a config path names an array entry: by its key field when keyed, else by index."""
    if keyed_by and isinstance(item, dict):
        name = item.get(keyed_by)
        if isinstance(name, str) and name:
            return name
    return index


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
    validator: Any, value: Any, base: Sequence[Segment], node: schema.Node | None
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
    if check is None:
        return _reference_findings(_reference_validator(), config, (), schema.config_schema())
    out: list[Finding] = []
    check(config, [], out)
    return out


def check_value(node: schema.Node, value: Any, segments: Sequence[Segment]) -> list[Finding]:
    """Check one value against the schema node at ``segments`` (overrides, ``config set``)."""
    try:
        check = _compile(node)
    except _Unsupported:
        from jsonschema import Draft202012Validator

        return _reference_findings(Draft202012Validator(node), value, segments, node)
    out: list[Finding] = []
    check(value, list(segments), out)
    return out
