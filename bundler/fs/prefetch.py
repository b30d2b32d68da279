"""Reading a tree's metadata ahead of a walk that needs it: a hint, as readahead is for data.

A walk stats every entry it visits. When the inodes are not cached, each stat waits for the
disk, one after another, while the second core idles. :func:`read_metadata_ahead` starts a
helper process that walks the same subtrees first, in the same order, stat-ing every entry, so
the kernel reads the inodes while this process does other work; the walk then finds them
cached. The helper is a process, not a thread: a thread needs the GIL between two stats, and
gets it about once per switch interval (5 ms) while this process computes.

The helper only reads what the walk reads, less: it lists folders and stats their entries, and
opens nothing but folders, each with ``O_NOFOLLOW`` below the folder handed to it by
descriptor, never a link, never a folder on another device, never deeper than the walk may go.
It changes nothing, and what it finds is thrown away: it decides nothing. It runs this file as
a script of the standard library alone (``python -I -S``: no ``bundler`` import, no site, no
environment), is killed and reaped when the caller is done, and one that cannot start costs
only the time it would have saved.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
from collections.abc import Iterator, Sequence

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_HANDED_FD = 3
"""Where the helper finds the folder it walks (4 when the caller's descriptor is 3 itself)."""


@contextlib.contextmanager
def read_metadata_ahead(dir_fd: int, names: Sequence[str], max_depth: int) -> Iterator[None]:
    """While the block runs, a helper process stats every entry of the subtrees ``names`` of
    the open folder ``dir_fd``, down to ``max_depth`` components, in the order a sorted walk
    visits them. The helper is killed and reaped when the block ends, however it ends."""
    helper = _start_helper(dir_fd, names, max_depth)
    try:
        yield
    finally:
        if helper is not None:
            _stop_helper(*helper)


def _start_helper(
    dir_fd: int, names: Sequence[str], max_depth: int
) -> tuple[int, int | None] | None:
    """The helper's process id and a pidfd on it (None where the kernel has none), or None
    when it cannot be started here."""
    executable = sys.executable
    if not executable or getattr(sys, "frozen", False) or not __file__.endswith(".py"):
        return None  # no interpreter to run this file with
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
        # its children reaped by the kernel, this process could not tell its helper's pid
        # from another process's that took it over: no helper
        return None
    handed = _HANDED_FD if dir_fd != _HANDED_FD else _HANDED_FD + 1
    argv = [executable, "-I", "-S", __file__, str(handed), str(max_depth), *names]
    actions = [
        # first, while the caller's descriptor may still be any of 0-2
        (os.POSIX_SPAWN_DUP2, dir_fd, handed),
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    try:
        pid = os.posix_spawn(executable, argv, {}, file_actions=actions)
    except (OSError, ValueError):
        return None
    # the helper, even should another thread of this process reap it (os.wait); Linux only
    pidfd_open = getattr(os, "pidfd_open", None)
    try:
        pidfd: int | None = None if pidfd_open is None else pidfd_open(pid)
    except OSError:
        pidfd = None
    return pid, pidfd


def _stop_helper(pid: int, pidfd: int | None) -> None:
    """Kill the helper, finished or not, and reap it: it leaves no zombie."""
    try:
        with contextlib.suppress(ProcessLookupError):
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            else:
                # not reaped yet, a finished helper's pid is still its own
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # reaped elsewhere
            os.waitpid(pid, 0)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def stat_tree(dir_fd: int, names: Sequence[str], max_depth: int) -> int:
    """Stat every entry of the subtrees ``names`` of ``dir_fd`` (the helper's work), folders
    before their contents and names in byte order, as the walk visits them; how many entries
    were stat-ed. Links are stat-ed, not followed; a folder on another device, deeper than
    ``max_depth`` or that cannot be read is left unread."""
    root_dev = os.fstat(dir_fd).st_dev
    count = 0
    # each level: its descriptor, its names still to visit (last first), its depth
    stack: list[tuple[int, list[str], int]] = [(dir_fd, sorted(names, key=os.fsencode)[::-1], 0)]
    try:
        while stack:
            fd, pending, depth = stack[-1]
            if not pending:
                stack.pop()
                if fd != dir_fd:
                    os.close(fd)
                continue
            name = pending.pop()
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            count += 1
            if not stat.S_ISDIR(st.st_mode) or st.st_dev != root_dev or depth >= max_depth:
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                listed = sorted(os.listdir(child), key=os.fsencode)[::-1]
            except OSError:
                os.close(child)
                continue
            stack.append((child, listed, depth + 1))
    finally:
        for fd, _pending, _depth in stack:
            if fd != dir_fd:
                os.close(fd)
    return count


def _main(argv: Sequence[str]) -> int:
    stat_tree(int(argv[0]), argv[2:], int(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
