"""``bundler agents import --undo RECEIPT``: remove what one import added, and nothing anyone
wrote since (03 §4).

Entries are compared with what the receipt recorded by digest with ``x-secret`` fields ignored
(filling in secrets after an import is expected); an edited one is saved beside the receipt,
then removed. Files are compared by size and content digest: one still as imported is
removed, any other kept in place and listed, with a ``mv`` line moving its folder aside. The
removal is itself a journaled transaction (:mod:`bundler.install.journal`): files move *into*
staging, the config loses the entries, the receipt is marked undone.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomli_w
import tomlkit

from bundler.bundle.walk import MAX_ENTRIES
from bundler.config.file import parse_config_text, read_config_file
from bundler.config.guards import UNRESTRICTED
from bundler.config.write import config_lock
from bundler.errors import BundlerError, InvalidInput, Refused
from bundler.fs import digest, durable, safefs
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.install import merge, receipt_files
from bundler.install.files import (
    CONFIG,
    READ_FLAGS,
    entry_digest,
    field_digests,
    io_errors_refused,
    lstat_rel,
    open_install,
    public_value,
    rename_noreplace,
    tree_at,
    tree_digest,
    xxh,
)
from bundler.install.journal import (
    MAX_RECEIPT_BYTES,
    RECEIPT_FORMAT,
    RECEIPTS,
    Journal,
    Transaction,
    complete_transaction,
    is_emptied_list,
    is_install_path,
    is_path_list,
    kept_in,
    put_back,
    stamp,
)
from bundler.rules import hints, tomlcompat
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


@dataclass(frozen=True)
class ReceiptInfo:
    """One import receipt of an install, for ``agents imports``.

    ``state``: ``imported`` (everything it added is there, unchanged), ``undone`` (marked so
    by its undo, which kept ``kept_files`` files someone wrote; or none of it is there) or
    ``changed`` (some of it was edited or removed since).
    """

    path: Path
    agent: str
    bundle: str
    imported_at: str
    state: str
    kept_files: int = 0

    @property
    def shown_state(self) -> str:
        """The state as ``agents imports`` prints it: ``undone, 3 files kept``."""
        if self.state != "undone" or not self.kept_files:
            return self.state
        return f"undone, {self.kept_files} file{'s' if self.kept_files != 1 else ''} kept"

    def as_json(self) -> dict[str, Any]:
        """One row of ``agents imports --json``."""
        return {
            "receipt": str(self.path),
            "agent": self.agent,
            "bundle": self.bundle,
            "imported_at": self.imported_at,
            "state": self.state,
            "kept_files": self.kept_files,
        }


def _load_receipt(receipt: Path) -> dict[str, Any]:
    shown = escape_display(str(receipt))
    try:
        raw = read_small_file(receipt, MAX_RECEIPT_BYTES)
    except NotSmallFile as why:
        raise InvalidInput(
            f"{shown} {why.reason}: it is not an import receipt", path=str(receipt)
        ) from None
    except OSError as exc:
        raise Refused(
            f"cannot read receipt {shown} ({os.strerror(exc.errno or errno.EIO)})",
            path=str(receipt),
        ) from None
    try:
        data = tomlcompat.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomlcompat.TOMLDecodeError):
        raise InvalidInput(f"{shown} is not an import receipt", path=str(receipt)) from None
    if data.get("format") != RECEIPT_FORMAT or not isinstance(data.get("entries"), list):
        raise InvalidInput(
            f"{shown} is not an import receipt this version understands", path=str(receipt)
        )
    problem = _receipt_problem(data)
    if problem is not None:
        raise InvalidInput(
            f"{shown} is damaged ({problem}): it is not a receipt bundler wrote; nothing was done",
            path=str(receipt),
        )
    return data


def _is_entry_path(path: object) -> bool:
    """Whether ``path`` names a whole entry an import adds (``providers.models.openai.main``,
    ``mcp.servers.x``, ``agents.a``), never a field inside one."""
    if not isinstance(path, str):
        return False
    try:
        segments = parse_path(path)
    except BundlerError:
        return False
    located = merge.split_entry_path(segments)
    if located is not None:
        return not located[2]
    return len(segments) == 2 and segments[0] == "agents"


def _receipt_problem(data: Mapping[str, Any]) -> str | None:
    """What in a receipt an undo could not act on safely, or None. An undo removes what a
    receipt names: so its entries must be whole entries (a field path would take the secrets
    of the whole entry into the saved copy), its folders and parents paths inside the install,
    and every list the shape the import wrote."""
    entries = data["entries"]
    if not all(
        isinstance(entry, dict)
        and _is_entry_path(entry.get("path"))
        and isinstance(entry.get("digest"), str)
        and isinstance(entry.get("fields", {}), dict)
        for entry in entries
    ):
        return "an entry is not a whole config entry with its digest"
    folders = data.get("folders", [])
    if not isinstance(folders, list) or not all(
        isinstance(folder, dict)
        and is_install_path(folder.get("path"))
        and isinstance(folder.get("tree"), str)
        for folder in folders
    ):
        return "folders is not a list of {path, tree} inside the install"
    if not is_emptied_list(data.get("emptied", [])):
        return "emptied is not a list of {path, mode} inside the install"
    if not is_path_list(data.get("created_parents", [])):
        return "created_parents is not a list of paths inside the install"
    if not all(_is_file_list(folder.get("files", [])) for folder in folders):
        return "a folder's files are not a list of [path, size, digest] inside it"
    if "listing" in data:
        listing = data["listing"]
        if not (
            isinstance(listing, dict)
            and isinstance(listing.get("xxh3_128"), str)
            and type(listing.get("bytes")) is int
            and 0 <= listing["bytes"] <= MAX_RECEIPT_BYTES
            and type(listing.get("lines")) is int
            and 0 <= listing["lines"] <= MAX_ENTRIES
            and all(
                type(folder.get("listed")) is int
                and folder["listed"] >= 0
                and "files" not in folder
                for folder in folders
            )
            and sum(folder["listed"] for folder in folders) == listing["lines"]
        ):
            return "listing is not {xxh3_128, bytes, lines} with each folder's lines listed"
    undone = data.get("undone", {})
    if not (
        isinstance(undone, dict)
        and type(undone.get("kept_files", 0)) is int
        and is_path_list(undone.get("kept_folders", []))
    ):
        return "undone is not a table of {at, kept_files, kept_folders}"
    return None


def _is_file_list(files: object) -> bool:
    """Whether ``files`` is a list of ``[path inside the folder, size, digest]``."""
    return isinstance(files, list) and all(
        isinstance(item, list)
        and len(item) == 3
        and is_install_path(item[0])
        and type(item[1]) is int
        and item[1] >= 0
        and isinstance(item[2], str)
        for item in files
    )


def _read_files(receipt: Path, data: Mapping[str, Any]) -> None:
    """Give each folder of a receipt with a ``[listing]`` its ``files`` from the listing beside
    it (:func:`receipt_files.read_listing`), checked whole before anything is done: missing,
    damaged or another receipt's, the undo is refused. A receipt holding its files itself, or
    none (written by earlier versions), is left as it is."""
    listing = data.get("listing")
    if not isinstance(listing, dict):
        return
    folders = data.get("folders", [])
    lists = receipt_files.read_listing(
        receipt, listing["xxh3_128"], listing["bytes"], [f["listed"] for f in folders]
    )
    for folder, files in zip(folders, lists, strict=True):
        if not _is_file_list([list(file) for file in files]):
            raise InvalidInput(
                f"{escape_display(f'{receipt}{receipt_files.SUFFIX}')} is damaged (a path is not "
                "inside its folder): it is not a listing bundler wrote; nothing was done",
                path=f"{receipt}{receipt_files.SUFFIX}",
            )
        folder["files"] = files


def _find_entry(config: Mapping[str, Any], path: str) -> Any:
    segments = parse_path(path)
    located = merge.split_entry_path(segments)
    if located is not None:
        kind, name, _ = located
        return next(
            (entry for other, entry in merge.iter_entries(config, kind) if other == name), None
        )
    node: Any = config
    for part in segments:
        node = node.get(part) if isinstance(node, dict) else None
    return node


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


def _state_of(
    current: Mapping[str, Any], install_fd: int, data: Mapping[str, Any]
) -> tuple[str, list[str]]:
    """(``imported`` | ``undone`` | ``changed``, what changed) of one receipt's additions."""
    if "undone" in data:
        return "undone", []
    changed: list[str] = []
    absent = 0
    entries = [entry for entry in data["entries"] if isinstance(entry, dict)]
    for entry in entries:
        value = _find_entry(current, str(entry["path"]))
        if value is None:
            absent += 1
            changed.append(f"{entry['path']} (removed)")
        elif entry_digest(value, parse_path(str(entry["path"]))) != entry.get("digest"):
            changed += _changed_fields(entry, value)
    folders = [folder for folder in data.get("folders", []) if isinstance(folder, dict)]
    for folder in folders:
        tree = tree_at(install_fd, str(folder["path"]))
        if tree is None:
            absent += 1
        if tree != folder.get("tree"):
            changed.append(f"{folder['path']} (changed or missing)")
    if absent == len(entries) + len(folders):
        return "undone", changed
    return ("changed" if changed else "imported"), changed


