"""Skills of a single-agent project (04 §3): the three levels, listing, and the agent's saves.

Listing reads without following symbolic links: a skill is a real folder holding a regular
``SKILL.md`` (the agent writes ``<home>/skills/`` itself, so a link there could point anywhere).
Saving writes ``<home>/skills/<name>/SKILL.md`` atomically and durably, descriptor-relative
below the home.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from bundler.errors import (
    DestinationExists,
    InvalidConfig,
    NotFound,
    PolicyRefused,
    UnsuitablePath,
    os_failure,
)
from bundler.fs.durable import atomic_write, fsync_dir, open_dir
from bundler.home.agentyaml import agent_can_save_skills
from bundler.home.homes import HomeResolution, resolve_home, resolve_home_with_config
from bundler.rules.names import decode_name, escape_display, has_control_chars

SKILL_NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
SKILL_FILE = "SKILL.md"
MAX_DESCRIPTION = 500
MAX_CONTENT = 20_000
MAX_AGENT_SKILLS = 50
# front matter sits at the top; reading more of a huge SKILL.md would only cost memory
_FRONT_MATTER_BYTES = 64 * 1024

Origin = Literal["installed", "project", "agent"]


@dataclass(frozen=True)
class SkillInfo:
    """One skill as listed: ``shadowed`` is True for an agent skill whose name an installed or
    project skill already has (the runtime loads the other one)."""

    name: str
    description: str
    origin: Origin
    shadowed: bool = False

    def as_json(self) -> dict[str, str]:
        """The runtime's ``GET /skills`` entry: name, description, origin (never a path)."""
        return {"name": self.name, "description": self.description, "origin": self.origin}


@dataclass(frozen=True)
class SavedSkill:
    """What :func:`save_skill` did: the skill, and warnings for a failure after the commit."""

    skill: SkillInfo
    warnings: list[str]


