"""The files of an import's folders an undo takes (03 §4): those still as the receipt recorded
them, taken into the undo's staging folder and checked there; every other entry is kept."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.errors import Refused
from bundler.fs import digest, durable, safefs
from bundler.install.files import (
    READ_FLAGS,
    ensure_dirs,
    lstat_rel,
    remaining_entries,
    rename_noreplace,
    tree_digest,
)
from bundler.install.journal import Journal, staging_name
from bundler.rules import hints
from bundler.rules.actions import left_alone, step
from bundler.rules.names import escape_display

KEPT_WHY = {
    safefs.SkipKind.SYMLINK: "a symbolic link",
    safefs.SkipKind.SPECIAL: "a special file",
    safefs.SkipKind.HARD_LINK: "a file with another name (a hard link)",
    safefs.SkipKind.REPLACED: "replaced while it was read",
    safefs.SkipKind.OTHER_DEVICE: "on another file system",
    safefs.SkipKind.BAD_NAME: "a name that is not UTF-8",
}


@dataclass
class FolderPlan:
    """What an undo does in one folder of the import: the files to take (``{src, size,
    digest}``, install-relative) and what it keeps, with why."""

    path: str
    present: bool
    takes: list[dict[str, Any]] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


def plan_folder(install_fd: int, folder: Mapping[str, Any]) -> FolderPlan:
    """Read the import's folder ``folder`` as it is now, without following a link: each file
    the receipt recorded that still has its size and digest is to be taken; every other entry
    (edited, new, a link, a special file) is kept. A receipt without per-file digests (written
    by an earlier version) lets an undo take the files only when the whole tree is unchanged."""
    rel = str(folder["path"])
    try:
        st = lstat_rel(install_fd, rel)
    except Refused:
        return FolderPlan(rel, True, kept={rel: "behind a symbolic link"})
    if st is None:
        return FolderPlan(rel, False)  # moved aside or removed: nothing of it to remove
    if not stat.S_ISDIR(st.st_mode):
        return FolderPlan(rel, True, kept={rel: "no longer a folder"})
    plan = FolderPlan(rel, True)
    listed = folder.get("files")
    recorded = None if listed is None else {str(f[0]): (int(f[1]), str(f[2])) for f in listed}
    seen: list[tuple[str, int, str]] = []
    fd = safefs.open_beneath(install_fd, rel)
    buf = bytearray(digest.BUFFER_SIZE)

    def keep(kind: safefs.SkipKind, path: str) -> None:
        if kind is not safefs.SkipKind.VANISHED:
            plan.kept[path] = KEPT_WHY[kind]

    try:
        for entry in safefs.walk(fd, prefix=f"{rel}/", on_skip=keep):
            if entry.kind != "file":
                continue
            wanted = None if recorded is None else recorded.get(entry.rel)
            if recorded is not None and wanted is None:
                plan.kept[entry.relpath] = "new since the import"
                continue
            if wanted is not None and entry.stat.st_size != wanted[0]:
                plan.kept[entry.relpath] = "changed since the import"
                continue
            size, got = digest.digest_fd(
                entry.fd, relpath=entry.relpath, buffer=buf, expected=entry.stat.st_size
            )
            seen.append((entry.rel, size, got))
            if wanted is not None and got != wanted[1]:
                plan.kept[entry.relpath] = "changed since the import"
                continue
            plan.takes.append({"src": entry.relpath, "size": size, "digest": got})
    finally:
        os.close(fd)
    seen.sort(key=lambda item: os.fsencode(item[0]))  # the order the import digested them in
    if recorded is None and (plan.kept or tree_digest(seen) != folder.get("tree")):
        # no per-file digests to tell which file changed: keep them all
        why = "in a folder changed since the import"
        plan.kept.update({take["src"]: why for take in plan.takes})
        plan.takes = []
    return plan


def _check_staged(
    staging_fd: int, name: str, take: Mapping[str, Any], buf: bytearray
) -> str | None:
    """The :func:`stamp` of the file an undo just took into its
    staging folder when it is a regular file still as the import wrote it, else None (it
    changed between the first reading and the rename, or was swapped for a link or another
    kind of file: it goes back). Opened with ``O_NOFOLLOW``, after an ``lstat``: a link is
    never followed, a special file never opened."""
    try:
        lst = os.stat(name, dir_fd=staging_fd, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(lst.st_mode) or lst.st_size != take["size"]:
        return None
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=staging_fd)
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        if not safefs.same_object(before, lst):
            return None
        size, got = digest.digest_fd(fd, relpath=take["src"], buffer=buf)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if size != take["size"] or got != take["digest"] or stamp(before) != stamp(after):
        return None
    return stamp(after)


def take_files(
    install_fd: int, staging_fd: int, takes: Sequence[dict[str, Any]], token: str
) -> list[dict[str, Any]]:
    """Rename each file of ``takes`` into the staging folder and check it there; returns the
    takes that stayed taken (each with its ``seen`` stamp). A file that fails the check is put
    back at once. Durable when it returns: every folder a file left, and the staging folder,
    are fsynced (before the commit makes the removal final)."""
    taken: list[dict[str, Any]] = []
    by_parent: dict[str, list[dict[str, Any]]] = {}
    for take in takes:
        by_parent.setdefault(take["src"].rpartition("/")[0], []).append(take)
    buf = bytearray(digest.BUFFER_SIZE)
    for head, group in by_parent.items():
        try:
            parent_fd = safefs.open_beneath(install_fd, head)
        except OSError:
            continue  # removed or replaced by a link since it was read: nothing taken from it
        try:
            moved = False
            for take in group:
                staged = take["dst"].rpartition("/")[2]
                try:
                    rename_noreplace(parent_fd, take["src"].rpartition("/")[2], staging_fd, staged)
                except FileNotFoundError:
                    continue  # removed meanwhile
                moved = True
                seen = _check_staged(staging_fd, staged, take, buf)
                if seen is None:
                    put_back(install_fd, take, token)
                    continue
                take["seen"] = seen
                taken.append(take)
            if moved:
                durable.fsync_dir(parent_fd)
        finally:
            os.close(parent_fd)
    durable.fsync_dir(staging_fd)
    return taken


def mv_line(install_root: Path, folder: str) -> str:
    """The ``mv`` line that moves a kept folder aside to a name free now, every word
    shell-quoted (a hostile name pastes as one argument and runs nothing)."""
    source = install_root / folder
    target = Path(f"{source}.undone")
    counter = 2
    while os.path.lexists(target):
        target = Path(f"{source}.undone-{counter}")
        counter += 1
    return hints.shell_line("mv", "-n", "--", str(source), str(target))


def kept_in(install_fd: int, folders: Sequence[str]) -> tuple[list[str], list[str]]:
    """(every file left below ``folders`` after an undo, the folders still holding one):
    what it kept because the agent or the user wrote it (install-relative, display-safe). A
    link or a file where a folder was counts as one kept file."""
    kept: list[str] = []
    standing: list[str] = []
    for folder in folders:
        if lstat_rel(install_fd, folder) is None:
            continue
        found = remaining_entries(install_fd, folder)
        if found == []:
            continue  # empty: a folder the import replaced, made again as it was
        standing.append(folder)
        kept += found if found is not None else [folder]
    return kept, standing


def stamp(st: os.stat_result) -> str:
    """``"<inode>:<size>:<mtime ns>"``: what an undo saw of a file it took and checked; a
    write to it since (through a descriptor opened before it was taken) changes the size or
    the modification time."""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def put_back(install_fd: int, take: Mapping[str, Any], token: str) -> str:
    """Move a file an undo took into its staging folder back to its place (``take["src"]``),
    never over an entry: when one was made there meanwhile, beside it as
    ``<name>.undo-<token>`` (``-2``, ``-3``…). Missing folders on the way are made again; a
    link on the way is refused (``OSError``). Durable when it returns; returns where the file
    now is, install-relative."""
    head, _, name = take["src"].rpartition("/")
    staging, _, staged = take["dst"].rpartition("/")
    staging_fd = safefs.open_beneath(install_fd, staging)
    try:
        parent_fd, _created = ensure_dirs(install_fd, head)
        try:
            candidates = [name, f"{name}.undo-{token}"]
            candidates += (f"{name}.undo-{token}-{n}" for n in range(2, 1000))
            for candidate in candidates:
                try:
                    rename_noreplace(staging_fd, staged, parent_fd, candidate)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(errno.EEXIST, "no free name to put it back", take["src"])
            durable.fsync_dir(parent_fd)
            durable.fsync_dir(staging_fd)
        finally:
            os.close(parent_fd)
    finally:
        os.close(staging_fd)
    return f"{head}/{candidate}" if head else candidate


def put_back_all(
    install_fd: int, journal: Journal, actions: list[str], *, dry_run: bool, changed_only: bool
) -> None:
    """Put back each file an undo took that is still in its staging folder: all of them
    (rolling back), or after the commit only those whose :func:`stamp` differs from what the
    undo saw when it checked them (written to through a descriptor held open)."""
    staging = staging_name(journal.token)
    back = 0
    for take in reversed(journal.takes):
        st = lstat_rel(install_fd, take["dst"])
        if st is None:
            continue  # not taken, put back already, or removed
        if changed_only and stat.S_ISREG(st.st_mode) and take.get("seen") == stamp(st):
            continue
        back += 1
        if dry_run:
            continue
        landed = put_back(install_fd, take, journal.token)
        if landed != take["src"]:
            actions.append(
                left_alone(
                    landed,
                    f"{escape_display(landed)}: put back beside {escape_display(take['src'])}, "
                    "which was made meanwhile",
                )
            )
    if back:
        what = "changed after the undo checked them" if changed_only else "an undo had taken"
        actions.append(step("move back", staging, f"{back} files {what}", dry_run=dry_run))


def remove_taken(install_fd: int, journal: Journal, actions: list[str], *, dry_run: bool) -> None:
    """After an undo's commit: put back each taken file written to since it was checked,
    then unlink the rest from the staging folder (through its descriptor, never by a path
    that could lead elsewhere)."""
    put_back_all(install_fd, journal, actions, dry_run=dry_run, changed_only=True)
    staging = staging_name(journal.token)
    try:
        staging_fd = safefs.open_dir_nofollow(install_fd, staging)
    except FileNotFoundError:
        return
    removed = 0
    try:
        for take in journal.takes:
            staged = take["dst"].rpartition("/")[2]
            try:
                os.stat(staged, dir_fd=staging_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            removed += 1
            if not dry_run:
                os.unlink(staged, dir_fd=staging_fd)
        if removed and not dry_run:
            durable.fsync_dir(staging_fd)
    finally:
        os.close(staging_fd)
    if removed:
        actions.append(
            step("remove", staging, f"{removed} files the import added, unchanged", dry_run=dry_run)
        )
