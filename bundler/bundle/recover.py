"""What interrupted exports leave beside a destination, and ``bundler recover`` for it (02 §8.5).

Every leftover is named by its token: the staging folder ``.zeroclaw-export-<token>``, the
retired bundle ``.zeroclaw-export-old-<token>`` and the record ``.zeroclaw-export-<token>.target``
that names the destination. A run is over when its record's lock is free. Recovery of one
destination renames a retired bundle back when the destination is missing (and it still holds
its manifest), else removes it; then the staging folder; then the record, last, so that every
step is idempotent and recovery can itself be interrupted and run again. Leftovers of other
destinations, or without a readable record, are listed and never touched.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bundler.bundle.manifest import MANIFEST_NAME
from bundler.bundle.publish import (
    DIR_FLAGS,
    RECORD_RE,
    RETIRED_RE,
    STAGING_RE,
    decode_record,
    lstat_at,
    record_name,
    remove_tree_at,
    rename_noreplace,
    retired_name,
    split_out,
    staging_name,
    unlink_missing_ok,
)
from bundler.errors import Refused
from bundler.fs.durable import fsync_dir, locked_by_another, open_dir
from bundler.rules import hints
from bundler.rules.actions import left_alone, step
from bundler.rules.names import escape_display


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
    targets = {token: _read_record(dir_fd, record_name(token)) for _, _, token in found}
    return [Leftover(name, kind, token, targets[token]) for name, kind, token in sorted(found)]


def _read_record(dir_fd: int, name: str) -> str | None:
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


def _record_in_use(dir_fd: int, token: str) -> bool:
    """True while a running export holds the token's record locked."""
    try:
        fd = os.open(
            record_name(token),
            os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            dir_fd=dir_fd,
        )
    except OSError:
        return False
    try:
        return locked_by_another(fd)
    finally:
        os.close(fd)


def _explain(leftover: Leftover, folder: str) -> tuple[str, str]:
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
    ``folder``'s direct children, changing nothing; a folder that cannot be listed is
    :class:`Refused`."""
    try:
        fd = open_dir(folder, follow=True)
    except OSError as err:
        raise Refused(
            f"cannot scan {escape_display(str(folder))}: {err.strerror}", path=str(folder)
        ) from None
    try:
        absolute = os.path.abspath(folder)
        return [
            (os.path.join(absolute, item.name), *_explain(item, absolute))
            for item in find_leftovers(fd)
        ]
    finally:
        os.close(fd)


def scan_leftovers(folder: Path) -> list[str]:
    """One line per export leftover among ``folder``'s direct children, changing nothing."""
    return [f"{text}; run: {fix}" if fix else text for _, text, fix in explain_leftovers(folder)]


def _abandoned_by_token(dir_fd: int) -> dict[str, list[Leftover]]:
    """Leftovers among ``dir_fd``'s children grouped by token, live exports left out.

    A staging folder, its record and a retired bundle of one run are one problem, so callers
    name each token once.
    """
    grouped: dict[str, list[Leftover]] = {}
    for item in find_leftovers(dir_fd):
        grouped.setdefault(item.token, []).append(item)
    return {token: items for token, items in grouped.items() if not _record_in_use(dir_fd, token)}


def _recover_hint(folder: str, items: Sequence[Leftover]) -> str:
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
        return [_recover_hint(absolute, items) for items in _abandoned_by_token(fd).values()]
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
            _recover_hint(parent, items)
            for items in _abandoned_by_token(fd).values()
            if items[0].target == name
        ]
    finally:
        os.close(fd)


def clear_abandoned(out: str | os.PathLike[str]) -> list[str]:
    """Before an export is admitted: repair what earlier, dead exports to the same destination
    left (exactly what ``bundler recover DEST`` does, so a retired bundle goes back first) and
    name the recover command for dead exports to other destinations in the same folder.

    Returns warnings; a parent that cannot be opened is left for :func:`admit` to refuse.
    Exports still running (their record is locked) are left alone.
    """
    parent_given, name = split_out(out)
    parent = os.path.realpath(parent_given)
    try:
        fd = open_dir(parent, follow=False)
    except OSError:
        return []
    try:
        warnings: list[str] = []
        mine: list[str] = []
        for items in _abandoned_by_token(fd).values():
            if items[0].target == name:
                mine += [item.name for item in items]
            else:
                warnings.append(_recover_hint(parent, items))
        if mine:
            _recover_in(fd, parent, name, dry_run=False)
            warnings.append(
                f"removed {', '.join(escape_display(n) for n in sorted(mine))}: left by an "
                f"interrupted export to {escape_display(os.path.join(parent, name))} that is no "
                "longer running"
            )
        return warnings
    finally:
        os.close(fd)