def _open_level(base: Path, *parts: str) -> int | None:
    """Open ``base/parts...`` with no link followed below ``base``; None when absent."""
    try:
        fd = open_dir(base, follow=True)
    except OSError:
        return None
    for part in parts:
        try:
            child = open_dir(part, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        fd, parent = child, fd
        os.close(parent)
    return fd


def _entry_names(level_fd: int) -> list[tuple[str, bool]]:
    """(name, is a real folder) of every visible entry of a level, names valid UTF-8 only."""
    found: list[tuple[str, bool]] = []
    with os.scandir(level_fd) as entries:
        for entry in entries:
            name = decode_name(os.fsencode(entry.name))
            if name is None or name.startswith("."):
                continue
            found.append((name, entry.is_dir(follow_symlinks=False)))
    return found


def front_matter_description(text: str) -> str:
    """The ``description`` of a SKILL.md's YAML front matter, ``""`` when there is none or it
    cannot be read (a listing never fails because one skill's file is malformed)."""
    if not text.startswith("---"):
        return ""
    lines = text.split("\n")
    if lines[0].rstrip("\r") != "---":
        return ""
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r") == "---":
            block = "\n".join(lines[1:index])
            break
    else:
        return ""
    try:
        meta = yaml.safe_load(block)
    except (yaml.YAMLError, RecursionError):
        return ""
    if isinstance(meta, dict) and isinstance(meta.get("description"), str):
        description: str = meta["description"]
        return description
    return ""


def _read_description(folder_fd: int) -> str | None:
    """The description of the skill in ``folder_fd``; None when it has no regular SKILL.md."""
    try:
        fd = os.open(
            SKILL_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _FRONT_MATTER_BYTES)
    finally:
        os.close(fd)
    return front_matter_description(data.decode("utf-8", "replace"))


def _level_skills(base: Path, parts: tuple[str, ...], origin: Origin) -> dict[str, SkillInfo]:
    level_fd = _open_level(base, *parts)
    if level_fd is None:
        return {}
    skills: dict[str, SkillInfo] = {}
    try:
        for name, is_folder in _entry_names(level_fd):
            if not is_folder:
                continue
            try:
                folder_fd = open_dir(name, dir_fd=level_fd)
            except OSError:
                continue  # replaced by a link or removed since the scan
            try:
                description = _read_description(folder_fd)
            finally:
                os.close(folder_fd)
            if description is not None:
                skills[name] = SkillInfo(name, description, origin)
    finally:
        os.close(level_fd)
    return skills


def _taken_names(project: Path) -> set[str]:
    """Every entry name of the installed and project levels, skill or not: a save must not take
    any of them (a conservative reading of "cannot take the name")."""
    names: set[str] = set()
    for parts in ((".agents", "skills"), ("skills",)):
        level_fd = _open_level(project, *parts)
        if level_fd is None:
            continue
        try:
            names.update(name for name, _ in _entry_names(level_fd))
        finally:
            os.close(level_fd)
    return names


def skills_of(resolution: HomeResolution, project: Path) -> list[SkillInfo]:
    """Every skill, sorted by name: one entry per installed/project name (project wins), then
    each agent skill, ``shadowed`` when that name is already taken by either level."""
    installed = _level_skills(project, (".agents", "skills"), "installed")
    shipped = _level_skills(project, ("skills",), "project")
    own = _level_skills(resolution.home, ("skills",), "agent")
    winners = {**installed, **shipped}
    listed = list(winners.values())
    listed += [
        SkillInfo(s.name, s.description, "agent", shadowed=s.name in winners) for s in own.values()
    ]
    return sorted(listed, key=lambda s: (s.name, s.shadowed))


def list_skills(project: Path, *, environ: Mapping[str, str] | None = None) -> list[SkillInfo]:
    """The skills of ``project`` at the three levels of 04 §3 (see :func:`skills_of`).
    Creates nothing."""
    resolution = resolve_home(project, environ=environ)
    return skills_of(resolution, Path(os.path.abspath(project)))


def _front_matter_value(text: str) -> str:
    """``text`` as written after ``description: ``: plain when YAML reads it back unchanged,
    else double-quoted (JSON's escaping is valid YAML), so no description can add keys."""
    try:
        if yaml.safe_load(f"description: {text}") == {"description": text}:
            return text
    except yaml.YAMLError:
        pass
    import json

    return json.dumps(text, ensure_ascii=False)


def render_skill(name: str, description: str, content: str) -> str:
    """The SKILL.md a save writes (04 §3): front matter with name and description, then the
    content. Validates the limits; raises :class:`InvalidInput`."""
    check_skill(name, description, content)
    return f"---\nname: {name}\ndescription: {_front_matter_value(description)}\n---\n{content}"


def check_skill(name: str, description: str, content: str) -> None:
    """The limits of 04 §3 that depend on the arguments alone (pure)."""
    if SKILL_NAME_RE.fullmatch(name) is None:
        raise InvalidConfig(
            f"skill name '{escape_display(name)}': must match [A-Za-z0-9_-][A-Za-z0-9._-]{{0,127}}",
            path=f"skills/{escape_display(name)}",
        )
    if len(description) > MAX_DESCRIPTION:
        raise InvalidConfig(
            f"skill {name}: description is {len(description)} characters; "
            f"at most {MAX_DESCRIPTION}",
            path=f"skills/{name}",
        )
    if has_control_chars(description):
        raise InvalidConfig(
            f"skill {name}: description must be one line without control characters",
            path=f"skills/{name}",
        )
    if len(content) > MAX_CONTENT:
        raise InvalidConfig(
            f"skill {name}: content is {len(content)} characters; at most {MAX_CONTENT}",
            path=f"skills/{name}",
        )


def _own_skill_names(skills_fd: int) -> set[str]:
    return {name for name, is_folder in _entry_names(skills_fd) if is_folder}


def _open_or_make(parent_fd: int, name: str, shown: str) -> tuple[int, bool]:
    """Open folder ``name`` (no link followed), creating it 0700 first when absent."""
    made = False
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
        made = True
    except FileExistsError:
        pass
    try:
        fd = open_dir(name, dir_fd=parent_fd)
    except OSError:
        try:
            is_link = stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
        except OSError:
            is_link = False
        reason = "a symbolic link" if is_link else "not a folder"
        raise UnsuitablePath(f"{shown} is {reason}; remove it first", path=shown) from None
    if made:
        # mkdir's mode is filtered by the umask; skill folders are exactly private
        try:
            os.fchmod(fd, 0o700)
        except OSError:
            os.close(fd)
            _unmake(parent_fd, name)
            raise
    return fd, made


def _unmake(parent_fd: int, name: str) -> None:
    """Remove the folder ``name`` this run made, if it is still empty: a refused save leaves no
    empty skill folder behind (it was listed, and tripped over, as a skill). rmdir removes only
    an empty folder, so nothing another writer put there meanwhile is lost; a failure leaves
    the folder as it is, the save's own error being the one to report."""
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent_fd)


