"""Secrets of a config, pure: scrub a fragment, find escaped ciphertext, sweep bytes for values.

02 §5. The schema (``x-secret``) is the only source of which fields are secret. The sweep looks
for the exact values of every secret of the *whole* source config in carried bytes, in the
forms a value usually takes when pasted somewhere: raw, base64 at each of the three alignments,
URL-encoded and JSON-escaped. It is one pass over the bytes with a single compiled matcher.

Nothing here ever puts a secret value into a message, a ``repr`` or a :class:`Hit`.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bundler import schema
from bundler.configpath import format_path

CIPHERTEXT_PREFIXES = ("enc:", "enc2:")
SECRET_MIN_LENGTH = 8
SECRET_MAP_VALUE_MIN_LENGTH = 16
OPAQUE_SECRET_KEY = re.compile(r"token|secret|password|passwd|api_key|apikey", re.IGNORECASE)

Node = dict[str, Any]


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
        base = format_path(self.segments)
        return base if self.index is None else f"{base}[{self.index}]"


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
                yield Leaf(segments, i, item, False, False, known and item_node is not None)
        return
    secret = bool(node and node.get("x-secret"))
    yield Leaf(segments, None, value, secret, in_secret_map, known)


def _is_populated(value: Any) -> bool:
    return value not in ("", None) and value != {} and value != [] and value is not False


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


def sweep_targets(config: Node) -> tuple[list[SweepTarget], int]:
    """The values the exact-value sweep looks for (02 §5.3) and how many could not be swept.

    Secret fields count from 8 characters, values of secret maps from 16 (shorter ones would
    match by chance); values under a key matching ``token|secret|password|passwd|api_key|apikey``
    in opaque or unknown tables count from 8. Stored-encrypted values (``enc:``/``enc2:``) hide
    their plain text and are counted instead.
    """
    targets: list[SweepTarget] = []
    seen: set[tuple[str, str]] = set()
    encrypted = 0
    for leaf in iter_leaves(config):
        value = leaf.value
        if leaf.secret or leaf.secret_map_value:
            minimum = SECRET_MAP_VALUE_MIN_LENGTH if leaf.secret_map_value else SECRET_MIN_LENGTH
        elif not leaf.known and _opaque_secret_key(leaf):
            minimum = SECRET_MIN_LENGTH
        else:
            continue
        if not isinstance(value, str):
            continue
        if value.startswith(CIPHERTEXT_PREFIXES):
            encrypted += 1
            continue
        if len(value) < minimum:
            continue
        key = (leaf.path, value)
        if key not in seen:
            seen.add(key)
            targets.append(SweepTarget(leaf.path, value))
    return targets, encrypted


def _opaque_secret_key(leaf: Leaf) -> bool:
    # A list item's key is the list's own key; a table's value is keyed by its last segment.
    return bool(leaf.segments) and OPAQUE_SECRET_KEY.search(leaf.segments[-1]) is not None


@dataclass(frozen=True)
class Hit:
    """A secret found in carried bytes: which file, which config path, in which encoding."""

    file: str
    secret_path: str
    encoding: str


def encodings_of(value: str) -> list[tuple[str, bytes]]:
    """The byte patterns that reveal ``value``: raw, base64 at three alignments, URL, JSON.

    A base64 pattern keeps only the characters fully determined by the value's own bytes at
    that alignment (the text around it changes the first and last groups).
    """
    raw = value.encode("utf-8")
    forms: list[tuple[str, bytes]] = [("raw", raw)]
    for shift in range(3):
        body = raw[(3 - shift) % 3 :]
        body = body[: len(body) // 3 * 3]
        if len(body) >= 3:
            forms.append(("base64", base64.b64encode(body)))
    forms.append(("url-encoded", urllib.parse.quote(value, safe="").encode("ascii")))
    forms.append(("url-encoded", urllib.parse.quote_plus(value, safe="").encode("ascii")))
    forms.append(("json-escaped", json.dumps(value)[1:-1].encode("ascii")))
    forms.append(("json-escaped", json.dumps(value, ensure_ascii=False)[1:-1].encode("utf-8")))
    unique: list[tuple[str, bytes]] = []
    seen: set[bytes] = set()
    for name, pattern in forms:
        if pattern and pattern not in seen:
            seen.add(pattern)
            unique.append((name, pattern))
    return unique


def _trie_regex(patterns: Sequence[bytes]) -> bytes:
    """One regex matching any of ``patterns``, factored as a trie.

    A flat alternation makes ``re`` try every pattern at every position; the trie tries one
    branch per distinct next byte, which measured about 6x faster for 100 secrets.
    """
    trie: dict[int, Any] = {}
    for pattern in patterns:
        node = trie
        for byte in pattern:
            node = node.setdefault(byte, {})
        node[-1] = {}

    def emit(node: dict[int, Any]) -> bytes:
        branches = [
            re.escape(bytes([byte])) + emit(sub) for byte, sub in sorted(node.items()) if byte != -1
        ]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if -1 in node else body

    return emit(trie)


class Sweeper:
    """A one-pass multi-pattern matcher over bytes for a set of :class:`SweepTarget`.

    ``scan_bytes`` checks a whole buffer; ``stream`` checks a file fed in chunks and finds a
    value that straddles a chunk boundary. Each (file, secret path, encoding) is reported once.
    """

    def __init__(self, targets: Sequence[SweepTarget]) -> None:
        owners: dict[bytes, list[tuple[str, str]]] = {}
        for target in targets:
            for encoding, pattern in encodings_of(target.value):
                owners.setdefault(pattern, []).append((target.config_path, encoding))
        self._owners = owners
        self._patterns = sorted(owners, key=len, reverse=True)
        self.max_length = max((len(p) for p in self._patterns), default=0)
        self.min_length = min((len(p) for p in self._patterns), default=0)
        self._regex = re.compile(_trie_regex(self._patterns)) if self._patterns else None
        # Prefilter: every byte of every pattern belongs to a small alphabet, so a match lies
        # inside a run of at least min_length such bytes. ``bytes.translate`` marks them and
        # ``bytes.find`` jumps between runs at C speed; the (slow) regex only sees the runs.
        alphabet = {byte for pattern in self._patterns for byte in pattern}
        self._mask = bytes(1 if byte in alphabet else 0 for byte in range(256))
        self._run = b"\x01" * self.min_length

    @property
    def empty(self) -> bool:
        """True when there is nothing to look for."""
        return self._regex is None

    def _scan(
        self, name: str, data: bytes | memoryview, found: dict[tuple[str, str], None]
    ) -> None:
        if self._regex is None or len(data) < self.min_length:
            return
        buffer = data if isinstance(data, bytes) else bytes(data)
        mask = buffer.translate(self._mask)
        position, size = 0, len(mask)
        while True:
            start = mask.find(self._run, position)
            if start < 0:
                return
            end = mask.find(b"\x00", start + self.min_length)
            end = size if end < 0 else end
            self._scan_run(buffer, start, end, found)
            position = end

    def _scan_run(
        self, buffer: bytes, start: int, end: int, found: dict[tuple[str, str], None]
    ) -> None:
        regex = self._regex
        assert regex is not None
        position = start
        while True:
            match = regex.search(buffer, position, end)
            if match is None:
                return
            at = match.start()
            # The regex reports the longest pattern at this start; any shorter pattern that
            # also starts here (a secret contained in another) is found by checking them all.
            window = buffer[at : min(at + self.max_length, end)]
            for pattern in self._patterns:
                if window.startswith(pattern):
                    for owner in self._owners[pattern]:
                        found[owner] = None
            position = at + 1

    def scan_bytes(self, name: str, data: bytes | memoryview) -> list[Hit]:
        """Every secret found in ``data`` (the bytes, or the relative path, of ``name``)."""
        found: dict[tuple[str, str], None] = {}
        self._scan(name, data, found)
        return [Hit(name, path, encoding) for path, encoding in found]

    def stream(self, name: str) -> SweepStream:
        """A scanner for ``name`` fed chunk by chunk; call ``close()`` for the hits."""
        return SweepStream(self, name)


class SweepStream:
    """Feeds chunks of one file to a :class:`Sweeper`; keeps only a pattern-length tail.

    Each chunk is scanned alone (no copy), then the short window made of the previous chunk's
    tail and the new chunk's head is scanned for a value that straddles the boundary.
    """

    def __init__(self, sweeper: Sweeper, name: str) -> None:
        self._sweeper = sweeper
        self._name = name
        self._tail = b""
        self._found: dict[tuple[str, str], None] = {}

    def feed(self, chunk: bytes | memoryview) -> None:
        """Scan the next ``chunk`` of the file."""
        keep = self._sweeper.max_length - 1
        if keep <= 0 or not chunk:
            return
        data = bytes(chunk) if isinstance(chunk, memoryview) else chunk
        if self._tail:
            self._sweeper._scan(self._name, self._tail + data[:keep], self._found)
        self._sweeper._scan(self._name, data, self._found)
        self._tail = (self._tail + data[-keep:])[-keep:] if len(data) < keep else data[-keep:]

    def close(self) -> list[Hit]:
        """The hits of the whole file, each (secret path, encoding) once."""
        return [Hit(self._name, path, encoding) for path, encoding in self._found]
