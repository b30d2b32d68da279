"""SIGINT, SIGTERM and SIGHUP around an operation's commit point, and beside its threads.

The command line's handler raises :class:`~bundler.errors.Interrupted` wherever the main thread
is, and an operation cleans up after it like after any failure (exit 130). That is only true
before its commit point. A few steps cannot be cut in two (a swap of several renames, a rename
and the flag that says it happened), and from the commit on nothing is undone: an interrupt
there is a failure after the commit point, a warning with the new state standing (05 §2). So
those steps run with the signals held (:func:`signals_deferred`), and each operation says what
an interrupt that arrives once they are done means.

Nor may the handler raise inside a primitive another thread waits on: an exception thrown
between a condition's release of a waiter and its bookkeeping loses the next wakeup (a queue
whose reader sleeps forever beside a full queue), and one thrown between a lock's acquire and
the ``try`` that releases it leaves it held. So the main thread hands data to a thread, and
waits for one, with the signals held (:func:`handed_over`, :func:`wait_for`), and every thread
is started with them blocked (:func:`start_thread`): a signal the kernel gives to a thread that
does not block it would run the handler in the main thread all the same, held or not.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HELD = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

STEP = 0.05
"""Seconds a wait lasts with the signals held, at most: how late an interrupt can be taken."""


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block; one that arrived meanwhile is delivered
    (its handler runs) as the block is left.

    The mask is the calling thread's: it holds the signals only while every other thread
    blocks them too, which :func:`start_thread` sees to.
    """
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_thread(thread: threading.Thread) -> None:
    """Start ``thread`` with the signals blocked for its whole life (a thread keeps the mask it
    starts with), so that they reach the main thread alone."""
    with signals_deferred():
        thread.start()


handed_over = signals_deferred
"""Hold the signals while the main thread puts into, or takes from, a queue another thread
uses (the put that blocks on a full queue included)."""


def wait_for(done: Callable[[float], bool]) -> None:
    """Wait until ``done(timeout)`` (a wait of at most ``timeout`` seconds: an event's, a
    join's) says it is over, with the signals held during each wait and delivered between
    them: an interrupt is taken within :data:`STEP` seconds, never inside the wait itself."""
    while True:
        with signals_deferred():
            if done(STEP):
                return


def joined(thread: threading.Thread) -> Callable[[float], bool]:
    """``thread.join`` as :func:`wait_for` asks it."""

    def done(timeout: float) -> bool:
        thread.join(timeout)
        return not thread.is_alive()

    return done
