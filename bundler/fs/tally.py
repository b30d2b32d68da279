"""Counting a tree's regular files and bytes before it is copied, for a progress bar's totals.

Only an estimate: it reads names and ``lstat`` results (the folders a copy would read anyway,
so the copy then finds them cached), follows no link, and counts nothing it cannot read. The
copy that follows applies its own rules (skips, exclusions); a bar whose estimate was low
grows its total. It is called only when someone watches the progress.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterable
from pathlib import Path


def tally(roots: Iterable[Path], *, skip_top: Collection[str] = ()) -> tuple[int, int]:
    """Regular files and their bytes below each of ``roots`` (a missing root counts nothing).

    ``skip_top`` names entries directly below a root that are not counted (a copy leaves them).
    """
    files = nbytes = 0
    for root in roots:
        pending = [(os.fspath(root), True)]
        while pending:
            folder, top = pending.pop()
            try:
                with os.scandir(folder) as listing:
                    for entry in listing:
                        if top and entry.name in skip_top:
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISDIR(st.st_mode):
                            pending.append((entry.path, False))
                        elif stat.S_ISREG(st.st_mode):
                            files += 1
                            nbytes += st.st_size
            except OSError:
                continue
    return files, nbytes
