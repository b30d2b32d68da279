"""Generate ``manifests/config.schema.json`` from ZeroClaw's pinned Rust config source.

    python tools/zeroclaw_schema.py [UPSTREAM] [--check]

Also writes ``tests/fixtures/zeroclaw/config-facts.json`` (:func:`facts`).

``UPSTREAM`` is the copy of ZeroClaw's config crate the schema follows (default
``../shared/interop/zeroclaw/upstream-master``, relative to the repository root: master, which
released builds write installs with; the pull request's copy ``upstream`` is the reference for
the bundle format only, and every key it has, master has too). The schema covers every table an
agent closure touches (01 §3): agents, risk and runtime profiles, the three bundle maps,
``[mcp]``, every provider category and family, and the shapes of ``channels`` and ``cron``. Of
every other table it describes only the way down to each ``#[secret]`` field, so that a secret
anywhere in ``config.toml`` is known to be one. Each field gets its JSON
type, its default, ``x-secret`` (``#[secret]``), ``x-ref`` (ZeroClaw's reference newtypes),
``x-keyed-by`` (``#[natural_key]``), its serde aliases (``x-aliases``) and, where ZeroClaw
omits it when writing, ``x-skip-serializing-if``. What the Rust source cannot say (URL and
path formats, bundler's limits, alias patterns, opaque tables) comes from the one overlay file
``manifests/config.schema.overlay.json``, merged in last.

This is not a Rust parser. It reads the handful of declaration forms ZeroClaw's config crate
uses -- ``struct`` and ``enum`` items with their attributes, ``impl Default`` bodies, ``fn``
defaults, the provider-slot macro -- and fails loudly on a type it does not know, so a change
upstream is noticed here rather than silently mis-described.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_UPSTREAM = Path("../shared/interop/zeroclaw/upstream-master")
SCHEMA_PATH = REPO / "manifests" / "config.schema.json"
OVERLAY_PATH = REPO / "manifests" / "config.schema.overlay.json"
CRATE_SRC = Path("crates/zeroclaw-config/src")

# ZeroClaw's reference newtypes (``define_provider_ref!`` in providers.rs) and the table each
# one points into: the x-ref vocabulary every bundler module reads. The only such table.
REF_NEWTYPES = {
    "ModelProviderRef": "providers.models",
    "TtsProviderRef": "providers.tts",
    "TranscriptionProviderRef": "providers.transcription",
    "ChannelRef": "channels",
    "RiskProfileRef": "risk_profiles",
    "RuntimeProfileRef": "runtime_profiles",
    "AgentAlias": None,
}

# the ``Config`` fields an agent closure touches; False: shape only (an object), since the
# closure never carries it and only an entry's existence matters
ROOT_FIELDS: dict[str, bool] = {
    "agents": True,
    "providers": True,
    "risk_profiles": True,
    "runtime_profiles": True,
    "skill_bundles": True,
    "knowledge_bundles": True,
    "mcp_bundles": True,
    "mcp": True,
    "channels": False,
    "cron": False,
    # the secret store's policy ([secrets] encrypt): read by every writer of a secret, and
    # overridable as ZEROCLAW_secrets__encrypt
    "secrets": True,
}

# defaults that depend on the target platform (``#[cfg(target_os)]`` variants of their fn):
# the schema gives none rather than one platform's
PLATFORM_DEFAULTS = {
    ("RiskProfileConfig", "allowed_commands"),
    ("RiskProfileConfig", "forbidden_paths"),
}

# provider containers whose field names are a closed set of families (providers.rs slot lists)
CLOSED_FAMILY_CONTAINERS = ("ModelProviders", "TtsProviders", "TranscriptionProviders")

_INTEGERS = {"u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize"}
_FLOATS = {"f32", "f64"}
_MAPS = {"HashMap", "BTreeMap", "IndexMap"}
_FREE_JSON = {"Value", "serde_json::Value", "toml::Value"}

Node = dict[str, Any]


class SourceError(Exception):
    """The Rust source holds something this reader does not understand."""


# --- reading the source -------------------------------------------------------------------------


def strip_comments(text: str) -> str:
    """``text`` without ``//`` and ``/* */`` comments (doc comments included), strings kept."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith('r#"', i):
            j = text.index('"#', i + 3)
            out.append(text[i : j + 2])
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
        elif c == "'" and (m := _CHAR.match(text, i)):
            # a char literal ('"' must not open a string); lifetimes ('a) fall through
            out.append(m.group(0))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


_CHAR = re.compile(r"'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'")
_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}


