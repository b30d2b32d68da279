"""What an export leaves beside its destination while it runs, by name, and finding it (02 §8.5).

Every leftover is named by its token: the staging folder ``.zeroclaw-export-<token>``, the
retired bundle ``.zeroclaw-export-old-<token>`` and the record ``.zeroclaw-export-<token>.target``
that names the destination. A run is over when its record's lock is free.

Only names and reading here, nothing that changes a folder: :mod:`bundler.bundle.publish` makes
these names and :mod:`bundler.bundle.recover` clears them, while ``bundle verify`` and ``doctor``
only list them, and start without the publisher.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import UsageError, os_failure
from bundler.fs.durable import held_by_another, open_dir
from bundler.rules import hints
from bundler.rules.names import escape_display

STAGING_PREFIX = ".zeroclaw-export-"
RETIRED_PREFIX = ".zeroclaw-export-old-"
RECORD_SUFFIX = ".target"

_TOKEN = r"[A-Za-z0-9]{12}"
STAGING_RE = re.compile(rf"\.zeroclaw-export-({_TOKEN})")
RETIRED_RE = re.compile(rf"\.zeroclaw-export-old-({_TOKEN})")
RECORD_RE = re.compile(rf"\.zeroclaw-export-({_TOKEN})\.target")


def labelled(label: str, display: str) -> str:
    """``display`` after its option's name (``--out X``), or alone when there is none."""
    return f"{label} {display}" if label else display


def staging_name(token: str) -> str:
    """``.zeroclaw-export-<token>``: where a bundle is built."""
    return f"{STAGING_PREFIX}{token}"


def retired_name(token: str) -> str:
    """``.zeroclaw-export-old-<token>``: where a replaced bundle waits to be removed."""
    return f"{RETIRED_PREFIX}{token}"


def record_name(token: str) -> str:
    """``.zeroclaw-export-<token>.target``: the one-line record naming the destination."""
    return f"{STAGING_PREFIX}{token}{RECORD_SUFFIX}"


def encode_record(dest_name: str) -> bytes:
    """The record's bytes: the destination's final component and one newline."""
    return os.fsencode(dest_name) + b"\n"


def decode_record(data: bytes) -> str | None:
    """The destination named by a record, or None when the record is torn or empty.

    Exactly one trailing newline is removed, so a name that itself ends in a newline survives.
    """
    if not data.endswith(b"\n") or len(data) < 2 or b"\0" in data or b"/" in data[:-1]:
        return None
    return os.fsdecode(data[:-1])


def split_out(out: str | os.PathLike[str], label: str = "--out") -> tuple[str, str]:
    """(absolute parent path as given, final component), refusing ``.``, ``..`` and the root."""
    raw = os.fspath(out)
    if not raw:
        raise UsageError(f"{label or 'the destination'} is empty: name the bundle to create")
    trimmed = raw.rstrip("/")
    name = os.path.basename(trimmed)
    if name in ("", ".", ".."):
        raise UsageError(
            f"{labelled(label, escape_display(raw))}: the last component must name a new "
            "folder or file, not '.', '..' or '/'",
            path=raw,
        )
    parent = os.path.dirname(os.path.abspath(trimmed))
    return parent, name


@dataclass(frozen=True)
class Leftover:
    """One export leftover among a folder's children (02 §8.5)."""

    name: str
    kind: str  # "staging", "retired" or "record"
    token: str
    target: str | None  # destination named by the token's record; None without a readable record


def find_leftovers(dir_fd: int) -> list[Leftover]:
    """Every staging folder, retired folder and record among the children of ``dir_fd``, by name."""
    found: list[tuple[str, str, str]] = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            for kind, pattern in (
                ("record", RECORD_RE),
                ("retired", RETIRED_RE),
                ("staging", STAGING_RE),
            ):
                match = pattern.fullmatch(entry.name)
                if match:
                    found.append((entry.name, kind, match.group(1)))
                    break
    targets = {token: read_record(dir_fd, record_name(token)) for _, _, token in found}
    return [Leftover(name, kind, token, targets[token]) for name, kind, token in sorted(found)]


def read_record(dir_fd: int, name: str) -> str | None:
    """The destination the record ``name`` below ``dir_fd`` names, or None when it is missing,
    not a regular file, torn or empty."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return decode_record(os.read(fd, 4097))
    finally:
        os.close(fd)


def record_in_use(dir_fd: int, token: str) -> bool:
    """True while a running export holds the token's record locked."""
    return held_by_another(record_name(token), dir_fd=dir_fd)


