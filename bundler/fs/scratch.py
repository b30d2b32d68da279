"""Private scratch folders that say whether their owner is alive.

A scratch folder is ``<prefix><token>/`` (mode 0700) in a parent folder, with an exclusive
``flock`` held on the folder itself for as long as it is in use. It is removed when the block
that made it ends, by an exception or a signal the CLI turns into one as well; only a kill
leaves it behind, unlocked, and :func:`dead_scratch` then finds it. Whoever clears the dead ones
(the next run, ``recover``) takes the lock itself first, so it never removes a living one; a
maker that loses that race to a cleaner (its folder gone, or locked by the cleaner, before it
could lock it) simply makes another.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import tempfile
from collections.abc import Iterator

from bundler.fs.durable import fsync_dir, locked_by_another, open_dir, random_token
from bundler.fs.interrupts import signals_deferred
from bundler.fs.safefs import rmtree_at, same_object
from bundler.rules import hints
from bundler.rules.names import escape_display

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ATTEMPTS = 5

ARCHIVE_PREFIX = "bundler-archive-"
"""The temporary folder's scratch of an archive written or read: the bundle an export to
``FILE.tar`` builds before packing it, the metadata ``bundle pull REF FILE.tar`` unpacks, and
the archive or pulled copy that ``bundle verify|inspect|secrets-template|push`` and ``agents
import`` read, and a data-home backup's parts on their way to or from a registry."""
VERIFY_PREFIX = "bundler-verify-"
"""The temporary folder's scratch where ``bundle verify`` opens a copy of a bundle's memory."""
CHECK_PREFIX = ".bundler-check-"
"""Where ``home verify-backup`` and ``home restore`` check a copy of a backup's ``chat.db``."""

# Every kind of scratch folder bundler makes in the temporary folder, with the commands that
# make it: one list, so that what clears dead ones (``recover``) and what names them
# (``doctor``, ``recover --scan``) cannot miss a kind or word its owner differently.
TEMPORARY_KINDS: tuple[tuple[str, str], ...] = (
    (
        ARCHIVE_PREFIX,
        "'bundle pull REF FILE.tar', or a command reading an archive or an oci:// reference "
        "('bundle verify', 'inspect', 'secrets-template', 'push', 'agents import', "
        "'home backup --to oci://', 'home restore oci://')",
    ),
    (VERIFY_PREFIX, "'bundle verify', 'inspect' or 'agents import' of a bundle with memory"),
    (CHECK_PREFIX, "'home verify-backup' or 'home restore'"),
)


def temp_root() -> str:
    """The system's temporary folder (``$TMPDIR``, else ``/tmp``): :func:`tempfile.gettempdir`,
    whose first call probes the folder with a file of its own, made and removed with no
    clean-up for an interrupt between; so it is asked with the signals held."""
    with signals_deferred():
        return tempfile.gettempdir()


def _make_locked(parent_fd: int, prefix: str) -> tuple[str, int]:
    for _ in range(_ATTEMPTS):
        name = f"{prefix}{random_token()}"
        os.mkdir(name, 0o700, dir_fd=parent_fd)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            continue  # a cleaner took it for dead
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if same_object(os.fstat(fd), os.stat(name, dir_fd=parent_fd, follow_symlinks=False)):
                return name, fd
        except (BlockingIOError, FileNotFoundError):
            pass
        os.close(fd)
    raise OSError(errno.EAGAIN, "could not make a private scratch folder (others kept removing it)")


_left: list[str] = []


@contextlib.contextmanager
def scratch_folder(
    parent_fd: int, prefix: str, *, where: str, durable: bool = False, fix: str = ""
) -> Iterator[tuple[str, int]]:
    """Make ``<prefix><token>/`` (0700) in ``parent_fd`` (the folder ``where``, named in
    messages), lock it, yield (name, its descriptor); remove it on exit however the block ends.
    ``durable``: fsync the parent after the creation, so a crash cannot lose the entry that
    tells a later recovery it is there.

    A removal that fails (no descriptor left, an I/O error) raises nothing: the block's own
    outcome, a result or an error, is what the command reports, and the folder, unlocked once
    this process ends, is dead scratch the next maker clears. What was left is noted for the
    command line to warn about (:func:`take_left_behind`), with ``fix``, a command to paste that
    removes it, when there is one.
    """
    made: tuple[str, int] | None = None
    try:
        # the signals are held while the folder is made and while it is removed: an interrupt
        # taken between its mkdir and this block's knowing of it, or halfway through its
        # removal, would leave it behind an exit that says it cleaned up
        with signals_deferred():
            made = _make_locked(parent_fd, prefix)
        if durable:
            fsync_dir(parent_fd)
        yield made
    finally:
        if made is not None:
            with signals_deferred():
                try:
                    rmtree_at(parent_fd, made[0])
                except OSError as exc:
                    _note_left(os.path.join(where, made[0]), exc, fix)
                finally:
                    os.close(made[1])


def _note_left(path: str, exc: OSError, fix: str) -> None:
    reason = exc.strerror or str(exc)
    sentence = f"could not remove the scratch folder {escape_display(path)} ({reason})"
    if fix:
        _left.append(hints.Hinted(sentence, fix))
    else:
        _left.append(f"{sentence}: the next run that makes one there removes it")


def take_left_behind() -> list[str]:
    """The warnings for scratch folders this process could not remove (each once: they are
    forgotten as they are taken)."""
    taken = list(_left)
    _left.clear()
    return taken


def _candidates(parent_fd: int, prefix: str) -> list[str]:
    pattern = re.compile(re.escape(prefix) + r"[A-Za-z0-9]{12}")
    with os.scandir(parent_fd) as entries:
        return sorted(entry.name for entry in entries if pattern.fullmatch(entry.name))


def dead_scratch(parent_fd: int, prefix: str) -> list[str]:
    """The names of this user's ``<prefix><token>`` folders in ``parent_fd`` that no living
    process holds locked. Changes nothing."""
    dead: list[str] = []
    for name in _candidates(parent_fd, prefix):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid == os.geteuid() and not locked_by_another(fd):
                dead.append(name)
        finally:
            os.close(fd)
    return dead


def clear_dead_scratch(parent_fd: int, prefix: str) -> list[str]:
    """Remove this user's ``<prefix><token>`` folders in ``parent_fd`` that no living process
    holds, each while holding its lock; returns the names removed."""
    removed: list[str] = []
    for name in _candidates(parent_fd, prefix):
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # alive
            with contextlib.suppress(OSError):
                rmtree_at(parent_fd, name)
                removed.append(name)
        finally:
            os.close(fd)
    return removed


def dead_temporary_scratch(*, remove: bool = False) -> list[tuple[str, str]]:
    """(path, the commands that make its kind) of each of this user's scratch folders in the
    temporary folder that no living process holds (:data:`TEMPORARY_KINDS`), the same rule as
    :func:`dead_scratch`; with ``remove``, each is removed as :func:`clear_dead_scratch` does
    (under its lock, so never a living run's) and only those removed are returned."""
    where = temp_root()
    try:
        parent_fd = open_dir(where, follow=True)
    except OSError:
        return []  # no temporary folder: nothing can have been left in it
    try:
        return [
            (os.path.join(where, name), makers)
            for prefix, makers in TEMPORARY_KINDS
            for name in (clear_dead_scratch if remove else dead_scratch)(parent_fd, prefix)
        ]
    finally:
        os.close(parent_fd)
