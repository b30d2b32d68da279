"""What a program that runs bundler's operations as its own process takes on, as the command
line does: the signals an operation holds while it commits, and the scratch folders it could
not remove.

An operation interrupted before its commit point cleans up and raises; one interrupted after it
finishes, and the signal is reported late (02 §8.5). A process that wants that for SIGINT,
SIGTERM and SIGHUP calls :func:`begin_command` before each operation and, from its handler for
each signal in :data:`HELD`, raises only when :func:`interrupt_now` says so. Part of the API
(``docs/api.md``); the mechanism is :mod:`bundler.fs.interrupts`'.
"""

from __future__ import annotations

import sys

from bundler.fs.interrupts import (
    HELD,
    begin_command,
    committed,
    early_signal,
    interrupt_now,
    late_signal,
)

__all__ = [
    "HELD",
    "begin_command",
    "committed",
    "early_signal",
    "interrupt_now",
    "late_signal",
    "left_behind",
]


def left_behind() -> list[str]:
    """One warning per scratch folder the last operations could not remove (each names it and
    the command that clears it), taken: a second call returns only newer ones."""
    # only an operation that made one has imported the module; importing it here would load it
    # (and what it imports) for every run, a folder's verify among them
    if "bundler.fs.scratch" not in sys.modules:
        return []
    from bundler.fs.scratch import take_left_behind

    return take_left_behind()