def explain(leftover: Leftover, folder: str) -> tuple[str, str]:
    """What ``leftover`` is, and the command that clears it (``""`` when only a person can)."""
    what = {"staging": "staging folder", "retired": "replaced bundle", "record": "export record"}[
        leftover.kind
    ]
    name = escape_display(leftover.name)
    if leftover.target is None:
        return (
            f"{name}: {what} of an interrupted export with no readable record; "
            "inspect and remove it by hand",
            "",
        )
    dest = os.path.join(folder, leftover.target)
    return (
        f"{name}: {what} of an interrupted export to {escape_display(dest)}",
        hints.command("recover", dest),
    )


def explain_leftovers(folder: Path) -> list[tuple[str, str, str]]:
    """(its path, what it is, the command that clears it or ``""``) per export leftover among
    ``folder``'s direct children, changing nothing; a live export's (or pull's) staging is none.
    A folder that cannot be listed is :class:`Refused`."""
    try:
        fd = open_dir(folder, follow=True)
    except OSError as err:
        raise os_failure(
            f"cannot scan {escape_display(str(folder))}: {err.strerror}", err, path=str(folder)
        ) from None
    try:
        absolute = os.path.abspath(folder)
        return [
            (os.path.join(absolute, item.name), *explain(item, absolute))
            for items in abandoned_by_token(fd).values()
            for item in items
        ]
    finally:
        os.close(fd)


def explain_scratch(path: str, makers: str) -> tuple[str, str]:
    """What a dead scratch folder at ``path`` is (``makers``: the commands that make its kind,
    :data:`bundler.fs.scratch.TEMPORARY_KINDS`), and the command that removes it: ``recover``
    removes every dead one whatever DEST it is given, so the folder itself is named."""
    text = f"{escape_display(path)}: a scratch folder left by a killed {makers}"
    return text, hints.command("recover", path)


def temporary_leftovers() -> list[tuple[str, str, str]]:
    """(its path, what it is, the command that removes it) per dead scratch folder of this
    user in the temporary folder (what a killed archive export, pull or archive read left: an
    export's holds an unswept copy of the workspace); a living run's is none. Changes nothing."""
    # here, not at the top: a folder's verify starts without tempfile (06 §1 start-up)
    from bundler.fs.scratch import dead_temporary_scratch

    return [(path, *explain_scratch(path, makers)) for path, makers in dead_temporary_scratch()]


def scan_leftovers(folder: Path) -> list[str]:
    """One line per export leftover among ``folder``'s direct children, changing nothing."""
    return [f"{text}; run: {fix}" if fix else text for _, text, fix in explain_leftovers(folder)]


def abandoned_by_token(dir_fd: int) -> dict[str, list[Leftover]]:
    """Leftovers among ``dir_fd``'s children grouped by token, live exports left out.

    A staging folder, its record and a retired bundle of one run are one problem, so callers
    name each token once.
    """
    grouped: dict[str, list[Leftover]] = {}
    for item in find_leftovers(dir_fd):
        grouped.setdefault(item.token, []).append(item)
    return {token: items for token, items in grouped.items() if not record_in_use(dir_fd, token)}


def recover_hint(folder: str, items: Sequence[Leftover]) -> str:
    """One line naming a run's leftovers and the one command that repairs them."""
    names = ", ".join(escape_display(item.name) for item in items)
    target = items[0].target
    shown_folder = escape_display(folder)
    if target is None:
        return (
            f"{shown_folder}: {names}: left by an interrupted export with no readable record; "
            "inspect and remove by hand"
        )
    return hints.Hinted(
        f"{names} in {shown_folder}: left by an interrupted export",
        hints.command("recover", os.path.join(folder, target)),
    )


def abandoned_in(folder: Path) -> list[str]:
    """One line per dead export run among ``folder``'s children (its staging folder, record and
    retired bundle together), naming its recover command; changes nothing."""
    try:
        fd = open_dir(folder, follow=True)
    except OSError:
        return []
    try:
        absolute = os.path.abspath(folder)
        return [recover_hint(absolute, items) for items in abandoned_by_token(fd).values()]
    finally:
        os.close(fd)


def leftovers_beside(dest: Path) -> list[str]:
    """One line per interrupted export to ``dest`` whose owner is gone, naming ``bundler
    recover DEST``; empty when the parent cannot be read. Changes nothing (for ``bundle
    verify`` and ``doctor``)."""
    parent_given, name = split_out(dest)
    parent = os.path.realpath(parent_given)
    try:
        fd = open_dir(parent, follow=True)
    except OSError:
        return []
    try:
        return [
            recover_hint(parent, items)
            for items in abandoned_by_token(fd).values()
            if items[0].target == name
        ]
    finally:
        os.close(fd)
