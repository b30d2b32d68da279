"""Values at config paths, on plain data: the pure helpers behind ``config get`` and ``set``.

* :func:`canonical_segments`, :func:`lookup` and :func:`effective_value` find a value (keyed
  arrays such as ``mcp.servers`` by name, other arrays by index), or its schema default.
* :func:`redact` masks every secret below a path; :func:`to_jsonable` and :func:`format_value`
  render a value for ``--json`` and text output.
* :func:`parse_value` types a ``config set`` VALUE (or an override) by the schema.

No file I/O. No message built here contains the value it is about: it may be a secret.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from datetime import date, datetime, time
from typing import Any

import tomlkit
from tomlkit.items import Item

from bundler.errors import InvalidInput, Malformed
from bundler.rules import schema, tomlcompat
from bundler.rules.credentials import MASK, is_opaque_secret_key
from bundler.rules.findings import describe
from bundler.rules.names import is_text
from bundler.rules.paths import format_path, parse_path

__all__ = [
    "canonical_segments",
    "closest_path",
    "effective_value",
    "format_value",
    "is_string_field",
    "list_index",
    "lookup",
    "not_text",
    "parse_value",
    "redact",
    "schema_default",
    "to_item",
    "to_jsonable",
]


def canonical_segments(path: str) -> tuple[list[str], schema.Node | None, bool]:
    """Parse a config path and canonicalise its field names (``api-key`` -> ``api_key``)."""
    return schema.resolve(parse_path(path))


def lookup(data: Mapping[str, Any], segments: list[str]) -> tuple[bool, Any]:
    """The value at canonical ``segments``: ``(True, value)``, or ``(False, None)`` when absent.

    Keyed arrays (``mcp.servers``) are addressed by the ``name`` of their first matching entry;
    other arrays by index.
    """
    value: Any = data
    node: schema.Node | None = schema.config_schema()
    for segment in segments:
        if isinstance(value, Mapping):
            if segment not in value:
                return False, None
            value = value[segment]
        elif isinstance(value, list):
            index = list_index(value, segment, node)
            if index is None:
                return False, None
            value = value[index]
        else:
            return False, None
        node = schema.child(node, segment)
    return True, value


def without(data: Mapping[str, Any], segments: list[str], *, keep_leaf: bool = False) -> Any:
    """``data`` without the value at canonical ``segments``, and without any table or array on
    the way to it that is then empty: what an edit of that one path must leave as it was (a
    table it creates, or one it empties, is part of the edit). ``data`` is not changed.

    With ``keep_leaf`` only those empty tables and arrays go: for the config after an unset,
    whose list item at the path, if any, is the next one moved up."""
    gone = object()

    def strip(value: Any, rest: list[str], node: schema.Node | None) -> Any:
        if not rest:
            return value if keep_leaf else gone
        segment, child = rest[0], schema.child(node, rest[0])
        if isinstance(value, Mapping):
            if segment not in value:
                kept: Any = dict(value)
            else:
                kept = {key: item for key, item in value.items() if key != segment}
                inner = strip(value[segment], rest[1:], child)
                if inner is not gone:
                    kept[segment] = inner
        elif isinstance(value, list):
            index = list_index(value, segment, node)
            kept = list(value)
            if index is not None:
                inner = strip(value[index], rest[1:], child)
                if inner is gone:
                    del kept[index]
                else:
                    kept[index] = inner
        else:
            return value
        return kept if kept else gone

    stripped = strip(data, segments, schema.config_schema())
    return {} if stripped is gone else stripped


def list_index(items: list[Any], segment: str, node: schema.Node | None) -> int | None:
    """The index ``segment`` names in ``items``: by key field when keyed, else as a number."""
    key = node.get("x-keyed-by") if node else None
    if key:
        for index, entry in enumerate(items):
            if isinstance(entry, Mapping) and entry.get(key) == segment:
                return index
        return None
    if segment.isdigit() and int(segment) < len(items):
        return int(segment)
    return None


def schema_default(segments: list[str]) -> tuple[bool, Any]:
    """``(True, default)`` when the schema gives the path a default, else ``(False, None)``."""
    node = schema.resolve(segments)[1]
    return schema.has_default(node), schema.default_of(node)


def effective_value(data: Mapping[str, Any], segments: list[str]) -> tuple[str, Any]:
    """What ``config get`` answers: ``("set", v)``, ``("default", v)`` or ``("absent", None)``.

    A default answers only for a missing *field* of an entry that exists: the memory backend of
    an agent that is not in the config has no default, the agent is simply absent.
    """
    found, value = lookup(data, segments)
    if found:
        return "set", value
    node: schema.Node | None = schema.config_schema()
    for depth, segment in enumerate(segments):
        is_field = node is not None and segment in node.get("properties", {})
        if not is_field and not lookup(data, segments[: depth + 1])[0]:
            return "absent", None  # an alias or map key that does not exist
        node = schema.child(node, segment)
    has_default, default = schema_default(segments)
    return ("default", default) if has_default else ("absent", None)


def is_withheld(segments: list[str]) -> bool:
    """True when the value at ``segments`` is never shown unasked: a secret field or a secret
    map's value, or a value the schema does not describe under a key that looks like a
    secret's (:func:`bundler.rules.credentials.is_opaque_secret_key`: a channel's ``bot_token``)."""
    _canonical, node, secret = schema.resolve(segments)
    return secret or (node is None and bool(segments) and is_opaque_secret_key(segments[-1]))


def redact(
    value: Any,
    segments: list[str],
    *,
    secret: bool | None = None,
    secret_values: Collection[str] = (),
) -> Any:
    """``value`` (found at ``segments``) with every non-empty value :func:`is_withheld` holds
    replaced by ``"***"``, and so every string holding one of ``secret_values`` (the install's
    secrets, :func:`bundler.rules.secrets.sweep_targets`): a secret copied where no rule marks
    it is still a secret.

    Tables and arrays are walked, so ``config get mcp.servers.github`` masks its ``env``, and
    ``config get channels`` the tokens of each channel.
    """
    is_secret = is_withheld(segments) if secret is None else secret
    if is_secret and value not in ("", None) and not isinstance(value, (Mapping, list)):
        return MASK
    if isinstance(value, str) and redact_name(value, secret_values) != value:
        return MASK
    below = True if is_secret else None  # under a secret all is secret; else each judged
    if isinstance(value, Mapping):
        masked: dict[Any, Any] = {}
        for key, sub in value.items():
            shown = redact_name(str(key), secret_values)
            if shown != key:  # a key holding a secret (an agent's alias, say): numbered apart
                shown = f"{MASK}{len(masked)}" if MASK in masked else shown
            masked[shown] = redact(
                sub, [*segments, str(key)], secret=below, secret_values=secret_values
            )
        return masked
    if isinstance(value, list):
        node = schema.resolve(segments)[1]
        keyed = node.get("x-keyed-by") if node else None
        out = []
        for index, sub in enumerate(value):
            name = sub.get(keyed) if keyed and isinstance(sub, Mapping) else None
            label = name if isinstance(name, str) and name else str(index)
            out.append(redact(sub, [*segments, label], secret=below, secret_values=secret_values))
        return out
    return value


def redact_name(name: str, secret_values: Collection[str]) -> str:
    """``name`` (a key, an alias), or ``"***"`` when it holds one of ``secret_values``."""
    return MASK if any(held in name for held in secret_values) else name


def to_jsonable(value: Any) -> Any:
    """``value`` with TOML dates and times as RFC 3339 strings, so ``--json`` can print it."""
    if isinstance(value, dict):
        return {str(key): to_jsonable(sub) for key, sub in value.items()}
    if isinstance(value, list):
        return [to_jsonable(sub) for sub in value]
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    return value


def format_value(value: Any) -> str:
    """A value as ``config get`` prints it: strings bare, everything else as a TOML value."""
    if isinstance(value, str):
        return value
    return to_item(value, inline=True).as_string()


def is_string_field(node: schema.Node | None) -> bool:
    """True when the schema says the value is a string, so ``config set`` takes it verbatim."""
    if node is None:
        return False
    if node.get("type") == "string":
        return True
    choices = node.get("enum")
    return isinstance(choices, list) and bool(choices) and all(isinstance(c, str) for c in choices)


_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "array": (list,),
    "integer": (int,),
    "number": (int, float),
    "object": (dict,),
}


def toml_form_example(node: schema.Node | None) -> str:
    """How a value of ``node``'s type is written in TOML, for an error or a help text."""
    kind = node.get("type") if node else None
    if kind == "boolean":
        return "true or false"
    if kind == "array":
        items = node.get("items") if node else None
        if isinstance(items, Mapping) and items.get("type") == "integer":
            return "[1, 2]"
        return '["ls", "git"]'
    if kind == "integer":
        return "42"
    if kind == "number":
        return "0.5"
    if kind == "object":
        return '{ key = "value" }'
    return '"text", 42, true or ["a", "b"]'


