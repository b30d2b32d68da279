"""``bundler agents import --undo RECEIPT``: remove what one import added, and nothing anyone
wrote since (03 §4).

Entries are compared with what the receipt recorded by digest with ``x-secret`` fields ignored
(filling in secrets after an import is expected); an edited one is saved beside the receipt,
then removed. Files are compared by size and content digest: one still as imported is
removed, any other kept in place and listed, with a ``mv`` line moving its folder aside. The
removal is itself a journaled transaction (:mod:`bundler.install.transaction`): files move *into*
staging, the config loses the entries, the receipt is marked undone.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomli_w
import tomlkit

from bundler.config.file import parse_config_text, read_config_file
from bundler.config.guards import UNRESTRICTED
from bundler.config.write import config_lock
from bundler.errors import (
    BundlerError,
    InvalidConfig,
    InvalidInput,
    NotFound,
    PolicyRefused,
    RecoveryNeeded,
    os_failure,
)
from bundler.fs import durable
from bundler.install import merge
from bundler.install.files import (
    CONFIG,
    entry_digest,
    io_errors_refused,
    lstat_rel,
    open_install,
    public_value,
    xxh,
)
from bundler.install.journal import Journal
from bundler.install.receipts import (
    find_entry,
    installed_receipt,
    load_receipt,
    read_receipt_files,
    receipt_state,
)
from bundler.install.transaction import Transaction, complete_transaction
from bundler.install.undo_files import FolderPlan, kept_in, mv_line, plan_folder, take_files
from bundler.rules import hints
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path, parse_path
from bundler.rules.validate import validate


@dataclass
class UndoReport:
    """What :func:`undo_import` removed and kept (or, with ``dry_run``, would).

    ``kept`` are ``{path, why}`` of each file left in place; ``moves`` the paste-ready ``mv``
    line of each folder left, moving it aside; ``changes`` each field of an ``edited`` entry
    with what happened to it."""

    agent: str
    receipt: str
    removed_entries: list[str] = field(default_factory=list)
    removed_folders: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False
    edited: list[str] = field(default_factory=list)
    saved: str = ""
    removed_files: int = 0
    gone_folders: list[str] = field(default_factory=list)
    kept: list[dict[str, str]] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` payload of ``agents import --undo``."""
        return {
            "agent": self.agent,
            "receipt": self.receipt,
            "removed": self.removed_entries,
            "removed_files": self.removed_files,
            "removed_folders": self.removed_folders,
            "already_gone": self.gone_folders,
            "kept": self.kept,
            "mv": self.moves,
            "dry_run": self.dry_run,
            "edited": self.edited,
            "changes": self.changes,
            "saved": self.saved,
        }


