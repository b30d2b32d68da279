"""The journal of a restore's swap (04 §5.3.2), and ``bundler recover --home``, which reads it.

A restore stages into ``<home>/.restore-<token>/`` (0700) beside ``journal.toml``, then swaps by a
list of renames recorded there (``state = "swapping"``, ``step`` rewritten and fsynced before
each rename; folders fsynced after each): the previous ``*.before-restore`` set into
``<staging>/previous/``, the current ``chat.db`` (with its sidecars), ``files`` and ``skills``
to ``*.before-restore``, the staged ones into place; then ``state = "committed"``.

Recovery (:func:`recover_home`) reads the journal: ``committed``, or the last step done, rolls
forward (delete the staging folder); otherwise every step is undone in reverse order, each only
when its effect is visible (source absent, destination present), which makes recovery itself
safe to interrupt and re-run. The journal is unlinked before the staging folder is deleted, and a
staging folder without a journal holds nothing of the home's. A journal naming any move a
restore with its token never makes is refused, so a planted journal cannot move files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from bundler.errors import Hostile, Malformed, NotABundle, TooLarge, os_failure
from bundler.fs import durable
from bundler.fs.safefs import open_dir_nofollow, rmtree_at
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.fs.snapshot import SIDECARS
from bundler.home.homes import lock_home, open_home_dir
from bundler.home.publish import remove_leftovers
from bundler.home.zipcheck import DATABASE, TREES
from bundler.rules import tomlcompat
from bundler.rules.actions import Action, step
from bundler.rules.names import escape_display

STAGING_PREFIX = ".restore-"
JOURNAL = "journal.toml"
KEPT = ".before-restore"
PREVIOUS = "previous"
_JOURNAL_FORMAT = 1

# --- names of the swap -----------------------------------------------------------------------


def current_items() -> list[tuple[str, str]]:
    """(item, its before-restore name) for everything a restore replaces, in move order."""
    items = [(DATABASE, f"{DATABASE}{KEPT}")]
    items += [(f"{DATABASE}{suffix}", f"{DATABASE}{KEPT}{suffix}") for suffix in SIDECARS]
    items += [(tree, f"{tree}{KEPT}") for tree in TREES]
    return items


def allowed_moves(token: str) -> set[tuple[str, str]]:
    """Every rename a restore with staging token ``token`` may make (home-relative paths).

    Recovery refuses a journal naming anything else, so a planted journal cannot move files.
    """
    staging = f"{STAGING_PREFIX}{token}"
    moves: set[tuple[str, str]] = set()
    for item, kept in current_items():
        moves.add((kept, f"{staging}/{PREVIOUS}/{kept}"))
        moves.add((item, kept))
    moves.update((f"{staging}/{item}", item) for item in (DATABASE, *TREES))
    return moves


def plan_moves(token: str, present: set[str]) -> list[tuple[str, str]]:
    """The ordered renames of a swap given the home-level names ``present`` now (pure)."""
    staging = f"{STAGING_PREFIX}{token}"
    moves = [
        (kept, f"{staging}/{PREVIOUS}/{kept}") for _item, kept in current_items() if kept in present
    ]
    moves += [(item, kept) for item, kept in current_items() if item in present]
    moves += [(f"{staging}/{item}", item) for item in (DATABASE, *TREES)]
    return moves


# --- the journal -----------------------------------------------------------------------------


@dataclass
class Journal:
    """``journal.toml``: the plan of a swap and how far it got."""

    token: str
    state: str = "extracting"
    step: int = -1
    moves: list[tuple[str, str]] = field(default_factory=list)

    def render(self) -> bytes:
        """TOML text of the journal."""
        document: dict[str, Any] = {
            "format": _JOURNAL_FORMAT,
            "token": self.token,
            "state": self.state,
            "step": self.step,
            "moves": [list(move) for move in self.moves],
        }
        return tomli_w.dumps(document).encode("utf-8")

    def write(self, staging_fd: int) -> None:
        """Replace the journal durably (temporary file, fsync, rename, fsync of the folder)."""
        durable.atomic_write(staging_fd, JOURNAL, self.render())


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_journal(data: bytes, token: str) -> Journal:
    """Parse a journal, refusing anything but the moves a restore with ``token`` can make."""
    where = f"{STAGING_PREFIX}{token}/{JOURNAL}"
    try:
        document = tomlcompat.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomlcompat.TOMLDecodeError) as exc:
        raise Malformed(f"{where} is not valid TOML ({exc})", path=where) from None
    state = document.get("state")
    step = document.get("step", -1)
    raw_moves = document.get("moves", [])
    allowed = allowed_moves(token)
    moves: list[tuple[str, str]] = []
    if not isinstance(raw_moves, list):
        raw_moves = [None]
    for move in raw_moves:
        pair = (str(move[0]), str(move[1])) if isinstance(move, list) and len(move) == 2 else None
        if pair is None or pair not in allowed:
            raise Hostile(f"{where} names a move a restore never makes: remove it", path=where)
        moves.append(pair)
    version = document.get("format")
    if (
        # true and 1.0 equal 1 but are not format 1; a bool is not a step either
        not _is_int(version)
        or version != _JOURNAL_FORMAT
        or document.get("token") != token
        or state not in ("extracting", "swapping", "committed")
        or not _is_int(step)
        or not -1 <= step < max(len(moves), 1)
    ):
        raise NotABundle(f"{where} is not a journal this tool wrote: remove it", path=where)
    return Journal(token, str(state), step, moves)


# --- small descriptor helpers ----------------------------------------------------------------


def exists_at(home_fd: int, rel: str) -> bool:
    try:
        os.stat(rel, dir_fd=home_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _fsync_parent(home_fd: int, rel: str) -> None:
    parent = os.path.dirname(rel)
    if not parent:
        durable.fsync_dir(home_fd)
        return
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=home_fd)
    try:
        durable.fsync_dir(fd)
    finally:
        os.close(fd)


def rename_move(home_fd: int, src: str, dst: str) -> None:
    """Rename without replacing; both folders fsynced afterwards."""
    try:
        durable.renameat2(home_fd, src, home_fd, dst, durable.RENAME_NOREPLACE)
    except OSError as exc:
        if exc.errno not in durable.UNSUPPORTED_ERRNOS:
            raise
        if exists_at(home_fd, dst):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst) from None
        os.rename(src, dst, src_dir_fd=home_fd, dst_dir_fd=home_fd)
    _fsync_parent(home_fd, src)
    if os.path.dirname(src) != os.path.dirname(dst):
        _fsync_parent(home_fd, dst)


def discard_staging(home_fd: int, staging: str, staging_fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(JOURNAL, dir_fd=staging_fd)
        os.fsync(staging_fd)
    with contextlib.suppress(OSError):
        rmtree_at(home_fd, staging)
        durable.fsync_dir(home_fd)


def finish_staging(home_fd: int, staging: str, staging_fd: int) -> None:
    """After the commit: the journal goes first, so a half-deleted staging folder is garbage."""
    os.unlink(JOURNAL, dir_fd=staging_fd)
    os.fsync(staging_fd)
    rmtree_at(home_fd, staging)
    durable.fsync_dir(home_fd)


def undo_moves(home_fd: int, moves: list[tuple[str, str]]) -> None:
    for src, dst in reversed(moves):
        if not exists_at(home_fd, src) and exists_at(home_fd, dst):
            rename_move(home_fd, dst, src)


# --- recovery --------------------------------------------------------------------------------


def read_journal(staging_fd: int, token: str) -> Journal | None:
    try:
        data = read_small_file(JOURNAL, 1 << 20, dir_fd=staging_fd, follow=False)
    except FileNotFoundError:
        return None
    except NotSmallFile as why:
        where = f"{STAGING_PREFIX}{token}/{JOURNAL}"
        made = TooLarge if why.too_large else Hostile
        raise made(f"{where} {why.reason}", path=where) from None
    return parse_journal(data, token)


def held_nothing(journal: Journal | None) -> str:
    """Why a staging folder is only garbage: the journal is removed first after a commit, so
    one without a journal may be a finished restore's as well as one that never swapped."""
    if journal is None:
        return "which held nothing of the home's"
    return "which had not started its swap"


