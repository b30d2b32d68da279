"""``bundler doctor``: config validity, leftovers of interrupted operations, the filesystem's
rename support and the data home. It changes nothing and exits 3 when it finds a problem.

The checks are :func:`bundler.api.doctor`'s; this handler only words their report."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler import api
from bundler.cli.output import Output, Result
from bundler.errors import EXIT_INVALID


def doctor(args: argparse.Namespace, out: Output) -> Result:
    """Check everything that can be checked without changing anything (05 §1, 02 §8.5)."""
    options = api.DoctorOptions(
        install=Path(args.install) if args.install else None,
        destination=Path(args.path) if args.path else None,
        project=Path(args.project) if args.project else None,
    )
    report = api.doctor(options)
    problems, warnings, notes = report.problems, report.warnings, report.notes
    text: list[str] = []
    for label, findings in (("problem", problems), ("warning", warnings), ("ok", notes)):
        if out.quiet and label != "problem":
            continue
        for finding in findings:
            text.append(f"{label}: {finding.detail}" + ("; run:" if finding.fix else ""))
            if finding.fix:
                text.append(f"  {finding.fix}")
    return Result(
        payload=report.as_json(),
        text=text,
        code=EXIT_INVALID if problems else 0,
        error_message=f"doctor found {len(problems)} problem(s)" if problems else "",
    )
