"""The journal of an import or undo, the transaction it drives, and recovery (03 §3.2, §6).

What is durable after each step of 03 §3.2, and so what :func:`recover_install` finds after a
crash at any point:

1. **Stage.** ``.bundler-import-<token>/`` (0700) is created and its folder entry fsynced
   *before* anything else; the copies in it are fsynced (``copytree.make_durable``), then
   ``journal.toml`` is written atomically (temporary file, fsync, rename, fsync). A crash
   before the journal exists leaves only the staging folder: recovery removes it (and any
   temporary config of its token), nothing outside it was touched.
2. **Temporary config.** ``.config.toml.bundler-<token>`` is written beside the real
   ``config.toml``, fsynced, and its folder fsynced. ``config.toml`` still has the journal's
   ``old_config`` digest, so recovery rolls back.
3. **Moves.** Missing parent folders are made (each fsynced into its parent), then every staged
   folder is renamed into its target (source and target folders fsynced) and the journal is
   rewritten atomically naming it in ``moved``. Still uncommitted: recovery moves back each
   target whose tree digest equals the journal's, re-creates the empty folders a move replaced
   and removes the parents it made.
4. **Commit.** The temporary config is renamed over ``config.toml`` (for an undo of an import
   into an empty install, ``config.toml`` is unlinked) and the folder fsynced. From here
   ``config.toml`` has the ``new_config`` digest and recovery completes instead of rolling back.
5. **Complete.** The receipt goes to a ``.partial`` name, is fsynced and linked to its final
   name (never replacing one), audit lines are appended, undo's tidy-ups run, and the staging
   folder is removed last, so a crash on the way leaves the journal for recovery to finish.

An undo takes files, not folders (it must leave what anyone wrote since): in step 1 the
journal lists every file to take before one is taken; in step 3 each is renamed into the
staging folder, checked there, and the journal rewritten with what was seen of each, after
the folders it left and the staging folder are fsynced. Before the commit, recovery puts every
taken file back; after it, completion unlinks them (putting back one written to since its
check), removes the import's folders left empty and marks the receipt undone.

A ``config.toml`` matching neither digest (changed by hand meanwhile) is refused, never guessed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomli_w

from bundler.config.file import ConfigFile, read_config_file
from bundler.config.secretstore import key_leftovers
from bundler.config.write import append_audit, commit_config, config_lock, stage_config
from bundler.errors import Refused
from bundler.fs import durable, safefs, scratch
from bundler.fs.interrupts import signals_deferred
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.install import receipt_files
from bundler.install.files import (
    DIR_MODE,
    ensure_dirs,
    io_errors_refused,
    lstat_rel,
    mkdir_rel,
    open_install,
    partial_name,
    prune_empty,
    remaining_entries,
    rename_noreplace,
    rename_rel,
    rmdir_rel,
    target_state,
    tree_at,
    write_new_file,
)
from bundler.rules import hints, tomlcompat
from bundler.rules.actions import Action, left_alone, step
from bundler.rules.names import escape_display, has_control_chars

STAGING_PREFIX = ".bundler-import-"
UNPACK_PREFIX = ".bundler-unpack-"
"""An archive unpacked for ``agents import FILE.tar`` (:mod:`bundler.install.from_archive`):
locked while its import runs; a dead one changed nothing and is simply removed."""
JOURNAL = "journal.toml"
RECEIPTS = ("data", "state", "imports")
RECEIPT_FORMAT = 1
MAX_RECEIPT_BYTES = 256 << 20
"""A receipt lists the entries of one import and its files with their digests (some 100
bytes a file, and a bundle holds at most a million entries): a larger file is no receipt."""


@dataclass
class Journal:
    """``journal.toml``: everything recovery needs to finish or roll back, and no secret.

    ``moves`` are install-relative ``{src, dst, tree}``; ``parents`` are folders this transaction
    creates before its moves (removed again on rollback when empty); ``emptied`` are empty
    target folders a move replaced (``{path, mode}``, re-created on rollback); ``after`` holds
    what completes a committed transaction (the receipt to write, folders to tidy).

    An undo takes files one by one instead of moving folders: ``takes`` are ``{src, dst,
    size, digest}`` (a file of the import, still as the receipt recorded it, and its name in
    the staging folder), each with ``seen`` (``"<inode>:<size>:<mtime ns>"``) once it was
    taken and checked there; ``prune`` are the import's folders, each removed with its
    folders that are then empty; ``undone_receipt`` the receipt in ``data/state/imports/`` to
    mark undone when it completes.
    """

    kind: str
    token: str
    old_config: str
    new_config: str
    config_tmp: str
    config_dir: str  # for a person reading the journal; recovery opens config.toml anew
    moves: list[dict[str, str]] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    emptied: list[dict[str, Any]] = field(default_factory=list)
    receipt_stem: str = ""
    receipt_text: str = ""
    receipt_files: str = ""
    """The receipt's file listing inside the staging folder (``receipt.files``), published
    beside the receipt as it is written; empty for an undo, and for a receipt holding its
    files itself (written by an earlier version)."""
    restore_empty: list[dict[str, Any]] = field(default_factory=list)
    remove_parents: list[str] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)
    takes: list[dict[str, Any]] = field(default_factory=list)
    prune: list[str] = field(default_factory=list)
    undone_receipt: str = ""
    key_created: bool = False
    """Whether this import created ``.secret_key`` (no key material, no digest of it): a
    rollback keeps that key, and says so."""

    def dumps(self) -> bytes:
        """The journal as TOML bytes."""
        return tomli_w.dumps({key: value for key, value in self.__dict__.items()}).encode("utf-8")

    @classmethod
    def loads(cls, raw: bytes, token: str) -> Journal:
        """Parse the journal of the staging folder of ``token``; raises ``ValueError`` (saying
        what is wrong) when it is not one this version wrote for that folder.

        Recovery acts on what a journal names, so every name and path in it is checked first:
        the token is the folder's own, the temporary config a name beside ``config.toml``, the
        receipt a plain name, every other path relative and inside the install. A journal
        damaged or written by hand can then make recovery refuse, never reach outside.
        """
        data = tomlcompat.loads(raw.decode("utf-8"))
        problem = _journal_problem(data, token)
        if problem is not None:
            raise ValueError(problem)
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in known})


_TOKEN = re.compile(r"[A-Za-z0-9]{1,64}")
_RECEIPT_STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_MODE_MAX = 0o7777


def is_install_path(path: object) -> bool:
    """Whether ``path`` is a ``/``-separated path inside the install: relative, with no empty,
    ``.`` or ``..`` component and no control character."""
    if not isinstance(path, str) or not path or path.startswith("/") or has_control_chars(path):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def is_path_list(listed: object) -> bool:
    """Whether ``listed`` is a list of paths inside the install (:func:`is_install_path`)."""
    return isinstance(listed, list) and all(is_install_path(path) for path in listed)


def is_emptied_list(listed: object) -> bool:
    """Whether ``listed`` is a list of ``{path, mode}``: empty folders inside the install that
    a move replaced, with the permission bits to make them again."""
    return isinstance(listed, list) and all(
        isinstance(item, dict)
        and is_install_path(item.get("path"))
        and type(item.get("mode")) is int
        and 0 <= item["mode"] <= _MODE_MAX
        for item in listed
    )


def _journal_problem(data: Any, token: str) -> str | None:
    """What makes ``data`` not a journal of the staging folder of ``token``, or None."""
    if not isinstance(data, dict):
        return "it is not a table"
    texts = ("kind", "token", "old_config", "new_config", "config_tmp", "config_dir")
    missing = [key for key in texts if not isinstance(data.get(key), str)]
    if missing:
        return f"{missing[0]} is missing or not text"
    if data["kind"] not in ("import", "undo"):
        return "kind is neither import nor undo"
    if data["token"] != token or not _TOKEN.fullmatch(token):
        return "its token is not its folder's"
    tmp = data["config_tmp"]
    if "/" in tmp or not tmp.startswith(".") or not tmp.endswith(f".bundler-{token}"):
        return "config_tmp is not a temporary config of this token"
    stem = data.get("receipt_stem", "")
    if not isinstance(stem, str) or (stem and not _RECEIPT_STEM.fullmatch(stem)):
        return "receipt_stem is not a plain name"
    if not isinstance(data.get("receipt_text", ""), str):
        return "receipt_text is not text"
    if data.get("receipt_files", "") not in ("", receipt_files.STAGED_NAME):
        return "receipt_files is not the staged file listing"
    if data.get("receipt_files") and _listing_named(str(data.get("receipt_text", ""))) is None:
        return "receipt_text does not name its file listing"
    for key in ("moved", "parents", "remove_parents", "prune"):
        if not is_path_list(data.get(key, [])):
            return f"{key} is not a list of paths inside the install"
    moves = data.get("moves", [])
    if not isinstance(moves, list) or not all(
        isinstance(move, dict)
        and is_install_path(move.get("src"))
        and is_install_path(move.get("dst"))
        and isinstance(move.get("tree"), str)
        for move in moves
    ):
        return "moves is not a list of {src, dst, tree} inside the install"
    for key in ("emptied", "restore_empty"):
        if not is_emptied_list(data.get(key, [])):
            return f"{key} is not a list of {{path, mode}} inside the install"
    takes = data.get("takes", [])
    inside = f"{staging_name(token)}/"
    if not isinstance(takes, list) or not all(
        isinstance(take, dict)
        and is_install_path(take.get("src"))
        and isinstance(take.get("dst"), str)
        and take["dst"].startswith(inside)
        and _TOKEN.fullmatch(take["dst"][len(inside) :]) is not None
        and type(take.get("size")) is int
        and isinstance(take.get("digest"), str)
        and isinstance(take.get("seen", ""), str)
        for take in takes
    ):
        return "takes is not a list of {src, dst, size, digest} with dst in its staging folder"
    undone = data.get("undone_receipt", "")
    if not isinstance(undone, str) or (
        undone and not (undone.endswith(".toml") and _RECEIPT_STEM.fullmatch(undone[:-5]))
    ):
        return "undone_receipt is not a plain name"
    if not isinstance(data.get("key_created", False), bool):
        return "key_created is not true or false"
    audit = data.get("audit", [])
    if not isinstance(audit, list) or not all(
        isinstance(line, dict)
        and isinstance(line.get("path"), str)
        and isinstance(line.get("via"), str)
        and "old" in line
        and "new" in line
        for line in audit
    ):
        return "audit is not a list of {path, old, new, via}"
    return None


def staging_name(token: str) -> str:
    """``.bundler-import-<token>``."""
    return f"{STAGING_PREFIX}{token}"


def _write_journal(staging_fd: int, journal: Journal) -> None:
    durable.atomic_write(staging_fd, JOURNAL, journal.dumps())


class Transaction:
    """One journaled change of an install: moves, then the config rename as the commit."""

    def __init__(self, install_fd: int, config: ConfigFile, journal: Journal) -> None:
        self.install_fd = install_fd
        self.config = config
        self.journal = journal
        self.staging = staging_name(journal.token)
        self.staging_fd = -1
        self.committed = False
        self.created_staging = False
        self.after_commit_error: OSError | None = None

    def open_staging(self) -> int:
        """Create the 0700 staging folder, durably, before anything else; returns its descriptor."""
        with signals_deferred():  # one step to an interrupt: a rollback must know it is there
            os.mkdir(self.staging, 0o700, dir_fd=self.install_fd)
            self.created_staging = True
        durable.fsync_dir(self.install_fd)
        self.staging_fd = safefs.open_dir_nofollow(self.install_fd, self.staging)
        return self.staging_fd

    def write_journal(self) -> None:
        """Replace ``journal.toml`` atomically and durably with the journal as it is now."""
        _write_journal(self.staging_fd, self.journal)

    def run(self, new_text: str | None) -> None:
        """Steps 2-4 of 03 §3.2 (the journal is already durable); None removes config.toml."""
        if new_text is not None:
            stage_config(self.config, self.journal.config_tmp, new_text)
            durable.fsync_dir(self.config.dir_fd)
        for parent in self.journal.parents:
            mkdir_rel(self.install_fd, parent, DIR_MODE)
        for move in self.journal.moves:
            state = target_state(self.install_fd, move["dst"])
            if state == "occupied":
                raise Refused(
                    f"{escape_display(move['dst'])} appeared or was filled meanwhile; nothing "
                    "changed",
                    path=move["dst"],
                )
            rename_rel(self.install_fd, move["src"], move["dst"], replace_empty=state == "empty")
            self.journal.moved.append(move["dst"])
            self.write_journal()
        # None: undo of an import into an empty install, which had no config.toml before.
        # The rename and the flag that says it happened are one step to an interrupt: one in
        # between would roll back moves the new config already names
        with signals_deferred():
            commit_config(self.config, None if new_text is None else self.journal.config_tmp)
            self.committed = True
        try:
            durable.fsync_dir(self.config.dir_fd)
            if self.config.dir_fd != self.install_fd:
                durable.fsync_dir(self.install_fd)
        except OSError as err:
            # after the commit nothing can be undone: the caller reports it as a warning
            self.after_commit_error = err

    def rollback(self) -> list[str]:
        """Undo everything before the commit; returns what could not be undone."""
        if self.staging_fd >= 0:
            fd, self.staging_fd = self.staging_fd, -1
            os.close(fd)
        if not self.created_staging:
            return []
        return _roll_back(self.install_fd, self.config.dir_fd, self.journal, dry_run=False)

    def close(self) -> None:
        """Close the staging folder's descriptor (the folder itself stays for completion)."""
        if self.staging_fd >= 0:
            fd, self.staging_fd = self.staging_fd, -1
            os.close(fd)


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


