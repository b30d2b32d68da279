"""``bundler bundle verify DIR`` and ``bundler bundle inspect DIR`` (03 §1, §2): printing only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bundler.bundle.inspect import InspectReport, inspect_bundle
from bundler.bundle.recover import leftovers_beside
from bundler.bundle.verify import verify_bundle
from bundler.cli.output import Output, Result
from bundler.errors import EXIT_INVALID
from bundler.rules.names import escape_display


def _error_lines(first: str, rest: list[str], json_mode: bool) -> str:
    """The failure message: one ``error:`` line per error on a terminal, the first in JSON."""
    if json_mode or not rest:
        return first
    return "\nerror: ".join([first, *rest])


def verify(args: argparse.Namespace, out: Output) -> Result:
    """Verify a bundle; exit 3 listing every error when anything is wrong."""
    with out.progress("verifying", None) as advance:
        report = verify_bundle(Path(args.dir), progress=advance)
    payload = report.as_json()
    warnings = [f"{w.path}: {w.message}" for w in report.warnings]
    beside = leftovers_beside(Path(args.dir))
    warnings += beside
    payload["warnings"] += [{"path": str(args.dir), "message": line} for line in beside]
    if report.ok:
        text = [
            f"ok: {escape_display(str(report.path))}: format {report.format_version} bundle "
            f"of agent {payload['root_agent']}, {report.files} files, {report.bytes} bytes verified"
        ]
        return Result(payload=payload, text=[] if out.quiet else text, warnings=warnings)
    lines = [str(problem) for problem in report.errors]
    first = report.errors[0]
    return Result(
        payload=payload,
        code=EXIT_INVALID,
        # a refused bundle's report starts with why it is refused, as import's does; a tolerant
        # reader's warnings (no checksums, dangling names) would only bury that (--json keeps them)
        warnings=[],
        error_message=_error_lines(lines[0], lines[1:], out.json_mode),
        error_path=first.path,
    )


def _plain(report: InspectReport) -> list[str]:
    lines = [f"bundle: {escape_display(str(report.path))}"]
    for label, value in report.summary():
        lines.append(f"{label}: {value}")
    for title, rows in report.sections():
        lines.append(f"{title}:")
        lines += [f"  {'  '.join(row)}" for row in rows] or ["  (none)"]
    return lines


def _rich(report: InspectReport) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    summary = Table(show_header=False, box=None)
    summary.add_row("bundle", Text(escape_display(str(report.path))))
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
    with out.progress("verifying", None) as advance:
        report = inspect_bundle(Path(args.dir), progress=advance)
    payload: dict[str, Any] = report.as_json()
    warnings = [f"{w.path}: {w.message}" for w in report.verify.warnings]
    text: list[str] = []
    if not out.json_mode:
        if sys.stdout.isatty():
            _rich(report)
        else:
            text = _plain(report)
    if report.verify.ok:
        return Result(payload=payload, text=text, warnings=warnings)
    lines = [str(problem) for problem in report.verify.errors]
    return Result(
        payload=payload,
        text=text,
        code=EXIT_INVALID,
        warnings=warnings,
        error_message=_error_lines(lines[0], lines[1:], out.json_mode),
        error_path=report.verify.errors[0].path,
    )
