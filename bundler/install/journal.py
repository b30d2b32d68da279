"""The journal of an import or undo (03 §3.2): what it records, its names on disk, and the
rules a journal read back must meet before recovery acts on it (a damaged one is refused, never
taken for none). The transaction it drives is :mod:`bundler.install.transaction`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import tomli_w

from bundler.fs import durable
from bundler.install import receipt_files
from bundler.rules import tomlcompat
from bundler.rules.names import has_control_chars

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
        problem = journal_problem(data, token)
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


def journal_problem(data: Any, token: str) -> str | None:
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
    if data.get("receipt_files") and listing_named(str(data.get("receipt_text", ""))) is None:
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


def write_journal_file(staging_fd: int, journal: Journal) -> None:
    durable.atomic_write(staging_fd, JOURNAL, journal.dumps())


"""A journal names the folders and entries of one import and its receipt's text, or the files
one undo takes (some 150 bytes each, for at most a million): far smaller than this."""


def listing_named(receipt_text: str) -> tuple[str, int] | None:
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