def _put_back_all(
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


def _roll_back(
    install_fd: int, config_dir_fd: int, journal: Journal, *, dry_run: bool
) -> list[str]:
    """Put back what an uncommitted transaction moved or created; returns the actions taken."""
    actions: list[str] = []
    _put_back_all(install_fd, journal, actions, dry_run=dry_run, changed_only=False)
    for move in reversed(journal.moves):
        if (
            lstat_rel(install_fd, move["src"]) is not None
            or lstat_rel(install_fd, move["dst"]) is None
        ):
            continue  # never moved (or already moved back)
        if tree_at(install_fd, move["dst"]) != move["tree"]:
            actions.append(
                left_alone(move["dst"], f"{move['dst']}: it changed since the import staged it")
            )
            continue
        actions.append(step("move back", move["dst"], move["dst"], dry_run=dry_run))
        if not dry_run:
            rename_rel(install_fd, move["dst"], move["src"], replace_empty=False)
    for empty in journal.emptied:
        if lstat_rel(install_fd, empty["path"]) is None:
            actions.append(
                step("re-create", empty["path"], f"empty folder {empty['path']}", dry_run=dry_run)
            )
            if not dry_run:
                mkdir_rel(install_fd, empty["path"], int(empty["mode"]))
    for parent in reversed(journal.parents):
        if lstat_rel(install_fd, parent) is not None:
            actions.append(step("remove", parent, f"folder {parent}", dry_run=dry_run))
            if not dry_run:
                rmdir_rel(install_fd, parent)
    with contextlib.suppress(FileNotFoundError):
        os.stat(journal.config_tmp, dir_fd=config_dir_fd, follow_symlinks=False)
        actions.append(step("remove", journal.config_tmp, journal.config_tmp, dry_run=dry_run))
        if not dry_run:
            os.unlink(journal.config_tmp, dir_fd=config_dir_fd)
    staging = staging_name(journal.token)
    actions.append(step("remove", staging, staging, dry_run=dry_run))
    if not dry_run:
        safefs.rmtree_at(install_fd, staging_name(journal.token))
        durable.fsync_dir(install_fd)
    if journal.key_created:
        actions.append(KEY_KEPT)
    return actions


KEY_KEPT = (
    "kept .secret_key: the import created it, and ZeroClaw may already use it (it opens the "
    "install's stored secrets)"
)


def complete_transaction(
    install_root: Path, install_fd: int, journal: Journal, *, dry_run: bool
) -> tuple[list[str], str]:
    """Finish a committed transaction: receipt, audit, tidy folders, remove staging (last, so
    that a failure or crash on the way leaves the journal for ``recover --install``).

    Returns the actions and the receipt's install-relative path (``""`` for an undo). An audit
    line may be written twice when a crash hits between it and the staging removal: a repeated
    line is better than a lost one.
    """
    actions: list[str] = []
    receipt = ""
    if journal.receipt_text:
        _remove_partial_receipt(install_fd, journal, actions, dry_run=dry_run)
        name = _receipt_present(install_fd, journal)
        if name is None:
            actions.append(step("write", "/".join(RECEIPTS), "the import receipt", dry_run=dry_run))
            if not dry_run:
                receipt = write_receipt(install_fd, journal)
        else:
            receipt = "/".join([*RECEIPTS, name])
    for line in journal.audit:
        actions.append(
            step("audit", "data/state/config-audit.jsonl", line["path"], dry_run=dry_run)
        )
        if not dry_run:
            append_audit(install_root, line["path"], line["old"], line["new"], line["via"])
    if journal.takes:
        _remove_taken(install_fd, journal, actions, dry_run=dry_run)
    for folder in journal.prune:
        if dry_run:
            actions.append(step("remove", folder, f"the empty folders of {folder}", dry_run=True))
        else:
            actions += [
                step("remove", gone, f"empty folder {escape_display(gone)}", dry_run=False)
                for gone in prune_empty(install_fd, folder)
            ]
    for empty in journal.restore_empty:
        if lstat_rel(install_fd, empty["path"]) is None:
            actions.append(
                step("re-create", empty["path"], f"empty folder {empty['path']}", dry_run=dry_run)
            )
            if not dry_run:
                mkdir_rel(install_fd, empty["path"], int(empty["mode"]))
    for parent in reversed(journal.remove_parents):
        if (
            lstat_rel(install_fd, parent) is not None
            and target_state(install_fd, parent) == "empty"
        ):
            actions.append(step("remove", parent, f"empty folder {parent}", dry_run=dry_run))
            if not dry_run:
                rmdir_rel(install_fd, parent)
    if journal.undone_receipt:
        _mark_undone(install_fd, journal, actions, dry_run=dry_run)
    staging = staging_name(journal.token)
    actions.append(step("remove", staging, staging, dry_run=dry_run))
    if not dry_run:
        safefs.rmtree_at(install_fd, staging_name(journal.token))
        durable.fsync_dir(install_fd)
    return actions, receipt


def _remove_taken(install_fd: int, journal: Journal, actions: list[str], *, dry_run: bool) -> None:
    """After an undo's commit: put back each taken file written to since it was checked,
    then unlink the rest from the staging folder (through its descriptor, never by a path
    that could lead elsewhere)."""
    _put_back_all(install_fd, journal, actions, dry_run=dry_run, changed_only=True)
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


def _mark_undone(install_fd: int, journal: Journal, actions: list[str], *, dry_run: bool) -> None:
    """Add ``[undone]`` (when, how many files kept, the folders kept) to the receipt the undo
    names, replacing it atomically; a receipt marked already, missing or not the one the
    journal's undo read is left as it is (``agents imports`` then reads its state from disk)."""
    name = journal.undone_receipt
    shown = "/".join([*RECEIPTS, name])
    try:
        dir_fd = safefs.open_beneath(install_fd, "/".join(RECEIPTS))
    except OSError:
        return
    try:
        try:
            raw = read_small_file(name, MAX_RECEIPT_BYTES, dir_fd=dir_fd, follow=False)
            data = tomlcompat.loads(raw.decode("utf-8"))
            mode = stat.S_IMODE(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except (OSError, NotSmallFile, UnicodeDecodeError, tomlcompat.TOMLDecodeError):
            return
        if not isinstance(data, dict) or "undone" in data:
            return
        folders = [str(f.get("path")) for f in data.get("folders", []) if isinstance(f, dict)]
        kept, standing = kept_in(install_fd, [f for f in folders if is_install_path(f)])
        actions.append(step("write", shown, f"{shown} marked undone", dry_run=dry_run))
        if dry_run:
            return
        mark = {
            "undone": {
                "at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "kept_files": len(kept),
                "kept_folders": standing,
            }
        }
        text = raw.rstrip(b"\n") + b"\n\n" + tomli_w.dumps(mark).encode("utf-8")
        durable.atomic_write(dir_fd, name, text, mode=mode)
    finally:
        os.close(dir_fd)


def _remove_partial_receipt(
    install_fd: int, journal: Journal, actions: list[str], *, dry_run: bool
) -> None:
    """Remove a receipt a crash left half-written under its temporary name."""
    try:
        fd = safefs.open_beneath(install_fd, "/".join(RECEIPTS))
    except OSError:
        return
    try:
        os.stat(partial_name(journal.receipt_stem), dir_fd=fd, follow_symlinks=False)
        actions.append(
            step(
                "remove",
                "/".join([*RECEIPTS, partial_name(journal.receipt_stem)]),
                "a half-written receipt",
                dry_run=dry_run,
            )
        )
        if not dry_run:
            os.unlink(partial_name(journal.receipt_stem), dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def _receipt_present(install_fd: int, journal: Journal) -> str | None:
    """The name of the journal's receipt when it is written already (its listing too)."""
    try:
        fd = safefs.open_beneath(install_fd, "/".join(RECEIPTS))
    except OSError:
        return None
    try:
        for name in sorted(os.listdir(fd)):
            if name.startswith(journal.receipt_stem) and name.endswith(".toml"):
                with contextlib.suppress(OSError, NotSmallFile):
                    raw = read_small_file(name, MAX_RECEIPT_BYTES, dir_fd=fd, follow=False)
                    if raw == journal.receipt_text.encode("utf-8"):
                        # published before the receipt; made again if removed since
                        _publish_listing(install_fd, fd, journal, name)
                        return name
        return None
    finally:
        os.close(fd)


def _publish_listing(install_fd: int, dir_fd: int, journal: Journal, name: str) -> None:
    """Publish the journal's staged file listing beside the receipt ``name`` (when the journal
    has one): whole and durable before the receipt is linked."""
    named = _listing_named(journal.receipt_text) if journal.receipt_files else None
    if named is None:  # Journal.loads refused a journal naming a listing its receipt does not
        return
    staging_fd = safefs.open_dir_nofollow(install_fd, staging_name(journal.token))
    try:
        receipt_files.publish(staging_fd, dir_fd, name, *named)
    finally:
        os.close(staging_fd)


def _listing_named(receipt_text: str) -> tuple[str, int] | None:
    """The XXH3-128 and size of the file listing a receipt's text names, or None."""
    try:
        listing = tomlcompat.loads(receipt_text).get("listing")
    except tomlcompat.TOMLDecodeError:
        return None
    if not isinstance(listing, dict):
        return None
    digest, size = listing.get("xxh3_128"), listing.get("bytes")
    if not isinstance(digest, str) or type(size) is not int or size < 0:
        return None
    return digest, size


def write_receipt(install_fd: int, journal: Journal) -> str:
    """Write the journal's receipt under ``data/state/imports/``, its file listing first;
    returns its install path."""
    dir_fd, _ = ensure_dirs(install_fd, "/".join(RECEIPTS))
    try:
        name = write_new_file(
            dir_fd,
            journal.receipt_stem,
            ".toml",
            journal.receipt_text.encode("utf-8"),
            before_link=lambda chosen: _publish_listing(install_fd, dir_fd, journal, chosen),
        )
    finally:
        os.close(dir_fd)
    return "/".join([*RECEIPTS, name])


MAX_JOURNAL_BYTES = 1 << 29
"""A journal names the folders and entries of one import and its receipt's text, or the files
one undo takes (some 150 bytes each, for at most a million): far smaller than this."""


def _journal_of(install_root: Path, install_fd: int, name: str) -> Journal | None:
    """The journal of the staging folder ``name``: None when it has none (a crash came before
    it was written, so nothing outside the folder changed); :class:`Refused` when it has one
    this version cannot trust (damaged, or written by hand), since recovery would then have to
    guess what the import changed."""
    try:
        dir_fd = safefs.open_dir_nofollow(install_fd, name)
    except OSError:
        return None
    try:
        raw = read_small_file(JOURNAL, MAX_JOURNAL_BYTES, dir_fd=dir_fd, follow=False)
        problem = None
    except FileNotFoundError:
        return None
    except NotSmallFile as why:
        problem = f"it {why.reason}"
    except OSError as err:
        problem = f"it cannot be read: {err.strerror}"
    finally:
        os.close(dir_fd)
    if problem is None:
        token = name[len(STAGING_PREFIX) :]
        try:
            return Journal.loads(raw, token)
        except (UnicodeDecodeError, tomlcompat.TOMLDecodeError):
            problem = "it is not valid TOML text"
        except ValueError as err:
            problem = str(err)
    shown = escape_display(name)
    raise Refused(
        f"the journal of {shown} in {escape_display(str(install_root))} is damaged ({problem}); "
        f"nothing was done, as recovery would have to guess: check config.toml and the "
        f"folders the import added by hand, then remove {shown}",
        path=str(install_root / name),
    )


def _temp_configs(dir_fd: int, token: str) -> list[str]:
    return [
        name
        for name in os.listdir(dir_fd)
        if name.startswith(".") and name.endswith(f".bundler-{token}")
    ]


def clear_abandoned(install_root: Path, install_fd: int, config_dir_fd: int) -> list[str]:
    """Before an import or undo stages, with the config lock held (so no other writer of this
    install is running): remove staging folders without a journal (nothing outside them was
    touched) and refuse, naming ``bundler recover --install``, when one has a journal.

    Returns warnings naming what was removed.
    """
    warnings: list[str] = [
        f"removed {escape_display(name)}: an archive unpacked by an interrupted import"
        for name in scratch.clear_dead_scratch(install_fd, UNPACK_PREFIX)
    ]
    for name in sorted(n for n in os.listdir(install_fd) if n.startswith(STAGING_PREFIX)):
        shown = escape_display(str(install_root))
        if _journal_of(install_root, install_fd, name) is not None:
            raise Refused(
                hints.Hinted(
                    f"an interrupted import or undo left {escape_display(name)} with its "
                    f"journal in {shown}: recover it first",
                    hints.command("recover", "--install", str(install_root)),
                ),
                path=str(install_root / name),
            )
        removed = [name, *_temp_configs(config_dir_fd, name[len(STAGING_PREFIX) :])]
        for tmp in removed[1:]:
            os.unlink(tmp, dir_fd=config_dir_fd)
        safefs.rmtree_at(install_fd, name)
        durable.fsync_dir(install_fd)
        warnings.append(
            f"removed {', '.join(escape_display(n) for n in removed)}: left by an interrupted "
            "import that had changed nothing else"
        )
    return warnings


@io_errors_refused("recovery")
def recover_install(install_root: Path, dry_run: bool = False) -> list[str]:
    """Finish or roll back interrupted imports and undos of an install (03 §6).

    For each ``.bundler-import-<token>/`` folder: without a journal nothing outside it was
    touched, so it is removed; ``config.toml`` equal to the journal's old digest → not
    committed, rolled back (moved targets still identical to what was staged, and the parent
    folders created for them, are removed); equal to the new digest → committed, completed
    (receipt written if missing, leftovers removed); anything else → :class:`Refused` listing
    what was found. Returns the actions taken (with ``dry_run``, those it would take).
    """
    install_root = Path(os.path.abspath(install_root))
    actions: list[str] = []
    with open_install(install_root, create=False) as install_fd, contextlib.ExitStack() as stack:
        for name in scratch.dead_scratch(install_fd, UNPACK_PREFIX):
            actions.append(
                step(
                    "remove",
                    name,
                    f"{name} (an archive unpacked by an interrupted import)",
                    dry_run=dry_run,
                )
            )
        if not dry_run:
            scratch.clear_dead_scratch(install_fd, UNPACK_PREFIX)
        names = sorted(name for name in os.listdir(install_fd) if name.startswith(STAGING_PREFIX))
        temporaries = key_leftovers(install_fd)
        if temporaries:
            # a key being published belongs to a writer holding the config lock
            stack.enter_context(config_lock(install_root))
            for name in key_leftovers(install_fd):
                detail = f"{escape_display(name)} (a key a crash left before it was published)"
                actions.append(step("remove", name, detail, dry_run=dry_run))
                if not dry_run:
                    os.unlink(name, dir_fd=install_fd)
            if not dry_run:
                durable.fsync_dir(install_fd)
        if not names:
            root = str(install_root)
            return [a.under(root) if isinstance(a, Action) else a for a in actions]
        if not temporaries:
            stack.enter_context(config_lock(install_root))
        config = read_config_file(install_fd, install_root, stack, missing_ok=True)
        for name in names:
            token = name[len(STAGING_PREFIX) :]
            journal = _journal_of(install_root, install_fd, name)
            if journal is None:
                # the journal is written before anything outside staging changes
                for tmp in _temp_configs(config.dir_fd, token):
                    actions.append(step("remove", tmp, tmp, dry_run=dry_run))
                    if not dry_run:
                        os.unlink(tmp, dir_fd=config.dir_fd)
                actions.append(
                    step(
                        "remove",
                        name,
                        f"{escape_display(name)} (no journal: nothing else was changed)",
                        dry_run=dry_run,
                    )
                )
                if not dry_run:
                    safefs.rmtree_at(install_fd, name)
                    durable.fsync_dir(install_fd)
                continue
            digest = config.digest
            if digest == journal.old_config and digest != journal.new_config:
                actions.append(
                    step(
                        "roll back",
                        name,
                        f"the {journal.kind} of {escape_display(name)}: it was not committed",
                        dry_run=dry_run,
                    )
                )
                actions += _roll_back(install_fd, config.dir_fd, journal, dry_run=dry_run)
            elif digest == journal.new_config:
                actions.append(
                    step(
                        "complete",
                        name,
                        f"the {journal.kind} of {escape_display(name)}: it was committed",
                        dry_run=dry_run,
                    )
                )
                for tmp in _temp_configs(config.dir_fd, token):
                    actions.append(step("remove", tmp, tmp, dry_run=dry_run))
                    if not dry_run:
                        os.unlink(tmp, dir_fd=config.dir_fd)
                actions += complete_transaction(install_root, install_fd, journal, dry_run=dry_run)[
                    0
                ]
            else:
                raise Refused(
                    f"{escape_display(name)}: config.toml matches neither the state before nor "
                    f"after this {journal.kind}; it lists targets "
                    f"{', '.join(escape_display(m['dst']) for m in journal.moves) or 'none'}; "
                    "resolve by hand",
                    path=str(install_root / name),
                )
    root = str(install_root)
    return [a.under(root) if isinstance(a, Action) else a for a in actions]
