"""A bundle's root folder and the small files at its root, opened and read without following a
link and never past a limit (03 §1): what verify reads before and beside its walk.

A file that is no file a bundle may hold there (a link, a hard link, not regular, too large)
is a finding, not an exception; the system's own failure (no descriptor left, an I/O error) is
raised, being none of the bundle's.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bundler.bundle import fragment as fragment_rules
from bundler.bundle.fragment import Problem
from bundler.errors import (
    Hostile,
    Malformed,
    NotABundle,
    NotFound,
    TooLarge,
    environment_failure,
    os_failure,
)
from bundler.rules import tomlcompat
from bundler.rules.names import escape_display
from bundler.rules.tomlcompat import toml_error_reason
from bundler.rules.units import human_size

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def open_bundle_root(path: Path) -> int:
    """Open the bundle folder itself without following a link (its ancestors are the user's)."""
    shown = escape_display(str(path))
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFound(f"{shown}: no such bundle folder", path=str(path)) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            if os.path.islink(path):
                message = f"{shown} is a symbolic link: verify the real folder"
            else:
                message = f"{shown} is not a folder: a bundle is a folder"
            raise NotABundle(message, path=str(path)) from None
        failed = environment_failure("read", shown, exc)
        if failed is not None:
            raise failed from None
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise os_failure(f"cannot read {shown} ({reason})", exc, path=str(path)) from None


class PastLimit(Exception):
    """A root file grew past its limit while it was read."""


def open_root_file(root_fd: int, name: str, limit: int) -> tuple[int | None, Problem | None]:
    """Open a regular file at the bundle root for reading: (fd, None), (None, None) if absent,
    (None, problem) when it is no file a bundle may hold there or is larger than ``limit``."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=root_fd)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, Problem(name, "a symbolic link (a bundle holds none)", Hostile)
        return None, cannot_read(name, exc)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            problem = Problem(name, "not a regular file", Hostile)
        elif st.st_nlink > 1:
            problem = Problem(name, "a hard link (a bundle holds none)", Hostile)
        elif st.st_size > limit:
            problem = Problem(name, f"larger than {human_size(limit)}", TooLarge)
        else:
            return fd, None
    except OSError as exc:
        problem = cannot_read(name, exc)
    os.close(fd)
    return None, problem


def read_chunks(fd: int, limit: int, size: int = 1 << 20) -> Iterator[bytes]:
    """The file's bytes from its start in pieces of ``size``; raises :class:`PastLimit` past
    ``limit`` and :class:`OSError` as the reads do."""
    offset = 0
    while chunk := os.pread(fd, size, offset):
        offset += len(chunk)
        if offset > limit:
            raise PastLimit
        yield chunk


def read_root_file(root_fd: int, name: str, limit: int) -> tuple[bytes | None, Problem | None]:
    """Read a small regular file at the bundle root: (bytes, None), (None, None) if absent."""
    fd, problem = open_root_file(root_fd, name, limit)
    if fd is None:
        return None, problem
    try:
        return b"".join(read_chunks(fd, limit)), None
    except PastLimit:
        return None, Problem(name, f"larger than {human_size(limit)}", TooLarge)
    except OSError as exc:
        return None, cannot_read(name, exc)
    finally:
        os.close(fd)


def cannot_read(name: str, exc: OSError) -> Problem:
    """The finding for a root file that cannot be read; the system's own failure (no
    descriptor left, an I/O error) is raised instead, being none of the bundle's."""
    failed = environment_failure("read", name, exc)
    if failed is not None:
        raise failed from exc
    return Problem(name, f"cannot be read ({os.strerror(exc.errno or errno.EIO)})")


def parse_toml(name: str, raw: bytes) -> tuple[dict[str, Any] | None, Problem | None]:
    """Parse TOML bytes after the raw-text nesting bound (03 §1: checked before parsing)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, Problem(name, "not valid UTF-8", Malformed)
    depth = fragment_rules.nesting_depth(text)
    if depth > fragment_rules.MAX_NESTING:
        return None, Problem(
            name, f"nested {depth} levels deep (at most {fragment_rules.MAX_NESTING})", TooLarge
        )
    try:
        return tomlcompat.loads(text), None
    except (tomlcompat.TOMLDecodeError, RecursionError) as exc:
        return None, Problem(
            name, f"not valid TOML ({escape_display(toml_error_reason(exc))})", Malformed
        )
