"""``bundler home init | show | volumes | skills``: each calls :mod:`bundler.api` and prints
its report (04 §1-§4); ``bundler doctor --project`` checks the home as well."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Any

from bundler import api
from bundler.api.display import escape_display, human_size
from bundler.cli.output import Output, Result
from bundler.errors import UsageError


def _project(args: argparse.Namespace) -> Path:
    return Path(os.path.abspath(getattr(args, "project", None) or "."))


def init(args: argparse.Namespace, out: Output) -> Result:
    """``home init``: the first start of 04 §1.2."""
    report = api.init_home(_project(args))
    home = str(report.home)
    text = [f"data home {escape_display(home)} (rule {report.rule}: {report.source})"]
    text += report.actions or ["nothing to do: the home is complete"]
    return Result(payload=report.as_json(), text=text if not out.quiet else [])


def show(args: argparse.Namespace, out: Output) -> Result:
    """``home show``: the admin view (04 §4), paths included. Creates nothing."""
    report = api.show_home(_project(args))
    sizes, volumes = report.sizes, report.volumes
    text = [
        f"data home: {escape_display(str(report.home))}",
        f"found by:  rule {report.rule}, {escape_display(report.source)}",
        f"writable:  {'yes' if report.writable else 'no'}",
        f"database:  {escape_display(str(report.database))} "
        f"({human_size(sizes['database'])}, -wal {human_size(sizes['database_wal'])})",
    ]
    text += [
        f"{name + '/':<10} {human_size(sizes[name])}" for name in ("files", "skills", "backups")
    ]
    text += _before_restore_lines(report.before_restore)
    text.append("volumes:" if volumes else "volumes:   none (toolOptions.bxai.allowedPaths is set)")
    text += [
        f"  {v.name} ({v.mode}) {escape_display(str(v.path))}"
        + (f"  {escape_display(v.description)}" if v.description else "")
        for v in volumes
    ]
    return Result(payload=report.as_json(), text=text)


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
    listed = api.list_volumes(_project(args))
    text = [
        f"{escape_display(v['name'])} ({v['mode']})"
        + (f"  {escape_display(v['description'])}" if v["description"] else "")
        for v in listed
    ]
    return Result(payload={"volumes": listed}, text=text or ["no volumes"])


def skills(args: argparse.Namespace, out: Output) -> Result:
    """``home skills``: list (the runtime's ``GET /skills``), or ``save NAME``."""
    project = _project(args)
    if args.action == "save":
        if not args.name or args.description is None or not args.file:
            raise UsageError("home skills save needs NAME, --description TEXT and --file FILE")
        saved = api.save_skill(project, args.name, args.description, args.file, force=args.force)
        return Result(
            payload={"saved": saved.skill.as_json()},
            text=[f"saved agent skill {saved.skill.name}"] if not out.quiet else [],
            warnings=saved.warnings,
        )
    if args.name or args.description is not None or args.file or args.force:
        raise UsageError("NAME, --description, --file and --force are for 'home skills save'")
    listed = api.list_skills(project)
    active = [s.as_json() for s in listed if not s.shadowed]
    shadowed = [s.as_json() for s in listed if s.shadowed]
    text = [
        f"{escape_display(s.name)} [{s.origin}{', shadowed' if s.shadowed else ''}]"
        + (f"  {escape_display(s.description)}" if s.description else "")
        for s in listed
    ]
    return Result(payload={"skills": active, "shadowed": shadowed}, text=text or ["no skills"])
