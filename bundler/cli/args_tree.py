"""The parsers of ``bundler completion`` and ``bundler man``: the commands generated from the
whole parser tree, which they are handed (``root_parser``) so they import nothing of it."""

from __future__ import annotations

from typing import Any

from bundler.cli.parser import Tree
from bundler.cli.shells import SHELLS

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    ("completion",): "bundler.cli.completion:completion",
    ("man",): "bundler.cli.manpage:man",
}

# per command: example argument lists (05 §1)
EXAMPLES: dict[tuple[str, ...], list[list[str]]] = {
    ("completion",): [["bash"], ["fish"]],
    ("man",): [[]],
}

WHOLE_TREE = frozenset(word for (word,) in HANDLERS)
"""The words whose command describes every command: the parser is built whole for them."""


def add(groups: Any, tree: Tree) -> None:
    """``completion`` and ``man``."""
    completion = tree.command(groups, "completion", "print a shell completion script")
    completion.add_argument(
        "shell", choices=SHELLS, metavar="SHELL", help="the shell to print the script for"
    )
    man = tree.command(groups, "man", "print the manual page (roff), made from this help")
    for generated in (completion, man):
        generated.set_defaults(root_parser=tree.root)
