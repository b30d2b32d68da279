"""The signal policy of :mod:`bundler.fs.interrupts` (05 §2): which signal the command line's
handler raises as an interrupt, and which it only notes."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from bundler.fs import interrupts


@pytest.fixture(autouse=True)
def _fresh_command() -> Iterator[None]:
    interrupts.begin_command()
    yield
    interrupts.begin_command()


def test_the_first_signal_before_the_commit_is_raised() -> None:
    assert interrupts.interrupt_now(signal.SIGINT) is True
    assert interrupts.late_signal() is None


def test_a_second_signal_during_the_first_ones_clean_up_is_not_raised() -> None:
    """Ctrl-C twice: the clean-up the first one started must finish, or exit 130's 'cleaned up'
    is false (staging folders were left by a second Ctrl-C during a rollback)."""
    assert interrupts.interrupt_now(signal.SIGINT) is True
    assert interrupts.interrupt_now(signal.SIGINT) is False
    assert interrupts.interrupt_now(signal.SIGTERM) is False
    assert interrupts.late_signal() is None


def test_a_signal_after_the_commit_is_noted_not_raised() -> None:
    """From the commit point nothing is undone: the command finishes and warns (05 §2)."""
    interrupts.commit_reached()
    assert interrupts.interrupt_now(signal.SIGTERM) is False
    assert interrupts.interrupt_now(signal.SIGINT) is False
    assert interrupts.late_signal() == signal.SIGTERM


def test_a_new_command_starts_with_nothing_committed_or_taken() -> None:
    interrupts.commit_reached()
    interrupts.interrupt_now(signal.SIGINT)
    interrupts.begin_command()
    assert interrupts.late_signal() is None
    assert interrupts.interrupt_now(signal.SIGINT) is True


def test_a_signal_during_start_up_is_noted_then_taken_once() -> None:
    previous = {signum: signal.getsignal(signum) for signum in interrupts.HELD}
    try:
        interrupts.note_until_main()
        signal.raise_signal(signal.SIGHUP)
        assert interrupts.early_signal() == signal.SIGHUP
        assert interrupts.early_signal() is None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_signals_deferred_delivers_a_held_signal_as_the_block_is_left() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda signum, _frame: seen.append(signum))
    try:
        with interrupts.signals_deferred():
            signal.raise_signal(signal.SIGHUP)
            assert seen == []
        assert seen == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, previous)
