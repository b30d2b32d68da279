"""``bundle verify|inspect BUNDLE`` (03 §1, §2), ``bundle secrets-template BUNDLE``, and
``bundle pack`` / ``bundle unpack``: each calls :mod:`bundler.api` and prints its report."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundler.api.display import escape_display, human_size
from bundler.cli.output import Output, Result
from bundler.cli.registry_args import opened_bundle
from bundler.errors import EXIT_INVALID, error_kind

if TYPE_CHECKING:
    from bundler.api import ArchiveReport, InspectReport

# bundler.api is imported by the handlers, not here: it is cheap, but what it names is each
# handler's own (a folder's verify loads no archive, registry or inspect code)


def _error_lines(first: str, rest: list[str], json_mode: bool) -> str:
    """The failure message: one ``error:`` line per error on a terminal, the first in JSON."""
    if json_mode or not rest:
        return first
    return "\nerror: ".join([first, *rest])


def _problem_lines(bundle: str, problems: Sequence[object]) -> list[str]:
    """One line per problem, naming the bundle as well: entry paths are relative to it."""
    # "bundle/: NOTES.md" reads as a path of its own: drop a completed path's trailing slash
    where = escape_display(str(bundle).rstrip("/") or "/")
    return [f"{where}: {problem}" for problem in problems]


def verify(args: argparse.Namespace, out: Output) -> Result:
    """Verify a bundle; exit 3 listing every error when anything is wrong."""
    from bundler import api

    with opened_bundle(args, args.dir, out) as (bundle, progress):
        report = api.verify(bundle, progress=progress)
    pinned = bundle.reference
    if pinned is not None:
        report.path = Path(args.dir)
    payload = report.as_json()
    warnings = [f"{w.path}: {w.message}" for w in report.warnings]
    beside = api.leftovers_beside(args.dir)
    if pinned is not None:
        payload["path"] = payload["reference"] = pinned
    warnings += beside
    payload["warnings"] += [{"path": str(args.dir), "message": line} for line in beside]
    if report.ok:
        text = [
            f"ok: {escape_display(pinned or str(report.path))}: "
            f"format {report.format_version} bundle "
            f"of agent {payload['root_agent']}, {report.files} files, "
            f"{human_size(report.bytes)} verified"
        ]
        return Result(payload=payload, text=[] if out.quiet else text, warnings=warnings)
    lines = _problem_lines(args.dir, report.errors)
    first = report.errors[0]
    return Result(
        payload=payload,
        code=EXIT_INVALID,
        # a refused bundle's report starts with why it is refused, as import's does; a tolerant
        # reader's warnings (no checksums, dangling names) would only bury that (--json keeps them)
        warnings=[],
        error_message=_error_lines(lines[0], lines[1:], out.json_mode),
        error_path=first.path,
        error_kind=error_kind(first.concept),
    )


def _plain(report: InspectReport, shown: str) -> list[str]:
    lines = [f"bundle: {escape_display(shown)}"]
    for label, value in report.summary():
        lines.append(f"{label}: {value}")
    for title, rows in report.sections():
        lines.append(f"{title}:")
        lines += [f"  {'  '.join(row)}" for row in rows] or ["  (none)"]
    return lines


def _rich(report: InspectReport, shown: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    summary = Table(show_header=False, box=None)
    summary.add_row("bundle", Text(escape_display(shown)))
    for label, value in report.summary():
        summary.add_row(label, Text(value))
    console.print(summary)
    for title, rows in report.sections():
        table = Table(title=title, title_justify="left")
        for column in report.columns(title):
            # fold, never truncate: a cut-off path or command could hide what is granted
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        if not rows:
            table.add_row(*(["(none)"] + [""] * (len(report.columns(title)) - 1)))
        console.print(table)


def inspect(args: argparse.Namespace, out: Output) -> Result:
    """Show what a bundle holds and grants: a table on a terminal, plain lines otherwise."""
    from bundler import api

    # a reference is judged as its pulled folder would be: the workspace, the bulk of an
    # agent, is listed as it arrives (every rule, each file's digest) and never written
    with opened_bundle(args, args.dir, out, list_only=api.LISTED_BY_INSPECT) as opened:
        bundle, progress = opened
        report = api.inspect(bundle, progress=progress)
    pinned = bundle.reference
    shown = pinned or str(report.path)
    payload: dict[str, Any] = report.as_json()
    if pinned is not None:
        # the private copy it was read from is gone: the bundle is the reference
        payload["bundle"] = payload["path"] = payload["reference"] = pinned
    warnings = [f"{w.path}: {w.message}" for w in report.verify.warnings]
    text: list[str] = []
    if not out.json_mode:
        if sys.stdout.isatty():
            _rich(report, shown)
        else:
            text = _plain(report, shown)
    if report.verify.ok:
        return Result(payload=payload, text=text, warnings=warnings)
    lines = _problem_lines(args.dir, report.verify.errors)
    return Result(
        payload=payload,
        text=text,
        code=EXIT_INVALID,
        warnings=warnings,
        error_message=_error_lines(lines[0], lines[1:], out.json_mode),
        error_path=report.verify.errors[0].path,
        error_kind=error_kind(report.verify.errors[0].concept),
    )


def secrets_template(args: argparse.Namespace, out: Output) -> Result:
    """``bundle secrets-template BUNDLE [--out FILE [--force]]``: the ``--secrets-file``
    skeleton of a verified bundle's required secrets, on stdout or in a new 0600 file."""
    from bundler import api

    options = api.SecretsTemplateOptions(out=args.out, force=args.force, install=args.install)
    with opened_bundle(args, args.dir, out) as (bundle, progress):
        made = api.secrets_template(bundle, options, progress=progress)
    report = made.verify
    if not made.ok:
        lines = _problem_lines(args.dir, report.errors) or [
            f"{escape_display(str(args.dir))}: the bundle cannot be read"
        ]
        return Result(
            payload=made.as_json(),
            code=EXIT_INVALID,
            error_message=_error_lines(lines[0], lines[1:], out.json_mode),
            error_path=report.errors[0].path if report.errors else str(args.dir),
            error_kind=error_kind(report.errors[0].concept) if report.errors else "",
        )
    payload: dict[str, Any] = made.as_json()
    if args.out is None:
        if out.json_mode:
            payload["template"] = made.text
            return Result(payload=payload)
        # a file's content, to be saved or copied: never folded
        return Result(payload=payload, text=made.text.splitlines(), verbatim=True)
    shown = escape_display(args.out)
    return Result(payload=payload, text=[] if out.quiet else [f"wrote {shown}"])


def _archive_result(report: ArchiveReport, verb: str, out: Output) -> Result:
    text = [
        # how it was published (the kernel call) is for --json readers, not for people
        f"{verb} {escape_display(report.source)} to {escape_display(report.destination)}: "
        f"{report.members} members"
    ]
    return Result(
        payload=report.as_json(),
        text=[] if out.quiet else text,
        quiet_text=[escape_display(report.destination)],
        warnings=report.warnings,
    )


def pack(args: argparse.Namespace, out: Output) -> Result:
    """``bundle pack DIR FILE [--force]``: the bundle folder as one deterministic tar file."""
    from bundler import api

    with out.progress() as progress:
        options = api.PackOptions(force=args.force)
        report = api.pack(Path(args.dir), Path(args.file), options, progress=progress)
    return _archive_result(report, "packed", out)


def unpack(args: argparse.Namespace, out: Output) -> Result:
    """``bundle unpack FILE DIR [--force]``: a bundle archive as a verified bundle folder."""
    from bundler import api

    with out.progress() as progress:
        options = api.UnpackOptions(force=args.force)
        report = api.unpack(Path(args.file), Path(args.dir), options, progress=progress)
    return _archive_result(report, "unpacked", out)
