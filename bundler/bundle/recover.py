"""``bundler recover`` for what interrupted exports leave beside a destination (02 §8.5).

The leftovers and their names are :mod:`bundler.bundle.leftovers`'s. Recovery of one
destination renames a retired bundle back when the destination is missing (and it still holds
its manifest), else removes it; then the staging folder; then the record, last, so that every
step is idempotent and recovery can itself be interrupted and run again. Leftovers of other
destinations, or without a readable record, are listed and never touched.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bundler.bundle.leftovers import (
    abandoned_by_token,
    explain,
    explain_scratch,
    find_leftovers,
    record_in_use,
    record_name,
    recover_hint,
    retired_name,
    split_out,
    staging_name,
)
from bundler.bundle.manifest import MANIFEST_NAME
from bundler.bundle.publish import (
    DIR_FLAGS,
    lstat_at,
    remove_tree_at,
    rename_noreplace,
    unlink_missing_ok,
)
from bundler.errors import os_failure
from bundler.fs.durable import fsync_dir, open_dir
from bundler.fs.scratch import dead_temporary_scratch
from bundler.rules import hints
from bundler.rules.actions import left_alone, step
from bundler.rules.names import escape_display


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
        for items in abandoned_by_token(fd).values():
            if items[0].target == name:
                mine += [item.name for item in items]
            else:
                warnings.append(recover_hint(parent, items))
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
        raise os_failure(
            f"cannot open {escape_display(parent_given)}: {err.strerror}", err, path=str(dest)
        ) from None
    try:
        return (
            _recover_in(parent_fd, parent, name, dry_run)
            + _clear_backup_temporaries(dest, dry_run)
            + _clear_temporary(dry_run)
        )
    except OSError as err:  # a leftover we may not remove (immutable, no permission, EMFILE)
        where = escape_display(os.fsdecode(err.filename)) if err.filename else ""
        raise os_failure(
            f"recovering {escape_display(str(dest))} stopped"
            + (f" at {where}" if where else "")
            + f" ({err.strerror or err}); what is left is listed by 'bundler doctor': fix the "
            "cause and run recover again",
            err,
            path=str(dest),
        ) from None
    finally:
        os.close(parent_fd)


def _clear_backup_temporaries(dest: Path, dry_run: bool) -> list[str]:
    """When ``dest`` is a folder: remove what a backup killed while writing into it (``home
    backup --to DIR``) left there, by :mod:`bundler.home.publish`'s rule (04 §5.1): its hidden
    temporaries of a run that holds no lock, never a finished backup nor a running one's."""
    if not os.path.isdir(dest):
        return []
    from bundler.home.publish import remove_leftovers_in  # sqlite3, for backups only

    return remove_leftovers_in(dest, dry_run=dry_run)


def _clear_temporary(dry_run: bool) -> list[str]:
    """Remove (or, on a dry run, list) every dead scratch folder of this user in the temporary
    folder. A kill during an export to ``FILE.tar`` or a pull to one leaves its bundle there and
    nothing beside DEST that could say so, and no folder of that kind is ever needed once its
    owner is gone: so any ``recover DEST`` clears them all."""
    return [
        step("remove", path, explain_scratch(path, makers)[0], dry_run=dry_run)
        for path, makers in dead_temporary_scratch(remove=not dry_run)
    ]


def _recover_in(parent_fd: int, parent: str, name: str, dry_run: bool) -> list[str]:
    dest_display = escape_display(os.path.join(parent, name))
    actions: list[str] = []
    leftovers = find_leftovers(parent_fd)
    mine = sorted({item.token for item in leftovers if item.target == name})
    # a record is written before its staging folder is made: one killed before its destination
    # was written names nothing and explains nothing, and goes once no export holds it
    tokens = [item.token for item in leftovers]
    nameless = {
        item.token
        for item in leftovers
        if item.kind == "record"
        and item.target is None
        and tokens.count(item.token) == 1
        and not record_in_use(parent_fd, item.token)
    }
    for item in leftovers:
        if item.token in nameless:
            actions.append(
                step(
                    "remove",
                    os.path.join(parent, item.name),
                    f"the record {item.name}, which names no destination",
                    dry_run=dry_run,
                )
            )
            if not dry_run:
                unlink_missing_ok(parent_fd, item.name)
                fsync_dir(parent_fd)
        elif item.target != name:
            actions.append(left_alone(os.path.join(parent, item.name), *explain(item, parent)))
    for token in mine:
        if record_in_use(parent_fd, token):
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