def matching(text: str, start: int) -> int:
    """Index just past the bracket closing the one at ``start`` (strings skipped)."""
    stack = [_OPEN[text[start]]]
    i = start + 1
    while stack:
        c = text[i]
        if c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "([{" or (c == "<" and stack[-1] == ">"):
            stack.append(_OPEN[c])
        elif c == stack[-1]:
            stack.pop()
        elif c == ">" and text[i - 1] == "-":
            pass  # an arrow, not a bracket
        i += 1
    return i


def split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split on ``sep`` outside brackets and strings; empty parts dropped."""
    parts: list[str] = []
    depth = 0
    angle = 0
    current: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            current.append(text[i : j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "<":
            angle += 1
        elif c == ">" and text[i - 1] != "-" and angle:
            angle -= 1
        if c == sep and depth == 0 and angle == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(c)
        i += 1
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def attributes(block: str) -> tuple[list[str], str]:
    """The leading ``#[...]`` attributes of ``block`` (their insides) and what follows them."""
    attrs: list[str] = []
    rest = block.lstrip()
    while rest.startswith("#["):
        end = matching(rest, 1)
        attrs.append(rest[2 : end - 1].strip())
        rest = rest[end:].lstrip()
    return attrs, rest


@dataclass
class Serde:
    """What one item's ``#[serde(...)]`` attributes say."""

    flags: set[str] = field(default_factory=set)
    default_fn: str | None = None
    rename: str | None = None
    rename_all: str | None = None
    aliases: list[str] = field(default_factory=list)
    skip_serializing_if: str | None = None


def read_serde(attrs: list[str]) -> Serde:
    """Collect every ``serde(...)`` attribute of an item."""
    serde = Serde()
    for attr in attrs:
        if not attr.startswith("serde("):
            continue
        for part in split_top(attr[len("serde(") : -1]):
            key, eq, value = part.partition("=")
            key = key.strip()
            value = value.strip().strip('"')
            if not eq:
                serde.flags.add(key)
            elif key == "default":
                serde.default_fn = value
            elif key == "rename":
                serde.rename = value
            elif key == "rename_all":
                serde.rename_all = value
            elif key == "alias":
                serde.aliases.append(value)
            elif key == "skip_serializing_if":
                serde.skip_serializing_if = value
    return serde


def attr_value(attrs: list[str], name: str) -> str | None:
    """The string of ``#[name = "value"]``, or None."""
    for attr in attrs:
        m = re.fullmatch(rf'{name}\s*=\s*"([^"]*)"', attr)
        if m:
            return m.group(1)
    return None


@dataclass
class Field:
    """One named field of a struct."""

    name: str
    type: str
    attrs: list[str]
    serde: Serde


@dataclass
class Struct:
    """A struct: its fields, whether ``#[serde(default)]`` covers all of them, its attrs."""

    name: str
    fields: list[Field]
    serde: Serde
    attrs: list[str]
    tuple_type: str | None = None  # a newtype's inner type


@dataclass
class Variant:
    """One enum variant: its wire names (first is the one written) and payload, if any."""

    names: list[str]
    payload: str | None
    is_default: bool


@dataclass
class Enum:
    """An enum and its variants."""

    name: str
    variants: list[Variant]
    serde: Serde


def wire_case(name: str, rule: str | None) -> str:
    """A Rust variant or field name as serde's ``rename_all`` spells it."""
    if rule is None:
        return name
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", name)
    if rule == "snake_case":
        return "_".join(w.lower() for w in words)
    if rule == "kebab-case":
        return "-".join(w.lower() for w in words)
    if rule == "lowercase":
        return name.lower()
    if rule == "UPPERCASE":
        return name.upper()
    if rule == "SCREAMING_SNAKE_CASE":
        return "_".join(w.upper() for w in words)
    raise SourceError(f"unknown rename_all rule {rule!r}")


