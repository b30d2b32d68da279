"""Asking the disk, ahead of a walk, for what the walk will ask it one piece at a time.

A backup that reads few files still stats every file of the trees, in order, and copies the
base zip from front to back. From a cold cache each of those stats waits for its inode to come
off the disk while the processor idles, and the processor's work per file waits in turn for
the next stat. :func:`warming` runs a thread beside the walk that stats every entry first and
asks the kernel to read the base zip ahead (``POSIX_FADV_WILLNEED``): the disk then works while
the main thread does, and the walk finds what it needs in the cache.

Nothing this thread sees is kept or trusted: it only fills the kernel's caches, so a folder
swapped for a link, a file that changes or an error here changes nothing the walk decides (the
walk checks every file as it was). It still walks by descriptor, never following a link, so it
reads no metadata outside the trees. It stops when the block ends, and any ``OSError`` ends it
early: warming is a hint, never a failure.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence

from bundler.fs.interrupts import joined, start_thread, wait_for

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _stat_tree(parent_fd: int, name: str, stop: threading.Event) -> None:
    """Stat every entry below ``name`` of ``parent_fd``, depth first, until ``stop`` is set."""
    pending = [os.open(name, _DIR_FLAGS, dir_fd=parent_fd)]
    try:
        while pending and not stop.is_set():
            fd = pending.pop()
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if stop.is_set():
                            return
                        if entry.is_dir(follow_symlinks=False):
                            with contextlib.suppress(OSError):
                                pending.append(os.open(entry.name, _DIR_FLAGS, dir_fd=fd))
                        else:
                            entry.stat(follow_symlinks=False)
            finally:
                os.close(fd)
    finally:
        for fd in pending:
            os.close(fd)


def _read_ahead(path: str) -> None:
    """Have the kernel read the file at ``path`` into the page cache, in the background."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def _warm(root_fd: int, trees: Sequence[str], ahead: str | None, stop: threading.Event) -> None:
    if ahead is not None:
        with contextlib.suppress(OSError):
            _read_ahead(ahead)
    for tree in trees:
        with contextlib.suppress(OSError):
            _stat_tree(root_fd, tree, stop)


@contextlib.contextmanager
def warming(
    root_fd: int, trees: Sequence[str], ahead: str | None = None
) -> Iterator[threading.Thread]:
    """Warm the caches for the block: stat every entry of the folders ``trees`` of ``root_fd``
    (not following links) and have the kernel read the file at the path ``ahead`` into the page
    cache, on a thread of its own that the end of the block stops and joins (the block is given
    the thread: joining it waits for the warming to finish). ``root_fd`` stays the caller's,
    open for the whole block."""
    stop = threading.Event()
    thread = threading.Thread(
        target=_warm, args=(root_fd, trees, ahead, stop), name="bundler-warm", daemon=True
    )
    try:
        start_thread(thread)
        yield thread
    finally:
        stop.set()
        if thread.ident is not None:
            wait_for(joined(thread))
