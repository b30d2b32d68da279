"""Where things are in an install (01 §2), computed from the config alone.

Pure: no function here touches the file system (``~`` expansion reads ``$HOME`` only), so the
planner and the validator can ask about 5,000 agents without a single system call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bundler.rules.config_view import table

__all__ = [
    "agent_dir",
    "config_file",
    "default_skill_bundle_dir",
    "default_workspace_dir",
    "lexically_inside",
    "normalise",
    "resolve_config_path",
    "shared_dir",
    "state_dir",
    "skill_bundle_dir",
    "workspace_dir",
]

CONFIG_NAME = "config.toml"
MANIFEST_NAME = "zeroclaw-agent.toml"
"""A bundle's manifest: what marks a folder as a bundle rather than an install."""
# a config this large is not a config; refusing it keeps a hostile file from exhausting memory.
# One limit for every config.toml bundler reads, an install's or a bundle's: 03 §1 gives 16 MiB
# for a bundle's, and an install's is held to the same, so that one number is ever explained.
MAX_CONFIG_TOML_BYTES = 16 * 1024 * 1024


def config_file(install_root: Path) -> Path:
    """``<install>/config.toml``."""
    return install_root / CONFIG_NAME


def shared_dir(install_root: Path) -> Path:
    """``<install>/shared``: the only place skill bundle folders may live (01 §5 rule 4)."""
    return install_root / "shared"


def state_dir(install_root: Path) -> Path:
    """``<install>/data/state``: receipts, the audit log and the record of export destinations."""
    return install_root / "data" / "state"


def agent_dir(install_root: Path, alias: str) -> Path:
    """``<install>/agents/<alias>``."""
    return install_root / "agents" / alias


def default_workspace_dir(install_root: Path, alias: str) -> Path:
    """``<install>/agents/<alias>/workspace``: the workspace when ``workspace.path`` is unset."""
    return agent_dir(install_root, alias) / "workspace"


def default_skill_bundle_dir(install_root: Path, bundle_alias: str) -> Path:
    """``<install>/shared/skills/<bundle>``: the folder when ``directory`` is unset."""
    return shared_dir(install_root) / "skills" / bundle_alias


def resolve_config_path(value: str, install_root: Path) -> Path:
    """A path written in the config: ``~`` expanded, absolute kept, relative joined to the root."""
    if value.startswith("~"):
        return Path(os.path.expanduser(value))
    path = Path(value)
    return path if path.is_absolute() else install_root / path


def workspace_dir(config: Mapping[str, Any], alias: str, install_root: Path) -> Path:
    """The workspace folder of agent ``alias``: ``agents.<alias>.workspace.path`` or the default."""
    agent = table(table(config.get("agents")).get(alias))
    path = table(agent.get("workspace")).get("path")
    if isinstance(path, str) and path:
        return resolve_config_path(path, install_root)
    return default_workspace_dir(install_root, alias)


def skill_bundle_dir(config: Mapping[str, Any], bundle_alias: str, install_root: Path) -> Path:
    """The folder of skill bundle ``bundle_alias``: its ``directory`` or the default."""
    bundle = table(table(config.get("skill_bundles")).get(bundle_alias))
    directory = bundle.get("directory")
    if isinstance(directory, str) and directory:
        return resolve_config_path(directory, install_root)
    return default_skill_bundle_dir(install_root, bundle_alias)


def normalise(path: str | os.PathLike[str]) -> str:
    """``path`` with ``.``, ``..`` and repeated separators collapsed lexically (no symlink lookup).

    A leading ``//`` is folded to ``/`` too: POSIX lets ``os.path.normpath`` keep it, but on
    Linux it names the same root, and two spellings of one folder must compare equal.
    """
    text = os.path.normpath(os.fspath(path))
    if text.startswith("//"):
        text = "/" + text.lstrip("/")
    return text


def lexically_inside(
    path: str | os.PathLike[str], folder: str | os.PathLike[str], *, strict: bool = False
) -> bool:
    """True when ``path`` is ``folder`` or below it, after ``..`` normalisation of both.

    With ``strict=True`` the folder itself does not count. Lexical only: a symbolic link inside
    ``folder`` pointing out is the reader's business (every reader opens without following).
    """
    inner, outer = normalise(path), normalise(folder)
    if inner == outer:
        return not strict
    prefix = outer if outer.endswith(os.sep) else outer + os.sep
    return inner.startswith(prefix)
