"""Reading an open file to its end for its XXH3-128 digest, the digest the checksums use.

Apart from :mod:`bundler.fs.copytree` so that the readers (``bundle verify``, import, backups)
start without the copier.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

import xxhash

from bundler.errors import Refused, environment_failure, os_failure

BUFFER_SIZE = 1 << 20

Observer = Callable[[str, memoryview], None]


def digest_fd(
    fd: int,
    *,
    relpath: str = "",
    observer: Observer | None = None,
    buffer: bytearray | None = None,
    expected: int | None = None,
) -> tuple[int, str]:
    """Read an open file from its current offset to the end: (byte count, XXH3-128 hex).

    ``observer(relpath, chunk)`` sees every chunk. Read errors raise :class:`Refused`. With
    ``expected`` (the size ``fstat`` gave), a short read that reaches it ends the file without
    one more read to see end-of-file, as the copier does: one system call less per small file.
    """
    buf = buffer if buffer is not None else bytearray(BUFFER_SIZE)
    view = memoryview(buf)
    hasher = xxhash.xxh3_128()
    size = 0
    while True:
        count = read_into(fd, buf, relpath)
        if not count:
            return size, hasher.hexdigest()
        chunk = view[:count]
        hasher.update(chunk)
        if observer is not None:
            observer(relpath, chunk)
        size += count
        if size == expected and count < len(buf):
            return size, hasher.hexdigest()


def read_into(fd: int, buf: bytearray, relpath: str) -> int:
    """``readv`` of ``fd`` into ``buf``: the byte count, 0 at end of file; a failure is
    :class:`Refused` naming ``relpath``."""
    try:
        return os.readv(fd, [buf])
    except OSError as exc:
        raise read_failure(relpath, exc) from exc


def failure(verb: str, relpath: str, exc: OSError) -> Refused:
    """``cannot VERB RELPATH (reason): hint``, the hint fitting the errno (a full disk or not;
    an :class:`~bundler.errors.EnvironmentFailure` when the system, not the file, failed)."""
    failed = environment_failure(verb, relpath, exc)
    if failed is not None:
        return failed
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    hint = "free some space" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "check the disk"
    return os_failure(
        f"cannot {verb} {relpath} ({reason}): {hint} and try again", exc, path=relpath
    )


def read_failure(relpath: str, exc: OSError) -> Refused:
    """:func:`failure` of a read."""
    return failure("read", relpath, exc)
