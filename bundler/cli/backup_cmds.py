"""``bundler home backup``, ``home verify-backup`` and ``home restore`` (04 §5, 05 §3)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler.cli.output import Output, Result
from bundler.cli.registry_args import REFERENCE_SCHEME, no_registry_options, registry_options
from bundler.errors import UsageError
from bundler.fs.safefs import SkipCounts
from bundler.home import backup as backups
from bundler.home import keep
from bundler.home.restore import restore_home
from bundler.home.verify import verify_backup as check_backup
from bundler.install.bind_secrets import passphrase_prompter
from bundler.rules.names import escape_display
from bundler.rules.retention import Policy
from bundler.rules.units import human_size


def _is_reference(given: str | None) -> bool:
    return given is not None and given.startswith(REFERENCE_SCHEME)


def backup(args: argparse.Namespace, out: Output) -> Result:
    """Back up the data home; ``--json``: ``{"ok", "backup", "entries", "bytes", "base",
    "reused"}``."""
    if _is_reference(args.to):
        return _backup_to_registry(args, out)
    no_registry_options(args, "a local backup")
    with out.progress() as progress:
        report = backups.backup_home(
            Path(args.project),
            to=Path(args.to) if args.to else None,
            progress=progress,
            base=Path(args.base) if args.base else None,
            full=args.full,
            compression=args.compression,
            encrypt_to=args.encrypt_to,
            age_identities=[Path(name) for name in args.age_identity],
            age_passphrase=passphrase_prompter(),
        )
    warnings = [*report.warnings, *_left_out(report.skipped)]
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


def _left_out(skipped: SkipCounts) -> list[str]:
    """The warning naming what the walk did not carry, if anything."""
    if not skipped.total:
        return []
    counts = ", ".join(f"{n} {kind}" for kind, n in skipped.as_json().items() if n)
    return [f"not in the backup: {counts} (links and special files are never copied)"]


def _backup_to_registry(args: argparse.Namespace, out: Output) -> Result:
    """``home backup --to oci://HOST/REPO``: the backup pushed, one layer per part."""
    from bundler import api

    if args.base or args.full:
        given = "--base" if args.base else "--full"
        raise UsageError(
            f"{given} goes with a local backup: a registry keeps each unchanged part once, "
            "so a backup to oci:// needs no base"
        )
    if args.encrypt_to:
        raise UsageError(
            "--encrypt-to with oci://: encryption of a backup sent to a registry is not "
            "supported yet; back up to a file with --encrypt-to, or to the registry unencrypted"
        )
    _no_age_identity(args)
    options = api.RegistryBackupOptions(
        compression=args.compression, registry=registry_options(args)
    )
    with out.progress() as progress:
        report = api.backup_to_registry(Path(args.project), args.to, options, progress=progress)
    sent = ", ".join(report.uploaded) or "nothing"
    there = f"; already there: {', '.join(report.skipped)}" if report.skipped else ""
    return Result(
        payload=report.as_json(),
        text=[
            f"backup {escape_display(report.reference)}: {report.entries} files, "
            f"{human_size(report.bytes)} (sent: {escape_display(sent)}{escape_display(there)})",
            f"restore it with: bundler home restore {escape_display(report.pinned)}",
        ],
        quiet_text=[escape_display(report.pinned)],
        warnings=[*report.warnings, *_left_out(report.left_out)],
    )


def _no_age_identity(args: argparse.Namespace) -> None:
    """Refuse ``--age-identity`` with ``oci://``: it opens an encrypted backup file, and a
    backup on a registry is never encrypted (04 §5.5)."""
    if args.age_identity:
        raise UsageError(
            "--age-identity with oci://: it opens an encrypted backup file, and a backup on a "
            "registry is not encrypted; give it without --age-identity"
        )


def verify_backup(args: argparse.Namespace, out: Output) -> Result:
    """Check a backup zip, changing nothing; any failure is exit 3 (InvalidInput)."""
    with out.progress() as progress:
        report = check_backup(
            Path(args.file),
            progress=progress,
            age_identities=[Path(name) for name in args.age_identity],
            age_passphrase=passphrase_prompter(),
        )
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
    """Restore a backup zip, or a backup in a registry, into the data home (or ``--home
    DIR``)."""
    target = Path(args.target_home) if args.target_home else None
    warnings: list[str] = []
    payload: dict[str, object] | None = None
    if _is_reference(args.file):
        from bundler import api

        _no_age_identity(args)
        options = api.RegistryRestoreOptions(
            home=target, force=args.force, registry=registry_options(args)
        )
        with out.progress() as progress:
            pulled = api.restore_from_registry(
                Path(args.project), args.file, options, progress=progress
            )
        report, warnings, payload = pulled.restore, pulled.warnings, pulled.as_json()
    else:
        no_registry_options(args, "a backup zip")
        with out.progress() as progress:
            report = restore_home(
                Path(args.project),
                Path(args.file),
                home=target,
                force=args.force,
                progress=progress,
                age_identities=[Path(name) for name in args.age_identity],
                age_passphrase=passphrase_prompter(),
            )
        warnings = report.warnings
    shown = escape_display(str(report.home))
    lines = [f"restored {report.entries} files ({human_size(report.bytes)}) into {shown}"]
    if report.kept:
        lines.append(f"what was there is kept as {', '.join(report.kept)} until the next restore")
    return Result(
        payload=report.as_json() if payload is None else payload,
        text=lines,
        quiet_text=[shown],
        warnings=warnings,
    )


