"""Hostile ``Agent.yaml`` files (06 §3 S3) and the helpers the data-home tests share.

Each :class:`Case` is a template: ``{userhome}``, ``{home}``, ``{outside}``, ``{outside_file}``,
``{tmp}`` and ``{project}`` are filled with real folders by :func:`materialise`, so cases such
as "a volume that is the data home" or "a volume whose path is a file" point at real objects.
``expect`` is a fragment the one-line error must contain: the key path at fault.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support import kit

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    """One hostile Agent.yaml: its text (or bytes) and the fragment its error must name."""

    name: str
    text: str | bytes
    expect: str
    setup: Callable[[Path], None] | None = None


def _volumes(count: int, outside: str = "{outside}") -> str:
    lines = ["volumes:"]
    for index in range(count):
        lines += [f"  v{index}:", f"    path: {outside}"]
    return "\n".join(lines) + "\n"


def _one_volume(body: str, name: str = "notes") -> str:
    indented = "".join(f"    {line}\n" for line in body.splitlines())
    return f"volumes:\n  {name}:\n{indented}"


def _link_to_userhome(tmp: Path) -> None:
    (tmp / "outside" / "to-home").symlink_to(tmp / "user")


def _nested(depth: int) -> str:
    return "name: a\nextra: " + "[" * depth + "]" * depth + "\n"


_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)

CASES: list[Case] = [
    Case("top_level_list", "- a\n- b\n", "top level"),
    Case("top_level_scalar", "just some text\n", "top level"),
    Case("unclosed_flow", "name: [unclosed\n", "line"),
    Case("tab_indentation", "name: a\nvolumes:\n\tnotes: {{}}\n", "line"),
    Case("duplicate_top_key", "name: a\nname: b\n", "duplicate key 'name'"),
    Case(
        "duplicate_volume",
        "volumes:\n  notes:\n    path: {outside}\n  notes:\n    path: {outside}\n",
        "duplicate key 'notes'",
    ),
    Case("name_integer", "name: 42\n", "name: must be a string"),
    Case("name_list", "name: [a, b]\n", "name: must be a string"),
    Case("name_null", "name:\n", "name: must be a string"),
    Case("name_date", "name: 2020-01-01\n", "name: must be a string"),
    Case("name_only_dots", "name: '...'\n", "name"),
    Case("name_empty", "name: ''\n", "name"),
    Case("data_not_mapping", "data: somewhere\n", "data: must be a mapping"),
    Case("data_home_integer", "data:\n  home: 5\n", "data.home: must be a string"),
    Case("data_home_root", "data:\n  home: /\n", "data.home"),
    Case("data_home_user_home", "data:\n  home: '~'\n", "data.home"),
    Case("data_home_contains_user_home", "data:\n  home: {tmp}\n", "data.home"),
    Case("volumes_list", "volumes: [notes]\n", "volumes: must be a mapping"),
    Case("volumes_33", _volumes(33), "at most 32 volumes"),
    Case("volume_named_files", _one_volume("path: {outside}", "files"), "'files' is taken"),
    Case("volume_name_uppercase", _one_volume("path: {outside}", "Notes"), "volume name"),
    Case("volume_name_underscore", _one_volume("path: {outside}", "my_notes"), "volume name"),
    Case("volume_name_33_chars", _one_volume("path: {outside}", "a" * 33), "volume name"),
    Case("volume_name_integer", _one_volume("path: {outside}", "7"), "volume name '7'"),
    Case("volume_name_bidi", _one_volume("path: {outside}", '"no\\u202etes"'), "\\u202e"),
    Case(
        "volume_entry_string", "volumes:\n  notes: {outside}\n", "volumes.notes: must be a mapping"
    ),
    Case("volume_path_root", _one_volume("path: /"), "volumes.notes"),
    Case("volume_path_tilde", _one_volume("path: '~'"), "volumes.notes"),
    Case(
        "volume_path_data_home",
        "data:\n  home: {home}\n" + _one_volume("path: {home}"),
        "volumes.notes",
    ),
    Case(
        "volume_path_inside_data_home",
        "data:\n  home: {home}\n" + _one_volume("path: {home}/files"),
        "volumes.notes",
    ),
    Case(
        "volume_path_contains_data_home",
        "data:\n  home: {home}\n" + _one_volume("path: {home}/.."),
        "volumes.notes",
    ),
    Case("volume_path_contains_user_home", _one_volume("path: {tmp}"), "volumes.notes"),
    Case(
        "volume_path_link_to_user_home",
        _one_volume("path: {outside}/to-home"),
        "volumes.notes",
        _link_to_userhome,
    ),
    Case("volume_path_climbs_to_root", _one_volume("path: " + "../" * 40), "volumes.notes"),
    Case("volume_unknown_key", _one_volume("path: {outside}\nowner: root"), "unknown key 'owner'"),
    Case("volume_missing_path_key", _one_volume("mode: rw"), "missing key 'path'"),
    Case("volume_path_absent", _one_volume("path: {outside}/nope"), "volumes.notes"),
    Case("volume_path_is_file", _one_volume("path: {outside_file}"), "volumes.notes"),
    Case("volume_path_integer", _one_volume("path: 12"), "volumes.notes.path"),
    Case("volume_mode_bad", _one_volume("path: {outside}\nmode: rwx"), "volumes.notes.mode"),
    Case(
        "volume_description_201",
        _one_volume("path: {outside}\ndescription: " + "d" * 201),
        "volumes.notes.description",
    ),
    Case(
        "volume_description_list",
        _one_volume("path: {outside}\ndescription: [a]"),
        "volumes.notes.description",
    ),
    Case(
        "volumes_with_allowed_paths",
        _one_volume("path: {outside}") + "toolOptions:\n  bxai:\n    allowedPaths: [/tmp]\n",
        "allowedPaths",
    ),
    Case(
        "allowed_paths_not_list",
        "toolOptions:\n  bxai:\n    allowedPaths: /tmp\n",
        "toolOptions.bxai.allowedPaths",
    ),
    Case("agent_can_save_string", "skills:\n  agentCanSave: 'no'\n", "skills.agentCanSave"),
    Case("auto_approve_integer", "skills:\n  autoApprove: 1\n", "skills.autoApprove"),
    Case("python_object_tag", "name: !!python/object/apply:os.system ['true']\n", "Agent.yaml"),
    Case("billion_laughs", _LAUGHS, "expands to more than"),
    Case("deep_nesting", _nested(5000), "nested deeper"),
    Case("not_utf8", b"name: \xff\xfe agent\n", "UTF-8"),
    Case("oversized", "name: a\n" + "# padding\n" * 120_000, "larger than"),
    Case("unhashable_key", "? [a, b]\n: value\n", "Agent.yaml"),
]


def materialise(tmp: Path, case: Case) -> tuple[Path, dict[str, str]]:
    """Build the world of ``case`` under ``tmp``: a user home, a project holding the hostile
    Agent.yaml, an outside folder and file. Returns (project, environment for the CLI)."""
    user = tmp / "user"
    project = tmp / "project"
    outside = tmp / "outside"
    home = tmp / "datahome"
    for folder in (user, project, outside, home / "files"):
        folder.mkdir(parents=True, exist_ok=True)
    (outside / "file.txt").write_text("outside\n")
    if case.setup is not None:
        case.setup(tmp)
    values = {
        "userhome": str(user),
        "home": str(home),
        "outside": str(outside),
        "outside_file": str(outside / "file.txt"),
        "tmp": str(tmp),
        "project": str(project),
    }
    text = case.text
    data = text if isinstance(text, bytes) else text.format(**values).encode("utf-8")
    (project / "Agent.yaml").write_bytes(data)
    return project, clean_env(user)


def clean_env(user: Path, **extra: str) -> dict[str, str]:
    """A subprocess environment whose ``HOME`` is ``user`` and without any BXAGENTS_*
    variable of the machine running the tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BXAGENTS_")}
    env["HOME"] = str(user)
    env.update(extra)
    return env


def run_cli(
    *args: str, env: Mapping[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m bundler ARGS`` as a real process."""
    return kit.run_cli(args, exact_env=env, cwd=cwd)


Snapshot = dict[str, tuple[Any, ...]]


def snapshot_tree(root: Path) -> Snapshot:
    """Every entry below ``root`` (links not followed): kind, mode, content (file bytes, link
    target), mtime (not folders') and size, to prove an operation created or changed nothing."""
    return kit.tree_snapshot(root, mtimes=True, sizes=True)
