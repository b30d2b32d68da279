"""``bundler agents import BUNDLE`` and ``agents import --undo RECEIPT`` (03 §3, §4).

No logic here: options are handed to :func:`bundler.install.importer.import_bundle` and
:func:`bundler.install.undo_import`, and their reports are printed. Secret values never
pass through this module's output: reports name paths only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler.bundle.archive_kind import is_archive
from bundler.cli.output import Output, Result
from bundler.cli.registry_args import bundle_folder, tag_warnings
from bundler.config.file import find_install_root
from bundler.errors import UsageError
from bundler.install import importer
from bundler.install.bind_secrets import (
    SECRET_ARGUMENT_WARNING,
    default_prompter,
    passphrase_prompter,
    split_assignment,
)
from bundler.install.import_types import ImportOptions, ImportReport
from bundler.install.undo import undo_import
from bundler.rules import hints
from bundler.rules.names import escape_display


def import_bundle(args: argparse.Namespace, out: Output) -> Result:
    """Import BUNDLE, or undo the import of ``--undo RECEIPT`` (exactly one of the two)."""
    if (args.bundle is None) == (args.undo is None):
        raise UsageError("agents import takes exactly one of BUNDLE or --undo RECEIPT")
    install = find_install_root(args.install)
    if args.undo is not None:
        return _undo(args, out, install)
    if args.force:
        raise UsageError("--force goes with --undo (see 'bundler agents import --help')")
    binds = dict(split_assignment(raw, "--bind") for raw in args.bind)
    prompter = None if out.json_mode else default_prompter()
    early = [SECRET_ARGUMENT_WARNING] if args.secret and not out.json_mode else []
    for warning in early:
        # said before any prompt or refusal: the value is already in ps and the shell history
        out.warn(warning)
    with bundle_folder(args, args.bundle, out) as (folder, pinned), out.progress() as progress:
        options = ImportOptions(
            as_alias=args.as_alias,
            binds=binds,
            secrets=list(args.secret),
            secrets_file=Path(args.secrets_file) if args.secrets_file else None,
            age_identities=[Path(name) for name in args.age_identity],
            age_passphrase=passphrase_prompter(),
            accept_risks=args.accept_risks,
            dry_run=args.dry_run,
            prompt=prompter,
            progress=progress,
            source=pinned,
        )
        if pinned is None and is_archive(folder):
            from bundler.install.from_archive import import_archive

            report = import_archive(install, folder, options)
        else:
            report = importer.import_bundle(install, folder, options)
    return Result(
        payload=report.as_json(),
        text=summary(report, install=args.install),
        quiet_text=[escape_display(report.receipt)] if report.receipt else [],
        warnings=[
            *tag_warnings(args.bundle, pinned),
            *(warning for warning in report.warnings if warning not in early),
        ],
    )


def _undo(args: argparse.Namespace, out: Output, install: Path) -> Result:
    """``--undo RECEIPT`` or ``--undo last``, with ``--dry-run`` saying what would go and stay.

    ``--force`` is accepted and changes nothing: an undo always saves edited entries first."""
    from bundler.install.receipts import resolve_receipt

    if args.as_alias or args.bind or args.secret or args.secrets_file:
        raise UsageError("--undo takes no other import option but --dry-run")
    receipt = resolve_receipt(install, args.undo)
    undone = undo_import(install, receipt, dry_run=args.dry_run)
    verb = "would remove" if undone.dry_run else "removed"
    text = [f"{verb} {escape_display(path)}" for path in undone.removed_entries]
    if undone.changes:
        text.append(
            "edited since the import: " + ", ".join(escape_display(c) for c in undone.changes)
        )
    if undone.dry_run and undone.edited:
        text.append("would save the edited values beside the receipt first")
    if undone.saved:
        text.append(f"edited values saved in {escape_display(undone.saved)}")
    if undone.removed_files:
        text.append(f"{verb} {undone.removed_files} files the import added, unchanged")
    text += [f"{verb} folder {escape_display(path)}" for path in undone.removed_folders]
    text += [f"already gone: folder {escape_display(path)}" for path in undone.gone_folders]
    keeps = "would keep" if undone.dry_run else "kept"
    text += [f"{keeps} {escape_display(kept['path'])} ({kept['why']})" for kept in undone.kept]
    if undone.moves:
        text.append("to move what was kept aside:")
        text += [f"  {line}" for line in undone.moves]
    return Result(
        payload=undone.as_json(), text=[] if out.quiet else text, warnings=undone.warnings
    )


def imports(args: argparse.Namespace, out: Output) -> Result:
    """``agents imports``: the install's receipts, newest first, with alias, bundle, date, state."""
    from bundler.install.receipts import list_receipts

    rows = list_receipts(find_install_root(args.install))
    text = [
        f"{row.imported_at}  {escape_display(row.agent)}  {row.shown_state}  "
        f"from {escape_display(row.bundle)}  receipt {escape_display(str(row.path))}"
        for row in rows
    ]
    return Result(
        payload={"imports": [row.as_json() for row in rows]},
        text=[] if out.quiet else (text or ["no imports"]),
    )


def summary(report: ImportReport, *, install: str | None = None) -> list[str]:
    """The human-readable plan (dry run) or outcome of an import; every string escaped.

    ``install`` is the ``--install`` given on the command line (None otherwise): the commands
    printed for the user to paste repeat it (:mod:`bundler.rules.hints`), each on a line of its own.
    """
    plan = report.plan
    head = "would import" if report.dry_run else "imported"
    lines = [f"{head} agent {escape_display(plan.agent)} from {escape_display(report.bundle)}"]
    lines.append(f"  workspace: {escape_display(report.workspace_target)}")
    for alias, folder in report.skill_targets.items():
        lines.append(f"  skills {escape_display(alias)}: {escape_display(folder)}")
    for title, items in (
        ("added", plan.added),
        ("reused", plan.reused),
        ("not needed", plan.unused),
    ):
        for item in items:
            lines.append(f"  {title}: {escape_display(item)}")
    for old, new in plan.renamed.items():
        lines.append(f"  renamed: {escape_display(old)} -> {escape_display(new)}")
    for old, local in plan.bound.items():
        lines.append(f"  bound: {escape_display(old)} -> {escape_display(local)}")
    for path in plan.reused_with_secrets:
        lines.append(f"  uses the credentials of the existing {escape_display(path)}")
    for path in report.skills_differ:
        lines.append(
            f"  reused {escape_display(path)}: the bundle's skill files differ from the local "
            "folder's"
        )
    extra = {(f["path"], f["kind"]) for f in report.also_found}
    for flag in report.risk_flags:
        detail = escape_display(flag.get("detail", ""))
        also = " (also found by bundler)" if (flag["path"], flag["kind"]) in extra else ""
        lines.append(
            f"  risk {escape_display(flag['kind'])} {escape_display(flag['path'])}: {detail}{also}"
        )
    for change in report.approval_changes:
        lines.append(f"  approves less: {change}")
    for command in report.missing_commands:
        lines.append(f"  not on PATH: {command}")
    lines.extend(f"  note: {note}" for note in report.notes)
    for path in plan.secrets_missing:
        endpoint = report.endpoints.get(path, "")
        lines.append(f"  secret needed: {escape_display(path)} (sent to {endpoint}); set it with:")
        lines.append(f"    {hints.command('config', 'set', path, install=install)}")
    if report.receipt:
        lines.append(f"  receipt: {escape_display(report.receipt)}")
        lines.append("  to undo this import:")
        lines.append(
            f"    {hints.command('agents', 'import', '--undo', report.receipt, install=install)}"
        )
    return lines
