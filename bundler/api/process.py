"""What a program that runs bundler's operations as its own process takes on, as the command
line does: the signals an operation holds while it commits, and the scratch folders it could
not remove.

An operation interrupted before its commit point cleans up and raises; one interrupted after it
finishes, and the signal is reported late (02 §8.5). A process that wants that for SIGINT,
SIGTERM and SIGHUP calls :func:`begin_command` before each operation and, from its handler for
each signal in :data:`HELD`, raises only when :func:`interrupt_now` says so. Part of the API
(``docs/api.md``); the mechanism is :mod:`bundler.fs.interrupts`' and, for the threads an
operation starts, :mod:`bundler.fs.threads`'.
"""

from __future__ import annotations

import sys
from typing import Any

from bundler.fs.interrupts import (
    HELD,
    NO_THREAD,
    QUIET_STARTS,
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
    "no_thread",
    "quiet_failed_thread_starts",
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


def no_thread(err: BaseException) -> bool:
    """Whether ``err`` is an operation's failure to get a thread: the system refused one (its
    stack could not be mapped under a small ``ulimit -v``, or there are too many), or one died
    before its first step for want of memory. The command line reports it as out of memory."""
    return isinstance(err, RuntimeError) and str(err) == NO_THREAD


def quiet_failed_thread_starts() -> None:
    """Leave unprinted the interpreter's report of an operation's thread that died before its
    first step (``Exception ignored in thread started by``): the operation raises that failure
    itself (:func:`no_thread`), so a program can report it on one line. Chains the hook set
    before it for anything else."""
    earlier = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        try:
            # the threads module is asked only once loaded: most operations start no thread
            threads = sys.modules.get("bundler.fs.threads")
            if threads is None or not threads.died_starting(unraisable):
                earlier(unraisable)
        except MemoryError:
            # no memory even to tell or to print it: the interpreter would print that this hook
            # failed, a traceback's worth of lines before the operation's own one-line error
            pass

    # while a thread of an operation starts, a hook that needs no frame stands in for this one
    setattr(hook, QUIET_STARTS, True)
    sys.unraisablehook = hook
