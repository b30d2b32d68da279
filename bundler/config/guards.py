"""The two guarded fields of an agent: its filesystem escape hatch and its memory backend. Pure.

``workspace.unrestricted_filesystem`` may be turned on only by an audited ``config set``, never
by an environment override; ``memory.backend`` may not change once the agent's
``<workspace>/memory/`` holds data (the memory would be orphaned). :func:`guarded_changes`
finds what changed between two configs; whether a memory backend is locked is a question for
the disk, which :mod:`bundler.config.memorylock` asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bundler.rules.paths import format_path
from bundler.rules.values import lookup, schema_default

__all__ = ["GuardedChange", "guarded_changes"]


def _effective(data: Mapping[str, Any], segments: list[str]) -> Any:
    found, value = lookup(data, segments)
    return value if found else schema_default(segments)[1]


UNRESTRICTED = ("workspace", "unrestricted_filesystem")
_BACKEND = ("memory", "backend")


@dataclass(frozen=True)
class GuardedChange:
    """One agent's changed ``unrestricted_filesystem`` or ``memory.backend`` (effective)."""

    alias: str
    segments: tuple[str, ...]
    old: Any
    new: Any

    @property
    def path(self) -> str:
        """The config path of the changed field."""
        return format_path(self.segments)

    @property
    def is_unrestricted(self) -> bool:
        """True for ``workspace.unrestricted_filesystem``, False for ``memory.backend``."""
        return self.segments[2:] == UNRESTRICTED


def guarded_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[GuardedChange]:
    """Every agent whose escape hatch or memory backend differs between two configs.

    Compared on effective values (schema defaults filled in) for every agent of either config,
    so a change made by replacing a whole table (``agents.a.workspace``, ``agents.a``) is
    caught as surely as one made at the field itself.
    """
    aliases: dict[str, None] = {}
    for config in (before, after):
        agents = config.get("agents")
        if isinstance(agents, dict):
            aliases.update(dict.fromkeys(agents))
    changes = []
    for alias in aliases:
        for field_name in (UNRESTRICTED, _BACKEND):
            segments = ["agents", alias, *field_name]
            old, new = _effective(before, segments), _effective(after, segments)
            if old != new:
                changes.append(GuardedChange(alias, tuple(segments), old, new))
    return changes
