"""The transaction an import or undo drives through its journal, and its completion (03 §3.2).

What is durable after each step of 03 §3.2, and so what
:func:`bundler.install.recovery.recover_install` finds after a crash at any point:

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
import os
from pathlib import Path

from bundler.config.file import ConfigFile
from bundler.config.write import append_audit, commit_config, stage_config
from bundler.errors import ChangedMeanwhile
from bundler.fs import durable, safefs
from bundler.fs.interrupts import signals_deferred
from bundler.install.files import (
    DIR_MODE,
    lstat_rel,
    mkdir_rel,
    prune_empty,
    rename_rel,
    rmdir_rel,
    target_state,
    tree_at,
)
from bundler.install.journal import RECEIPTS, Journal, staging_name, write_journal_file
from bundler.install.receipt_write import (
    mark_undone,
    receipt_present,
    remove_partial_receipt,
    write_receipt,
)
from bundler.install.undo_files import put_back_all, remove_taken
from bundler.rules.actions import left_alone, step
from bundler.rules.names import escape_display


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
        write_journal_file(self.staging_fd, self.journal)

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
                raise ChangedMeanwhile(
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
        return roll_back(self.install_fd, self.config.dir_fd, self.journal, dry_run=False)

    def close(self) -> None:
        """Close the staging folder's descriptor (the folder itself stays for completion)."""
        if self.staging_fd >= 0:
            fd, self.staging_fd = self.staging_fd, -1
            os.close(fd)


def roll_back(install_fd: int, config_dir_fd: int, journal: Journal, *, dry_run: bool) -> list[str]:
    """Put back what an uncommitted transaction moved or created; returns the actions taken."""
    actions: list[str] = []
    put_back_all(install_fd, journal, actions, dry_run=dry_run, changed_only=False)
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
        remove_partial_receipt(install_fd, journal, actions, dry_run=dry_run)
        name = receipt_present(install_fd, journal)
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
        remove_taken(install_fd, journal, actions, dry_run=dry_run)
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
        mark_undone(install_fd, journal, actions, dry_run=dry_run)
    staging = staging_name(journal.token)
    actions.append(step("remove", staging, staging, dry_run=dry_run))
    if not dry_run:
        safefs.rmtree_at(install_fd, staging_name(journal.token))
        durable.fsync_dir(install_fd)
    return actions, receipt
