"""``bundler home backup``, ``home verify-backup`` and ``home restore`` (04 §5, 05 §3)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler.cli.output import Output, Result
from bundler.errors import UsageError
from bundler.home import backup as backups
from bundler.home import keep
from bundler.home.restore import restore_home
from bundler.home.verify import verify_backup as check_backup
from bundler.rules.names import escape_display
from bundler.rules.retention import Policy
from bundler.rules.units import human_size


def backup(args: argparse.Namespace, out: Output) -> Result:
    """Back up the data home; ``--json``: ``{"ok", "backup", "entries", "bytes", "base",
    "reused"}``."""
    with out.progress() as progress:
        report = backups.backup_home(
            Path(args.project),
            to=Path(args.to) if args.to else None,
            progress=progress,
            base=Path(args.base) if args.base else None,
            full=args.full,
            compression=args.compression,
        )
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
        report = check_backup(Path(args.file), progress=progress)
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
    with out.progress() as progress:
        report = restore_home(
            Path(args.project), Path(args.file), home=target, force=args.force, progress=progress
        )
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
    folder = keep.backups_folder(Path(args.project), Path(args.to) if args.to else None)
    listing = keep.list_backups(folder, verify=args.verify)
    lines = []
    for item in listing.backups:
        checked = {None: "", True: ", verified", False: ", FAILS verification"}[item.verified]
        lines.append(
            f"{item.created_at}  {escape_display(item.path.name)}  {human_size(item.size)}, "
            f"{item.files} files, {'encrypted' if item.encrypted else 'not encrypted'}{checked}"
        )
    return Result(
        payload={
            "folder": str(listing.folder),
            "backups": [item.as_json() for item in listing.backups],
        },
        text=lines or [f"no backups in {escape_display(str(folder))}"],
        warnings=listing.warnings,
    )


def prune(args: argparse.Namespace, out: Output) -> Result:
    """Remove the backups the policy does not keep (or list them, ``--dry-run``)."""
    for rule in ("last", "daily", "weekly", "monthly"):
        if getattr(args, f"keep_{rule}") < 0:
            raise UsageError(f"--keep-{rule} must be 0 or more")
    policy = Policy(args.keep_last, args.keep_daily, args.keep_weekly, args.keep_monthly)
    folder = keep.backups_folder(Path(args.project), Path(args.to) if args.to else None)
    report = keep.prune_backups(folder, policy, dry_run=args.dry_run)
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {escape_display(item.path.name)}" for item in report.removed]
    lines += [
        f"kept {escape_display(item.path.name)} ({', '.join(why)})" for item, why in report.kept
    ]
    return Result(payload=report.as_json(), text=lines, warnings=report.warnings)
