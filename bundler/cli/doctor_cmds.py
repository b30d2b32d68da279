"""``bundler doctor``: config validity, leftovers of interrupted operations, the filesystem's
rename support and the data home. It changes nothing and exits 3 when it finds a problem.

The checks are :mod:`bundler.install.doctor`'s; this handler only words their report."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler.cli.output import Output, Result
from bundler.errors import EXIT_INVALID


def doctor(args: argparse.Namespace, out: Output) -> Result:
    """Check everything that can be checked without changing anything (05 §1, 02 §8.5)."""
    from bundler.install.doctor import diagnose

    report = diagnose(
        args.install,
        Path(args.path) if args.path else None,
        Path(args.project) if args.project else None,
    )
    problems, notes = report.problems, report.notes
    text = [f"problem: {p}" for p in problems] + [f"ok: {n}" for n in notes]
    return Result(
        payload={"problems": problems, "notes": notes},
        text=text,
        code=EXIT_INVALID if problems else 0,
        error_message=f"doctor found {len(problems)} problem(s)" if problems else "",
    )
