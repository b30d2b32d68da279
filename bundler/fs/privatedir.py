"""A user's private folders for bundler (state, cache): where they are, as ``platformdirs``
says for each platform, and how they are made, as the XDG rules say: 0700, with their parents."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

APP_NAME = "bundler"


def user_cache_folder() -> Path:
    """bundler's folder in the user's cache (``platformdirs.user_cache_dir``: by default
    ``$XDG_CACHE_HOME/bundler`` or ``~/.cache/bundler``), not created."""
    # here, not at the top: only a pull and a backup need it, and start-up is counted
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


def user_state_folder() -> Path:
    """bundler's folder in the user's state (``platformdirs.user_state_dir``: by default
    ``$XDG_STATE_HOME/bundler`` or ``~/.local/state/bundler``), not created."""
    # here, not at the top: only an export and doctor need it, and start-up is counted
    import platformdirs

    return Path(platformdirs.user_state_dir(APP_NAME))


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
