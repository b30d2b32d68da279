"""``bundler recover``: one entry point for what an export, import, backup or restore left."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler.cli.output import Output, Result
from bundler.errors import UsageError
from bundler.rules.actions import RecoveryReport


def recover(args: argparse.Namespace, out: Output) -> Result:
    """Exactly one of DEST, ``--install``, ``--home`` or ``--scan`` (02 §8.5); otherwise exit 2."""
    chosen = [
        name
        for name, value in (
            ("DEST", args.dest),
            ("--install", args.install),
            ("--home", args.home),
            ("--scan", args.scan),
        )
        if value
    ]
    if len(chosen) != 1:
        raise UsageError(
            "recover takes exactly one of DEST, --install DIR, --home DIR or --scan DIR"
        )
    if args.scan:
        from bundler.bundle.leftovers import explain_leftovers, temporary_leftovers

        # what a killed archive export or pull left lies in the temporary folder, not in DIR,
        # and names no destination: listed whatever DIR is, or a scan would miss it
        found = explain_leftovers(Path(args.scan)) + temporary_leftovers()
        text: list[str] = []
        for _, line, fix in found:
            text += [f"{line}; run:", f"  {fix}"] if fix else [line]
        listed = [
            {"action": "found", "path": where, "done": False, "detail": line, "fix": fix}
            for where, line, fix in found
        ]
        return Result(
            payload={"actions": listed}, text=[] if out.quiet else text or ["nothing to do"]
        )
    if args.dest:
        from bundler.bundle.recover import recover_destination

        actions = recover_destination(Path(args.dest), dry_run=args.dry_run)
    elif args.install:
        from bundler.install.recovery import recover_install

        actions = recover_install(Path(args.install), dry_run=args.dry_run)
    else:
        from bundler.home.restore import recover_home

        actions = recover_home(Path(args.home), dry_run=args.dry_run)
    report = RecoveryReport(actions)
    return Result(
        payload=report.as_json(), text=[] if out.quiet else report.lines() or ["nothing to do"]
    )
