"""Secrets of a config, pure: scrub a fragment, find escaped ciphertext, the values to sweep for.

02 §5. The schema (``x-secret``) is the only source of which fields are secret. The sweep looks
for the exact values of every secret of the *whole* source config in carried bytes
(:func:`sweep_targets`); the matcher that does it is :mod:`bundler.rules.sweeper`, apart so that
the commands that only read a config or a bundle start without it.

Nothing here ever puts a secret value into a message or a ``repr``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bundler.rules import schema
from bundler.rules.credentials import (
    authorization_token,
    credentials_in,
    is_opaque_secret_key,
    spellings,
)
from bundler.rules.paths import format_path

CIPHERTEXT_PREFIXES = ("enc:", "enc2:")
WITHHELD = "<name withheld: it holds a secret>"
SECRET_MIN_LENGTH = 8
SECRET_MAP_VALUE_MIN_LENGTH = 16
Node = dict[str, Any]


class ScanSecrets(str, enum.Enum):
    """What a known secret found in a carried file does to an export (``--scan-secrets``):
    ``refuse`` fails it, ``warn`` lists the hit in the report, ``off`` does not sweep."""

    REFUSE = "refuse"
    WARN = "warn"
    OFF = "off"


@dataclass(frozen=True)
class Leaf:
    """One value of a config tree with its address and what the schema says about it.

    ``segments`` address the value (MCP servers by name); ``index`` is set for an item of a
    plain list, whose path is written ``<path>[<index>]``. ``known`` is False below a key the
    schema does not describe (or an ``x-opaque`` table).
    """

    segments: tuple[str, ...]
    index: int | None
    value: Any = field(repr=False)
    secret: bool
    secret_map_value: bool
    known: bool

    @property
    def path(self) -> str:
        """The pasteable config path of this value (01 §6)."""
        tail = [] if self.index is None else [self.index]
        return format_path([*self.segments, *tail])


def iter_leaves(
    tree: Node, node: Node | None = None, segments: tuple[str, ...] = ()
) -> Iterator[Leaf]:
    """Every scalar of ``tree`` (and every value of a secret map, whatever its type).

    Walks alongside the config schema, so each leaf knows whether it is secret. Recursive: the
    depth is that of the parsed TOML document, which the loaders bound.
    """
    start = schema.config_schema() if node is None and not segments else node
    yield from _walk(tree, start, segments, known=start is not None, in_secret_map=False)


def _walk(
    value: Any, node: Node | None, segments: tuple[str, ...], *, known: bool, in_secret_map: bool
) -> Iterator[Leaf]:
    if isinstance(value, dict):
        secret_map = bool(node and node.get("x-secret") and node.get("type") == "object")
        for key, sub in value.items():
            key_s = str(key)
            sub_node = None if node is None or node.get("x-opaque") else schema.child(node, key_s)
            sub_known = known and sub_node is not None
            path = (*segments, key_s)
            if secret_map:
                # Every value of a secret map is secret, whatever its shape.
                yield Leaf(path, None, sub, True, True, sub_known)
                continue
            yield from _walk(sub, sub_node, path, known=sub_known, in_secret_map=False)
        return
    if isinstance(value, list):
        keyed = bool(node and node.get("x-keyed-by"))
        item_node = node.get("items") if node and isinstance(node.get("items"), dict) else None
        # a secret list (ZeroClaw's #[secret] Vec<String>) holds a secret in every item
        secret_items = bool(node and node.get("x-secret")) or bool(
            item_node and item_node.get("x-secret")
        )
        for i, item in enumerate(value):
            if keyed and isinstance(item, dict) and isinstance(item.get("name"), str):
                yield from _walk(
                    item, item_node, (*segments, item["name"]), known=known, in_secret_map=False
                )
            elif isinstance(item, (dict, list)):
                yield from _walk(
                    item,
                    item_node,
                    (*segments, str(i)),
                    known=known and item_node is not None,
                    in_secret_map=False,
                )
            else:
                yield Leaf(segments, i, item, secret_items, False, known and item_node is not None)
        return
    secret = bool(node and node.get("x-secret"))
    yield Leaf(segments, None, value, secret, in_secret_map, known)


def _is_populated(value: Any) -> bool:
    return value not in ("", None) and value != {} and value != [] and value is not False


def holds_secret(config: Node) -> bool:
    """Whether ``config`` holds a non-empty secret value, plain or stored-encrypted: the file
    that holds one is written 0600 whatever mode it had."""
    return any(
        (leaf.secret or leaf.secret_map_value) and _is_populated(leaf.value)
        for leaf in iter_leaves(config)
    )


def scrub(fragment: Node) -> list[str]:
    """Replace every non-empty secret value of ``fragment`` by ``""`` in place (02 §5.1).

    Returns the config paths of the scrubbed values, sorted and unique, each pasteable into
    ``bundler config set``. MCP servers are addressed by name.
    """
    scrubbed: set[str] = set()
    _scrub(fragment, schema.config_schema(), (), scrubbed)
    return sorted(scrubbed)


def _scrub(value: Any, node: Node | None, segments: tuple[str, ...], out: set[str]) -> None:
    if node is None:
        return
    if isinstance(value, dict):
        secret_map = bool(node.get("x-secret") and node.get("type") == "object")
        for key in list(value):
            path = (*segments, str(key))
            if secret_map:
                if _is_populated(value[key]):
                    value[key] = ""
                    out.add(format_path(path))
                continue
            sub_node = schema.child(node, str(key))
            if sub_node is not None and sub_node.get("x-secret"):
                if sub_node.get("type") == "object" and isinstance(value[key], dict):
                    _scrub(value[key], sub_node, path, out)
                elif _is_populated(value[key]):
                    # a secret field, or a secret map of the wrong type: nothing of it travels
                    value[key] = ""
                    out.add(format_path(path))
                continue
            _scrub(value[key], sub_node, path, out)
    elif isinstance(value, list) and node.get("x-keyed-by"):
        items = node.get("items")
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                _scrub(
                    item, items if isinstance(items, dict) else None, (*segments, item["name"]), out
                )


def find_ciphertext(fragment: Node) -> list[str]:
    """Config paths of string values beginning ``enc:`` or ``enc2:`` (02 §5.2), in walk order."""
    return [
        leaf.path
        for leaf in iter_leaves(fragment)
        if isinstance(leaf.value, str) and leaf.value.startswith(CIPHERTEXT_PREFIXES)
    ]


@dataclass(frozen=True)
class SweepTarget:
    """A secret value of the source config to look for, and the config path that holds it."""

    config_path: str
    value: str = field(repr=False)


def sweep_targets(config: Node, *more: Node) -> tuple[list[SweepTarget], int]:
    """The values the exact-value sweep looks for (02 §5.3) and how many could not be swept.

    Secret fields count from 8 characters, values of secret maps from 16 (shorter ones would
    match by chance); values under a key matching ``token|secret|password|passwd|api_key|apikey``
    in opaque or unknown tables count from 8. Of an authorization value among them
    (``Bearer TOKEN``), the token alone counts too, from 8. In every other string, the
    credentials written into its web addresses count, as written and decoded, from 8
    (:mod:`bundler.rules.credentials`). Stored-encrypted values (``enc:``/``enc2:``) hide their
    plain text and are counted instead.

    ``more`` are other views of the same install whose values count too: the config as the
    file has it and with the environment overrides applied are both the install's secrets (an
    override replacing a key does not make the stored key harmless to publish).
    """
    targets: list[SweepTarget] = []
    seen: set[tuple[str, str]] = set()
    encrypted: set[tuple[str, str]] = set()
    for view in (config, *more):
        for leaf in iter_leaves(view):
            value = leaf.value
            if leaf.secret or leaf.secret_map_value:
                minimum = (
                    SECRET_MAP_VALUE_MIN_LENGTH if leaf.secret_map_value else SECRET_MIN_LENGTH
                )
            elif not leaf.known and _opaque_secret_key(leaf):
                minimum = SECRET_MIN_LENGTH
            else:
                # any other string: a credential written into an address in it is a secret too
                if isinstance(value, str):
                    for credential in address_credentials(value):
                        if (leaf.path, credential) not in seen:
                            seen.add((leaf.path, credential))
                            targets.append(SweepTarget(leaf.path, credential))
                continue
            if not isinstance(value, str):
                continue
            if value.startswith(CIPHERTEXT_PREFIXES):
                encrypted.add((leaf.path, value))
                continue
            token = authorization_token(value)
            for held, floor in ((value, minimum), (token, SECRET_MIN_LENGTH)):
                if held is not None and len(held) >= floor and (leaf.path, held) not in seen:
                    seen.add((leaf.path, held))
                    targets.append(SweepTarget(leaf.path, held))
    return targets, len(encrypted)


def value_targets(values: Mapping[str, str]) -> list[SweepTarget]:
    """Targets for values given by the user (``--secret``, ``--secrets-file``): path -> value.

    The same floor as a secret field's (8 characters): a shorter value would be withheld
    wherever its letters happen to occur.
    """
    return [
        SweepTarget(path, value)
        for path, value in values.items()
        if isinstance(value, str) and len(value) >= SECRET_MIN_LENGTH
    ]


def address_credentials(text: str) -> list[str]:
    """The credentials written into the web addresses of ``text``
    (:func:`bundler.rules.credentials.credentials_in`), each as written and decoded, in order.
    As the sweep's other targets, only values of at least :data:`SECRET_MIN_LENGTH` characters
    count (shorter ones would match by chance)."""
    found: list[str] = []
    for credential in credentials_in(text):
        found += spellings(credential, text)
    return [value for value in found if len(value) >= SECRET_MIN_LENGTH]


def _opaque_secret_key(leaf: Leaf) -> bool:
    # A list item's key is the list's own key; a table's value is keyed by its last segment.
    return bool(leaf.segments) and is_opaque_secret_key(leaf.segments[-1])