class Source:
    """Every struct, enum, ``impl Default`` and ``fn`` of the config crate, by name."""

    def __init__(self, upstream: Path) -> None:
        self.structs: dict[str, Struct] = {}
        self.enums: dict[str, Enum] = {}
        self.impl_defaults: dict[str, str] = {}
        self.fns: dict[str, set[str]] = {}
        self.ref_newtypes: set[str] = set()
        self.endpoints: dict[str, dict[str, str]] = {}
        self.model_slots: list[tuple[str, str, str]] = []
        self.texts: list[str] = []
        for path in sorted((upstream / CRATE_SRC).glob("*.rs")):
            self.texts.append(strip_comments(path.read_text(encoding="utf-8")))
        for text in self.texts:
            self._read(text)
        if not self.model_slots:
            raise SourceError("for_each_model_provider_slot! not found")
        self.structs["ModelProviders"] = Struct(
            "ModelProviders",
            [
                Field(
                    name,
                    f"HashMap<String, {cfg}>",
                    [],
                    Serde(flags={"default"}, skip_serializing_if="HashMap::is_empty"),
                )
                for name, _wire, cfg in self.model_slots
            ],
            Serde(),
            [],
        )

    def _read(self, text: str) -> None:
        for found in re.finditer(r"define_provider_ref!\((\w+),", text):
            self.ref_newtypes.add(found.group(1))
        slots = re.search(r"macro_rules! for_each_model_provider_slot\s*\{", text)
        if slots:
            body = text[slots.end() : matching(text, slots.end() - 1)]
            self.model_slots = re.findall(r'\((\w+),\s*"(\w+)",\s*(\w+)\)', body)
        item = re.compile(
            r'((?:#\[(?:[^\[\]"]|"[^"]*"|\[[^\[\]]*\])*\]\s*)*)'
            r"pub(?:\([^)]*\))?\s+(struct|enum) (\w+)\s*([{(;])",
            re.M,
        )
        for m in item.finditer(text):
            attrs, _ = attributes(m.group(1))
            kind, name, opener = m.group(2), m.group(3), m.group(4)
            if opener == ";":
                continue
            start = m.end() - 1
            body = text[start + 1 : matching(text, start) - 1]
            if "$" in body:
                continue  # a macro template (ModelProviders is built from the slot list)
            if kind == "struct" and opener == "(":
                inner = re.sub(r"^\s*pub\s+", "", body.strip())
                self.structs.setdefault(name, Struct(name, [], read_serde(attrs), attrs, inner))
            elif kind == "struct":
                fields = self._fields(body)
                self.structs.setdefault(name, Struct(name, fields, read_serde(attrs), attrs))
            else:
                self.enums.setdefault(name, self._enum(name, body, attrs))
        for m in re.finditer(r"impl (?:Model|Tts|Transcription)Endpoint for (\w+)\s*\{", text):
            block = text[m.end() : matching(text, m.end() - 1) - 1]
            arms = dict(re.findall(r'Self::(\w+)\s*=>\s*\{?\s*"([^"]*)"', block))
            if not arms:  # a single endpoint written as a bare literal
                arms = {"": re.findall(r'"([^"]*)"', block)[-1]}
            self.endpoints[m.group(1)] = arms
        for m in re.finditer(r"impl Default for (\w+)\s*\{", text):
            block = text[m.end() : matching(text, m.end() - 1) - 1]
            self.impl_defaults.setdefault(m.group(1), block)
        for m in re.finditer(r"\bfn (\w+)\s*\(\s*\)\s*->\s*[^{]+\{", text):
            body = " ".join(text[m.end() : matching(text, m.end() - 1) - 1].split())
            self.fns.setdefault(m.group(1), set()).add(body)

    @staticmethod
    def _fields(body: str) -> list[Field]:
        fields = []
        for part in split_top(body):
            attrs, rest = attributes(part)
            m = re.fullmatch(r"(?:pub(?:\([^)]*\))?\s+)?(\w+)\s*:\s*([\s\S]+)", rest.strip())
            if not m:
                raise SourceError(f"cannot read field {rest[:60]!r}")
            fields.append(Field(m.group(1), " ".join(m.group(2).split()), attrs, read_serde(attrs)))
        return fields

    @staticmethod
    def _enum(name: str, body: str, attrs: list[str]) -> Enum:
        serde = read_serde(attrs)
        variants = []
        for part in split_top(body):
            v_attrs, rest = attributes(part)
            m = re.match(r"(\w+)\s*([({][\s\S]*)?$", rest.strip())
            if not m:
                raise SourceError(f"cannot read variant of {name}: {rest[:60]!r}")
            v_serde = read_serde(v_attrs)
            wire = v_serde.rename or wire_case(m.group(1), serde.rename_all)
            variants.append(Variant([wire, *v_serde.aliases], m.group(2), "default" in v_attrs))
        return Enum(name, variants, serde)


def is_secret_field(f: Field) -> bool:
    """True for a field marked ``#[secret]`` or ``#[secret(category = ...)]``."""
    return any(re.fullmatch(r"secret\b(\(.*\))?", attr, re.S) for attr in f.attrs)


# --- types to schema nodes ----------------------------------------------------------------------


