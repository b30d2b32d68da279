"""``bundler doctor``: config validity, leftovers of interrupted operations, the filesystem's
rename support and the data home. It changes nothing and exits 3 when it finds a problem."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bundler.cli.output import Output, Result
from bundler.errors import EXIT_INVALID, BundlerError
from bundler.rules.names import escape_display


def _install_findings(install_arg: str | None) -> tuple[list[str], list[str]]:
    """(problems, notes) about the install: validity and import leftovers."""
    from bundler.config.file import find_install_root
    from bundler.config.store import load_config
    from bundler.rules.validate import validate

    problems: list[str] = []
    notes: list[str] = []
    install = find_install_root(install_arg)
    if not (install / "config.toml").exists():
        notes.append(f"no install at {escape_display(str(install))} (no config.toml)")
        return problems, notes
    try:
        loaded = load_config(install)
    except BundlerError as err:
        return [f"config: {err.message}"], notes
    errors, warnings = validate(loaded.data, install)
    problems += [f"config: {e.kind} {e.path}: {escape_display(e.message)}" for e in errors]
    notes += [f"config warning: {w.kind} {w.path}: {escape_display(w.message)}" for w in warnings]
    if not errors:
        notes.append(f"config: {escape_display(str(install / 'config.toml'))} is valid")
    leftovers = sorted(name for name in os.listdir(install) if name.startswith(".bundler-import-"))
    for name in leftovers:
        problems.append(
            f"interrupted import left {escape_display(name)}: "
            f"run 'bundler recover --install {escape_display(str(install))}'"
        )
    return problems, notes


def _path_findings(path: Path) -> tuple[list[str], list[str]]:
    """(problems, notes) for a destination folder: RENAME_EXCHANGE support and export leftovers."""
    from bundler.bundle.publish import rename_exchange_works, scan_leftovers

    problems: list[str] = []
    notes: list[str] = []
    if rename_exchange_works(path):
        notes.append(
            f"{escape_display(str(path))}: RENAME_EXCHANGE works "
            "(exports replace bundles atomically)"
        )
    else:
        notes.append(
            f"{escape_display(str(path))}: RENAME_EXCHANGE is not supported; "
            "--force exports use the two-rename fallback"
        )
    for line in scan_leftovers(path):
        problems.append(line)
    return problems, notes


def doctor(args: argparse.Namespace, out: Output) -> Result:
    """Check everything that can be checked without changing anything (05 §1, 02 §8.5)."""
    problems, notes = _install_findings(args.install)
    if args.path:
        more_problems, more_notes = _path_findings(Path(args.path))
        problems += more_problems
        notes += more_notes
    if args.project:
        from bundler.cli.home_cmds import doctor_home

        try:
            notes += doctor_home(Path(args.project))
        except BundlerError as err:
            problems.append(f"data home: {err.message}")
    code = EXIT_INVALID if problems else 0
    text = [f"problem: {p}" for p in problems] + [f"ok: {n}" for n in notes]
    return Result(
        payload={"problems": problems, "notes": notes},
        text=text,
        code=code,
        error_message=f"doctor found {len(problems)} problem(s)" if problems else "",
    )
