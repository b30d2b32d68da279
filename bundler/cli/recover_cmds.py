"""``bundler recover``: one entry point for what an export, import, backup or restore left;
:func:`bundler.api.recover` does the work, this handler prints its report."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler import api
from bundler.cli.output import Output, Result
from bundler.errors import UsageError


def recover(args: argparse.Namespace, out: Output) -> Result:
    """Exactly one of DEST, ``--install``, ``--home`` or ``--scan`` (02 §8.5); otherwise exit 2."""
    chosen = [
        (what, value)
        for what, value in (
            (api.RecoverWhat.DESTINATION, args.dest),
            (api.RecoverWhat.INSTALL, args.install),
            (api.RecoverWhat.HOME, args.home),
            (api.RecoverWhat.LEFTOVERS, args.scan),
        )
        if value
    ]
    if len(chosen) != 1:
        raise UsageError(
            "recover takes exactly one of DEST, --install DIR, --home DIR or --scan DIR"
        )
    [(what, path)] = chosen
    report = api.recover(Path(path), what, api.RecoverOptions(dry_run=args.dry_run))
    return Result(
        payload=report.as_json(), text=[] if out.quiet else report.lines() or ["nothing to do"]
    )
