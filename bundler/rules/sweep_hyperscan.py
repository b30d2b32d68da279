"""The sweep's matcher on Hyperscan: every pattern in one database, scanned in streaming mode.

:class:`bundler.rules.sweeper.Sweeper` uses this where the ``hyperscan`` wheel imports (and
``BUNDLER_SWEEP_ENGINE`` does not say ``python``); elsewhere it uses its own pure-Python
engine. The semantics are the same: exact bytes, case-sensitive, anywhere in the data (no word
boundaries). Streaming mode finds a pattern that straddles two chunks without scanning any
byte twice.

The ``hyperscan`` binding (0.9) shapes this module. A scratch space may be used by one
thread at a time and ``Stream.close`` always uses the database's own scratch, so an open
stream holds a database of its own: a second one is compiled (in tens of milliseconds,
outside the GIL) only when two threads sweep at the same moment; see
:class:`HyperscanStream` for its reference counting. The literal compiler measures each
pattern with ``strlen``, so a pattern holding a NUL byte cannot be given to it:
:func:`compile_matcher` returns None then, and for any pattern Hyperscan refuses (longer than
about 16 KB), and the caller keeps the pure-Python engine.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


@functools.cache
def _module() -> ModuleType | None:
    # imported on first use: commands that sweep nothing do not pay for it at start-up
    try:
        return importlib.import_module("hyperscan")
    except ImportError:  # no wheel for this platform: the pure-Python engine is used
        return None


Record = Callable[[int], None]


def available() -> bool:
    """True when the ``hyperscan`` module imports."""
    return _module() is not None


def version() -> str:
    """The ``hyperscan`` binding's version (``""`` when it is not available)."""
    hyperscan = _module()
    return str(getattr(hyperscan, "__version__", "")) if hyperscan is not None else ""


def _on_match(pattern: int, start: int, end: int, flags: int, record: Record) -> None:
    record(pattern)


class HyperscanStream:
    """One file's (or buffer's) stream: :meth:`feed` each chunk in order, then :meth:`close`.

    The binding keeps only borrowed references to the handler and its context (a temporary
    one is freed under the scan and crashes it): the handler is a module function and the
    context, ``record``, is held here for the stream's life. A stream object is entered
    once: its ``__enter__`` returns a borrowed reference, which the extra reference
    ``Database.stream`` leaks pays for exactly once.
    """

    def __init__(self, matcher: HyperscanMatcher, record: Record) -> None:
        self._matcher = matcher
        self._record = record
        self._database = matcher.acquire()
        self._stream = self._database.stream(match_event_handler=_on_match, context=record)
        self._stream.__enter__()  # hs_open_stream

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        """Scan the next ``chunk`` (any buffer; it is not copied)."""
        self._stream.scan(chunk)

    def close(self) -> None:
        """End the stream and free its state; its database is free for the next stream."""
        self._stream.close()
        self._matcher.release(self._database)


class HyperscanMatcher:
    """Finds which of ``patterns`` (by index) occur in a stream of bytes.

    Each pattern is reported at most once per stream (``HS_FLAG_SINGLEMATCH``): a file is
    reported once per secret and encoding, so later occurrences would only cost callbacks.
    """

    def __init__(self, patterns: Sequence[bytes]) -> None:
        self._patterns = list(patterns)
        # compiled now, so that a refused pattern shows in compile_matcher
        self._free = [self._compile()]

    def _compile(self) -> Any:
        hyperscan = _module()
        assert hyperscan is not None
        database = hyperscan.Database(mode=hyperscan.HS_MODE_STREAM)
        count = len(self._patterns)
        database.compile(
            expressions=self._patterns,
            ids=list(range(count)),
            elements=count,
            flags=hyperscan.HS_FLAG_SINGLEMATCH,
            literal=True,
        )
        return database

    def acquire(self) -> Any:
        """A database no open stream uses (compiled anew only when all are in use)."""
        try:
            return self._free.pop()  # atomic under the GIL
        except IndexError:
            return self._compile()

    def release(self, database: Any) -> None:
        """Give back a database :meth:`acquire` lent."""
        self._free.append(database)

    def stream(self, record: Record) -> HyperscanStream:
        """A new stream reporting each pattern found to ``record`` (once)."""
        return HyperscanStream(self, record)

    def scan(self, data: bytes | bytearray | memoryview, record: Record) -> None:
        """Report every pattern found in ``data`` to ``record`` (once each)."""
        stream = self.stream(record)
        stream.feed(data)
        stream.close()


def compile_matcher(patterns: Sequence[bytes]) -> HyperscanMatcher | None:
    """A matcher for ``patterns``, or None where Hyperscan is unavailable or refuses them."""
    hyperscan = _module()
    if hyperscan is None or not patterns or any(b"\x00" in p for p in patterns):
        return None
    try:
        return HyperscanMatcher(patterns)
    except hyperscan.error:
        return None
