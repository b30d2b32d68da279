"""``bundler agents export``: run :func:`~bundler.bundle.export.export_agent`, report (02 §11)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bundler.bundle.archive import ARCHIVE_SUFFIXES
from bundler.bundle.export import export_agent
from bundler.bundle.export_report import CARRIED_AS_IS, ExportReport
from bundler.cli.output import Output, Result
from bundler.rules import hints
from bundler.rules.names import escape_display
from bundler.rules.units import human_size


def export(args: argparse.Namespace, out: Output) -> Result:
    """Export ALIAS to ``--out``; the human summary on stdout, progress on a terminal's stderr."""
    from bundler.config.file import find_install_root

    install = find_install_root(args.install)
    with out.progress() as progress:
        options: dict[str, Any] = {
            "force": args.force,
            "include_memory": args.include_memory,
            "scan_secrets": args.scan_secrets,
            "exclude": args.exclude,
            "exclude_from": [Path(name) for name in args.exclude_from],
            "seal_to": args.seal_to,
            "progress": progress,
        }
        archive = args.out.endswith(ARCHIVE_SUFFIXES)
        report = export_agent(install, args.alias, Path(args.out), archive=archive, **options)
    return Result(
        payload=report.as_json(),
        text=summary(report),
        quiet_text=[escape_display(report.bundle)],
        warnings=report.warnings,
    )


def summary(report: ExportReport) -> list[str]:
    """The human report of 02 §11; every string from the config or the tree is escaped."""
    esc = escape_display
    lines = [
        f"exported {esc(report.root_agent)} to {esc(report.bundle)}",
        f"  {report.files} files, {human_size(report.bytes)}",
    ]
    if report.skill_bundles:
        lines.append(f"  skill bundles: {', '.join(esc(b) for b in report.skill_bundles)}")
    counts = report.skipped.as_json()
    if any(counts.values()):
        lines.append(
            "  skipped: "
            + ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items() if n)
        )
        lines += [f"    {esc(path)}" for path in report.skipped.paths]
        if report.skipped.total > len(report.skipped.paths):
            lines.append(f"    … and {report.skipped.total - len(report.skipped.paths)} more")
    if report.skipped.non_portable_count:
        lines.append(
            f"  names that are not portable to every system ({report.skipped.non_portable_count}):"
        )
        lines += [f"    {esc(path)}" for path in report.skipped.non_portable_names]
    if report.risk_flags:
        lines.append("  risk flags (what the receiver is asked to trust):")
        lines += [f"    {esc(f.kind)}  {esc(f.path)}: {esc(f.detail)}" for f in report.risk_flags]
    if report.sealed_recipients:
        lines.append(
            f"  secrets sealed to {report.sealed_recipients} recipient(s) in secrets.age: "
            + ", ".join(esc(path) for path in report.sealed_paths)
        )
    if report.required_secrets:
        # run by the receiver in their own install: the exporter's --install is not repeated
        lines.append("  credentials scrubbed; the receiver completes each, in their install, with:")
        lines += [f"    {hints.command('config', 'set', path)}" for path in report.required_secrets]
    if report.dropped:
        lines.append("  not carried:")
        lines += [f"    {esc(d.path)} ({d.reason}): {esc(d.detail)}" for d in report.dropped]
    if report.secret_hits:
        lines.append("  known secrets found in carried files (--scan-secrets warn):")
        lines += [
            f"    {esc(h.file)}: {esc(h.secret_path)} ({h.encoding})" for h in report.secret_hits
        ]
    if report.encrypted_not_swept:
        why = "; ".join(f"{n}: {reason}" for reason, n in report.encrypted_not_swept_why.items())
        lines.append(
            f"  {report.encrypted_not_swept} secret(s) stored encrypted could not be swept "
            f"for their plain text ({why})"
        )
    lines.append(f"  note: {CARRIED_AS_IS}")
    return lines
