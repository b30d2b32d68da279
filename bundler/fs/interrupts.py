"""SIGINT, SIGTERM and SIGHUP around an operation's commit point, and beside its threads.

The command line's handler raises :class:`~bundler.errors.Interrupted` wherever the main thread
is, and an operation cleans up after it like after any failure (exit 130). That is only true
before its commit point. A few steps cannot be cut in two (a swap of several renames, a rename
and the flag that says it happened), and from the commit on nothing is undone: an interrupt
there is a failure after the commit point, a warning with the new state standing (05 §2). So
those steps run with the signals held (:func:`signals_deferred`), and the last of them records
that the command has committed (:func:`commit_reached`). The handler asks :func:`interrupt_now`
whether to raise: only for the first signal, and only before the commit. A signal after the
commit is noted (:func:`late_signal`) and the command finishes, its new state standing, with a
warning (05 §2: a failure after the commit point); a second signal while the first one's
clean-up runs is noted too, so the clean-up finishes and what exit 130 says holds.

Nor may the handler raise inside a primitive another thread waits on: an exception thrown
between a condition's release of a waiter and its bookkeeping loses the next wakeup (a queue
whose reader sleeps forever beside a full queue), and one thrown between a lock's acquire and
the ``try`` that releases it leaves it held. So the main thread hands data to a thread, and
waits for one, with the signals held (:func:`handed_over`, :func:`wait_for`), and every thread
is started with them blocked (:func:`bundler.fs.threads.start_thread`): a signal the kernel gives
to a thread that does not block it would run the handler in the main thread all the same, held
or not.

The same holds of the code around a handler's exception: a descriptor is forgotten before it is
closed (``fd, self.fd = self.fd, -1``), so an interrupt between the two can leak it to the
exiting process but never has a clean-up close it twice (the second close failed with EBADF,
and the error replaced the interrupt; or it closed a file that had taken the number).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from concurrent import futures

HELD = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


class _Command:
    """What the running command has reached, as its signal handler asks it."""

    def __init__(self) -> None:
        self.committed = False
        self.taken = False  # a signal was raised as an interrupt
        self.late: int | None = None  # the first signal noted after the commit


_command = _Command()


def begin_command() -> None:
    """Start a command afresh: nothing committed, no signal taken (``main`` may run often in
    one process)."""
    global _command
    _command = _Command()


def commit_reached() -> None:
    """Record that the command has committed: call it with the signals held, right after the
    step that commits (the swap, the rename, the stored tag), so no interrupt falls between."""
    _command.committed = True


def committed() -> bool:
    """Whether the running command has passed its commit point (:func:`commit_reached`): from
    then on a failure, its report's included, is a warning and the change stands."""
    return _command.committed


def interrupt_now(signum: int) -> bool:
    """Whether the handler of ``signum`` raises: for the first signal before the commit point.
    Any other is noted, not raised: after the commit nothing may be undone, and during the
    clean-up the first one started the clean-up must finish."""
    if _command.committed:
        if _command.late is None and not _command.taken:
            _command.late = signum
        return False
    if _command.taken:
        return False
    _command.taken = True
    return True


_early: list[int] = []


def _note_early(signum: int, frame: object) -> None:
    _early.append(signum)


def note_until_main() -> None:
    """As the process starts: note SIGINT, SIGTERM and SIGHUP until the command line installs
    its handler, which then takes the first one noted (:func:`early_signal`). Python's own
    would print a traceback (SIGINT) or end the process without a word (the others)."""
    for signum in HELD:
        signal.signal(signum, _note_early)


def early_signal() -> int | None:
    """The first signal noted during start-up (forgotten once asked)."""
    signum = _early[0] if _early else None
    _early.clear()
    return signum


def late_signal() -> int | None:
    """The signal that arrived after the commit, if one did (the command then finished)."""
    return _command.late


QUIET_STARTS = "quiet_thread_starts"
"""The attribute, true, of a ``sys.unraisablehook`` that leaves unprinted the interpreter's
report of a thread that died before its first step (the command line's,
:func:`bundler.api.process.quiet_failed_thread_starts`): while a thread starts,
:mod:`bundler.fs.threads` puts a hook that needs no frame in its place."""

NO_THREAD = "can't start new thread"
"""The message of the ``RuntimeError`` raised when no thread could be had: CPython's, when the
system refuses a thread (its stack could not be mapped under a small ``ulimit -v``, or there
are too many), and :func:`bundler.fs.threads.start_thread`'s for a thread that died before its
first step; callers handle both alike.
"""

STEP = 0.05
"""Seconds a wait lasts with the signals held, at most: how late an interrupt can be taken."""


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block; one that arrived meanwhile is delivered
    (its handler runs) as the block is left.

    The mask is the calling thread's: it holds the signals only while every other thread
    blocks them too, which :func:`bundler.fs.threads.start_thread` sees to.
    """
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


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


def settled(future: futures.Future[Any]) -> Callable[[float], bool]:
    """A pool's ``future`` done, as :func:`wait_for` asks it."""
    # here, not at the top: every command imports this module, few run a pool
    from concurrent.futures import wait

    return lambda timeout: not wait([future], timeout).not_done


class Joinable(Protocol):
    """A thread as :func:`joined` waits for it."""

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


def joined(thread: Joinable) -> Callable[[float], bool]:
    """``thread.join`` as :func:`wait_for` asks it."""

    def done(timeout: float) -> bool:
        thread.join(timeout)
        return not thread.is_alive()

    return done
