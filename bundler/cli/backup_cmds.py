"""``bundler home backup``, ``verify-backup``, ``restore``, ``backups`` and ``prune`` (04 §5,
05 §3): each calls :mod:`bundler.api` and prints its report."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler import api
from bundler.api.display import escape_display, human_size
from bundler.cli.output import Output, Result
from bundler.errors import UsageError


def backup(args: argparse.Namespace, out: Output) -> Result:
    """Back up the data home; ``--json``: ``{"ok", "backup", "entries", "bytes", "base",
    "reused"}``."""
    options = api.BackupOptions(
        to=Path(args.to) if args.to else None,
        base=Path(args.base) if args.base else None,
        full=args.full,
        compression=args.compression,
    )
    with out.progress() as progress:
        report = api.backup(Path(args.project), options, progress=progress)
    skipped = report.skipped
    warnings = list(report.warnings)
    if skipped.total:
        counts = ", ".join(f"{n} {kind}" for kind, n in skipped.as_json().items() if n)
        warnings.append(f"not in the backup: {counts} (links and special files are never copied)")
    shown = escape_display(str(report.path))
    reused = ""
    if report.base is not None:
        reused = f" ({report.reused} copied unchanged from {escape_display(report.base.name)})"
    return Result(
        payload=report.as_json(),
        text=[f"backup {shown}: {report.entries} files, {human_size(report.bytes)}{reused}"],
        quiet_text=[shown],
        warnings=warnings,
    )


def verify_backup(args: argparse.Namespace, out: Output) -> Result:
    """Check a backup zip, changing nothing; any failure is exit 3 (InvalidInput)."""
    with out.progress() as progress:
        report = api.verify_backup(Path(args.file), progress=progress)
    shown = escape_display(str(report.path))
    agent = escape_display(report.agent) if report.agent else "(no name)"
    return Result(
        payload=report.as_json(),
        text=[]
        if out.quiet
        else [
            f"{shown}: sound backup of {agent} taken {report.created_at}, "
            f"{report.entries} files, {human_size(report.bytes)}"
        ],
    )


def restore(args: argparse.Namespace, out: Output) -> Result:
    """Restore a backup zip into the data home (or ``--home DIR``)."""
    target = Path(args.target_home) if args.target_home else None
    options = api.RestoreOptions(home=target, force=args.force)
    with out.progress() as progress:
        report = api.restore(Path(args.project), Path(args.file), options, progress=progress)
    shown = escape_display(str(report.home))
    lines = [f"restored {report.entries} files ({human_size(report.bytes)}) into {shown}"]
    if report.kept:
        lines.append(f"what was there is kept as {', '.join(report.kept)} until the next restore")
    return Result(
        payload=report.as_json(),
        text=lines,
        quiet_text=[shown],
        warnings=report.warnings,
    )


def list_backups(args: argparse.Namespace, out: Output) -> Result:
    """List the backups of the folder, oldest first; ``--json``: ``{"ok", "folder", "backups"}``."""
    options = api.ListBackupsOptions(to=Path(args.to) if args.to else None, verify=args.verify)
    listing = api.list_backups(Path(args.project), options)
    lines = []
    for item in listing.backups:
        checked = {None: "", True: ", verified", False: ", FAILS verification"}[item.verified]
        lines.append(
            f"{item.created_at}  {escape_display(item.path.name)}  {human_size(item.size)}, "
            f"{item.files} files, {'encrypted' if item.encrypted else 'not encrypted'}{checked}"
        )
    return Result(
        payload=listing.as_json(),
        text=lines or [f"no backups in {escape_display(str(listing.folder))}"],
        warnings=listing.warnings,
    )


def prune(args: argparse.Namespace, out: Output) -> Result:
    """Remove the backups the policy does not keep (or list them, ``--dry-run``)."""
    for rule in ("last", "daily", "weekly", "monthly"):
        if getattr(args, f"keep_{rule}") < 0:
            raise UsageError(f"--keep-{rule} must be 0 or more")
    options = api.PruneOptions(
        to=Path(args.to) if args.to else None,
        keep_last=args.keep_last,
        keep_daily=args.keep_daily,
        keep_weekly=args.keep_weekly,
        keep_monthly=args.keep_monthly,
        dry_run=args.dry_run,
    )
    report = api.prune_backups(Path(args.project), options)
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {escape_display(item.path.name)}" for item in report.removed]
    lines += [
        f"kept {escape_display(item.path.name)} ({', '.join(why)})" for item, why in report.kept
    ]
    return Result(payload=report.as_json(), text=lines, warnings=report.warnings)
