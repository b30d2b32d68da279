"""``bundler home backup``, ``verify-backup``, ``restore``, ``backups`` and ``prune`` (04 §5,
05 §3): each calls :mod:`bundler.api` and prints its report."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from bundler import api
from bundler.api.display import escape_display, human_size, shell_line
from bundler.cli.output import Output, Result
from bundler.cli.registry_args import no_registry_options, registry_options
from bundler.errors import NotFound, UsageError


def _is_reference(given: str | None) -> bool:
    return given is not None and given.startswith(api.REFERENCE_SCHEME)


def _identities(args: argparse.Namespace) -> tuple[Path, ...]:
    """The ``--age-identity`` files given, in order."""
    return tuple(Path(name) for name in args.age_identity)


def _passphrase(args: argparse.Namespace) -> Callable[[str], str] | None:
    """The terminal's prompt for a protected ``--age-identity``: none without one (the prompt's
    module is not even loaded then)."""
    return api.terminal_passphrase() if args.age_identity else None


def _backup_to(given: str | None) -> Path | None:
    """``--to`` as the path to back up to. One that ends in ``/`` names a folder, as it does
    for ``cp`` and ``mv``: when there is none, the zip would otherwise be given the folder's
    name, so it is refused with the command that makes the folder."""
    if not given:
        return None
    if given.endswith(os.sep) and not os.path.isdir(given):
        shown = escape_display(given)
        raise NotFound(
            f"--to {shown} names a folder, and there is none: create it first "
            f"({shell_line('mkdir', '-p', given)}), or name the zip without the final /",
            path=shown,
        )
    return Path(given)


def backup(args: argparse.Namespace, out: Output) -> Result:
    """Back up the data home; ``--json``: ``{"ok", "backup", "entries", "bytes", "base",
    "reused"}``."""
    if _is_reference(args.to):
        return _backup_to_registry(args, out)
    no_registry_options(args, "a local backup")
    options = api.BackupOptions(
        to=_backup_to(args.to),
        base=Path(args.base) if args.base else None,
        full=args.full,
        compression=args.compression,
        encrypt_to=tuple(args.encrypt_to),
        age_identities=_identities(args),
        age_passphrase=_passphrase(args),
    )
    with out.progress() as progress:
        report = api.backup(Path(args.project), options, progress=progress)
    warnings = [*report.warnings, *_left_out(report.skipped.as_json())]
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


def _left_out(skipped: Mapping[str, int]) -> list[str]:
    """The warning naming what the walk did not carry (counts by kind), if anything."""
    counts = ", ".join(f"{n} {kind}" for kind, n in skipped.items() if n)
    if not counts:
        return []
    return [f"not in the backup: {counts} (links and special files are never copied)"]


def _backup_to_registry(args: argparse.Namespace, out: Output) -> Result:
    """``home backup --to oci://HOST/REPO``: the backup pushed, one layer per part."""
    if args.base or args.full:
        given = "--base" if args.base else "--full"
        raise UsageError(
            f"{given} goes with a local backup: a registry keeps each unchanged part once, "
            "so a backup to oci:// needs no base"
        )
    if args.age_identity:
        raise UsageError(
            "--age-identity with oci://: it opens an encrypted base, and a backup to a "
            "registry has none; give it without --age-identity"
        )
    options = api.RegistryBackupOptions(
        compression=args.compression,
        encrypt_to=tuple(args.encrypt_to),
        registry=registry_options(args),
    )
    with out.progress() as progress:
        report = api.backup_to_registry(Path(args.project), args.to, options, progress=progress)
    sent = ", ".join(report.uploaded) or "nothing"
    there = f"; already there: {', '.join(report.skipped)}" if report.skipped else ""
    sealed = ", encrypted" if report.encrypted else ""
    return Result(
        payload=report.as_json(),
        text=[
            f"backup {escape_display(report.reference)}: {report.entries} files, "
            f"{human_size(report.bytes)}{sealed} (sent: {escape_display(sent)}"
            f"{escape_display(there)})",
            f"restore it with: bundler home restore {escape_display(report.pinned)}",
        ],
        quiet_text=[escape_display(report.pinned)],
        warnings=[*report.warnings, *_left_out(report.left_out.as_json())],
    )


def verify_backup(args: argparse.Namespace, out: Output) -> Result:
    """Check a backup zip, changing nothing; any failure is exit 3 (InvalidInput)."""
    options = api.VerifyBackupOptions(
        age_identities=_identities(args), age_passphrase=_passphrase(args)
    )
    with out.progress() as progress:
        report = api.verify_backup(Path(args.file), options, progress=progress)
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
    payload: dict[str, object] | None = None
    if _is_reference(args.file):
        from_registry = api.RegistryRestoreOptions(
            home=target,
            force=args.force,
            age_identities=_identities(args),
            age_passphrase=_passphrase(args),
            registry=registry_options(args),
        )
        with out.progress() as progress:
            pulled = api.restore_from_registry(
                Path(args.project), args.file, from_registry, progress=progress
            )
        report, warnings, payload = pulled.restore, pulled.warnings, pulled.as_json()
    else:
        no_registry_options(args, "a backup zip")
        options = api.RestoreOptions(
            home=target,
            force=args.force,
            age_identities=_identities(args),
            age_passphrase=_passphrase(args),
        )
        with out.progress() as progress:
            report = api.restore(Path(args.project), Path(args.file), options, progress=progress)
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
    options = api.ListBackupsOptions(
        to=Path(args.to) if args.to else None,
        verify=args.verify,
        age_identities=_identities(args),
        age_passphrase=_passphrase(args),
    )
    listing = api.list_backups(Path(args.project), options)
    lines = []
    for item in listing.backups:
        checked = {None: "", True: ", verified", False: ", FAILS verification"}[item.verified]
        lines.append(
            f"{item.created_at}  {escape_display(item.path.name)}  {human_size(item.size)}, "
            f"{'? files' if item.files is None else f'{item.files} files'}, "
            f"{'encrypted' if item.encrypted else 'not encrypted'}{checked}"
        )
    return Result(
        payload=listing.as_json(),
        text=lines or [f"no backups in {escape_display(str(listing.folder))}"],
        warnings=listing.warnings,
    )


def _registry_backups(args: argparse.Namespace) -> Result:
    """``home backups --to oci://HOST/REPO``: the repository's backups, from their manifests."""
    if args.verify or args.age_identity:
        given = "--verify" if args.verify else "--age-identity"
        raise UsageError(
            f"{given} with oci://: a listing reads the registry's manifests only, and a backup "
            "in a registry is checked whole when it is restored"
        )
    listing = api.registry_backups(args.to, registry_options(args))
    lines = [
        f"{item.created_at}  {escape_display(item.tag)}  "
        + (
            f"{human_size(item.size)}, ? files, encrypted"
            if item.encrypted
            else f"{human_size(item.bytes or 0)}, {item.files} files"
        )
        + f"  {item.digest}"
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


def _prune_registry(args: argparse.Namespace) -> Result:
    """``home prune --to oci://HOST/REPO``: the tags the policy does not keep, deleted."""
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