def list_backups(args: argparse.Namespace, out: Output) -> Result:
    """List the backups of the folder, oldest first; ``--json``: ``{"ok", "folder", "backups"}``
    (for ``--to oci://…``: ``{"ok", "reference", "backups"}``)."""
    if _is_reference(args.to):
        return _registry_backups(args)
    no_registry_options(args, "a folder of backups")
    folder = keep.backups_folder(Path(args.project), Path(args.to) if args.to else None)
    listing = keep.list_backups(
        folder,
        verify=args.verify,
        age_identities=[Path(name) for name in args.age_identity],
        age_passphrase=passphrase_prompter(),
    )
    lines = []
    for item in listing.backups:
        checked = {None: "", True: ", verified", False: ", FAILS verification"}[item.verified]
        lines.append(
            f"{item.created_at}  {escape_display(item.path.name)}  {human_size(item.size)}, "
            f"{'? files' if item.files is None else f'{item.files} files'}, "
            f"{'encrypted' if item.encrypted else 'not encrypted'}{checked}"
        )
    return Result(
        payload={
            "folder": str(listing.folder),
            "backups": [item.as_json() for item in listing.backups],
        },
        text=lines or [f"no backups in {escape_display(str(folder))}"],
        warnings=listing.warnings,
    )


def _registry_backups(args: argparse.Namespace) -> Result:
    """``home backups --to oci://HOST/REPO``: the repository's backups, from their manifests."""
    from bundler import api

    if args.verify:
        raise UsageError(
            "--verify checks local backup zips; a backup in a registry is checked whole when "
            "it is restored"
        )
    _no_age_identity(args)
    listing = api.registry_backups(args.to, registry_options(args))
    lines = [
        f"{item.created_at}  {escape_display(item.tag)}  {human_size(item.bytes)}, "
        f"{item.files} files  {item.digest}"
        for item in listing.backups
    ]
    return Result(
        payload=listing.as_json(),
        text=lines or [f"no backups in {escape_display(listing.reference)}"],
        warnings=listing.warnings,
    )


def prune(args: argparse.Namespace, out: Output) -> Result:
    """Remove the backups the policy does not keep (or list them, ``--dry-run``)."""
    for rule in ("last", "daily", "weekly", "monthly"):
        if getattr(args, f"keep_{rule}") < 0:
            raise UsageError(f"--keep-{rule} must be 0 or more")
    if _is_reference(args.to):
        return _prune_registry(args)
    no_registry_options(args, "a folder of backups")
    policy = Policy(args.keep_last, args.keep_daily, args.keep_weekly, args.keep_monthly)
    folder = keep.backups_folder(Path(args.project), Path(args.to) if args.to else None)
    report = keep.prune_backups(folder, policy, dry_run=args.dry_run)
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {escape_display(item.path.name)}" for item in report.removed]
    lines += [
        f"kept {escape_display(item.path.name)} ({', '.join(why)})" for item, why in report.kept
    ]
    return Result(payload=report.as_json(), text=lines, warnings=report.warnings)


def _prune_registry(args: argparse.Namespace) -> Result:
    """``home prune --to oci://HOST/REPO``: the tags the policy does not keep, deleted."""
    from bundler import api

    options = api.RegistryPruneOptions(
        keep_last=args.keep_last,
        keep_daily=args.keep_daily,
        keep_weekly=args.keep_weekly,
        keep_monthly=args.keep_monthly,
        dry_run=args.dry_run,
        registry=registry_options(args),
    )
    report = api.prune_registry_backups(args.to, options)
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {escape_display(item.tag)}" for item in report.removed]
    lines += [f"kept {escape_display(item.tag)} ({', '.join(why)})" for item, why in report.kept]
    return Result(payload=report.as_json(), text=lines, warnings=report.warnings)
