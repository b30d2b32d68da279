"""How a long operation says how far it is, without knowing who listens (05 §3).

The library layers (``fs``, ``home``, ``bundle``, ``install`` and, later, transfers) take a
``progress: Progress | None`` argument and report through it; ``None`` means nobody listens,
so work done only for the display (counting a tree first) is skipped. The command line passes
a bar drawn on a terminal's stderr (:mod:`bundler.cli.progress_bar`); nothing below ``cli``
knows how progress is shown.

The protocol, as a caller uses it::

    progress.start("copying", files=12, nbytes=4096)   # a phase and its totals, None if unknown
    for item in work:
        ...
        progress(1, item.size)                          # per file: one file, its bytes, done
    progress.stop()                                     # the phase is over: the bar goes away

A phase is stopped before anything else is printed or asked (a prompt), and whatever raises
in a phase stops it too (``try``/``finally``, or :func:`phase`). ``__call__`` runs once per
file on the hot path: an implementation must keep it to a few additions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Progress(Protocol):
    """What a long operation reports: phases with their totals, then files and bytes done."""

    def start(self, label: str, files: int | None = None, nbytes: int | None = None) -> None:
        """A phase begins (replacing any other): what it does and its totals, when known."""

    def __call__(self, files: int, nbytes: int) -> None:
        """``files`` more files holding ``nbytes`` more bytes are done."""

    def stop(self) -> None:
        """The phase is over; nothing of it stays on the screen."""


@contextmanager
def phase(
    progress: Progress | None, label: str, files: int | None = None, nbytes: int | None = None
) -> Iterator[None]:
    """Run a block as one phase of ``progress`` (nothing when it is ``None``); stopped on exit."""
    if progress is None:
        yield
        return
    progress.start(label, files, nbytes)
    try:
        yield
    finally:
        progress.stop()


def known_total(value: object) -> int | None:
    """A total read from untrusted data (a manifest, a zip): a non-negative int, else unknown."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
