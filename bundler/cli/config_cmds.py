"""``config validate|get|set|unset`` and ``agents list``: each calls :mod:`bundler.api` and
prints its report."""

from __future__ import annotations

import argparse
import sys

from bundler import api
from bundler.api.display import escape_display
from bundler.cli.output import Output, Result
from bundler.errors import EXIT_INVALID


def validate(args: argparse.Namespace, out: Output) -> Result:
    """``config validate``: every error and warning, one per line; exit 3 on any error."""
    root = api.find_install(args.install)
    report = api.validate_config(root, api.ConfigOptions(named_install=args.install))
    # --quiet: errors only; warnings change nothing a script must act on
    text = report.error_lines()
    if not out.quiet:
        text += report.warning_lines()
    if report.ok:
        count = report.warning_count()
        noted = f"{count} warning{'' if count == 1 else 's'}" if count else "no warnings"
        verdict = [] if out.quiet else [f"config valid ({noted}): {report.config_file}"]
        return Result(payload=report.as_json(), text=text + verdict)
    return Result(
        payload=report.as_json(),
        text=text,
        code=EXIT_INVALID,
        error_message=f"{len(report.errors)} error(s) in {report.config_file}",
        error_path=str(report.config_file),
    )


def get(args: argparse.Namespace, out: Output) -> Result:
    """``config get PATH [--reveal]``: the value, secrets as ``***`` unless revealed."""
    root = api.find_install(args.install)
    options = api.ConfigGetOptions(reveal=args.reveal, named_install=args.install)
    report = api.get_config(root, args.path, options)
    # a value, not prose: never folded (it may be copied)
    return Result(
        payload=report.as_json(), text=[report.text()], warnings=report.warnings, verbatim=True
    )


def set_value(args: argparse.Namespace, out: Output) -> Result:
    """``config set PATH [VALUE]``: a validated, comment-preserving, atomic edit; without
    VALUE, the value is read from standard input (typed without echo at a terminal)."""
    root = api.find_install(args.install)
    options = api.ConfigOptions(named_install=args.install)
    raw = args.value
    if raw is None:
        # its stand-in for a closed stdin reads as empty: refused, not taken for ""
        stream = None if "stdin" in out.closed else sys.stdin.buffer
        raw = api.read_config_value(args.path, stream, options)
    edit = api.set_config(root, args.path, raw, options)
    warnings = list(edit.warnings)
    if args.value is not None and edit.secret:
        warnings.append(
            f"the value of secret {edit.path} was given on the command line, where other users "
            "and the shell history can see it; next time omit VALUE and type it when asked"
        )
    text = [] if out.quiet else [f"set {escape_display(edit.path)}"]
    return Result(payload=edit.as_json(), text=text, warnings=warnings)


def unset_value(args: argparse.Namespace, out: Output) -> Result:
    """``config unset PATH``: remove a value (validated, comment-preserving, atomic)."""
    edit = api.unset_config(api.find_install(args.install), args.path)
    line = f"unset {escape_display(edit.path)}"
    if not edit.changed:
        close = f"; did you mean {escape_display(edit.closest)}?" if edit.closest else ""
        line = f"{escape_display(edit.path)} was not set{close}"
    return Result(payload=edit.as_json(), text=[] if out.quiet else [line], warnings=edit.warnings)


def agents_list(args: argparse.Namespace, out: Output) -> Result:
    """``agents list``: alias, enabled and model provider of every agent."""
    rows = api.list_agents(api.find_install(args.install))
    shown = [
        (
            escape_display(str(row["alias"])),
            "yes" if row["enabled"] is True else "no",
            escape_display(str(row["model_provider"])),
        )
        for row in rows.agents
    ]
    width = max([len("ALIAS"), *(len(alias) for alias, _, _ in shown)])
    text = [f"{'ALIAS':<{width}}  ENABLED  MODEL PROVIDER"]
    text += [f"{alias:<{width}}  {enabled:<7}  {provider}" for alias, enabled, provider in shown]
    return Result(payload=rows.as_json(), text=text, verbatim=True)