def parse_type(text: str) -> tuple[str, list[str]]:
    """``Option<Vec<crate::x::T>>`` as ``("Option", ["Vec<crate::x::T>"])``; paths shortened."""
    text = text.strip()
    m = re.fullmatch(r"([\w:]+)\s*(?:<([\s\S]*)>)?", text)
    if not m:
        raise SourceError(f"cannot read type {text!r}")
    name = m.group(1)
    if name not in _FREE_JSON:
        name = name.rsplit("::", 1)[-1]
    return name, split_top(m.group(2)) if m.group(2) else []


class Generator:
    """Turns the source's types into JSON Schema nodes, with their defaults."""

    def __init__(self, source: Source) -> None:
        self.source = source
        missing = set(REF_NEWTYPES) - source.ref_newtypes
        if missing:
            raise SourceError(f"reference newtypes not declared upstream: {sorted(missing)}")

    # types

    def node(self, type_text: str) -> Node:
        """The schema of a Rust type (without a default)."""
        name, args = parse_type(type_text)
        if name == "Option":
            return self.node(args[0])
        if name in ("Box", "Arc"):
            return self.node(args[0])
        if name in REF_NEWTYPES:
            kind = REF_NEWTYPES[name]
            return {"type": "string"} if kind is None else {"type": "string", "x-ref": kind}
        if name in ("String", "PathBuf", "str"):
            return {"type": "string"}
        if name == "bool":
            return {"type": "boolean"}
        if name in _INTEGERS:
            # an unsigned field refuses a negative number when ZeroClaw loads the config
            return {"type": "integer", "minimum": 0} if name[0] == "u" else {"type": "integer"}
        if name in _FLOATS:
            return {"type": "number"}
        if name in _FREE_JSON:
            # any TOML value, carried as is: bundler's mark for content it does not describe
            return {"x-opaque": True}
        if name in ("Vec", "HashSet", "BTreeSet"):
            items = self.node(args[0])
            if "x-ref" in items:
                # bundler reads a list of references by the mark on the list itself
                return {"type": "array", "items": {"type": "string"}, "x-ref": items["x-ref"]}
            return {"type": "array", "items": items}
        if name in _MAPS:
            return {"type": "object", "additionalProperties": self.node(args[1])}
        if name in self.source.enums:
            return self.enum_node(self.source.enums[name])
        if name in self.source.structs:
            return self.struct_node(self.source.structs[name])
        raise SourceError(f"unknown type {type_text!r}")

    def enum_node(self, enum: Enum) -> Node:
        if all(v.payload is None for v in enum.variants):
            return {"type": "string", "enum": [w for v in enum.variants for w in v.names]}
        if "untagged" in enum.serde.flags:
            options = []
            for v in enum.variants:
                payload = (v.payload or "").strip()
                if payload.startswith("("):
                    options.append(self.node(payload[1:-1]))
                else:
                    raise SourceError(f"untagged struct variant in {enum.name}")
            return {"oneOf": options}
        raise SourceError(f"enum {enum.name} carries data in a form this reader does not know")

    def struct_node(self, struct: Struct) -> Node:
        if struct.tuple_type is not None:
            if "transparent" in struct.serde.flags:
                return self.node(struct.tuple_type)
            raise SourceError(f"tuple struct {struct.name} without #[serde(transparent)]")
        properties: dict[str, Node] = {}
        required: list[str] = []
        self._fields_into(struct, properties, required)
        node: Node = {"type": "object"}
        if required:
            node["required"] = required
        node["properties"] = properties
        if struct.name in CLOSED_FAMILY_CONTAINERS:
            node["propertyNames"] = {"enum": list(properties)}
        self._endpoints_into(struct, node)
        return node

    def _endpoints_into(self, struct: Struct, node: Node) -> None:
        """Mark a provider family's entry with where it connects when it sets no ``uri``.

        ``x-default-endpoint`` is the family's default endpoint URI (a template such as
        ``{region}`` is filled from the entry's field of that name); a family that chooses among
        several by an ``endpoint`` field also gets ``x-endpoint-uris`` there, per choice.
        """
        m = re.fullmatch(r"(\w+?)(Model)?ProviderConfig", struct.name)
        if not m or struct.name == "ModelProviderConfig":
            return
        enum_name = m.group(1) + "Endpoint"
        arms = self.source.endpoints.get(enum_name)
        if arms is None:
            return
        idents = (
            _variant_idents(self.source, self.source.enums[enum_name])
            if enum_name in self.source.enums
            else []
        )
        by_wire: dict[str, str] = {}
        default_uri = next(iter(arms.values()))
        if idents:
            enum = self.source.enums[enum_name]
            for variant, ident in zip(enum.variants, idents, strict=True):
                if ident in arms:
                    by_wire[variant.names[0]] = arms[ident]
                    if variant.is_default:
                        default_uri = arms[ident]
        node["x-default-endpoint"] = default_uri
        chooser = node["properties"].get("endpoint")
        if chooser is not None and len(by_wire) > 1:
            chooser["x-endpoint-uris"] = by_wire

    def _fields_into(
        self, struct: Struct, properties: dict[str, Node], required: list[str]
    ) -> None:
        struct_defaults = self.struct_default_exprs(struct)
        for f in struct.fields:
            if "skip" in f.serde.flags or "skip_deserializing" in f.serde.flags:
                continue
            if "flatten" in f.serde.flags:
                inner = self.source.structs[parse_type(f.type)[0]]
                self._fields_into(inner, properties, required)
                continue
            wire = f.serde.rename or wire_case(f.name, struct.serde.rename_all)
            node = self.node(f.type)
            if is_secret_field(f):
                node["x-secret"] = True
            keyed_by = attr_value(f.attrs, "natural_key")
            if keyed_by:
                node["x-keyed-by"] = keyed_by
            has_default, default = self.field_default(struct, f, struct_defaults)
            if has_default:
                if default is not _NONE:
                    node["default"] = default
            else:
                required.append(wire)
            if f.serde.skip_serializing_if:
                node["x-skip-serializing-if"] = f.serde.skip_serializing_if
            if f.serde.aliases:
                # accepted on input, never written: carried entries use the field's own name
                node["x-aliases"] = list(f.serde.aliases)
            properties[wire] = node

    # secret marks of the tables the closure never carries

    def secret_skeleton(self, type_text: str, stack: tuple[str, ...] = ()) -> Node | None:
        """The schema of a Rust type reduced to the way down to its ``#[secret]`` fields.

        None when the type holds no secret. Only containers and secret leaves are described
        (no ``required``, no defaults, no other field): the tables outside an agent's closure
        stay as free as before, while every secret in them is known to be one wherever bundler
        meets a config path (``config set``, the sweep, the secret store).
        """
        name, args = parse_type(type_text)
        if name in ("Option", "Box", "Arc"):
            return self.secret_skeleton(args[0], stack)
        if name in ("Vec", "HashSet", "BTreeSet"):
            items = self.secret_skeleton(args[0], stack)
            return None if items is None else {"type": "array", "items": items}
        if name in _MAPS:
            values = self.secret_skeleton(args[1], stack)
            return None if values is None else {"type": "object", "additionalProperties": values}
        if name in self.source.enums:
            enum = self.source.enums[name]
            for v in enum.variants:
                payload = (v.payload or "").strip()
                inner = payload[1:-1] if payload.startswith("(") else None
                if inner and self.secret_skeleton(inner, stack) is not None:
                    raise SourceError(f"enum {name} carries a secret in a form this reader lacks")
                if payload.startswith("{") and any(
                    is_secret_field(f) or self.secret_skeleton(f.type, stack) is not None
                    for f in Source._fields(payload[1:-1])
                ):
                    raise SourceError(f"enum {name} carries a secret in a form this reader lacks")
            return None
        if name not in self.source.structs or name in stack:
            return None  # a scalar or a foreign type: no ``#[secret]`` below it
        struct = self.source.structs[name]
        if struct.tuple_type is not None:
            return self.secret_skeleton(struct.tuple_type, (*stack, name))
        properties = self._secret_fields_into(struct, (*stack, name))
        return {"type": "object", "properties": properties} if properties else None

    def _secret_fields_into(self, struct: Struct, stack: tuple[str, ...]) -> dict[str, Node]:
        properties: dict[str, Node] = {}
        for f in struct.fields:
            if "skip" in f.serde.flags or "skip_deserializing" in f.serde.flags:
                continue
            if "flatten" in f.serde.flags:
                inner = self.source.structs[parse_type(f.type)[0]]
                properties.update(self._secret_fields_into(inner, stack))
                continue
            wire = f.serde.rename or wire_case(f.name, struct.serde.rename_all)
            if is_secret_field(f):
                node = self.node(f.type)
                node["x-secret"] = True
            else:
                found = self.secret_skeleton(f.type, stack)
                if found is None:
                    continue
                node = found
                keyed_by = attr_value(f.attrs, "natural_key")
                if keyed_by:
                    node["x-keyed-by"] = keyed_by
            if f.serde.aliases:
                node["x-aliases"] = list(f.serde.aliases)
            properties[wire] = node
        return properties

    # defaults

    def struct_default_exprs(self, struct: Struct) -> dict[str, str] | None:
        """Field -> default expression from a hand-written ``impl Default``; None when derived."""
        body = self.source.impl_defaults.get(struct.name)
        if body is None:
            return None
        # the struct literal, not the ``-> Self {`` that opens the fn body
        literals = [
            m
            for m in re.finditer(r"\b(?:Self|" + struct.name + r")\s*\{", body)
            if not body[: m.start()].rstrip().endswith("->")
        ]
        if not literals:
            return None
        m = literals[0]
        inner = body[m.end() : matching(body, m.end() - 1) - 1]
        exprs: dict[str, str] = {}
        for part in split_top(inner):
            name, colon, expr = part.partition(":")
            if part.startswith(".."):
                continue
            exprs[name.strip()] = expr.strip() if colon else name.strip()
        return exprs

    def field_default(
        self, struct: Struct, f: Field, struct_defaults: dict[str, str] | None
    ) -> tuple[bool, Any]:
        """Whether ``f`` may be absent, and the value it then takes (``_NONE`` for no value)."""
        if f.serde.default_fn:
            return True, self.evaluate(f.serde.default_fn + "()", f.type)
        if "default" in f.serde.flags:
            return True, self.type_default(f.type)
        if "default" in struct.serde.flags:
            if (struct.name, f.name) in PLATFORM_DEFAULTS:
                return True, _NONE
            if struct_defaults is not None and f.name in struct_defaults:
                return True, self.evaluate(struct_defaults[f.name], f.type)
            return True, self.type_default(f.type)
        name, _ = parse_type(f.type)
        if name == "Option":
            return True, _NONE
        return False, _NONE

    def type_default(self, type_text: str) -> Any:
        """``<T as Default>::default()`` as a TOML value; ``_NONE`` when it is no value."""
        name, args = parse_type(type_text)
        if name == "Option":
            return _NONE
        if name in ("Box", "Arc"):
            return self.type_default(args[0])
        if name in REF_NEWTYPES or name in ("String", "PathBuf"):
            return ""
        if name == "bool":
            return False
        if name in _INTEGERS:
            return 0
        if name in _FLOATS:
            return 0.0
        if name in ("Vec", "HashSet", "BTreeSet"):
            return []
        if name in _MAPS:
            return {}
        if name in _FREE_JSON:
            return _NONE
        if name in self.source.enums:
            enum = self.source.enums[name]
            chosen = [v for v in enum.variants if v.is_default]
            if chosen and chosen[0].payload is None:
                return chosen[0].names[0]
            body = self.source.impl_defaults.get(name)
            if body is not None:
                return self.evaluate(body.split("{", 1)[1].rsplit("}", 1)[0], type_text)
            return _NONE
        if name in self.source.structs:
            struct = self.source.structs[name]
            if struct.tuple_type is not None:
                return self.type_default(struct.tuple_type)
            # an absent table and ``{}`` both give the struct's Default
            return {}
        raise SourceError(f"no default known for {type_text!r}")

    def evaluate(self, expr: str, type_text: str) -> Any:
        """A default expression as a TOML value (``_NONE`` for ``None``).

        Knows literals, ``vec![..]``, ``Some(..)``, ``X::default()``, enum variants, constant
        arithmetic and calls of argument-less fns (their last expression); anything else raises
        :class:`SourceError`, so a default is never guessed.
        """
        expr = " ".join(expr.split()).rstrip(";").strip()
        name, args = parse_type(type_text) if re.fullmatch(r"[\w:<>, ]+", type_text) else ("", [])
        # a fn body: take its last expression
        if ";" in expr:
            expr = expr.rsplit(";", 1)[1].strip()
        for suffix in (".into()", ".to_string()", ".to_owned()", ".into_iter().collect()"):
            if expr.endswith(suffix):
                return self.evaluate(expr[: -len(suffix)], type_text)
        if expr in ("true", "false"):
            return expr == "true"
        if expr == "None":
            return _NONE
        if m := re.fullmatch(r"Some\((.*)\)", expr):
            return self.evaluate(m.group(1), args[0] if name == "Option" else type_text)
        if re.fullmatch(r"-?[0-9][0-9_]*(u8|u16|u32|u64|usize|i32|i64)?", expr):
            value = int(re.sub(r"[_a-z].*$", "", expr.replace("_", "")) or "0")
            return float(value) if name in _FLOATS else value
        if re.fullmatch(r"[0-9_]+(?:\s*[*+]\s*[0-9_]+)+", expr):
            # a constant written as arithmetic (``25 * 1024 * 1024``): sums of products
            total = 0
            for term in expr.split("+"):
                product = 1
                for factor in term.split("*"):
                    product *= int(factor.strip().replace("_", ""))
                total += product
            return float(total) if name in _FLOATS else total
        if re.fullmatch(r"-?[0-9][0-9_]*\.[0-9_]*(f32|f64)?", expr):
            return float(re.sub(r"f(32|64)$", "", expr).replace("_", ""))
        if m := re.fullmatch(r'"((?:[^"\\]|\\.)*)"', expr):
            return json.loads(f'"{m.group(1)}"')
        if m := re.fullmatch(r'String::from\((".*")\)', expr):
            return self.evaluate(m.group(1), "String")
        if expr in ("String::new()", "Vec::new()", "HashMap::new()", "BTreeMap::new()", "vec![]"):
            return {"String::new()": ""}.get(expr, {} if "Map" in expr else [])
        if expr in ("Default::default()",) or re.fullmatch(r"[\w:]+::default\(\)", expr):
            target = expr.rsplit("::", 2)[-2] if expr != "Default::default()" else None
            return self.type_default(type_text if target in (None, "Default") else target)
        if m := re.fullmatch(r"vec!\[(.*)\]", expr):
            item_type = args[0] if name == "Vec" and args else "String"
            return [self.evaluate(part, item_type) for part in split_top(m.group(1))]
        if m := re.fullmatch(r"(?:[\w]+::)*(\w+)\(\)", expr):
            bodies = self.source.fns.get(m.group(1), set())
            if len(bodies) > 1:
                raise SourceError(f"{m.group(1)}() has {len(bodies)} different bodies upstream")
            if bodies:
                return self.evaluate(next(iter(bodies)), type_text)
        if m := re.fullmatch(r"(?:[\w]+::)*(\w+)::(\w+)", expr):
            enum = self.source.enums.get(m.group(1))
            if enum is not None:
                for v, rust in zip(enum.variants, _variant_idents(self.source, enum), strict=True):
                    if rust == m.group(2):
                        return v.names[0]
        raise SourceError(f"cannot evaluate default {expr!r} of {type_text!r}")