def _remove_entries(config: dict[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    for path in paths:
        segments = parse_path(path)
        located = merge.split_entry_path(segments)
        if located is not None and located[0] == "mcp.servers":
            servers = out["mcp"]["servers"]
            index = next(
                i
                for i, s in enumerate(servers)
                if isinstance(s, dict) and s.get("name") == located[1]
            )
            del servers[index]
            continue
        node = out
        for part in segments[:-1]:
            node = node[part]
        del node[segments[-1]]
    return out


def _remove_from_text(text: str, paths: Sequence[str], *, prune: bool = False) -> str:
    """``text`` without the entries at ``paths``, the rest kept through tomlkit; with
    ``prune``, also without the tables and arrays on their way that this leaves empty (the
    import made them, in most configs: ``groq = {}`` inside an inline ``providers`` table)."""
    doc = tomlkit.parse(text)
    for path in paths:
        segments = parse_path(path)
        located = merge.split_entry_path(segments)
        chain: list[tuple[Any, Any]] = []  # (container, key) from the root to the entry
        node: Any = doc
        if located is not None and located[0] == "mcp.servers":
            servers: Any = doc["mcp"]["servers"]
            index = next(i for i, s in enumerate(servers) if s.get("name") == located[1])
            chain = [(doc, "mcp"), (doc["mcp"], "servers"), (servers, index)]
        else:
            for part in segments[:-1]:
                chain.append((node, part))
                node = node[part]
            chain.append((node, segments[-1]))
        container, key = chain.pop()
        del container[key]
        while prune and chain and len(container) == 0:
            container, key = chain.pop()
            del container[key]
    return tomlkit.dumps(doc)


def _pruned(value: Any) -> Any:
    """``value`` without empty tables or arrays: removing a map's last entry leaves one behind."""
    if isinstance(value, dict):
        out = {key: _pruned(sub) for key, sub in value.items()}
        return {key: sub for key, sub in out.items() if sub not in ({}, [])}
    return value


def _save_edited(receipt: Path, current: Mapping[str, Any], paths: Sequence[str]) -> Path:
    """Write the current values of the edited entries (secret fields left out) beside the
    receipt, 0600 and durable, before ``--force`` removes them; returns the file."""
    document = {
        "receipt": str(receipt),
        "saved_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "entries": {
            path: public_value(find_entry(current, path), parse_path(path)) for path in paths
        },
    }
    data = tomli_w.dumps(document).encode("utf-8")
    folder = receipt.parent
    fd = durable.open_dir(folder, follow=False)
    try:
        name = f"{receipt.stem}.edited-{durable.random_token()}.toml"
        durable.create_synced(fd, name, data, mode=0o600)
    finally:
        os.close(fd)
    return folder / name


"""Why an entry a walk does not read is kept: none of them is a file the import made."""


@io_errors_refused("undo")
def undo_import(install_root: Path, receipt: Path, *, dry_run: bool = False) -> UndoReport:
    """Remove what the import recorded in ``receipt`` added (03 §4), transactionally, and never
    a byte anyone wrote since.

    The config loses the import's entries (those edited since are saved beside the receipt
    first, their ``x-secret`` fields left out; filled-in secrets do not count as edits). Every
    file the import added that still has the size and digest the receipt recorded is removed,
    then every folder of the import left empty; every other file (edited, new, a link, a
    special file) stays where it is and is listed with a ``mv`` line that moves its folder
    aside. A folder that is gone (moved aside) counts as removed. The receipt is marked undone.

    Crash safety: one journaled transaction (:mod:`bundler.install.transaction`). The journal lists
    the files to take before any is taken; each is renamed into the staging folder, where it is
    checked; the config's replacement is the commit. ``recover --install`` before it puts every
    taken file back, after it removes them and finishes; either way one consistent state.

    Race safety, what is guaranteed: every path is reached from the install's descriptor
    without following a link; a file is renamed (the entry itself: a link swapped in is moved,
    never followed) into the staging folder and only there opened (``O_NOFOLLOW``) and compared
    with the receipt, so the bytes judged unchanged are the bytes removed, and no process can
    open the file by its path any more; a file that fails the check goes back. A process that
    already held the file open can still write to it; such a write changes its size or
    modification time, which is compared again just before the unlink (after the commit), and
    the file then goes back instead. A write that leaves both as they were (within one tick of
    a coarse file-system clock, of the same size) is not seen. Removal is by ``unlinkat`` in the
    staging folder and ``rmdir``, which the kernel refuses for a folder not empty.
    """
    install_root = Path(os.path.abspath(install_root))
    data = load_receipt(receipt)
    read_receipt_files(receipt, data)
    result = UndoReport(agent=str(data.get("agent", "")), receipt=str(receipt), dry_run=dry_run)
    with open_install(install_root, create=False) as install_fd, contextlib.ExitStack() as stack:
        stack.enter_context(config_lock(install_root))
        config = read_config_file(install_fd, install_root, stack, missing_ok=True)
        current = config.parse()
        folders = [folder for folder in data.get("folders", []) if isinstance(folder, dict)]
        state, changed = receipt_state(current, install_fd, data)
        if state == "undone":
            raise NotFound(
                f"{escape_display(str(receipt))} is already undone: nothing it added is in the "
                "install",
                path=str(receipt),
            )
        edited = sorted(
            str(entry["path"])
            for entry in data["entries"]
            if (value := find_entry(current, str(entry["path"]))) is not None
            and entry_digest(value, parse_path(str(entry["path"]))) != entry.get("digest")
        )
        # an entry already gone has nothing left to remove
        paths = [
            str(entry["path"])
            for entry in data["entries"]
            if find_entry(current, str(entry["path"])) is not None
        ]
        new_text = _undone_text(config.text, current, paths, data)
        errors, _ = validate(parse_config_text(new_text or "", config.where), install_root)
        if errors:
            raise InvalidConfig(
                "cannot undo: the config without the imported entries would be invalid: "
                f"{errors[0].line()}",
                path=errors[0].path,
            )
        plans = [plan_folder(install_fd, folder) for folder in folders]
        result.edited = edited
        result.changes = [
            change
            for change in changed
            if not change.endswith(("(changed or missing)", "(removed)"))
        ]
        result.removed_entries = paths
        if dry_run:
            result.removed_files = sum(len(plan.takes) for plan in plans)
            result.gone_folders = [str(install_root / p.path) for p in plans if not p.present]
            result.removed_folders = [
                str(install_root / p.path) for p in plans if p.present and not p.kept
            ]
            kept = {path: why for plan in plans for path, why in plan.kept.items()}
            _report_kept(result, install_root, kept, [p.path for p in plans if p.kept])
            return result
        if edited:
            result.saved = str(_save_edited(Path(receipt), current, edited))
        token = durable.random_token()
        journal = Journal(
            kind="undo",
            token=token,
            old_config=config.digest,
            new_config="absent" if new_text is None else xxh(new_text.encode("utf-8")),
            config_tmp=f".{config.name}.bundler-{token}",
            config_dir=os.path.realpath(f"/proc/self/fd/{config.dir_fd}"),
            restore_empty=list(data.get("emptied", [])),
            remove_parents=list(data.get("created_parents", [])),
            prune=[plan.path for plan in plans if plan.present],
            undone_receipt=installed_receipt(install_root, receipt, data),
        )
        agent_path = ["agents", result.agent, *UNRESTRICTED]
        if merge.value_at(current, agent_path) is True:
            # the entry goes away, so the flag is off again (false is its default)
            line = {"path": format_path(agent_path), "old": True, "new": False}
            journal.audit = [{**line, "via": "agents import --undo"}]
        txn = Transaction(install_fd, config, journal)
        try:
            staging_fd = txn.open_staging()
            takes = [take for plan in plans for take in plan.takes]
            journal.takes = [
                {**take, "dst": f"{txn.staging}/{index}"} for index, take in enumerate(takes)
            ]
            # durable before the first file leaves its folder: recovery puts back what it lists
            txn.write_journal()
            journal.takes = take_files(install_fd, staging_fd, journal.takes, token)
            txn.write_journal()
            txn.run(new_text)
        except BaseException as err:
            if not txn.committed:
                try:
                    txn.rollback()
                except OSError:
                    raise RecoveryNeeded(
                        hints.Hinted(
                            "undo failed", hints.command("recover", "--install", str(install_root))
                        ),
                        path=str(install_root),
                    ) from err
                if isinstance(err, OSError):
                    raise os_failure(
                        f"undo failed ({os.strerror(err.errno or errno.EIO)}); nothing changed",
                        err,
                        path=str(install_root),
                    ) from err
                raise
            txn.close()
            raise
        txn.close()
        failure = str(txn.after_commit_error) if txn.after_commit_error is not None else ""
        try:
            complete_transaction(install_root, install_fd, journal, dry_run=False)
        except (OSError, BundlerError) as err:
            failure = failure or str(err)
        if failure:
            result.warnings.append(
                hints.Hinted(
                    f"undone, but tidying up failed ({failure})",
                    hints.command("recover", "--install", str(install_root)),
                )
            )
        result.removed_files = len(journal.takes)
        result.gone_folders = [str(install_root / p.path) for p in plans if not p.present]
        try:
            _report_after(result, install_root, install_fd, plans, folders)
        except (OSError, BundlerError) as err:
            # the undo stands: only the account of what it kept could not be read back
            result.warnings.append(f"undone, but what was kept could not be listed ({err})")
    return result


def _report_after(
    result: UndoReport,
    install_root: Path,
    install_fd: int,
    plans: Sequence[FolderPlan],
    folders: Sequence[Mapping[str, Any]],
) -> None:
    """Fill in the folders an undo removed and the files it kept, as the disk now has them."""
    result.removed_folders = [
        str(install_root / p.path)
        for p in plans
        if p.present and lstat_rel(install_fd, p.path) is None
    ]
    left, standing = kept_in(install_fd, [p.path for p in plans if p.present])
    recorded = {f"{folder['path']}/{f[0]}" for folder in folders for f in folder.get("files", [])}
    why = {path: reason for plan in plans for path, reason in plan.kept.items()}
    kept = {
        path: why.get(
            path, "changed since the import" if path in recorded else "new since the import"
        )
        for path in left
    }
    _report_kept(result, install_root, kept, standing)


def _report_kept(
    result: UndoReport, install_root: Path, kept: Mapping[str, str], standing: Sequence[str]
) -> None:
    """Fill in what an undo keeps (or would), with the ``mv`` line of each folder left."""
    result.kept = [{"path": str(install_root / path), "why": why} for path, why in kept.items()]
    result.moves = [mv_line(install_root, folder) for folder in standing]


def _undone_text(
    text: str, current: dict[str, Any], paths: Sequence[str], data: Mapping[str, Any]
) -> str | None:
    """The config text without the import's entries (None: there was no config.toml before).

    The import appended its entries, so whenever the file before them is unchanged the exact old
    bytes are its prefix; otherwise the entries are removed through tomlkit, keeping the rest.
    """
    expected = _pruned(_remove_entries(current, paths))
    raw = text.encode("utf-8")
    old_bytes = data.get("old_config_bytes")
    old_digest = data.get("old_config_xxh3_128")
    if data.get("append_only") and isinstance(old_bytes, int) and 0 <= old_bytes <= len(raw):
        prefix = raw[:old_bytes]
        if old_digest == "absent" and old_bytes == 0 and expected == {}:
            return None
        if xxh(prefix) == old_digest:
            with contextlib.suppress(UnicodeDecodeError, InvalidInput):
                candidate = prefix.decode("utf-8")
                if _pruned(parse_config_text(candidate, CONFIG)) == expected:
                    return candidate
    # without the tables the removal empties, unless keeping them gives back the very bytes
    # the config had before the import (an empty table of the user's own): the candidate that
    # does is taken first
    candidates = [_remove_from_text(text, paths, prune=True), _remove_from_text(text, paths)]
    # tomlkit leaves the blank line that stood before what the import appended
    candidates += [candidate.rstrip("\n") + "\n" for candidate in candidates]
    for candidate in sorted(candidates, key=lambda c: xxh(c.encode("utf-8")) != old_digest):
        if _pruned(parse_config_text(candidate, CONFIG)) == expected:
            return candidate
    raise PolicyRefused(
        "cannot undo: config.toml could not be edited to remove exactly the imported entries",
        path=CONFIG,
    )
