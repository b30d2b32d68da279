"""``bundler doctor``: config validity, leftovers of interrupted operations, the filesystem's
rename support and the data home. It changes nothing and exits 3 when it finds a problem."""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from bundler.cli.output import Output, Result
from bundler.errors import EXIT_INVALID, BundlerError, Refused
from bundler.rules import hints
from bundler.rules.names import escape_display


@dataclass(frozen=True)
class Finding:
    """One thing doctor found: ``kind`` says what was checked, ``path`` where, ``detail`` what
    was found (escaped for display), ``fix`` the command that repairs it (``""`` if none)."""

    kind: str
    path: str
    detail: str
    fix: str = ""


def _install_findings(
    install_arg: str | None,
) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """(problems, warnings, notes) about the install: validity and import leftovers."""
    from bundler.config.file import find_install_root
    from bundler.config.store import load_config
    from bundler.rules.validate import validate

    problems: list[Finding] = []
    warnings: list[Finding] = []
    notes: list[Finding] = []
    install = find_install_root(install_arg)
    config_file = str(install / "config.toml")
    try:
        os.lstat(config_file)
    except (FileNotFoundError, NotADirectoryError):
        notes.append(
            Finding(
                "install",
                str(install),
                f"no install at {escape_display(str(install))} (no config.toml)",
            )
        )
        return problems, warnings, notes
    except OSError:
        pass  # load_config names the file and the reason
    try:
        loaded = load_config(install)
    except BundlerError as err:
        return [Finding("config", err.path or config_file, err.message)], warnings, notes
    errors, config_warnings = validate(loaded.data, install)
    problems += [
        Finding("config", e.path, f"{e.kind} {e.path}: {escape_display(e.message)}") for e in errors
    ]
    warnings += [
        Finding("config", w.path, f"{w.kind} {w.path}: {escape_display(w.message)}")
        for w in config_warnings
    ]
    if not errors:
        notes.append(Finding("config", config_file, f"{escape_display(config_file)} is valid"))
    leftovers = sorted(name for name in os.listdir(install) if name.startswith(".bundler-import-"))
    for name in leftovers:
        problems.append(
            Finding(
                "import-leftover",
                str(install / name),
                f"an interrupted import left {escape_display(name)} in "
                f"{escape_display(str(install))}",
                # explicit, whatever chose the install: recover's --install is its target
                hints.command("recover", "--install", str(install)),
            )
        )
    return problems, warnings, notes


def _path_findings(path: Path) -> tuple[list[Finding], list[Finding]]:
    """(problems, notes) for a destination folder: RENAME_EXCHANGE support and export leftovers."""
    from bundler.bundle.publish import explain_leftovers, rename_exchange_works

    shown = escape_display(str(path))
    try:
        works = rename_exchange_works(path)
    except OSError as err:
        raise Refused(
            f"--path {shown}: cannot check it ({err.strerror}); name an existing folder "
            "where exports go",
            path=str(path),
        ) from None
    if works:
        detail = f"{shown}: RENAME_EXCHANGE works (exports replace bundles atomically)"
    else:
        detail = (
            f"{shown}: RENAME_EXCHANGE is not supported; --force exports use the two-rename "
            "fallback"
        )
    problems = [
        Finding("export-leftover", where, text, fix) for where, text, fix in explain_leftovers(path)
    ]
    return problems, [Finding("rename-exchange", str(path), detail)]


def doctor(args: argparse.Namespace, out: Output) -> Result:
    """Check everything that can be checked without changing anything (05 §1, 02 §8.5)."""
    problems, warnings, notes = _install_findings(args.install)
    if args.path:
        more_problems, more_notes = _path_findings(Path(args.path))
        problems += more_problems
        notes += more_notes
    if args.project:
        from bundler.cli.home_cmds import doctor_home

        try:
            notes += [
                Finding("data-home", args.project, note.sentence, note.fix)
                if isinstance(note, hints.Hinted)
                else Finding("data-home", args.project, note)
                for note in doctor_home(Path(args.project))
            ]
        except BundlerError as err:
            problems.append(Finding("data-home", err.path, f"data home: {err.message}"))
    code = EXIT_INVALID if problems else 0
    text: list[str] = []
    for label, findings in (("problem", problems), ("warning", warnings), ("ok", notes)):
        if out.quiet and label != "problem":
            continue
        for finding in findings:
            text.append(f"{label}: {finding.detail}" + ("; run:" if finding.fix else ""))
            if finding.fix:
                text.append(f"  {finding.fix}")
    return Result(
        payload={
            "problems": [asdict(f) for f in problems],
            "warnings": [asdict(f) for f in warnings],
            "notes": [asdict(f) for f in notes],
        },
        text=text,
        code=code,
        error_message=f"doctor found {len(problems)} problem(s)" if problems else "",
    )
