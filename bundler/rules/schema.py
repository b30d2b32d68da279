"""The JSON Schemas shipped in ``manifests/``: loading, walking, defaults and secret marks.

The config schema is the single source of which fields exist, their defaults and which are
secret (``"x-secret": true`` on a field, or on a map whose every value is then secret). No other
module keeps a list of secret field names.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

Node = dict[str, Any]

# package data in a wheel (``bundler/manifests``), else the checkout's ``manifests/``; read by
# path because importlib.resources costs more start-up than the read (06 §1)
_MANIFEST_FOLDERS = (
    Path(__file__).resolve().parents[1] / "manifests",
    Path(__file__).resolve().parents[2] / "manifests",
)


@cache
def load(name: str) -> Node:
    """The schema ``manifests/<name>``: package data in a wheel, else the checkout's folder."""
    for folder in _MANIFEST_FOLDERS:
        if (folder / name).is_file():
            data: Node = json.loads((folder / name).read_bytes())
            return data
    from importlib import resources  # a package imported from a zip has no folders

    packaged = resources.files("bundler").joinpath("manifests").joinpath(name)
    loaded: Node = json.loads(packaged.read_bytes())
    return loaded


def config_schema() -> Node:
    """The schema of ``config.toml`` (01 §3)."""
    return load("config.schema.json")


def child(node: Node | None, segment: str) -> Node | None:
    """The schema of ``segment`` below ``node``, or None when the schema does not describe it.

    Objects look in ``properties`` then ``additionalProperties``; arrays keyed by ``name``
    (``mcp.servers``) take any segment as the name of an entry; other arrays take an index.
    """
    if node is None:
        return None
    if node.get("type") == "array":
        items = node.get("items")
        if not isinstance(items, dict):
            return None
        if node.get("x-keyed-by") or segment.isdigit():
            return items
        return None
    properties = node.get("properties", {})
    if segment in properties:
        sub: Node = properties[segment]
        return sub
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    return None


def is_value_map(node: Node | None) -> bool:
    """True for a map whose values are plain values: a secret map (``extra_headers``, ``env``) or
    a free-form one (``pricing``, ``workspace.access``).

    Such a map's key always ends a config path, which is why ZeroClaw's ``config set`` takes the
    whole rest of a path as the key (:mod:`bundler.rules.paths`).
    """
    if node is None or node.get("type") != "object" or node.get("properties"):
        return False
    extra = node.get("additionalProperties")
    return isinstance(extra, dict) and extra.get("type") not in (None, "object", "array")


def is_position_list(node: Node | None) -> bool:
    """True for an array whose entries are addressed by position (not keyed by a name)."""
    return node is not None and node.get("type") == "array" and not node.get("x-keyed-by")


def alias_target(node: Node | None, segment: str) -> str | None:
    """The field ``segment`` is a serde alias of (``x-aliases``), or None.

    ZeroClaw accepts an alias on input and writes the field's own name, so a carried entry
    uses the field's name.
    """
    if node is None:
        return None
    for name, sub in node.get("properties", {}).items():
        if segment in sub.get("x-aliases", ()):
            return str(name)
    return None


def field_name(node: Node | None, segment: str) -> str:
    """``segment`` as the schema spells it: ``api-key`` is ``api_key`` when that field exists.

    Aliases and map keys (anything not in ``properties``) are taken exactly.
    """
    if node is None or node.get("type") == "array":
        return segment
    properties = node.get("properties", {})
    if segment not in properties and segment.replace("-", "_") in properties:
        return segment.replace("-", "_")
    return segment


def resolve(segments: Sequence[str]) -> tuple[list[str], Node | None, bool]:
    """Walk the config schema along ``segments``.

    Returns the segments with field names canonicalised, the node reached (None when the schema
    does not describe the path) and whether the value there is secret.
    """
    node: Node | None = config_schema()
    canonical: list[str] = []
    secret = False
    for segment in segments:
        name = field_name(node, segment)
        parent_is_secret_map = bool(node and node.get("x-secret") and node.get("type") == "object")
        node = child(node, name)
        canonical.append(name)
        secret = parent_is_secret_map or bool(node and node.get("x-secret"))
    return canonical, node, secret


def is_secret(segments: Sequence[str]) -> bool:
    """True when the value at ``segments`` is secret (a secret field or a secret map's value)."""
    return resolve(segments)[2]


def has_default(node: Node | None) -> bool:
    """True when the schema gives ``node`` a default."""
    return node is not None and "default" in node


def default_of(node: Node | None) -> Any:
    """The schema default of ``node`` (a fresh copy), or None when it has none."""
    if node is None or "default" not in node:
        return None
    return json.loads(json.dumps(node["default"]))
