"""The parsers of ``bundler recover`` and ``bundler doctor``: repairing and checking."""

from __future__ import annotations

from typing import Any

from bundler.cli.parser import Tree

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    ("recover",): "bundler.cli.recover_cmds:recover",
    ("doctor",): "bundler.cli.doctor_cmds:doctor",
}

# per command: example argument lists (05 §1)
EXAMPLES: dict[tuple[str, ...], list[list[str]]] = {
    ("recover",): [["./researcher.bundle", "--dry-run"], ["--scan", "."], ["--home", "DIR"]],
    ("doctor",): [[], ["--project", ".", "--path", "/mnt/usb"]],
}


def add(groups: Any, tree: Tree) -> None:
    """``recover`` and ``doctor``."""
    recover = tree.command(
        groups, "recover", "repair what an interrupted export, import, backup or restore left"
    )
    recover.add_argument(
        "dest", nargs="?", metavar="DEST", help="an export destination, or a home backup's --to DIR"
    )
    recover.add_argument("--home", metavar="DIR", help="a data home with an interrupted restore")
    recover.add_argument(
        "--scan", metavar="DIR", help="list leftovers among DIR's children, changing nothing"
    )
    recover.add_argument("--dry-run", action="store_true", help="say what would be done")
    doctor = tree.command(
        groups, "doctor", "check the install, leftovers, the filesystem and the data home"
    )
    doctor.add_argument("--project", metavar="DIR", help="also check this project's data home")
    doctor.add_argument(
        "--path",
        metavar="DIR",
        help="check that exports can replace a bundle atomically where DIR is",
    )
