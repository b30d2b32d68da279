"""SIGINT, SIGTERM and SIGHUP around an operation's commit point.

The command line's handler raises :class:`~bundler.errors.Interrupted` wherever the program is,
and an operation cleans up after it like after any failure (exit 130). That is only true before
its commit point. A few steps cannot be cut in two (a swap of several renames, a rename and the
flag that says it happened), and from the commit on nothing is undone: an interrupt there is a
failure after the commit point, a warning with the new state standing (05 §2). So those steps
run with the signals held (:func:`signals_deferred`), and each operation says what an interrupt
that arrives once they are done means.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

HELD = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block; one that arrived meanwhile is delivered
    (its handler runs) as the block is left.

    The mask is the calling thread's: a thread started before the block could still take the
    signal, so callers hold it only while no other thread of theirs runs.
    """
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