class _NoValue:
    """A default that is no TOML value (``None``): the schema then gives no ``default``."""


_NONE: Any = _NoValue()


def _variant_idents(source: Source, enum: Enum) -> list[str]:
    """The Rust identifiers of ``enum``'s variants, in order."""
    for text in source.texts:
        m = re.search(rf"pub enum {enum.name}\s*\{{", text)
        if m:
            body = text[m.end() : matching(text, m.end() - 1) - 1]
            return [
                re.match(r"\w+", attributes(p)[1].strip()).group(0)  # type: ignore[union-attr]
                for p in split_top(body)
            ]
    raise SourceError(f"enum {enum.name} not found")


# --- the whole schema ---------------------------------------------------------------------------


def revision(upstream: Path) -> str | None:
    """``master 15d28660ff (2026-08-22)``: the revision the copy's README names, or None."""
    readme = upstream / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    m = re.search(r"(master) at commit `([0-9a-f]{10})[0-9a-f]*` \((\d{4}-\d\d-\d\d)\)", text)
    return f"{m.group(1)} {m.group(2)} ({m.group(3)})" if m else None


def generate_tree(upstream: Path) -> Node:
    """The config schema derived from the Rust source alone (before the overlay)."""
    source = Source(upstream)
    gen = Generator(source)
    config = source.structs["Config"]
    by_name = {f.name: f for f in config.fields}
    properties: dict[str, Node] = {}
    for name, expand in ROOT_FIELDS.items():
        f = by_name[name]
        # shape-only tables: an object, never expanded
        node: Node = gen.node(f.type) if expand else {"type": "object"}
        has_default, default = gen.field_default(config, f, gen.struct_default_exprs(config))
        if has_default and default is not _NONE:
            node["default"] = default
        if f.serde.aliases:
            node["x-aliases"] = list(f.serde.aliases)
        properties[name] = node
    # every other table: only where its secrets are (``#[secret]`` holds in all of ZeroClaw)
    for f in config.fields:
        if f.name in ROOT_FIELDS and ROOT_FIELDS[f.name]:
            continue
        if "skip" in f.serde.flags or "skip_deserializing" in f.serde.flags:
            continue
        if is_secret_field(f):
            raise SourceError(f"Config.{f.name} is a secret at the root, which bundler lacks")
        found = gen.secret_skeleton(f.type)
        if found is None:
            continue
        wire = f.serde.rename or wire_case(f.name, config.serde.rename_all)
        if wire in properties:
            properties[wire].update(found)  # the shape-only tables keep their free shape
        else:
            properties[wire] = found
    tree: Node = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://bundler.invalid/schemas/config.schema.json",
        "title": "zeroclaw install config.toml",
        "description": (
            "GENERATED by tools/zeroclaw_schema.py from ZeroClaw's config source on master "
            "(../shared/interop/zeroclaw/upstream-master) and "
            "manifests/config.schema.overlay.json; "
            "do not edit. Types, defaults, secret marks (x-secret) and references (x-ref) of "
            "config.toml (spec 01 \u00a73). Unknown keys are allowed: they are the user's and "
            "kept by edits; export never carries them."
        ),
        "type": "object",
        "properties": properties,
    }
    found = revision(upstream)
    if found is not None:
        # the revision a key the schema lacks is newer than (named in an export's dropped row)
        tree["x-zeroclaw-revision"] = found
    return tree


