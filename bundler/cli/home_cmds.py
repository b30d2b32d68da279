"""``bundler home init | show | volumes | skills``: thin handlers over the data-home library
(04 §1-§4); ``bundler doctor --project`` asks :func:`bundler.install.doctor.home_findings`."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Any

from bundler.cli.output import Output, Result
from bundler.errors import (
    DestinationExists,
    InvalidInput,
    Malformed,
    TooLarge,
    UsageError,
    os_failure,
)
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.home.homes import (
    home_sizes,
    init_home,
    is_writable,
    resolve_home,
    resolve_home_with_config,
    user_home,
)
from bundler.home.skills import save_skill, skills_of
from bundler.home.volumes import list_allowed_directories, load_volumes, volumes_from
from bundler.rules.names import escape_display
from bundler.rules.units import human_size

_MAX_SKILL_FILE = 1 << 20


def _project(args: argparse.Namespace) -> Path:
    return Path(os.path.abspath(getattr(args, "project", None) or "."))


def init(args: argparse.Namespace, out: Output) -> Result:
    """``home init``: the first start of 04 §1.2."""
    resolution = resolve_home(_project(args))
    actions = init_home(resolution)
    home = str(resolution.home)
    text = [f"data home {escape_display(home)} (rule {resolution.rule}: {resolution.source})"]
    text += actions or ["nothing to do: the home is complete"]
    return Result(
        payload={"home": home, "source_rule": resolution.rule, "actions": actions},
        text=text if not out.quiet else [],
    )


def show(args: argparse.Namespace, out: Output) -> Result:
    """``home show``: the admin view (04 §4), paths included. Creates nothing."""
    project = _project(args)
    resolution, document = resolve_home_with_config(project)
    volumes = volumes_from(document, project, resolution, user_home(os.environ))
    sizes = home_sizes(resolution)
    before = _before_restore(resolution.home)
    writable = is_writable(resolution.home)
    payload = {
        "home": str(resolution.home),
        "source_rule": resolution.rule,
        "source": resolution.source,
        "writable": writable,
        "database": str(resolution.database),
        "sizes": sizes,
        "volumes": [
            {"name": v.name, "mode": v.mode, "description": v.description, "path": str(v.path)}
            for v in volumes
        ],
        "before_restore": before,
    }
    text = [
        f"data home: {escape_display(str(resolution.home))}",
        f"found by:  rule {resolution.rule}, {escape_display(resolution.source)}",
        f"writable:  {'yes' if writable else 'no'}",
        f"database:  {escape_display(str(resolution.database))} "
        f"({human_size(sizes['database'])}, -wal {human_size(sizes['database_wal'])})",
    ]
    text += [
        f"{name + '/':<10} {human_size(sizes[name])}" for name in ("files", "skills", "backups")
    ]
    text += _before_restore_lines(before)
    text.append("volumes:" if volumes else "volumes:   none (toolOptions.bxai.allowedPaths is set)")
    text += [
        f"  {v.name} ({v.mode}) {escape_display(str(v.path))}"
        + (f"  {escape_display(v.description)}" if v.description else "")
        for v in volumes
    ]
    return Result(payload=payload, text=text)


def _before_restore(home: Path) -> dict[str, Any] | None:
    """The one copy a restore keeps of what it replaced (04 §5.3 step 3), for ``home show``."""
    from bundler.home.restore import before_restore_copy

    found = before_restore_copy(home)
    if found is None:
        return None
    names, size = found
    return {"names": names, "paths": [str(home / name) for name in names], "bytes": size}


def _before_restore_lines(copy: dict[str, Any] | None) -> list[str]:
    if copy is None:
        return []
    paths = [str(path) for path in copy["paths"]]
    names = ", ".join(escape_display(os.path.basename(path)) for path in paths)
    return [
        f"before-restore copy: {human_size(copy['bytes'])} ({names}); the next restore replaces it",
        "  to remove it:",
        "    rm -r -- " + " ".join(shlex.quote(escape_display(path)) for path in paths),
    ]


def volumes(args: argparse.Namespace, out: Output) -> Result:
    """``home volumes``: the runtime's ``GET /volumes`` (name, mode, description; no path)."""
    listed = list_allowed_directories(load_volumes(_project(args)))
    text = [
        f"{escape_display(v['name'])} ({v['mode']})"
        + (f"  {escape_display(v['description'])}" if v["description"] else "")
        for v in listed
    ]
    return Result(payload={"volumes": listed}, text=text or ["no volumes"])


def _read_skill_file(path: str) -> str:
    try:
        data = read_small_file(path, _MAX_SKILL_FILE, streams=True)
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
    if len(data) > _MAX_SKILL_FILE:
        raise TooLarge(
            f"--file {escape_display(path)}: is larger than {human_size(_MAX_SKILL_FILE)} "
            "(a skill holds at most 20,000 characters)",
            path=path,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"--file {escape_display(path)}: is not UTF-8 text", path=path) from None


def skills(args: argparse.Namespace, out: Output) -> Result:
    """``home skills``: list (the runtime's ``GET /skills``), or ``save NAME``."""
    project = _project(args)
    if args.action == "save":
        if not args.name or args.description is None or not args.file:
            raise UsageError("home skills save needs NAME, --description TEXT and --file FILE")
        content = _read_skill_file(args.file)
        existing = [
            s
            for s in skills_of(resolve_home(project), project)
            if s.origin == "agent" and s.name == args.name
        ]
        if existing and not args.force:
            name = escape_display(args.name)
            raise DestinationExists(
                f"the agent already has a skill {name}; pass --force to replace it",
                path=args.name,
            )
        saved = save_skill(project, args.name, args.description, content)
        return Result(
            payload={"saved": saved.skill.as_json()},
            text=[f"saved agent skill {saved.skill.name}"] if not out.quiet else [],
            warnings=saved.warnings,
        )
    if args.name or args.description is not None or args.file or args.force:
        raise UsageError("NAME, --description, --file and --force are for 'home skills save'")
    listed = skills_of(resolve_home(project), project)
    active = [s.as_json() for s in listed if not s.shadowed]
    shadowed = [s.as_json() for s in listed if s.shadowed]
    text = [
        f"{escape_display(s.name)} [{s.origin}{', shadowed' if s.shadowed else ''}]"
        + (f"  {escape_display(s.description)}" if s.description else "")
        for s in listed
    ]
    return Result(payload={"skills": active, "shadowed": shadowed}, text=text or ["no skills"])
