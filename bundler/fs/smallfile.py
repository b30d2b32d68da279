"""Reading a small file named by the user or left by a crash: never blocking, never endless.

A path may name a FIFO (an ``open`` that blocks until a writer comes, forever), ``/dev/zero``
(a read without end), or a regular file far larger than the format allows. So the file is
opened with ``O_NONBLOCK`` (a FIFO opens at once) and ``O_NOCTTY``, must then be a regular
file (or, where the user names it, a pipe: see ``streams``), and is read to at most ``limit``
bytes; anything else is :class:`NotSmallFile`, whose reason completes a sentence about the
file. ``OSError`` of the open or the read is left to
the caller, which says what it was reading.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from bundler.rules.units import human_size

_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class NotSmallFile(Exception):
    """The file is not a regular file of at most the limit; ``reason`` says which, and
    ``too_large`` whether it was the size (the content is wrong, not the kind of file)."""

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_large = too_large


def read_small_file(
    path: str | os.PathLike[str],
    limit: int,
    *,
    dir_fd: int | None = None,
    follow: bool = True,
    streams: bool = False,
    check: Callable[[os.stat_result], None] | None = None,
) -> bytes:
    """The bytes of the regular file ``path`` (relative to ``dir_fd`` when given; a symbolic
    link is followed only with ``follow``), at most ``limit`` of them.

    With ``streams``, for a file the user names, a pipe or a character device is read too, as
    it comes and to the same bound: ``--exclude-from <(git ls-files …)`` is a FIFO, and reading
    one waits for its writer, as any program's would.

    ``check`` is given the status of the file that was opened, before a byte is read, and may
    raise to refuse it (a secrets file others can read is refused unread).
    """
    flags = _FLAGS | (0 if follow else os.O_NOFOLLOW)
    if streams and _is_stream(os.stat(path, dir_fd=dir_fd, follow_symlinks=follow)):
        flags &= ~os.O_NONBLOCK
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) or (streams and _is_stream(st))):
            raise NotSmallFile("is not a regular file" + (" nor a pipe" if streams else ""))
        if check is not None:
            check(st)
        too_large = NotSmallFile(f"is larger than {human_size(limit)}", too_large=True)
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise too_large
        parts: list[bytes] = []
        held = 0
        # to the end, not to st_size: the file may grow while it is read
        while chunk := os.read(fd, min(1 << 20, limit + 1 - held)):
            parts.append(chunk)
            held += len(chunk)
            if held > limit:
                raise too_large
        return b"".join(parts)
    finally:
        os.close(fd)


def _is_stream(st: os.stat_result) -> bool:
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)
