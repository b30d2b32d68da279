"""Validation findings: what a config check reports and the words it reports with (01 §5).

A :class:`Finding` names a kind, the config path at fault and what was expected there. Both
the schema checker (:mod:`bundler.rules.schemacheck`) and the rules of
:mod:`bundler.rules.validate` build them from this vocabulary; :func:`describe` says what a schema
node accepts, never the value found, because values may be secrets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DANGLING_REFERENCE",
    "FALLBACK_CYCLE",
    "FALLBACK_DANGLING",
    "FALLBACK_TOO_DEEP",
    "INVALID_FORMAT",
    "INVALID_VALUE",
    "NON_PORTABLE_ALIAS",
    "REQUIRED_FIELD_EMPTY",
    "UNKNOWN_MCP_SERVER",
    "Finding",
    "describe",
]

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