def _changed_fields(entry: Mapping[str, Any], value: Any) -> list[str]:
    """Each field of an edited entry, named with what happened to it; the entry as a whole
    for receipts written before per-field digests."""
    recorded = entry.get("fields")
    segments = parse_path(str(entry["path"]))
    if not isinstance(recorded, dict) or not isinstance(value, dict):
        return [f"{entry['path']} (changed)"]
    now = field_digests(value, segments)
    named = [
        f"{format_path([*segments, key])} ({'removed' if key not in now else 'changed'})"
        for key, digest in recorded.items()
        if now.get(key) != digest
    ]
    named += [f"{format_path([*segments, key])} (added)" for key in now if key not in recorded]
    return named or [f"{entry['path']} (changed)"]


def _save_edited(receipt: Path, current: Mapping[str, Any], paths: Sequence[str]) -> Path:
    """Write the current values of the edited entries (secret fields left out) beside the
    receipt, 0600 and durable, before ``--force`` removes them; returns the file."""
    document = {
        "receipt": str(receipt),
        "saved_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "entries": {
            path: public_value(_find_entry(current, path), parse_path(path)) for path in paths
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


def _receipts_dir(install_root: Path) -> Path:
    return install_root.joinpath(*RECEIPTS)


def _receipt_names(folder: Path) -> list[str]:
    """The receipt file names in ``folder``, sorted; none when it does not exist (no import
    yet). A folder that cannot be read is :class:`Refused` naming it: taken for an empty one,
    it made ``agents imports`` say "no imports" and ``--undo last`` "no import left to undo"
    while receipts were there."""
    try:
        return sorted(name for name in os.listdir(folder) if name.endswith(".toml"))
    except FileNotFoundError:
        return []
    except OSError as err:
        shown = escape_display(str(folder))
        raise Refused(
            f"cannot read the import receipts in {shown} ({os.strerror(err.errno or 0)}); fix "
            "its permissions, or run as the user who imported",
            path=str(folder),
        ) from None


def list_receipts(install_root: Path) -> list[ReceiptInfo]:
    """Every readable receipt of the install, newest first, each with its state. Reads only;
    a file that is not a receipt is skipped; a receipts folder that cannot be read is
    :class:`Refused`."""
    install_root = Path(os.path.abspath(install_root))
    folder = _receipts_dir(install_root)
    names = _receipt_names(folder)
    found: list[tuple[tuple[str, int], ReceiptInfo]] = []
    with open_install(install_root, create=False) as install_fd, contextlib.ExitStack() as stack:
        config = read_config_file(install_fd, install_root, stack, missing_ok=True)
        current = config.parse()
        for name in names:
            path = folder / name
            try:
                data = _load_receipt(path)
                mtime = os.stat(path, follow_symlinks=False).st_mtime_ns
            except (BundlerError, OSError):
                continue
            state, changed = _state_of(current, install_fd, data)
            when = str(data.get("imported_at", ""))
            undone = data.get("undone", {})
            info = ReceiptInfo(
                path,
                str(data.get("agent", "")),
                str(data.get("bundle", "")),
                when,
                state,
                int(undone.get("kept_files", 0)),
            )
            found.append(((when, mtime), info))
    return [info for _key, info in sorted(found, key=lambda item: item[0], reverse=True)]


def unfilled_secrets(install_root: Path, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(secret path, agent)`` of each required secret an import left unfilled that is still
    empty in ``config``, sorted by path.

    "Left unfilled" is the import's own decision (:func:`merge.plan_merge`'s ``secrets_missing``,
    kept in the receipt), not a second rule; a secret whose entry is gone (undone, removed) is
    not listed. Reads only; a file that is not a receipt is skipped.
    """
    folder = _receipts_dir(Path(os.path.abspath(install_root)))
    try:
        names = _receipt_names(folder)
    except Refused:
        # a hint beside what validate, get and doctor check: it must not make them fail, and
        # 'agents imports' names the folder it cannot read
        return []
    found: dict[str, str] = {}
    for name in names:
        try:
            data = _load_receipt(folder / name)
        except BundlerError:
            continue
        missing = data.get("secrets_missing")
        for path in missing if isinstance(missing, list) else []:
            if not isinstance(path, str):
                continue
            try:
                segments = parse_path(path)
            except BundlerError:
                continue
            located = merge.split_entry_path(segments)
            node: Any = _find_entry(config, path)
            if node is None or located is None:
                continue
            for part in located[2]:
                node = node.get(part) if isinstance(node, dict) else None
            if node is None or node == "":
                # an older receipt may spell the path in a form since retired (headers."X-Org.Id")
                found.setdefault(format_path(segments), str(data.get("agent", "")))
    return sorted(found.items())


def resolve_receipt(install_root: Path, which: str) -> Path:
    """``which`` as a receipt path; ``last`` is the newest import not yet undone."""
    if which != "last":
        return Path(which)
    for info in list_receipts(install_root):
        if info.state != "undone":
            return info.path
    shown = escape_display(str(install_root))
    raise Refused(
        f"no import left to undo in {shown} (see 'bundler agents imports')",
        path=str(install_root),
    )


KEPT_WHY = {
    safefs.SkipKind.SYMLINK: "a symbolic link",
    safefs.SkipKind.SPECIAL: "a special file",
    safefs.SkipKind.HARD_LINK: "a file with another name (a hard link)",
    safefs.SkipKind.REPLACED: "replaced while it was read",
    safefs.SkipKind.OTHER_DEVICE: "on another file system",
    safefs.SkipKind.BAD_NAME: "a name that is not UTF-8",
}
"""Why an entry a walk does not read is kept: none of them is a file the import made."""


@dataclass
class _FolderPlan:
    """What an undo does in one folder of the import: the files to take (``{src, size,
    digest}``, install-relative) and what it keeps, with why."""

    path: str
    present: bool
    takes: list[dict[str, Any]] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


def _plan_folder(install_fd: int, folder: Mapping[str, Any]) -> _FolderPlan:
    """Read the import's folder ``folder`` as it is now, without following a link: each file
    the receipt recorded that still has its size and digest is to be taken; every other entry
    (edited, new, a link, a special file) is kept. A receipt without per-file digests (written
    by an earlier version) lets an undo take the files only when the whole tree is unchanged."""
    rel = str(folder["path"])
    try:
        st = lstat_rel(install_fd, rel)
    except Refused:
        return _FolderPlan(rel, True, kept={rel: "behind a symbolic link"})
    if st is None:
        return _FolderPlan(rel, False)  # moved aside or removed: nothing of it to remove
    if not stat.S_ISDIR(st.st_mode):
        return _FolderPlan(rel, True, kept={rel: "no longer a folder"})
    plan = _FolderPlan(rel, True)
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
    """The :func:`~bundler.install.journal.stamp` of the file an undo just took into its
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


def _take_files(
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


def _installed_receipt(install_root: Path, receipt: Path, data: Mapping[str, Any]) -> str:
    """The name in ``data/state/imports/`` of the receipt ``receipt`` is (or is a copy of,
    told by its token), for the undo to mark; ``""`` when the install holds none."""
    folder = _receipts_dir(install_root)
    with contextlib.suppress(OSError):
        if os.path.samefile(Path(receipt).parent, folder):
            return Path(receipt).name
    for name in _receipt_names(folder):
        with contextlib.suppress(BundlerError, OSError):
            if _load_receipt(folder / name).get("token") == data.get("token"):
                return name
    return ""


def _mv_line(install_root: Path, folder: str) -> str:
    """The ``mv`` line that moves a kept folder aside to a name free now, every word
    shell-quoted (a hostile name pastes as one argument and runs nothing)."""
    source = install_root / folder
    target = Path(f"{source}.undone")
    counter = 2
    while os.path.lexists(target):
        target = Path(f"{source}.undone-{counter}")
        counter += 1
    return hints.shell_line("mv", "-n", "--", str(source), str(target))


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

    Crash safety: one journaled transaction (:mod:`bundler.install.journal`). The journal lists
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
    data = _load_receipt(receipt)
    _read_files(receipt, data)
    result = UndoReport(agent=str(data.get("agent", "")), receipt=str(receipt), dry_run=dry_run)
    with open_install(install_root, create=False) as install_fd, contextlib.ExitStack() as stack:
        stack.enter_context(config_lock(install_root))
        config = read_config_file(install_fd, install_root, stack, missing_ok=True)
        current = config.parse()
        folders = [folder for folder in data.get("folders", []) if isinstance(folder, dict)]
        state, changed = _state_of(current, install_fd, data)
        if state == "undone":
            raise Refused(
                f"{escape_display(str(receipt))} is already undone: nothing it added is in the "
                "install",
                path=str(receipt),
            )
        edited = sorted(
            str(entry["path"])
            for entry in data["entries"]
            if (value := _find_entry(current, str(entry["path"]))) is not None
            and entry_digest(value, parse_path(str(entry["path"]))) != entry.get("digest")
        )
        # an entry already gone has nothing left to remove
        paths = [
            str(entry["path"])
            for entry in data["entries"]
            if _find_entry(current, str(entry["path"])) is not None
        ]
        new_text = _undone_text(config.text, current, paths, data)
        errors, _ = validate(parse_config_text(new_text or "", config.where), install_root)
        if errors:
            raise InvalidInput(
                "cannot undo: the config without the imported entries would be invalid: "
                f"{errors[0].line()}",
                path=errors[0].path,
            )
        plans = [_plan_folder(install_fd, folder) for folder in folders]
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
            undone_receipt=_installed_receipt(install_root, receipt, data),
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
            journal.takes = _take_files(install_fd, staging_fd, journal.takes, token)
            txn.write_journal()
            txn.run(new_text)
        except BaseException as err:
            if not txn.committed:
                try:
                    txn.rollback()
                except OSError:
                    raise Refused(
                        hints.Hinted(
                            "undo failed", hints.command("recover", "--install", str(install_root))
                        ),
                        path=str(install_root),
                    ) from err
                if isinstance(err, OSError):
                    raise Refused(
                        f"undo failed ({os.strerror(err.errno or errno.EIO)}); nothing changed",
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
    plans: Sequence[_FolderPlan],
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
    result.moves = [_mv_line(install_root, folder) for folder in standing]


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
    raise Refused(
        "cannot undo: config.toml could not be edited to remove exactly the imported entries",
        path=CONFIG,
    )
