"""Reading a file's bytes ahead of a reader that takes them in order: a hint, as the kernel's
readahead is, only deeper.

The kernel reads ahead of a sequential reader one window at a time, and only when the reader
asks. A reader that computes between its reads (a backup copying a base's entries span after
span) then waits for the disk at each window. Most disks hide it; the virtual disks this was
measured on, slow to give back bytes written a few seconds before, do not: a second backup
taken right after the first waited 0.3 s of its 1.5 s for the first's zip.

:func:`read_ahead` reads the file on a thread of its own, with large reads into one reused
buffer (the system call releases the GIL, and a few hundred of them need it only between
two), while the block runs; the reader then finds the bytes cached. The thread stays at most
:data:`WINDOW` bytes ahead of the position the reader reports (:meth:`ReadAhead.reached`), so
a reader that takes little of a large file does not have it read whole. It reads through a
descriptor of its own, changes nothing, and keeps nothing it reads: an error ends it quietly
(the reader's own reads report errors), and it is stopped and joined when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from bundler.fs.interrupts import joined, wait_for
from bundler.fs.threads import Thread, start_thread

CHUNK = 4 << 20
"""Bytes of one read: few reads, so the thread rarely waits for the GIL."""
WINDOW = 64 << 20
"""How far ahead of the reader the thread reads, at most."""


class ReadAhead:
    """The thread reading ``[start, end)`` of a file ahead of its reader, which reports the
    offset it has reached with :meth:`reached`. It owns ``fd``, closed exactly once: by
    :meth:`run` when it ends, or by :meth:`discard` when no thread ran it."""

    def __init__(self, fd: int, start: int, end: int, window: int = WINDOW) -> None:
        self._fd = fd
        self._at = start
        self._end = end
        self._window = window
        self._position = start
        self._stopped = False
        self._moved = threading.Event()
        """Set when the reader reports a position or the thread is stopped: what a thread a
        window ahead waits for, without waking meanwhile."""
        self._lock = threading.Lock()

    @property
    def read_to(self) -> int:
        """How far the thread has read."""
        return self._at

    def reached(self, offset: int) -> None:
        """The reader has read up to ``offset``: the thread may read a window past it."""
        self._position = offset
        if not self._moved.is_set():
            self._moved.set()

    def run(self) -> None:
        """Read until the end, an error or :meth:`stop`; then close the descriptor."""
        fd = self._take()
        if fd < 0:
            return
        try:
            buffer = bytearray(CHUNK)
            while self._at < self._end and not self._stopped:
                if self._at - self._position >= self._window:
                    self._moved.clear()
                    # looked at again once cleared: a report between the two is not missed
                    if self._at - self._position >= self._window and not self._stopped:
                        self._moved.wait()
                    continue
                count = min(CHUNK, self._end - self._at)
                done = os.preadv(fd, [memoryview(buffer)[:count]], self._at)
                if done <= 0:
                    break
                self._at += done
        except (OSError, MemoryError):
            pass  # a hint: the reader's own reads say what went wrong
        finally:
            os.close(fd)

    def _take(self) -> int:
        with self._lock:
            fd, self._fd = self._fd, -1
        return fd

    def discard(self) -> None:
        """Close the descriptor if no thread took it."""
        fd = self._take()
        if fd >= 0:
            os.close(fd)

    def stop(self) -> None:
        """Ask the thread to stop before its next read."""
        self._stopped = True
        self._moved.set()


@contextlib.contextmanager
def read_ahead(fd: int, start: int, end: int, window: int = WINDOW) -> Iterator[ReadAhead]:
    """While the block runs, a thread reads bytes ``start`` to ``end`` of the open file ``fd``
    ahead of the block's own reads (a window at most ahead of what it reports to the
    :class:`ReadAhead` it is given). Stopped and joined when the block ends, however it ends;
    where no thread can be had, the block runs without one."""
    ahead = ReadAhead(os.dup(fd), start, end, window)
    thread = Thread(ahead.run, name="bundler-readahead")
    try:
        with contextlib.suppress(RuntimeError):  # no thread to be had: the block reads alone
            start_thread(thread)
        yield ahead
    finally:
        ahead.stop()
        wait_for(joined(thread))
        ahead.discard()  # the descriptor of a thread that never ran
