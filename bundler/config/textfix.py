"""Keeping the text of ``config.toml`` where the user had it, around what tomlkit writes.

tomlkit counts the comment lines after a table's last entry as that table's, though they stand
above the next header and head what follows (``# --- model providers ---``): removing the
table took them, and a key appended to it went below them. It also writes the lines it adds
with LF alone. These functions mend the text tomlkit wrote; what the text *means* is checked
afterwards (:func:`bundler.config.store`'s edit check), so a mend can only move comments and
blank lines, never change a value.

Each edit adds or removes one run of text. Where the characters around the run repeat
(``[agents.ops]`` removed before ``[agents.other]``), the run can be placed at several points
that all give the same result; :func:`_splice_points` lists them, rightmost first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tomlkit.items import Comment, Table, Whitespace

MAX_SLIDE = 1024
"""How far left a run's place is looked for: a header's length or so is what it takes."""


def trailing_comments(item: Any) -> str:
    """The comment lines (and blank lines among them) after the last entry of ``item``, a
    ``[table]`` (its last sub-table's, when it ends with one); ``""`` without a comment."""
    if not isinstance(item, Table):
        return ""
    tail: list[str] = []
    for key, entry in reversed(item.value.body):
        if key is None and isinstance(entry, (Comment, Whitespace)):
            tail.insert(0, entry.as_string())
            continue
        if isinstance(entry, Table):  # a sub-table is written last: its own end is the table's
            tail.insert(0, trailing_comments(entry))
        break
    text = "".join(tail)
    return text if "#" in text else ""


def _splice_points(longer: str, shorter: str) -> Iterator[int]:
    """Every ``at`` where ``longer`` is ``shorter`` with one run inserted at ``at``, rightmost
    first (at most :data:`MAX_SLIDE` of them); none when ``longer`` is not that."""
    size = len(longer) - len(shorter)
    if size <= 0:
        return
    at = 0
    while at < len(shorter) and longer[at] == shorter[at]:
        at += 1
    if longer[at + size :] != shorter[at:]:
        return
    for _step in range(MAX_SLIDE):
        yield at
        if at == 0 or longer[at - 1] != longer[at - 1 + size]:
            return
        at -= 1


def keep_heading(old: str, new: str, heading: str) -> str:
    """``new`` (``old`` with a table's text removed) with ``heading``, the comment lines that
    ended it, put back where they stood: right before what followed the removed text. ``new`` as
    it is when the removal is not one run of ``old`` ending with them."""
    removed = len(old) - len(new)
    if heading and removed > len(heading):
        for at in _splice_points(old, new):
            if old[at : at + removed].endswith(heading):
                return new[:at] + heading + new[at:]
    return new


def above_heading(old: str, new: str, heading: str) -> str:
    """``new`` (``old`` with a key's line inserted) with that line moved above ``heading``, the
    comment lines that ended the table it was appended to; ``new`` as it is when the line does
    not follow them."""
    if not heading:
        return new
    added = len(new) - len(old)
    # tomlkit may put the new line above the heading's last blank line: match without it
    core = heading.rstrip("\n") + "\n"
    for at in _splice_points(new, old):
        if old[:at].endswith(core):
            start = at - len(core)
            return old[:start] + new[at : at + added] + core + old[at:]
    return new


def line_endings_like(old: str, new: str) -> str:
    """``new`` with CRLF line ends where ``old`` has only those: tomlkit writes the lines it adds
    with LF alone."""
    if "\r\n" not in old or old.count("\n") != old.count("\r\n"):
        return new
    return re.sub(r"(?<!\r)\n", "\r\n", new)
