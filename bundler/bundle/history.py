"""The user's record of recent export destinations, so ``doctor`` can find what an interrupted
export left beside a bundle folder it has no other way to know about.

``<state>/export-destinations.json``, where ``<state>`` is the user's state folder for bundler
(:func:`state_folder`: ``$XDG_STATE_HOME/bundler``, by default ``~/.local/state/bundler``; on
macOS ``~/Library/Application Support/bundler``): ``{"format": 1, "destinations": [...]}``,
absolute paths, newest last, at most :data:`KEEP`. It lives with the user, not in the install,
because export is read-only on the install (02): an install the exporting user cannot write is
exported all the same. So the record is per user: ``doctor`` run as another user (``sudo``, a
service account) reads that user's record.

It is replaced atomically and durably (:func:`bundler.fs.durable.atomic_write`) under an
``flock`` on the state folder, so two exports at once cannot lose each other's entry. It names
folders only, never a value from the config. Older versions kept the record in
``<install>/data/state/``; :func:`recent_destinations` still reads that one, and nothing
writes it again.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path

from bundler.fs import durable
from bundler.fs.privatedir import make_private, user_state_folder
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules import layout

__all__ = [
    "KEEP",
    "RECORD_NAME",
    "make_private",
    "recent_destinations",
    "record_destination",
    "state_folder",
]

RECORD_NAME = "export-destinations.json"
KEEP = 16
_MAX_BYTES = 1 << 20


def state_folder() -> Path:
    """The user's state folder for bundler, not created."""
    return user_state_folder()


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


def _read_in(folder: Path) -> list[str]:
    try:
        state_fd = durable.open_dir(folder, follow=True)
    except OSError:
        return []
    try:
        return _read(state_fd)
    finally:
        os.close(state_fd)


def recent_destinations(install_root: Path | None = None) -> list[str]:
    """The destinations in this user's record, oldest first, then those an older version
    recorded in ``install_root`` (read, never written), each once; empty when neither record
    can be read."""
    found = _read_in(state_folder())
    if install_root is not None:
        found += _read_in(layout.state_dir(install_root))
    return list(dict.fromkeys(found))


def record_destination(dest: str) -> None:
    """Add ``dest`` (absolute) as the newest entry of this user's record, keeping the last
    :data:`KEEP`; the state folder is created (0700) if missing.

    Durable when it returns. Raises ``OSError`` when the state folder cannot be made or
    written, or belongs to another user (the caller goes on: the export does not depend on it).
    """
    folder = state_folder()
    make_private(folder)
    state_fd = durable.open_dir(folder, follow=True)
    try:
        if os.fstat(state_fd).st_uid != os.geteuid():
            raise PermissionError(errno.EPERM, "the folder belongs to another user", str(folder))
        fcntl.flock(state_fd, fcntl.LOCK_EX)
        listed = [item for item in _read(state_fd) if item != dest] + [dest]
        document = {"format": 1, "destinations": listed[-KEEP:]}
        durable.atomic_write(state_fd, RECORD_NAME, json.dumps(document, indent=1).encode())
    finally:
        os.close(state_fd)
