"""Whether an agent's memory backend is locked: its ``<workspace>/memory/`` holds data.

The rule of which changes need asking is pure (:mod:`bundler.config.guards`); this module is the
disk scan that answers it, descriptor-relative and without following symbolic links below the
workspace.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bundler.config.guards import GuardedChange
from bundler.fs.durable import open_dir
from bundler.rules import layout

__all__ = ["backend_locked", "memory_backend_locked"]

# how deep the memory-lock probe descends into <workspace>/memory before it assumes "locked"
_MEMORY_PROBE_DEPTH = 16


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
