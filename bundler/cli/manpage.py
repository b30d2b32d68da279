"""``bundler man``: the manual page, in roff, generated from the parser.

Commands, options, help texts and the examples of each command's epilog come from
:func:`bundler.cli.parsertree.read_tree`; the exit codes are those of 05 §2.
"""

from __future__ import annotations

import argparse
import datetime
import os

from bundler import __version__
from bundler.api.display import PROGRAM
from bundler.cli.args_registry import CREDENTIALS_HELP
from bundler.cli.output import Output, Result
from bundler.cli.parsertree import Command, Option, read_tree
from bundler.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
)

EXIT_MEANINGS = (
    (
        EXIT_OK,
        "done, or nothing to do; also a failure after an operation's commit point, "
        "reported as a warning",
    ),
    (
        EXIT_FAILED,
        "refused or failed, or a needed input is missing; the previous state is "
        "intact, or repairable by the 'bundler recover' command the message names",
    ),
    (EXIT_USAGE, "usage error: unknown command or option, missing or conflicting arguments"),
    (
        EXIT_INVALID,
        "invalid input: what validation or verification finds in a config, "
        "Agent.yaml, bundle or backup; doctor finding a problem",
    ),
    (
        EXIT_INTERRUPTED,
        "interrupted (Ctrl-C, SIGTERM, a closed terminal); cleaned up like a failure",
    ),
)


def roff_text(text: str) -> str:
    """``text`` safe in a roff text line: backslashes escaped, a leading ``.`` or ``'``
    (a request to roff) neutralised, hyphens kept as minus signs (what a user types)."""
    escaped = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(
        f"\\&{line}" if line.startswith((".", "'")) else line for line in escaped.splitlines()
    )


def _bold(text: str) -> str:
    return f"\\fB{roff_text(text)}\\fR"


def _option_lines(option: Option) -> list[str]:
    names = (
        ", ".join(_bold(flag) for flag in option.flags) or f"\\fI{roff_text(option.metavar)}\\fR"
    )
    if option.flags and option.takes_value:
        names += f" \\fI{roff_text(option.metavar)}\\fR"
    text = option.help or ""
    if option.choices:
        text = f"{text} (one of: {', '.join(option.choices)})".strip()
    return [".TP", names, roff_text(text) if text else "\\&"]


def _examples(epilog: str) -> list[str]:
    """The example commands of an epilog (the lines under ``examples:``)."""
    lines = epilog.splitlines()
    if not lines or lines[0] != "examples:":
        return []
    found = []
    for line in lines[1:]:
        if not line.startswith("  "):
            break
        found.append(line.strip())
    return found


def _command_section(node: Command) -> list[str]:
    lines = [f".SS {roff_text(' '.join((PROGRAM, *node.words)))}"]
    if node.description:
        lines += [".PP", roff_text(node.description)]
    lines += [".PP", "Usage:", ".nf", ".RS", roff_text(node.usage), ".RE", ".fi"]
    for option in [*node.positionals, *node.options]:
        if option.hidden or "--help" in option.flags:
            continue
        lines += _option_lines(option)
    examples = _examples(node.epilog)
    if examples:
        lines += [".PP", "Examples:", ".nf", ".RS"]
        lines += [roff_text(example) for example in examples]
        lines += [".RE", ".fi"]
    return lines


def _date() -> str:
    # a reproducible page: SOURCE_DATE_EPOCH when a build sets it, else today
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (
        datetime.datetime.fromtimestamp(int(epoch), tz=datetime.timezone.utc)
        if epoch and epoch.isdigit()
        else datetime.datetime.now(tz=datetime.timezone.utc)
    )
    return when.strftime("%Y-%m-%d")


def man_page(tree: Command) -> str:
    """The whole manual page of ``tree`` (section 1), in roff."""
    lines = [
        f'.TH {PROGRAM.upper()} 1 "{_date()}" "{PROGRAM} {__version__}" "User Commands"',
        ".SH NAME",
        f"{PROGRAM} \\- {roff_text(tree.description[:1].lower() + tree.description[1:])}",
        ".SH SYNOPSIS",
        f"{_bold(PROGRAM)} [\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGUMENTS\\fR]",
        ".SH DESCRIPTION",
        roff_text(tree.description),
        ".PP",
        roff_text(
            "Global options may be given before or after the command. Run "
            f"'{PROGRAM} COMMAND --help' for the same text as below."
        ),
        ".SH GLOBAL OPTIONS",
    ]
    for option in tree.options:
        lines += _option_lines(option)
    lines.append(".SH COMMANDS")
    for node in tree.walk()[1:]:
        if node.children:
            continue
        lines += _command_section(node)
    lines += [".SH REGISTRY CREDENTIALS", roff_text(" ".join(CREDENTIALS_HELP.split()))]
    lines.append(".SH EXIT STATUS")
    for code, meaning in EXIT_MEANINGS:
        lines += [".TP", _bold(str(code)), roff_text(meaning)]
    lines += [
        ".SH SEE ALSO",
        roff_text(f"{PROGRAM} completion bash|zsh|fish prints a shell completion script."),
        "",
    ]
    return "\n".join(lines)


def man(args: argparse.Namespace, out: Output) -> Result:
    """Print the manual page (``bundler man | man -l -`` shows it)."""
    page = man_page(read_tree(args.root_parser))
    return Result(payload={"man": page}, text=[page.rstrip("\n")], verbatim=True)


__all__ = ["EXIT_MEANINGS", "man", "man_page", "roff_text"]
