"""The two guarded fields of an agent: its filesystem escape hatch and its memory backend.

``workspace.unrestricted_filesystem`` may be turned on only by an audited ``config set``, never
by an environment override; ``memory.backend`` may not change once the agent's
``<workspace>/memory/`` holds data (the memory would be orphaned). :func:`guarded_changes`
finds what changed between two configs (pure); :func:`memory_backend_locked` looks at the
workspace, descriptor-relative and without following symbolic links.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.fs.durable import open_dir
from bundler.rules import layout
from bundler.rules.paths import format_path
from bundler.rules.values import lookup, schema_default

__all__ = ["GuardedChange", "backend_locked", "guarded_changes", "memory_backend_locked"]

# how deep the memory-lock probe descends into <workspace>/memory before it assumes "locked"
_MEMORY_PROBE_DEPTH = 16


def _effective(data: Mapping[str, Any], segments: list[str]) -> Any:
    found, value = lookup(data, segments)
    return value if found else schema_default(segments)[1]


_UNRESTRICTED = ("workspace", "unrestricted_filesystem")
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
        return self.segments[2:] == _UNRESTRICTED


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
        for field_name in (_UNRESTRICTED, _BACKEND):
            segments = ["agents", alias, *field_name]
            old, new = _effective(before, segments), _effective(after, segments)
            if old != new:
                changes.append(GuardedChange(alias, tuple(segments), old, new))
    return changes


def backend_locked(change: GuardedChange, configs: list[Mapping[str, Any]], root: Path) -> bool:
    """True when a memory backend ``change`` would orphan memory under any of ``configs``."""
    # the workspace may differ between the configs (a path changed alongside): ask both
    return any(memory_backend_locked(config, change.alias, root) for config in configs)


def memory_backend_locked(config: Mapping[str, Any], alias: str, install_root: Path) -> bool:
    """True once ``<workspace>/memory/`` of agent ``alias`` holds a non-empty regular file.

    Read without following symbolic links below the workspace. What cannot be examined (an
    unreadable or symlinked ``memory``, a tree deeper than the probe) counts as locked: a wrong
    "locked" only refuses a change, a wrong "unlocked" would orphan the agent's memory.
    """
    workspace = layout.workspace_dir(config, alias, install_root)
    try:
        workspace_fd = open_dir(workspace, follow=True)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    try:
        try:
            memory_fd = open_dir("memory", dir_fd=workspace_fd)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        return _holds_data(memory_fd, 0)
    finally:
        os.close(workspace_fd)


def _holds_data(dir_fd: int, depth: int) -> bool:
    """Closes ``dir_fd``; True when a non-empty regular file lies below it (or it is unsure)."""
    try:
        if depth > _MEMORY_PROBE_DEPTH:
            return True
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_size > 0:
                    return True
                if stat.S_ISDIR(info.st_mode):
                    try:
                        sub = open_dir(entry.name, dir_fd=dir_fd)
                    except OSError:
                        return True
                    if _holds_data(sub, depth + 1):
                        return True
        return False
    except OSError:
        return True
    finally:
        os.close(dir_fd)
