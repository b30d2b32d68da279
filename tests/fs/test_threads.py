"""Threads whose start can neither hang a command nor hold off its signals
(:mod:`bundler.fs.threads`).

``threading.Thread.start`` waited forever for a thread that died before its first step (a
``MemoryError`` as the interpreter called into it: CPython gh-140746), and bundler waited with
SIGINT, SIGTERM and SIGHUP held, so only SIGKILL ended a backup that met it. The death is made
here for real, on a real thread, by handing it a first step that raises ``MemoryError`` (the
interpreter's own path for such a failure), and the start must report it at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.hostile_zips import make_project
from support.kit import clean_env, one_error

from bundler.api.process import no_thread
from bundler.fs import threads
from bundler.fs.interrupts import HELD, signals_deferred
from bundler.fs.threads import Pool, Thread, died_starting, running, start_thread


def _blocked_here() -> set[int]:
    """The signals the calling thread blocks, as the kernel says."""
    with open("/proc/thread-self/status") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigBlk:"))
    return {signum for signum in range(1, 65) if mask >> (signum - 1) & 1}


def _dies_before_its_first_step(handed: object) -> None:
    # the interpreter's failure before a first step has no frame to hold what it was handed;
    # this one lets go of it, so a hook that keeps the exception keeps nothing else
    del handed
    raise MemoryError


@pytest.fixture
def quiet_unraisable(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[SimpleNamespace]]:
    """What ``sys.unraisablehook`` is given meanwhile, kept rather than printed."""
    seen: list[SimpleNamespace] = []

    def keep(unraisable: Any) -> None:
        fields = ("object", "err_msg", "exc_value")
        seen.append(SimpleNamespace(**{name: getattr(unraisable, name) for name in fields}))

    monkeypatch.setattr(sys, "unraisablehook", keep)
    yield seen


def test_a_thread_runs_with_the_three_signals_blocked_and_its_starter_keeps_its_mask() -> None:
    before = _blocked_here()
    seen: list[set[int]] = []
    thread = Thread(lambda: seen.append(_blocked_here()), name="bundler-test")
    start_thread(thread)
    thread.join()
    assert set(HELD) <= seen[0]
    assert _blocked_here() == before and not set(HELD) <= before
    assert not thread.is_alive() and "bundler-test" not in running()


def test_a_thread_is_listed_as_running_until_it_ends() -> None:
    release = threading.Event()
    thread = Thread(release.wait, name="bundler-test-running")
    start_thread(thread)
    assert thread.is_alive() and "bundler-test-running" in running()
    release.set()
    thread.join()
    assert "bundler-test-running" not in running()


def test_a_thread_that_dies_before_its_first_step_is_reported_at_once(
    monkeypatch: pytest.MonkeyPatch, quiet_unraisable: list[SimpleNamespace]
) -> None:
    monkeypatch.setattr(threads, "_bootstrap", _dies_before_its_first_step)
    thread = Thread(lambda: None, name="bundler-test-dies")
    began = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        start_thread(thread)
    assert time.monotonic() - began < 5
    assert no_thread(raised.value)
    # the interpreter's own report of it, which the command line leaves unprinted
    [report] = quiet_unraisable
    assert died_starting(report)
    thread.join()  # at once: it will never run
    assert not thread.is_alive() and "bundler-test-dies" not in running()


def test_what_a_running_thread_lets_out_is_reported_as_a_threading_threads_is(
    monkeypatch: pytest.MonkeyPatch, quiet_unraisable: list[SimpleNamespace]
) -> None:
    """Only a death before the first step reaches ``sys.unraisablehook`` (which the command
    line quiets for it): a thread that ran out of memory later is reported, not hidden."""
    seen: list[object] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_type))

    def runs_out() -> None:
        raise MemoryError

    thread = Thread(runs_out, name="bundler-test-raises")
    start_thread(thread)
    thread.join()
    assert seen == [MemoryError] and quiet_unraisable == []


def test_a_pool_whose_worker_dies_starting_raises_and_shuts_down_at_once(
    monkeypatch: pytest.MonkeyPatch, quiet_unraisable: list[SimpleNamespace]
) -> None:
    monkeypatch.setattr(threads, "_bootstrap", _dies_before_its_first_step)
    pool = Pool(2, name="bundler-test-pool")
    with pytest.raises(RuntimeError) as raised:
        pool.submit(int, "1")
    assert no_thread(raised.value)
    pool.shutdown(cancel_pending=True)
    assert "bundler-test-pool" not in running()


def test_an_interrupt_while_a_start_waits_is_taken_once_the_thread_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start waits with the signals delivered between short waits: an interrupt is taken
    (where the standard start held them for as long as it waited), and only once the thread
    runs, so the caller can still join it."""
    real = threads._bootstrap

    def slow_first_step(handed: object) -> None:
        time.sleep(0.6)
        real(handed)  # type: ignore[arg-type]

    class Stop(Exception):
        pass

    def handler(_signum: int, _frame: object) -> None:
        raise Stop

    monkeypatch.setattr(threads, "_bootstrap", slow_first_step)
    earlier = signal.signal(signal.SIGINT, handler)
    ran = threading.Event()
    thread = Thread(ran.set, name="bundler-test-slow")
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        began = time.monotonic()
        with pytest.raises(Stop):
            start_thread(thread)
        assert time.monotonic() - began >= 0.5  # not before the thread ran
    finally:
        signal.signal(signal.SIGINT, earlier)
    thread.join()
    assert ran.is_set()


