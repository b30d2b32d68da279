"""``recover --install`` (03 §6): every staging folder of an import or undo found and finished,
rolled back or removed by its journal, and the leftovers no journal names cleared."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from bundler.config.file import read_config_file
from bundler.config.secretkey import key_leftovers
from bundler.config.write import config_lock
from bundler.errors import Damaged, RecoveryNeeded
from bundler.fs import durable, safefs, scratch
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.install.files import io_errors_refused, open_install
from bundler.install.journal import JOURNAL, STAGING_PREFIX, UNPACK_PREFIX, Journal
from bundler.install.transaction import complete_transaction, roll_back
from bundler.rules import hints, tomlcompat
from bundler.rules.actions import Action, step
from bundler.rules.names import escape_display

MAX_JOURNAL_BYTES = 1 << 29


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
    raise Damaged(
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
            raise RecoveryNeeded(
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
                actions += roll_back(install_fd, config.dir_fd, journal, dry_run=dry_run)
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
                raise Damaged(
                    f"{escape_display(name)}: config.toml matches neither the state before nor "
                    f"after this {journal.kind}; it lists targets "
                    f"{', '.join(escape_display(m['dst']) for m in journal.moves) or 'none'}; "
                    "resolve by hand",
                    path=str(install_root / name),
                )
    root = str(install_root)
    return [a.under(root) if isinstance(a, Action) else a for a in actions]
