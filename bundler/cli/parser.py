"""What every command's parser shares: the parser class, the global options, and the
:class:`Tree` the group modules (``cli/args_*.py``) add their commands through.

Kept free of the command modules and of anything heavy: ``bundler --help`` builds from it.
"""

from __future__ import annotations

import argparse
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from bundler.api import display
from bundler.errors import UsageError

GLOBALS_NOTE = (
    "global options (--install DIR, --json, --quiet, --no-progress) go before or after\n"
    "the command: see 'bundler --help'"
)

Examples = Mapping[tuple[str, ...], list[list[str]]]
"""Per command (its words): example argument lists, printed under "examples:" in its help
(05 §1)."""


def epilog(words: tuple[str, ...], examples: Examples) -> str:
    """A command's help epilog: its examples, each a paste-ready line, and the globals note."""
    lines = ["examples:"]
    lines += [f"  {display.command(*words, *args)}" for args in examples.get(words, [])]
    if len(lines) == 1:
        lines = []
    return "\n".join([*lines, "", GLOBALS_NOTE] if lines else [GLOBALS_NOTE])


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` instead of printing and exiting 2.

    Options are never abbreviated: ``--acc`` for ``--accept-risks`` would keep working only
    until a second option starting with ``--acc`` appears, and then mean something else.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def global_options(suppress: bool) -> argparse.ArgumentParser:
    """The global options; on subcommands they default to SUPPRESS so either position works."""
    parent = argparse.ArgumentParser(add_help=False)
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}

    def text(words: str) -> str:
        # shown once, in 'bundler --help'; a command's help points there instead of repeating
        return argparse.SUPPRESS if suppress else words

    parent.add_argument(
        "--install",
        metavar="DIR",
        help=text("install root (else $ZEROCLAW_CONFIG_DIR, else ~/.zeroclaw)"),
        **default,
    )
    parent.add_argument(
        "--json",
        action="store_true",
        help=text("print exactly one JSON object on stdout"),
        **default,
    )
    parent.add_argument(
        "--quiet", action="store_true", help=text("print only errors and the result"), **default
    )
    parent.add_argument(
        "--no-progress", action="store_true", help=text("never draw progress"), **default
    )
    return parent


@dataclass
class Tree:
    """The parser being built: its root, which groups get their commands' parsers (``None``:
    all), and every command's examples. A group module adds its words through
    :meth:`command` and :meth:`subcommands`."""

    root: argparse.ArgumentParser
    groups_wanted: Container[str] | None
    examples: Examples

    def __post_init__(self) -> None:
        self._sub_globals = global_options(suppress=True)

    def wanted(self, group: str) -> bool:
        """Whether the commands of ``group`` are built (every group is listed either way)."""
        return self.groups_wanted is None or group in self.groups_wanted

    def subcommands(self, parent: argparse.ArgumentParser) -> Any:
        """The sub-commands of a group's parser (the object ``add_parser`` is called on)."""
        return parent.add_subparsers(
            dest="command", metavar="COMMAND", parser_class=Parser, help="one of:"
        )

    def command(
        self, subs: Any, name: str, help_text: str, *extra: argparse.ArgumentParser
    ) -> argparse.ArgumentParser:
        """Add command ``name`` under ``subs``, with the global options, ``extra`` parents and
        its examples in the epilog."""
        # argparse keeps the parent command's words ("bundler agents") only in _prog_prefix
        words = (*str(subs._prog_prefix).split()[1:], name)
        made: argparse.ArgumentParser = subs.add_parser(
            name,
            help=help_text,
            description=help_text,
            parents=[self._sub_globals, *extra],
            epilog=epilog(words, self.examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return made