def save_skill(
    project: Path,
    name: str,
    description: str,
    content: str,
    *,
    environ: Mapping[str, str] | None = None,
) -> SavedSkill:
    """Write the agent skill ``<home>/skills/<name>/SKILL.md`` with every limit of 04 §3.

    Refused (exit 1): ``skills.agentCanSave: false``; a name an installed or project skill
    has; a 51st agent skill (replacing one is always allowed); a home that does not exist.
    Invalid (exit 3): a bad name, a description over 500 characters or with control
    characters, content over 20,000 characters. The write is atomic and durable; a failure
    before the rename leaves the previous SKILL.md and is refused, a failure of the fsync after
    it is a warning in the answer (the skill is saved, 05 §2).
    """
    text = render_skill(name, description, content)
    resolution, document = resolve_home_with_config(project, environ=environ)
    project = Path(os.path.abspath(project))
    if not agent_can_save_skills(document):
        raise PolicyRefused(
            "Agent.yaml: skills.agentCanSave is false; the agent cannot save skills",
            path="Agent.yaml:skills.agentCanSave",
        )
    if name in _taken_names(project):
        raise DestinationExists(
            f"skill {name}: an installed or project skill has this name; choose another",
            path=f"skills/{name}",
        )
    try:
        home_fd = open_dir(resolution.home, follow=True)
    except OSError:
        raise NotFound(
            f"data home {escape_display(str(resolution.home))} does not exist; "
            "run 'bundler home init' first",
            path=str(resolution.home),
        ) from None
    data = text.encode("utf-8")
    saved = SkillInfo(name, description, "agent")
    try:
        _write_skill(home_fd, name, data)
    except OSError as err:
        reason = os.strerror(err.errno or errno.EIO)
        if _holds(home_fd, name, data):
            # the rename (the commit point) happened; only a later fsync failed
            warning = f"skill {name}: saved, but flushing it to disk failed ({reason})"
            return SavedSkill(saved, [warning])
        raise os_failure(
            f"skill {name}: could not be written ({reason}); the previous SKILL.md, if any, "
            "is intact",
            err,
            path=f"skills/{name}",
        ) from None
    finally:
        os.close(home_fd)
    return SavedSkill(saved, [])


def _write_skill(home_fd: int, name: str, data: bytes) -> None:
    """``skills/<name>/SKILL.md`` below ``home_fd``: folders made 0700 and fsynced, the file
    written by :func:`~bundler.fs.durable.atomic_write`. OSError passes through."""
    skills_fd, made_skills = _open_or_make(home_fd, "skills", "skills/")
    try:
        if made_skills:
            fsync_dir(home_fd)
        own = _own_skill_names(skills_fd)
        if name not in own and len(own) >= MAX_AGENT_SKILLS:
            raise PolicyRefused(
                f"skill {name}: the agent already keeps {MAX_AGENT_SKILLS} skills; "
                "replace or delete one",
                path=f"skills/{name}",
            )
        folder_fd, made = _open_or_make(skills_fd, name, f"skills/{name}")
        try:
            if made:
                fsync_dir(skills_fd)
            atomic_write(folder_fd, SKILL_FILE, data, mode=0o600)
        except BaseException:
            if made:
                _unmake(skills_fd, name)
            raise
        finally:
            os.close(folder_fd)
    except BaseException:
        if made_skills:
            _unmake(home_fd, "skills")
        raise
    finally:
        os.close(skills_fd)


def _holds(home_fd: int, name: str, data: bytes) -> bool:
    """Whether ``skills/<name>/SKILL.md`` holds exactly ``data`` (read without following)."""
    try:
        fd = os.open(
            f"skills/{name}/{SKILL_FILE}",
            os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
            dir_fd=home_fd,
        )
    except OSError:
        return False
    try:
        return os.read(fd, len(data) + 1) == data
    except OSError:
        return False
    finally:
        os.close(fd)
