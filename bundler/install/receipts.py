"""Import receipts read back (03 §4): one loaded and checked as a receipt bundler wrote, an
install's receipts listed with the state of each, and what they say of unfilled secrets.

Reads only. A receipt is acted on only when every entry is a whole config entry and every path
lies inside the install; anything else is refused as damaged, never taken for none.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.bundle.walk import MAX_ENTRIES
from bundler.config.file import read_config_file
from bundler.errors import (
    BundlerError,
    Hostile,
    Malformed,
    NotABundle,
    NotFound,
    Refused,
    TooLarge,
    Unsupported,
    os_failure,
)
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.install import merge, receipt_files
from bundler.install.files import entry_digest, field_digests, open_install, tree_at
from bundler.install.journal import (
    MAX_RECEIPT_BYTES,
    RECEIPT_FORMAT,
    RECEIPTS,
    is_emptied_list,
    is_install_path,
    is_path_list,
)
from bundler.rules import tomlcompat
from bundler.rules.config_view import strings
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path, parse_path


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


def load_receipt(receipt: Path) -> dict[str, Any]:
    shown = escape_display(str(receipt))
    try:
        raw = read_small_file(receipt, MAX_RECEIPT_BYTES)
    except NotSmallFile as why:
        raise (TooLarge if why.too_large else NotABundle)(
            f"{shown} {why.reason}: it is not an import receipt", path=str(receipt)
        ) from None
    except OSError as exc:
        raise os_failure(
            f"cannot read receipt {shown} ({os.strerror(exc.errno or errno.EIO)})",
            exc,
            path=str(receipt),
        ) from None
    try:
        data = tomlcompat.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomlcompat.TOMLDecodeError):
        raise NotABundle(f"{shown} is not an import receipt", path=str(receipt)) from None
    if data.get("format") != RECEIPT_FORMAT or not isinstance(data.get("entries"), list):
        raise Unsupported(
            f"{shown} is not an import receipt this version understands", path=str(receipt)
        )
    problem = _receipt_problem(data)
    if problem is not None:
        raise Malformed(
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


def read_receipt_files(receipt: Path, data: Mapping[str, Any]) -> None:
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
            raise Hostile(
                f"{escape_display(f'{receipt}{receipt_files.SUFFIX}')} is damaged (a path is not "
                "inside its folder): it is not a listing bundler wrote; nothing was done",
                path=f"{receipt}{receipt_files.SUFFIX}",
            )
        folder["files"] = files


def find_entry(config: Mapping[str, Any], path: str) -> Any:
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


def receipt_state(
    current: Mapping[str, Any], install_fd: int, data: Mapping[str, Any]
) -> tuple[str, list[str]]:
    """(``imported`` | ``undone`` | ``changed``, what changed) of one receipt's additions."""
    if "undone" in data:
        return "undone", []
    changed: list[str] = []
    absent = 0
    entries = [entry for entry in data["entries"] if isinstance(entry, dict)]
    for entry in entries:
        value = find_entry(current, str(entry["path"]))
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


def receipts_dir(install_root: Path) -> Path:
    return install_root.joinpath(*RECEIPTS)


def receipt_names(folder: Path) -> list[str]:
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
        raise os_failure(
            f"cannot read the import receipts in {shown} ({os.strerror(err.errno or 0)}); fix "
            "its permissions, or run as the user who imported",
            err,
            path=str(folder),
        ) from None


def list_receipts(install_root: Path) -> list[ReceiptInfo]:
    """Every readable receipt of the install, newest first, each with its state. Reads only;
    a file that is not a receipt is skipped; a receipts folder that cannot be read is
    :class:`Refused`."""
    install_root = Path(os.path.abspath(install_root))
    folder = receipts_dir(install_root)
    names = receipt_names(folder)
    found: list[tuple[tuple[str, int], ReceiptInfo]] = []
    with open_install(install_root, create=False) as install_fd, contextlib.ExitStack() as stack:
        config = read_config_file(install_fd, install_root, stack, missing_ok=True)
        current = config.parse()
        for name in names:
            path = folder / name
            try:
                data = load_receipt(path)
                mtime = os.stat(path, follow_symlinks=False).st_mtime_ns
            except (BundlerError, OSError):
                continue
            state, changed = receipt_state(current, install_fd, data)
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
    folder = receipts_dir(Path(os.path.abspath(install_root)))
    try:
        names = receipt_names(folder)
    except Refused:
        # a hint beside what validate, get and doctor check: it must not make them fail, and
        # 'agents imports' names the folder it cannot read
        return []
    found: dict[str, str] = {}
    for name in names:
        try:
            data = load_receipt(folder / name)
        except BundlerError:
            continue
        for path in strings(data.get("secrets_missing")):
            try:
                segments = parse_path(path)
            except BundlerError:
                continue
            located = merge.split_entry_path(segments)
            node: Any = find_entry(config, path)
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
    raise NotFound(
        f"no import left to undo in {shown} (see 'bundler agents imports')",
        path=str(install_root),
    )


def installed_receipt(install_root: Path, receipt: Path, data: Mapping[str, Any]) -> str:
    """The name in ``data/state/imports/`` of the receipt ``receipt`` is (or is a copy of,
    told by its token), for the undo to mark; ``""`` when the install holds none."""
    folder = receipts_dir(install_root)
    with contextlib.suppress(OSError):
        if os.path.samefile(Path(receipt).parent, folder):
            return Path(receipt).name
    for name in receipt_names(folder):
        with contextlib.suppress(BundlerError, OSError):
            if load_receipt(folder / name).get("token") == data.get("token"):
                return name
    return ""
