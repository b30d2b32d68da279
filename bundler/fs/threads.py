"""Threads whose start can neither hang a command nor hold off its signals.

``threading.Thread.start`` waits, without a timeout, for the new thread to say that it runs. A
thread that dies before it says so is waited for forever: a ``MemoryError`` as the interpreter
calls into the new thread, in an address space near its limit, does that (CPython gh-140746,
open). Every pool of ``concurrent.futures`` starts its threads that way. And bundler starts its
threads with SIGINT, SIGTERM and SIGHUP held (:mod:`bundler.fs.interrupts`), so neither Ctrl-C
nor ``kill`` ended that wait: only SIGKILL did.

Here the system makes the thread (``_thread.start_new_thread``) while the signals are held, so
the thread keeps them blocked for its whole life and they reach the main thread alone. Then
the signals are released, and the starter waits for the thread's first step in short waits
with the signals delivered between them (:func:`~bundler.fs.interrupts.wait_for`). A thread
that died before its first step is known at once, with no timeout to guess: the interpreter
frees what it gave the thread as it gives up on it, and the one object handed to the thread,
which nothing else holds, is then gone (a weak reference says so).

:class:`Pool` is the part of ``concurrent.futures.ThreadPoolExecutor`` bundler uses (submit,
futures, a shutdown that cancels what has not begun), with its workers started this way.
"""

from __future__ import annotations

import _thread
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from queue import Empty, SimpleQueue
from typing import Any, TypeVar

from bundler.fs.interrupts import (
    NO_THREAD,
    QUIET_STARTS,
    STEP,
    joined,
    signals_deferred,
    wait_for,
)

_running: dict[int, str] = {}  # id of each started thread's handle -> its name, until it ends


def running() -> list[str]:
    """The names of the threads started here that have not ended (what a test asks)."""
    return list(_running.values())


