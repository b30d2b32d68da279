"""The export's exclusions, read and applied: ``--exclude``, ``--exclude-from``, ``.bundlerignore``.

What a pattern means is :mod:`bundler.rules.exclusions`; this module reads the pattern files
and turns a match into one ``dropped`` row (reason ``private_data``: the user chose to keep it
private). The walk does not enter an excluded folder, so it is one row, and nothing in it is
copied or swept: a secret in an excluded file does not refuse the export, since it does not
travel.

Order, last match wins: the workspace's ``.bundlerignore``, then each ``--exclude-from`` file,
then each ``--exclude``, so the command line can override the file the workspace carries.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from bundler.bundle.closure import PRIVATE_DATA
from bundler.bundle.manifest import Dropped
from bundler.errors import UnsuitablePath, os_failure
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules.exclusions import (
    IGNORE_FILE,
    MAX_PATTERN_FILE_BYTES,
    Exclusions,
    Pattern,
    parse_options,
    parse_text,
)
from bundler.rules.names import escape_display

WORKSPACE_IGNORE = f"workspace/{IGNORE_FILE}"


def command_line_patterns(exclude: Sequence[str], exclude_from: Sequence[Path]) -> list[Pattern]:
    """The patterns of every ``--exclude-from`` file, in order, then of every ``--exclude``.

    Read before anything is created, so a wrong file fails the export at once. Raises
    :class:`Refused` for a file that cannot be read, :class:`~bundler.errors.InvalidInput`
    naming file and line for an invalid pattern, a usage error for an invalid ``--exclude``.
    """
    patterns: list[Pattern] = []
    for path in exclude_from:
        shown = escape_display(os.fspath(path))
        try:
            data = read_small_file(path, MAX_PATTERN_FILE_BYTES, streams=True)
        except NotSmallFile as why:
            raise UnsuitablePath(
                f"--exclude-from {shown} {why.reason}; name a short file of patterns", path=shown
            ) from None
        except OSError as err:
            raise os_failure(
                f"--exclude-from {shown}: cannot read it ({err.strerror}); "
                "name a readable pattern file",
                err,
                path=shown,
            ) from None
        patterns += parse_text(data, shown)
    return patterns + parse_options(exclude)


def workspace_patterns(root_fd: int, shown: str) -> list[Pattern]:
    """The patterns of ``.bundlerignore`` at the root of the open workspace, if there is one.

    Opened no-follow through the root's descriptor, like every workspace entry (02 §7.2): a
    link or a non-file there is refused rather than silently ignored, since the user expects it
    to keep something private. ``shown`` names the file in errors; rows name it
    ``workspace/.bundlerignore``, as the bundle does (no host path travels).
    """
    try:
        data = read_small_file(IGNORE_FILE, MAX_PATTERN_FILE_BYTES, dir_fd=root_fd, follow=False)
    except FileNotFoundError:
        return []
    except NotSmallFile as why:
        raise UnsuitablePath(
            f"{shown} {why.reason}: make it a short file of patterns and try again", path=shown
        ) from None
    except OSError as err:
        what = (
            "is a symbolic link" if err.errno == errno.ELOOP else f"cannot be read ({err.strerror})"
        )
        raise UnsuitablePath(
            f"{shown} {what}: make it a regular file of patterns and try again", path=shown
        ) from None
    return parse_text(data, WORKSPACE_IGNORE, shown=shown)


class PatternExclude:
    """A walk's ``exclude`` hook: ``inner`` first (root memory), then the patterns.

    Every path the patterns exclude becomes a ``dropped`` row in ``rows``, its name and the
    pattern passed through ``redact``/``withhold`` first: the manifest lists the row, and a
    name that holds a known secret must not reach it that way.
    """

    def __init__(
        self,
        inner: Callable[[str, os.stat_result], bool],
        exclusions: Exclusions,
        *,
        prefix: str,
        rows: list[Dropped],
        redact: Callable[[str], str],
        withhold: Callable[[str], str],
    ) -> None:
        self.inner = inner
        self.exclusions = exclusions
        self.prefix = prefix
        self.rows = rows
        self.redact = redact
        self.withhold = withhold

    def __call__(self, rel: str, st: os.stat_result) -> bool:
        """True for an entry that must not travel; records the patterns' choices."""
        if self.inner(rel, st):
            return True
        pattern = self.exclusions.match(rel, is_dir=stat.S_ISDIR(st.st_mode))
        if pattern is None:
            return False
        detail = f"excluded by the pattern {pattern.text!r} ({pattern.origin})"
        self.rows.append(
            Dropped(self.redact(self.prefix + rel), PRIVATE_DATA, self.withhold(detail))
        )
        return True
