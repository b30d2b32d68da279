"""What ``home init``, ``home show``, ``home volumes`` and ``home skills`` report of a project's
data home (04 §1-§4): each a report whose ``as_json()`` is the command's ``--json`` payload.

Reads only, but for :func:`init_project_home` (the first start of 04 §1.2) and
:func:`save_skill_file` (an agent skill, with every limit of 04 §3).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.errors import DestinationExists, InvalidInput, Malformed, TooLarge, os_failure
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.home.homes import (
    home_sizes,
    init_home,
    is_writable,
    resolve_home,
    resolve_home_with_config,
    user_home,
)
from bundler.home.skills import SavedSkill, SkillInfo, save_skill, skills_of
from bundler.home.volumes import Volume, list_allowed_directories, load_volumes, volumes_from
from bundler.rules.names import escape_display
from bundler.rules.units import human_size

MAX_SKILL_FILE = 1 << 20
"""The largest file a skill is read from (a skill holds at most 20,000 characters)."""


@dataclass
class HomeInit:
    """What ``home init`` did: the home, the rule of 04 §1.1 that found it, and one line per
    step taken (none when the home was complete)."""

    home: Path
    rule: int
    source: str
    actions: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """``{"home", "source_rule", "actions"}``."""
        return {"home": str(self.home), "source_rule": self.rule, "actions": self.actions}


@dataclass
class HomeReport:
    """``home show``: where the home is and why, whether it is writable, its database, the
    sizes of its parts, the agent's volumes, and the one copy a restore keeps of what it
    replaced (``before_restore``: its names, paths and bytes; ``None`` when there is none)."""

    home: Path
    rule: int
    source: str
    writable: bool
    database: Path
    sizes: dict[str, int]
    volumes: list[Volume]
    before_restore: dict[str, Any] | None

    def as_json(self) -> dict[str, Any]:
        """The ``home show --json`` payload (without ``ok``)."""
        return {
            "home": str(self.home),
            "source_rule": self.rule,
            "source": self.source,
            "writable": self.writable,
            "database": str(self.database),
            "sizes": self.sizes,
            "volumes": [
                {"name": v.name, "mode": v.mode, "description": v.description, "path": str(v.path)}
                for v in self.volumes
            ],
            "before_restore": self.before_restore,
        }


def init_project_home(project: Path) -> HomeInit:
    """Create the data home of ``project`` as the agent's first start does (04 §1.2)."""
    resolution = resolve_home(Path(os.path.abspath(project)))
    actions = init_home(resolution)
    return HomeInit(resolution.home, resolution.rule, resolution.source, actions)


def show_home(project: Path) -> HomeReport:
    """The admin view of the data home of ``project`` (04 §4), paths included. Creates nothing."""
    project = Path(os.path.abspath(project))
    resolution, document = resolve_home_with_config(project)
    volumes = volumes_from(document, project, resolution, user_home(os.environ))
    return HomeReport(
        home=resolution.home,
        rule=resolution.rule,
        source=resolution.source,
        writable=is_writable(resolution.home),
        database=resolution.database,
        sizes=home_sizes(resolution),
        volumes=volumes,
        before_restore=_before_restore(resolution.home),
    )


def _before_restore(home: Path) -> dict[str, Any] | None:
    """The one copy a restore keeps of what it replaced (04 §5.3 step 3)."""
    from bundler.home.restore import before_restore_copy

    found = before_restore_copy(home)
    if found is None:
        return None
    names, size = found
    return {"names": names, "paths": [str(home / name) for name in names], "bytes": size}


def allowed_directories(project: Path) -> list[dict[str, str]]:
    """The runtime's ``GET /volumes`` of the agent of ``project``: name, mode, description (no
    path)."""
    return list_allowed_directories(load_volumes(Path(os.path.abspath(project))))


def project_skills(project: Path) -> list[SkillInfo]:
    """The skills the agent of ``project`` sees, agent skills another one shadows marked so."""
    project = Path(os.path.abspath(project))
    return skills_of(resolve_home(project), project)


def save_skill_file(
    project: Path, name: str, description: str, file: str, *, force: bool = False
) -> SavedSkill:
    """Save the text of ``file`` as the agent skill ``name`` of ``project`` (04 §3); an agent
    skill of that name is replaced only with ``force``."""
    project = Path(os.path.abspath(project))
    content = _read_skill_file(file)
    existing = [
        s
        for s in skills_of(resolve_home(project), project)
        if s.origin == "agent" and s.name == name
    ]
    if existing and not force:
        raise DestinationExists(
            f"the agent already has a skill {escape_display(name)}; pass --force to replace it",
            path=name,
        )
    return save_skill(project, name, description, content)


def _read_skill_file(path: str) -> str:
    try:
        data = read_small_file(path, MAX_SKILL_FILE, streams=True)
    except NotSmallFile as why:
        raise (TooLarge if why.too_large else InvalidInput)(
            f"--file {escape_display(path)} {why.reason} (a skill holds at most 20,000 characters)",
            path=path,
        ) from None
    except OSError as err:
        raise os_failure(
            f"--file {escape_display(path)}: cannot be read ({os.strerror(err.errno or 0)})",
            err,
            path=path,
        ) from None
    if len(data) > MAX_SKILL_FILE:
        raise TooLarge(
            f"--file {escape_display(path)}: is larger than {human_size(MAX_SKILL_FILE)} "
            "(a skill holds at most 20,000 characters)",
            path=path,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"--file {escape_display(path)}: is not UTF-8 text", path=path) from None
