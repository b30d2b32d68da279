"""Prose lines folded to the terminal's width; nothing else is touched.

Only a terminal gets folded lines: a pipe or a file gets each line whole, as scripts and
``grep`` expect. A line is folded at spaces only, so no word is ever cut: a path without a space
stays whole, and so does a path with spaces (up to where the message goes on after it). What the
user may paste is never folded: a line that is a command (it starts, after its indentation, with
``bundler `` or ``rm ``), a quoted span (``'bundler recover DIR'``) and the command after
``run: `` stay on one line, however long.
"""

from __future__ import annotations

import re
from typing import TextIO

from bundler.api import display

# a line that is itself a command to paste
_PASTE_STARTS = (f"{display.PROGRAM} ", "rm ")
# spans a fold must not cut: a quoted command or name, a command after "run: ", and a path
# (from a word starting "/", "~/" or "./" to where a message goes on: ": ", ", ", "; ", " (")
_KEEP_WHOLE = re.compile(
    r"'[^'\n]*'|(?<=run: )\S.*$|(?:(?<=\s)|^)(?:~|\.\.?)?/.*?(?=: |, |; | \(|\)|$)"
)
_LABEL = re.compile(r"^[a-z-]+: ")
# joins the words of a kept span while folding; output never holds it (escape_display shows C0)
_GLUE = "\x00"


def terminal_width(stream: TextIO) -> int | None:
    """The width to fold ``stream``'s lines to, or None when it is not a terminal."""
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    import shutil  # a terminal only: output to a pipe or a file never asks

    return shutil.get_terminal_size().columns


def fold(line: str, width: int | None) -> list[str]:
    """``line`` folded to ``width`` columns at spaces, continuation lines indented two more
    than the first; returned whole when ``width`` is None, when it fits, or when it is a
    command to paste."""
    body = line.lstrip(" ")
    indent = line[: len(line) - len(body)]
    if width is None or len(line) <= width or body.startswith(_PASTE_STARTS):
        return [line]
    import textwrap  # a line too long for a terminal only

    glued = _KEEP_WHOLE.sub(lambda span: span.group(0).replace(" ", _GLUE), body)
    # a label ("error:", "warning:") never stands alone above a long first word
    glued = _LABEL.sub(lambda label: label.group(0).replace(" ", _GLUE), glued, count=1)
    folded = textwrap.wrap(
        glued,
        width=max(width, 20),
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [part.replace(_GLUE, " ") for part in folded] or [line]


def fold_all(lines: list[str], stream: TextIO) -> list[str]:
    """Every line of ``lines`` folded for ``stream`` (see :func:`fold`)."""
    width = terminal_width(stream)
    return [part for line in lines for part in fold(line, width)]


__all__ = ["fold", "fold_all", "terminal_width"]