def _recover_one(home_fd: int, name: str, dry_run: bool) -> Action:
    token = name[len(STAGING_PREFIX) :]
    staging_fd = open_dir_nofollow(home_fd, name)
    try:
        journal = read_journal(staging_fd, token)
        shown = escape_display(name)
        if journal is None or journal.state == "extracting":
            if not dry_run:
                discard_staging(home_fd, name, staging_fd)
            return step(
                "remove",
                name,
                f"{shown}: the staging folder of an interrupted restore, {held_nothing(journal)}",
                dry_run=dry_run,
            )
        last_src = journal.moves[journal.step][0] if journal.moves else ""
        forward = journal.state == "committed" or (
            journal.step == len(journal.moves) - 1 and not exists_at(home_fd, last_src)
        )
        if forward:
            if not dry_run:
                finish_staging(home_fd, name, staging_fd)
            return step(
                "complete",
                name,
                f"the interrupted restore {shown}: the home holds the restored state",
                dry_run=dry_run,
            )
        if not dry_run:
            undo_moves(home_fd, journal.moves)
            finish_staging(home_fd, name, staging_fd)
        return step(
            "roll back",
            name,
            f"the interrupted restore {shown}: the home holds its previous state",
            dry_run=dry_run,
        )
    finally:
        os.close(staging_fd)


def recover_home(home: Path, dry_run: bool = False) -> list[str]:
    """Complete or roll back what an interrupted restore (or backup) left in ``home``.

    Afterwards the home holds its old state or the restored one, whole, and no
    ``.restore-*`` folder remains. Returns one line per action (empty: nothing to do).
    """
    home_fd = open_home_dir(home)
    actions: list[str] = []
    try:
        if not lock_home(home_fd):
            shown = escape_display(str(home))
            return [f"left alone: {shown}: a restore, recovery or backup of it is running"]
        for name in sorted(os.listdir(home_fd)):
            if not name.startswith(STAGING_PREFIX):
                continue
            st = os.stat(name, dir_fd=home_fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                continue
            if durable.held_by_another(name, dir_fd=home_fd):
                actions.append(f"left alone: {escape_display(name)}: a restore is still running")
                continue
            try:
                actions.append(_recover_one(home_fd, name, dry_run).under(os.path.abspath(home)))
            except OSError as exc:
                raise os_failure(
                    f"cannot recover {escape_display(name)} ({os.strerror(exc.errno or 0)})",
                    exc,
                    path=escape_display(name),
                ) from None
    finally:
        os.close(home_fd)
    return actions + remove_leftovers(home, dry_run=dry_run)