class Thread:
    """A thread that runs ``run()`` once :func:`start_thread` starts it, joined as a
    ``threading.Thread`` is; ``name`` is what :func:`running` lists.

    ``run`` should catch what it raises: an exception it lets out is reported by
    ``threading.excepthook``, not raised anywhere. A thread never started, or that could not
    start, is joined at once."""

    def __init__(self, run: Callable[[], object], *, name: str) -> None:
        self.name = name
        self._run = run
        self._made = False  # the system made it: it runs, or has ended
        self._began = threading.Event()
        self._ended = threading.Event()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the thread has ended, or ``timeout`` seconds have passed."""
        if self._made:
            self._ended.wait(timeout)

    def is_alive(self) -> bool:
        """Whether the thread was started and has not ended yet."""
        return self._made and not self._ended.is_set()


class _Handed:
    """What a new thread is handed; the thread holds the only reference to it."""

    __slots__ = ("__weakref__", "thread")

    def __init__(self, thread: Thread) -> None:
        self.thread = thread


def _bootstrap(handed: _Handed) -> None:
    thread = handed.thread
    try:
        try:
            _running[id(thread)] = thread.name
            thread._began.set()
        finally:
            # gone, even when an exception kept this frame: the starter reads its going, if the
            # thread has not begun, as a failed start
            del handed
        thread._run()
    except BaseException:
        # reported as a threading.Thread's is, unless it is a failed start, which the starter
        # raises: what reaches sys.unraisablehook from here is a death before this frame ran
        if thread._began.is_set():
            threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), None)))
    finally:
        _running.pop(id(thread), None)
        thread._ended.set()


def start_thread(thread: Thread) -> None:
    """Start ``thread`` with SIGINT, SIGTERM and SIGHUP blocked for its whole life, and return
    once it runs.

    Raises ``RuntimeError`` (:data:`NO_THREAD`) when the system gives no thread, or the thread
    died before its first step (out of memory). An interrupt while it waits is raised as from
    any wait, once the thread runs or is known dead: either way ``thread.join()`` then does
    not wait for a thread that never comes."""
    handed = _Handed(thread)
    gone = weakref.ref(handed)
    quiet = _reports_dropped()
    try:
        with signals_deferred():  # the thread is made with them blocked, and keeps them so
            _thread.start_new_thread(_bootstrap, (handed,))
            thread._made = True
        del handed

        def settled(timeout: float) -> bool:
            return thread._began.wait(timeout) or gone() is None

        try:
            wait_for(settled)
        finally:
            with signals_deferred():  # after an interrupt too: never while it may still begin
                while not settled(STEP):
                    pass
                if not thread._began.is_set():
                    thread._ended.set()  # it never will: a join returns at once
    finally:
        if quiet:
            _reports_restored()
    if not thread._began.is_set():
        raise RuntimeError(NO_THREAD)


_DROP = id
"""A builtin taking one argument and doing nothing with it: a hook that needs no frame. While a
thread starts it stands in for a :data:`~bundler.fs.interrupts.QUIET_STARTS` hook: the report of
a thread that died for want of memory is made in that thread, which then may not get even the
frame a Python hook runs in, and the interpreter would print that the hook failed. The report
comes before the thread's handed object is freed, so within the start's wait; a report of
anything else in that moment is dropped too."""
_swap_lock = threading.Lock()
_swaps = 0  # starts under way with _DROP standing in
_swapped: Any = None  # the hook _DROP stands in for


def _reports_dropped() -> bool:
    """Put :data:`_DROP` in place of a :data:`QUIET_STARTS` hook for a start (or count the
    start in, when another start already did); False when the hook is not one."""
    global _swaps, _swapped
    with _swap_lock:
        if _swaps:
            _swaps += 1
            return True
        hook = sys.unraisablehook
        if not getattr(hook, QUIET_STARTS, False):
            return False
        _swapped, _swaps = hook, 1
        sys.unraisablehook = _DROP
        return True


def _reports_restored() -> None:
    """Count a start out; the last puts the hook back."""
    global _swaps, _swapped
    with _swap_lock:
        _swaps -= 1
        if not _swaps:
            sys.unraisablehook, _swapped = _swapped, None


def died_starting(unraisable: Any) -> bool:
    """Whether ``unraisable`` (what ``sys.unraisablehook`` is given) is the interpreter's
    report of a thread that ran out of memory before its first step, a failure
    :func:`start_thread` raises itself."""
    if not isinstance(unraisable.exc_value, MemoryError):
        return False
    # CPython names the function as the report's object, or from 3.13 in its message
    message = unraisable.err_msg or ""
    return unraisable.object is _bootstrap or (
        unraisable.object is None and message.endswith(_BOOTSTRAP_NAMED)
    )


_BOOTSTRAP_NAMED = f" {_bootstrap!r}"
"""How a report's message ends when it names :func:`_bootstrap`: made once, as a report of a
death for want of memory may find none to make it with."""


T = TypeVar("T")
_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class Pool:
    """Up to ``size`` worker threads, each started by :func:`start_thread` as a call is
    submitted until there are ``size``, taking the submitted calls in order."""

    def __init__(self, size: int, *, name: str) -> None:
        self._size = size
        self._name = name
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._threads: list[Thread] = []

    def submit(self, call: Callable[..., T], /, *args: Any) -> Future[T]:
        """Queue ``call(*args)``; its future holds what it returns or raises. Raises as
        :func:`start_thread` does when a worker it starts cannot run."""
        future: Future[T] = Future()
        self._jobs.put((future, call, args))  # one step, in C: no interrupt falls inside it
        if len(self._threads) < self._size:
            thread = Thread(self._work, name=self._name)
            self._threads.append(thread)  # before it starts: shutdown joins what started
            start_thread(thread)
        return future

    def shutdown(self, *, cancel_pending: bool = False) -> None:
        """Stop the workers once the calls they run have returned, and wait for them; the
        calls not begun are cancelled with ``cancel_pending``, else run first."""
        if cancel_pending:
            while True:
                try:
                    job = self._jobs.get_nowait()
                except Empty:
                    break
                if job is not None:
                    job[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)
        while self._threads:
            wait_for(joined(self._threads[-1]))  # an interrupt is taken between waits
            self._threads.pop()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.shutdown()

    def _work(self) -> None:
        jobs = self._jobs
        while (job := jobs.get()) is not None:
            future, call, args = job
            del job
            if future.set_running_or_notify_cancel():
                try:
                    result = call(*args)
                except BaseException as exc:  # the caller's, raised by future.result()
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                    del result
            del future, call, args