def _children(node: Node, segment: str) -> Iterator[Node]:
    """The nodes ``segment`` names below ``node``; ``*`` names every one."""
    properties = node.get("properties", {})
    if segment != "*":
        if segment in properties:
            yield properties[segment]
        return
    yield from properties.values()
    for key in ("additionalProperties", "items"):
        if isinstance(node.get(key), dict):
            yield node[key]


def apply_overlay(tree: Node, overlay: Node) -> None:
    """Merge the overlay's keywords into the nodes its paths name (``*``: every child).

    Keywords are set on each named node; ``null`` removes one; ``why`` is the overlay's own
    comment. A path that names no node is an error: the overlay must not silently outlive the
    field it describes.
    """
    for path, keywords in overlay["paths"].items():
        targets = [tree]
        for segment in path.split("."):
            targets = [child for t in targets for child in _children(t, segment)]
        if not targets:
            raise SourceError(f"overlay path {path!r} names no schema node")
        for target in targets:
            for key, value in keywords.items():
                if key == "why":
                    continue
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value


FACTS_PATH = REPO / "tests" / "fixtures" / "zeroclaw" / "config-facts.json"
_SLOT_MACROS = {
    "models": "for_each_model_provider_slot",
    "tts": "for_each_tts_provider_slot",
    "transcription": "for_each_transcription_provider_slot",
}


