"""Whether a BUNDLE argument is read as an archive or as a bundle folder.

Apart from :mod:`bundler.bundle.archive` so that the commands taking either (``bundle verify``,
``inspect``, ``secrets-template``, ``agents import``) ask it without loading the archive
reader, writer and publisher, which only an archive needs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def is_archive(path: Path) -> bool:
    """True when ``path`` names something to read as an archive: anything but a folder (a
    missing path is left to the folder reader, which says it does not exist)."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False
