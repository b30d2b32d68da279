"""The sha256 of a blob as it streams, taken beside the code that reads the blob.

A registry names every blob by its sha256, and pulling a bundle hashes every byte of it: on a
bundle of a few hundred megabytes that is a third of a pull's time, and OpenSSL's sha256 runs
without Python's global interpreter lock. So a long stream is hashed in a thread of its own
while the pulling thread receives, writes and lists the next chunks; the digest is the same as
hashing inline, and it is only ever read after the last chunk was given (:meth:`Sha256.
hexdigest` waits for the thread).

The thread holds each chunk it is given until it has hashed it: at most :data:`QUEUED` chunks
wait, so the memory it takes is bounded by the chunk size, not the blob's. A short stream is
hashed inline, where a thread would cost more than it saves.

Why the switch interval is lowered while the thread runs: the hashing thread needs the lock
for a moment between two chunks, and the pulling thread, busy in Python (listing a tar), would
otherwise keep it for the interpreter's whole switch interval (5 ms) each time, which on a
bundle of many chunks costs more than the hashing itself.
"""

from __future__ import annotations

import hashlib
import queue
import sys
from typing import Any

from bundler.fs.interrupts import handed_over, joined, wait_for
from bundler.fs.threads import Thread, start_thread

THREADED_BYTES = 16 << 20
"""Streams at least this long are hashed in a thread."""

QUEUED = 4
"""Chunks that may wait for the hashing thread."""

SWITCH_INTERVAL = 0.0002
"""The interpreter's switch interval (seconds) while a hashing thread runs."""


Hash = Any
"""A ``hashlib.sha256()`` object (its type is private to ``hashlib``)."""


class Sha256:
    """A sha256 fed chunk by chunk (:meth:`update`), in a thread for a stream of ``expected``
    bytes of at least :data:`THREADED_BYTES`; ``start``, when given, is a sha256 already fed
    with what comes before. Call :meth:`close` when done with it (also on
    failure): it stops the thread."""

    def __init__(self, expected: int, start: Hash | None = None) -> None:
        self._hash = hashlib.sha256() if start is None else start
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: Thread | None = None
        self._interval = sys.getswitchinterval()
        if expected >= THREADED_BYTES:
            self._queue = queue.Queue(QUEUED)
            sys.setswitchinterval(min(self._interval, SWITCH_INTERVAL))
            self._thread = Thread(self._run, name="bundler-sha256")
            start_thread(self._thread)

    def _run(self) -> None:
        assert self._queue is not None
        while True:
            chunk = self._queue.get()
            if chunk is None:
                return
            self._hash.update(chunk)

    def update(self, chunk: bytes) -> None:
        """Hash ``chunk`` (kept, unchanged, until it is hashed: give bytes, not a buffer that
        will be reused)."""
        if self._queue is None:
            self._hash.update(chunk)
        else:
            with handed_over():
                self._queue.put(chunk)

    def hexdigest(self) -> str:
        """The digest of every chunk given; no chunk may be given after it."""
        self.close()
        return self._hash.hexdigest()

    def close(self) -> None:
        """Stop the thread (after the chunks given), and restore the switch interval."""
        if self._thread is None:
            return
        assert self._queue is not None
        with handed_over():
            self._queue.put(None)
        wait_for(joined(self._thread))
        self._thread = None
        sys.setswitchinterval(self._interval)
