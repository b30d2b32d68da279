"""The command tree read back from the argparse parser, for what is generated from it.

Shell completions and the man page are made from :func:`bundler.cli.build_parser` by walking
it here, so a command or option added to the parser appears in both with no list to keep.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Option:
    """One option or positional of a command, as the parser knows it.

    ``flags`` is empty for a positional; ``hidden`` marks the global options repeated
    (help suppressed) on every command so they may be given after it.
    """

    flags: tuple[str, ...]
    metavar: str
    help: str
    takes_value: bool
    choices: tuple[str, ...] = ()
    hidden: bool = False

    @property
    def wants_path(self) -> bool:
        """True when the value is a file or folder (its metavar says so)."""
        return self.metavar in ("DIR", "FILE", "BUNDLE", "DEST")

    @property
    def wants_dir(self) -> bool:
        """True when the value is a folder."""
        return self.metavar in ("DIR", "DEST")


@dataclass
class Command:
    """A node of the tree: ``words`` after ``bundler`` (empty for the program itself)."""

    words: tuple[str, ...]
    help: str
    description: str
    epilog: str
    usage: str
    options: list[Option] = field(default_factory=list)
    positionals: list[Option] = field(default_factory=list)
    children: list[Command] = field(default_factory=list)

    @property
    def key(self) -> str:
        """``/agents/export``: the words joined, as the generated scripts track them."""
        return "".join(f"/{word}" for word in self.words)

    def walk(self) -> list[Command]:
        """This command and every command below it, parents first."""
        return [self, *(node for child in self.children for node in child.walk())]


def _text(value: str | None) -> str:
    return "" if value is None or value == argparse.SUPPRESS else value


def _option(action: argparse.Action) -> Option:
    takes_value = action.nargs != 0
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if not metavar and takes_value:
        metavar = (action.dest or "").upper()
    return Option(
        flags=tuple(action.option_strings),
        metavar=metavar,
        help=_text(action.help),
        takes_value=takes_value,
        choices=tuple(str(c) for c in action.choices or ()),
        hidden=action.help == argparse.SUPPRESS,
    )


def read_tree(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = (), help_text: str = ""
) -> Command:
    """The tree of ``parser``: its options, positionals and sub-commands, recursively."""
    node = Command(
        words=words,
        help=help_text,
        description=_text(parser.description),
        epilog=_text(parser.epilog),
        usage=" ".join(parser.format_usage().split())[len("usage: ") :],
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: _text(choice.help) for choice in action._choices_actions}
            for name, child in action.choices.items():
                node.children.append(read_tree(child, (*words, name), helps.get(name, "")))
        elif (
            isinstance(action, (argparse._HelpAction, argparse._VersionAction))
            or action.option_strings
        ):
            node.options.append(_option(action))
        else:
            node.positionals.append(_option(action))
    return node


__all__ = ["Command", "Option", "read_tree"]