def test_a_pool_runs_the_calls_and_hands_back_what_they_return_or_raise() -> None:
    with Pool(2, name="bundler-test-pool") as pool:
        squares = [pool.submit(pow, n, 2) for n in range(50)]
        failed = pool.submit(int, "not a number")
        masks = [pool.submit(_blocked_here) for _ in range(4)]
        assert [future.result() for future in squares] == [n * n for n in range(50)]
        with pytest.raises(ValueError):
            failed.result()
        assert all(set(HELD) <= future.result() for future in masks)
    assert "bundler-test-pool" not in running()


def test_a_pool_shut_down_cancelling_runs_no_call_not_yet_begun() -> None:
    release = threading.Event()
    pool = Pool(1, name="bundler-test-pool")
    first = pool.submit(release.wait)
    rest = [pool.submit(pow, n, 2) for n in range(10)]
    release.set()
    pool.shutdown(cancel_pending=True)
    assert first.result() is True
    for future in rest:  # each ran before the shutdown came, or was cancelled, never lost
        if future.cancelled():
            with pytest.raises(CancelledError):
                future.result()
        else:
            assert future.result() == rest.index(future) ** 2
    assert "bundler-test-pool" not in running()


def test_a_start_in_a_block_holding_the_signals_ends_when_the_thread_dies_starting(
    monkeypatch: pytest.MonkeyPatch, quiet_unraisable: list[SimpleNamespace]
) -> None:
    """A start inside a block that holds the signals (a caller's) cannot take an interrupt,
    but neither does it hang: the death is known without one."""
    monkeypatch.setattr(threads, "_bootstrap", _dies_before_its_first_step)
    thread = Thread(lambda: None, name="bundler-test-held")
    with signals_deferred(), pytest.raises(RuntimeError):
        start_thread(thread)
    thread.join()
    assert not thread.is_alive()


_DIES_STARTING = """
import sys
import bundler.fs.threads as threads
def dies(handed):
    del handed
    raise MemoryError
threads._bootstrap = dies
from bundler.cli import main
sys.exit(main())
"""


def test_a_backup_whose_worker_dies_starting_fails_on_one_line_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """The command line's own run: exit 1, "not enough memory" on one line (not the
    interpreter's "Exception ignored in thread started by"), its staging gone."""
    project, _home = make_project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    backup = ["home", "backup", "--project", str(project), "--to", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", _DIES_STARTING, *backup],
        capture_output=True,
        text=True,
        env=clean_env({"HOME": str(tmp_path)}),
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert one_error(done.stderr) and "not enough memory" in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr
    assert os.listdir(out) == []


def _quietly_run(script: str) -> str:
    """What ``script`` prints, run by a new interpreter that must succeed and write nothing to
    its standard error."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def test_a_report_that_finds_no_memory_to_be_made_prints_nothing() -> None:
    """Out of memory, the hook that keeps a failed thread start quiet may itself find none:
    the interpreter would then print that the hook failed, lines of noise before the
    command's own one-line error. Here the report it hands on fails as printing would."""
    script = (
        "import sys\n"
        "from bundler.api.process import quiet_failed_thread_starts\n"
        "def printing_without_memory(unraisable):\n"
        "    raise MemoryError\n"
        "sys.unraisablehook = printing_without_memory\n"
        "quiet_failed_thread_starts()\n"
        "class Dropped:\n"
        "    def __del__(self):\n"
        "        raise ValueError('reported from a finalizer')\n"
        "Dropped()\n"
        "print('went on')\n"
    )
    assert _quietly_run(script) == "went on\n"


def test_a_thread_dying_before_its_first_step_needs_no_frame_for_its_quiet_report() -> None:
    """A thread that died for want of memory may not get even the frame a Python hook runs in:
    while it starts, a builtin stands in for the command line's quiet hook, so nothing is
    printed, and the hook is back once the start is over. The hook here fails as such a call
    would."""
    script = (
        "import sys\n"
        "from bundler.fs import interrupts, threads\n"
        "def without_a_frame(unraisable):\n"
        "    raise MemoryError\n"
        "setattr(without_a_frame, interrupts.QUIET_STARTS, True)\n"
        "sys.unraisablehook = without_a_frame\n"
        "def dies(handed):\n"
        "    del handed\n"
        "    raise MemoryError\n"
        "threads._bootstrap = dies\n"
        "try:\n"
        "    threads.start_thread(threads.Thread(lambda: None, name='dies'))\n"
        "except RuntimeError as exc:\n"
        "    print(exc, sys.unraisablehook is without_a_frame)\n"
    )
    assert _quietly_run(script) == "can't start new thread True\n"
