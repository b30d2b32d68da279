"""How bundler shows what its reports hold, for a program that prints them as the command line
does: names and paths made safe for a terminal, sizes (and a size a person typed, read back),
and commands to paste.

A report's strings come from bundles, configs and registries, that is from other people:
print them through :func:`escape_display`, which makes control characters and undecodable bytes
visible instead of letting them drive the terminal. Part of the API (``docs/api.md``); these are
the library's own rules (:mod:`bundler.rules.names`, :mod:`bundler.rules.units`,
:mod:`bundler.rules.hints`), named here so that they stay put while those modules move.
"""

from __future__ import annotations

from bundler.rules.hints import PROGRAM, Hinted, command, lines, shell_line
from bundler.rules.names import escape_display
from bundler.rules.units import human_size, parse_size

__all__ = [
    "PROGRAM",
    "Hinted",
    "command",
    "escape_display",
    "human_size",
    "lines",
    "parse_size",
    "shell_line",
]
