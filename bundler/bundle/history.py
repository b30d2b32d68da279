"""The install's record of recent export destinations, so ``doctor`` can find what an
interrupted export left beside a bundle folder it has no other way to know about.

``<install>/data/state/export-destinations.json``: ``{"format": 1, "destinations": [...]}``,
absolute paths, newest last, at most :data:`KEEP`. It is replaced atomically and durably
(:func:`bundler.fs.durable.atomic_write`) under an ``flock`` on the state folder, so two exports
at once cannot lose each other's entry. It names folders only: never a value from the config.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from bundler.fs import durable
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules import layout

__all__ = ["KEEP", "RECORD_NAME", "recent_destinations", "record_destination"]

RECORD_NAME = "export-destinations.json"
KEEP = 16
_MAX_BYTES = 1 << 20


def _parse(raw: bytes) -> list[str]:
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # nested past the parser's depth
        return []
    listed = document.get("destinations") if isinstance(document, dict) else None
    if not isinstance(listed, list):
        return []
    # a destination is a path with a last name (what export admits): "/" or "/a/.." is none
    return [
        item
        for item in listed
        if isinstance(item, str)
        and os.path.isabs(item)
        and os.path.basename(item) not in ("", ".", "..")
    ][-KEEP:]


def _read(state_fd: int) -> list[str]:
    # a record that is not a small regular file is none: it only helps doctor find leftovers
    try:
        return _parse(read_small_file(RECORD_NAME, _MAX_BYTES, dir_fd=state_fd, follow=False))
    except (OSError, NotSmallFile):
        return []


def recent_destinations(install_root: Path) -> list[str]:
    """The recorded destinations, oldest first; empty when there is no readable record."""
    try:
        state_fd = durable.open_dir(layout.state_dir(install_root), follow=False)
    except OSError:
        return []
    try:
        return _read(state_fd)
    finally:
        os.close(state_fd)


def record_destination(install_root: Path, dest: str) -> None:
    """Add ``dest`` (absolute) as the newest entry, keeping the last :data:`KEEP`.

    Durable when it returns. Raises ``OSError`` when the state folder cannot be made or
    written (the caller words it as a warning: the export itself does not depend on it).
    """
    state = layout.state_dir(install_root)
    os.makedirs(state, mode=0o700, exist_ok=True)
    state_fd = durable.open_dir(state, follow=False)
    try:
        fcntl.flock(state_fd, fcntl.LOCK_EX)
        listed = [item for item in _read(state_fd) if item != dest] + [dest]
        document = {"format": 1, "destinations": listed[-KEEP:]}
        durable.atomic_write(state_fd, RECORD_NAME, json.dumps(document, indent=1).encode())
    finally:
        os.close(state_fd)