def facts(upstream: Path) -> str:
    """The few facts of ZeroClaw's config crate the tests check bundler against, as data.

    The family lists of each provider category (its slot macro, in order), the
    ``default_auto_approve()`` tools and the number of ``#[secret]`` fields the crate declares,
    with the revision they come from: written to ``tests/fixtures/zeroclaw/config-facts.json``,
    so a clone without ZeroClaw's source still checks the schema against them.
    """
    source = Source(upstream)
    gen = Generator(source)
    families: dict[str, list[str]] = {}
    for category, macro in _SLOT_MACROS.items():
        for text in source.texts:
            m = re.search(rf"macro_rules! {macro}\s*\{{", text)
            if m:
                body = text[m.end() : matching(text, m.end() - 1)]
                families[category] = re.findall(r'\(\w+,\s*"(\w+)"', body)
        if category not in families:
            raise SourceError(f"{macro}! not found")
    secrets = sum(is_secret_field(f) for s in source.structs.values() for f in s.fields)
    data = {
        "revision": revision(upstream),
        "families": families,
        "default_auto_approve": gen.evaluate("default_auto_approve()", "Vec<String>"),
        "secret_fields": secrets,
    }
    return json.dumps(data, indent=2) + "\n"


def generate(upstream: Path, overlay_path: Path = OVERLAY_PATH) -> str:
    """The text of ``manifests/config.schema.json`` for the pinned source at ``upstream``."""
    tree = generate_tree(upstream)
    apply_overlay(tree, json.loads(overlay_path.read_text(encoding="utf-8")))
    return json.dumps(tree, indent=2, ensure_ascii=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("upstream", nargs="?", default=str(DEFAULT_UPSTREAM))
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    upstream = Path(args.upstream)
    if not upstream.is_absolute():
        upstream = REPO / upstream
    try:
        outputs = {SCHEMA_PATH: generate(upstream), FACTS_PATH: facts(upstream)}
    except (SourceError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.check:
        for path, text in outputs.items():
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                print(f"{path} is out of date: run tools/zeroclaw_schema.py", file=sys.stderr)
                return 1
        return 0
    for path, text in outputs.items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
