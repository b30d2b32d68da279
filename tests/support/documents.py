"""Nested documents (a config, a manifest, an Agent.yaml, as loaded) changed one place at a
time: what the differential tests of two schema engines draw their cases from."""

from __future__ import annotations

import copy
from typing import Any


def value_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``value``, as the keys and indexes that reach it; ``()``, the whole, first."""
    found = [prefix]
    if isinstance(value, dict):
        for key, sub in value.items():
            found += value_paths(sub, (*prefix, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            found += value_paths(sub, (*prefix, index))
    return found


def changed(document: Any, path: tuple[Any, ...], value: Any, *, remove: bool = False) -> Any:
    """A copy of ``document`` with ``value`` at ``path`` (which must not be ``()``), or with
    what is there removed when ``remove`` (nothing, when nothing is there)."""
    copied = copy.deepcopy(document)
    target: Any = copied
    for step in path[:-1]:
        target = target[step]
    last = path[-1]
    present = last in target if isinstance(target, dict) else last < len(target)
    if not remove:
        target[last] = value
    elif present:
        del target[last]
    return copied