def _bare_or_toml_string(raw: str) -> str:
    """A string field's VALUE: a TOML string (``"a b"`` or ``'a b'``) is unquoted, anything else
    is taken verbatim."""
    if raw[:1] not in ('"', "'"):
        return raw
    try:
        parsed = tomlcompat.loads(f"value = {raw}\n")
    except (tomlcompat.TOMLDecodeError, RecursionError):
        return raw
    value = parsed.get("value")
    return value if set(parsed) == {"value"} and isinstance(value, str) else raw


def parse_value(
    raw: str, node: schema.Node | None, path: str, *, toml_strings: bool = False
) -> Any:
    """A VALUE typed by the schema: verbatim for strings, else one TOML value of the schema's type.

    With ``toml_strings`` (``config set``) a string may also be given as a TOML string, quotes
    and all. Raises ``InvalidInput`` naming ``path`` and the expected TOML form (never the
    value) when it is not one TOML value of that type, and :func:`not_text`'s when it is not
    UTF-8 text (an argument's or a variable's bytes that are not UTF-8).
    """
    if not is_text(raw):
        raise not_text(path, "the value")
    if is_string_field(node):
        return _bare_or_toml_string(raw) if toml_strings else raw
    try:
        parsed = tomlcompat.loads(f"value = {raw}\n")
    except (tomlcompat.TOMLDecodeError, RecursionError):
        parsed = {}
    wanted = _TYPES.get(str(node.get("type"))) if node else None
    value = parsed.get("value")
    # more keys than one means the text smuggled in a second line: not a single value
    wrong_type = wanted is not None and (
        not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted)
    )
    # TOML's integers have 64 bits (other parsers, the runtime's, refuse more), and NaN passes
    # every bound a schema sets: neither is a value a field can mean
    out_of_toml = (isinstance(value, int) and not -(2**63) <= value < 2**63) or (
        isinstance(value, float) and value != value
    )
    if set(parsed) != {"value"} or wrong_type or out_of_toml:
        expected = "a value" if node is None else describe(node)
        raise Malformed(
            f"{path}: expected {expected}, written in TOML form: {toml_form_example(node)}",
            path=path,
        )
    return value


