"""A user's private folder (state, cache) made as the XDG rules say: 0700, with its parents."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path


def make_private(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each 0700 (the XDG rule for a state or cache
    folder).

    Nothing is created below a folder of another user: with ``sudo`` keeping the caller's
    ``HOME``, root would otherwise leave a folder there that the user can no longer write.
    """
    missing: list[Path] = []
    existing = folder
    while not os.path.lexists(existing):
        missing.append(existing)
        existing = existing.parent
    if os.stat(existing).st_uid != os.geteuid():
        if missing:
            raise PermissionError(errno.EPERM, "the folder belongs to another user", str(existing))
        return
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another run made it meanwhile
            os.mkdir(path, 0o700)
