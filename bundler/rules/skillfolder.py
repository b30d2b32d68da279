"""Where a travelling skill bundle's content may land: a fresh child of the skills root.

A skill bundle's ``directory`` (01 §2) becomes a folder of the importing install, so a bundle
must not choose it freely: a control character makes a name no tool can show, ``..`` or a
nested path escapes or overlaps, and ``shared/skills`` itself would make one bundle's folder the
parent of every later default skill folder. :func:`skill_folder_problem` is the one rule;
``bundle verify`` asks it of every ``directory`` a fragment carries
(:mod:`bundler.bundle.fragment`), ``agents import`` asks it of the folder every added or
namespaced skill bundle will have in the merged config, and export keeps a ``directory`` only
when it passes (:mod:`bundler.bundle.closure`). So an import never creates what verify would
refuse.

**A fresh child of the skills root** is a folder that

1. is written exactly ``shared/skills/<name>``, relative to the install root: no ``.``,
   ``..``, empty or extra component, no trailing ``/``, no backslash, no ``~`` or absolute path;
2. has a ``<name>`` that is a portable file name (02 §7.3: no control character — C0, DEL, C1 —
   no ``/\\:<>"|?*``, not ``.``/``..``, no reserved device name, 1-255 bytes), so it is one folder
   on every system; the whole text holds no control character either;
3. is used by no other entry: no other skill bundle's folder and no agent's workspace is that
   folder, lies inside it, or contains it (compared lexically, install-relative).

The default folder of a bundle without ``directory`` (``shared/skills/<alias>``) is checked by
the same rule at import. Whether the folder already exists on disk is the importer's separate
"absent or empty" check (03 §3.1.4).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bundler.rules import layout
from bundler.rules.config_view import table
from bundler.rules.names import has_control_chars, non_portable_reason
from bundler.rules.paths import format_path

__all__ = ["SKILLS_ROOT", "skill_folder_problem", "used_folders"]

SKILLS_ROOT = "shared/skills"


def _overlaps(folder: str, other: str) -> bool:
    return folder == other or other.startswith(folder + "/") or folder.startswith(other + "/")


def skill_folder_problem(directory: str, used: Mapping[str, str]) -> str | None:
    """Why ``directory`` is not a fresh child of the skills root (module docstring), or None.

    ``directory`` is the install-relative folder as the config writes it; ``used`` maps the
    config path of every other entry owning a folder to that folder, install-relative and
    normalised (:func:`used_folders`). The reason names no value (it may be hostile).
    """
    if has_control_chars(directory):
        return "contains a control character"
    head, _, name = directory.rpartition("/")
    if head != SKILLS_ROOT:
        return f"must be {SKILLS_ROOT}/<name>: one folder directly under the skills root"
    reason = non_portable_reason(name)
    if reason is not None:
        return f"its folder name is not portable ({reason})"
    return overlap_problem(directory, used)


def overlap_problem(directory: str, used: Mapping[str, str]) -> str | None:
    """Why ``directory`` may not be ``used`` (another entry's folder, inside or around it)."""
    for path, folder in used.items():
        if _overlaps(directory, folder):
            return f"overlaps the folder of {path}"
    return None


def used_folders(
    config: Mapping[str, Any], install_root: Path, *, except_bundle: str | None = None
) -> dict[str, str]:
    """Config path -> install-relative folder of every skill bundle and agent workspace.

    ``except_bundle`` leaves that skill bundle out (the one being checked). Folders outside the
    install come out ``..``-prefixed and so never overlap one under ``shared/skills``.
    """
    root = layout.normalise(install_root)
    found: dict[str, str] = {}

    def relative(path: Path) -> str:
        return os.path.relpath(layout.normalise(path), root)

    bundles = config.get("skill_bundles")
    for alias in table(bundles):
        if alias != except_bundle and isinstance(alias, str):
            folder = layout.skill_bundle_dir(config, alias, install_root)
            found[format_path(["skill_bundles", alias])] = relative(folder)
    agents = config.get("agents")
    for alias in table(agents):
        if isinstance(alias, str):
            folder = layout.workspace_dir(config, alias, install_root)
            found[format_path(["agents", alias, "workspace"])] = relative(folder)
    return found