def clear_abandoned_or_warn(out: str | os.PathLike[str]) -> list[str]:
    """:func:`clear_abandoned`, with a failure to clear turned into a warning naming the
    ``recover`` command (never fatal: the new publication does not depend on it)."""
    try:
        return clear_abandoned(out)
    except OSError as err:
        shown = escape_display(os.fspath(out))
        return [
            hints.Hinted(
                f"could not clear what an interrupted export left beside {shown} ({err.strerror})",
                hints.command("recover", os.path.abspath(out)),
            )
        ]


def recover_destination(dest: Path, dry_run: bool = False) -> list[str]:
    """Repair what interrupted exports to ``dest`` left (02 §8.5); returns what was (would be) done.

    For each token whose record names ``dest``: a retired bundle is renamed back when ``dest`` is
    missing (and it still holds its manifest), else removed; the staging folder is removed; then
    the record. Leftovers of other destinations, or without a record, are listed, not touched.
    Exports still running (their record is locked) are left alone.
    """
    parent_given, name = split_out(dest)
    parent = os.path.realpath(parent_given)
    try:
        parent_fd = open_dir(parent, follow=False)
    except OSError as err:
        raise Refused(
            f"cannot open {escape_display(parent_given)}: {err.strerror}", path=str(dest)
        ) from None
    try:
        return _recover_in(parent_fd, parent, name, dry_run)
    finally:
        os.close(parent_fd)


def _recover_in(parent_fd: int, parent: str, name: str, dry_run: bool) -> list[str]:
    dest_display = escape_display(os.path.join(parent, name))
    actions: list[str] = []
    leftovers = find_leftovers(parent_fd)
    mine = sorted({item.token for item in leftovers if item.target == name})
    for item in leftovers:
        if item.target != name:
            actions.append(left_alone(os.path.join(parent, item.name), *_explain(item, parent)))
    for token in mine:
        if _record_in_use(parent_fd, token):
            actions.append(
                left_alone(
                    os.path.join(parent, staging_name(token)),
                    f"{escape_display(staging_name(token))}: "
                    f"an export to {dest_display} is still running",
                )
            )
            continue
        retired = retired_name(token)
        staging = staging_name(token)
        retired_st = lstat_at(parent_fd, retired)
        if retired_st is not None:
            if (
                lstat_at(parent_fd, name) is None
                # a bundle folder with its manifest, or a bundle archive (only an archive's
                # publication retires a regular file)
                and (
                    stat.S_ISREG(retired_st.st_mode)
                    or (stat.S_ISDIR(retired_st.st_mode) and _holds_manifest(parent_fd, retired))
                )
            ):
                actions.append(
                    step(
                        "restore",
                        os.path.join(parent, name),
                        f"the previous bundle {retired} to {dest_display}",
                        dry_run=dry_run,
                    )
                )
                if not dry_run:
                    rename_noreplace(parent_fd, retired, name)
                    fsync_dir(parent_fd)
            else:
                actions.append(
                    step(
                        "remove",
                        os.path.join(parent, retired),
                        f"the replaced bundle {retired}",
                        dry_run=dry_run,
                    )
                )
                if not dry_run:
                    remove_tree_at(parent_fd, retired)
        if lstat_at(parent_fd, staging) is not None:
            actions.append(
                step(
                    "remove",
                    os.path.join(parent, staging),
                    f"the staging folder {staging}",
                    dry_run=dry_run,
                )
            )
            if not dry_run:
                remove_tree_at(parent_fd, staging)
        actions.append(
            step(
                "remove",
                os.path.join(parent, record_name(token)),
                f"the record {record_name(token)}",
                dry_run=dry_run,
            )
        )
        if not dry_run:
            # the folders' removal must be durable before the record that explains them goes
            fsync_dir(parent_fd)
            unlink_missing_ok(parent_fd, record_name(token))
            fsync_dir(parent_fd)
    return actions


def _holds_manifest(parent_fd: int, folder: str) -> bool:
    try:
        fd = os.open(folder, DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return False
    try:
        st = lstat_at(fd, MANIFEST_NAME)
        return st is not None and stat.S_ISREG(st.st_mode)
    finally:
        os.close(fd)