def not_text(path: str, what: str) -> InvalidInput:
    """The error for a value at ``path`` that is not UTF-8 text (``what``: where it came from,
    such as "the value typed"); it names the path, never the value."""
    return Malformed(
        f"{path}: {what} is not UTF-8 text (it is not shown); give it as UTF-8", path=path
    )


def to_item(value: Any, *, inline: bool) -> Item:
    """A tomlkit item for a plain value; tables inline so they stay where they are put."""
    if isinstance(value, Mapping):
        table = tomlkit.inline_table() if inline else tomlkit.table()
        for key, sub in value.items():
            table[key] = to_item(sub, inline=True)
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        for sub in value:
            array.append(to_item(sub, inline=True))
        return array
    item: Item = tomlkit.item(value)
    return item


def closest_path(data: Mapping[str, Any], segments: list[str]) -> str | None:
    """A path the user probably meant by ``segments`` (for "did you mean"), or None.

    Walks ``data`` and the schema together; at the first segment that names neither a key of
    the config there nor a field of the schema, takes the closest of those names
    (:func:`difflib.get_close_matches`) and keeps the rest of the path. Names only, never values.
    """
    value: Any = data
    node: schema.Node | None = schema.config_schema()
    for depth, segment in enumerate(segments):
        names: set[str] = set()
        if isinstance(value, Mapping):
            names |= {str(key) for key in value}
        key = node.get("x-keyed-by") if node else None
        if isinstance(value, list) and key:
            names |= {str(item[key]) for item in value if isinstance(item, Mapping) and key in item}
        properties = node.get("properties") if node else None
        if isinstance(properties, Mapping):
            names |= {str(name) for name in properties}
        if segment not in names:
            close = difflib.get_close_matches(segment, sorted(names), n=1)
            if close:
                return format_path([*segments[:depth], close[0], *segments[depth + 1 :]])
            # a table of aliases or a keyed array takes any name: look further down
            if node is None or not (key or isinstance(node.get("additionalProperties"), dict)):
                return None
        if isinstance(value, Mapping):
            value = value.get(segment)
        elif isinstance(value, list):
            index = list_index(value, segment, node)
            value = None if index is None else value[index]
        else:
            value = None
        node = schema.child(node, segment)
    return None
