"""Typed, read-only access to a parsed config (``config.toml`` or a bundle's fragment).

A config comes from a user's hand or from a bundle, so any value may have any type: an
``agents`` that is a string, a ``servers`` that is a table. The rule every reader of it follows,
written once here: **a value of the wrong type reads as absent**. A table that is not a table
is an empty table, an array that is not an array is an empty array, an item of the wrong type
in an array is not there. Nothing here raises; the schema check (:mod:`bundler.rules.schemacheck`)
and validation (:mod:`bundler.rules.validate`) are where a wrong type is *reported*, each once.

A table is any :class:`~collections.abc.Mapping` (``tomllib``'s dicts, ``tomlkit``'s tables);
what is returned is typed read-only, so no reader changes the config it was handed, and the
empty table is one immutable object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

EMPTY: Mapping[str, Any] = MappingProxyType({})
"""The table a value that is absent or not a table reads as."""


def table(value: object) -> Mapping[str, Any]:
    """``value`` as a config table; :data:`EMPTY` when it is absent or not a table."""
    return value if isinstance(value, Mapping) else EMPTY


def table_at(value: object, *keys: str) -> Mapping[str, Any]:
    """The table at ``keys`` below ``value`` (``table_at(config, "agents", alias)``): each step
    through a value that is not a table reads as :data:`EMPTY`."""
    node = table(value)
    for key in keys:
        node = table(node.get(key))
    return node


def array(value: object) -> Sequence[Any]:
    """``value`` as a config array (a TOML array is a ``list``); empty when it is not one."""
    return value if isinstance(value, list) else ()


def array_of_tables(value: object) -> list[Mapping[str, Any]]:
    """The tables of the array ``value`` (``[[mcp.servers]]``), in order; an item that is not a
    table is not there."""
    return [item for item in array(value) if isinstance(item, Mapping)]


def strings(value: object) -> list[str]:
    """The strings of the array ``value`` (``skill_bundles = [...]``), in order; an item that is
    not a string is not there."""
    return [item for item in array(value) if isinstance(item, str)]


def string(value: object) -> str | None:
    """``value`` when it is a string (``""`` included), else None."""
    return value if isinstance(value, str) else None


def integer(value: object) -> int | None:
    """``value`` when it is an integer, else None; a boolean is no integer (TOML keeps them
    apart, Python does not)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def boolean(value: object) -> bool | None:
    """``value`` when it is a boolean, else None."""
    return value if isinstance(value, bool) else None
