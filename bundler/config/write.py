"""The write protocol of 01 §6 for ``config.toml``: the one writer, for ``config set``, import,
undo and recovery alike.

A writer goes through these steps; what is durable after each:

1. :func:`config_lock`: an exclusive ``flock`` on ``<install>/.config.lock`` (the empty lock
   file is created 0600 if absent). The lock serialises bundler's writers and is released when
   the process dies, so a crash never leaves the install locked.
2. :func:`bundler.config.file.read_config_file`: the text and its identity (device, inode,
   size, mtime) from the descriptor read, and the folder holding the real file. Nothing
   written.
3. :func:`stage_config`: the new text in a temporary file beside the real file (behind a
   symlinked ``config.toml``, beside its target), created 0600, then given the original's
   owner and mode, then fsynced. Durable: the staged file's bytes; ``config.toml`` is
   untouched, so a crash here leaves only a stray temporary file. ``config set`` names it
   ``.config.toml.tmp-<random>``; an import or undo names it after its journal's token, so
   that recovery finds it.
4. :func:`commit_config`: if the identity still matches, rename the staged file over
   ``config.toml`` (the commit point: readers see the old file or the new one, never a mix),
   then the caller fsyncs the folder. Durable after the folder fsync: the new file under its
   real name. A changed identity removes the staged file and refuses; nothing is written.
   Bundler's writers hold the lock, so the identity check only has to catch an editor
   outside it.
5. :func:`append_audit`: one JSON line appended to ``data/state/config-audit.jsonl`` and
   fsynced, with any folder it had to create. Durable: the record.

:func:`write_config` is steps 3 and 4 and the fsync together, for callers that stage nothing
else; :func:`write_config_text` and its companions are the same for a caller holding a path.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bundler.config.file import ConfigFile, ConfigIdentity, open_install_root, read_config_file
from bundler.errors import ChangedMeanwhile, NotFound, Refused, os_failure
from bundler.fs import durable
from bundler.fs.durable import fsync_dir, open_dir
from bundler.fs.interrupts import commit_reached, signals_deferred
from bundler.rules import hints, layout, tomlcompat
from bundler.rules.names import escape_display
from bundler.rules.secrets import holds_secret

__all__ = [
    "AUDIT_RELATIVE_PATH",
    "LOCK_NAME",
    "StagedConfig",
    "append_audit",
    "check_config_unchanged",
    "commit_config",
    "commit_staged_config",
    "flush_committed",
    "config_lock",
    "discard_staged_config",
    "stage_config",
    "stage_config_text",
    "write_config",
    "write_config_text",
]

LOCK_NAME = ".config.lock"
AUDIT_RELATIVE_PATH = ("data", "state", "config-audit.jsonl")


@contextmanager
def config_lock(install_root: Path) -> Iterator[None]:
    """Hold the exclusive ``flock`` on ``<install>/.config.lock`` that every writer takes.

    A folder that is still no install when the lock is released (no ``config.toml``: a refused
    first import, a ``config set`` in the wrong folder) gets no lock file left behind. It is
    unlinked while held, so every taker checks, once it holds the lock, that the name still
    leads to the file it locked, and starts over when it does not.
    """
    path = install_root / LOCK_NAME
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as err:
            raise os_failure(
                f"cannot open the config lock {path}: {err.strerror}", err, path=str(path)
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            named = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
            break
        os.close(fd)
    try:
        yield
    finally:
        try:
            if not os.path.lexists(layout.config_file(install_root)):
                os.unlink(path)
        except OSError:
            pass  # a lock file left behind is harmless
        os.close(fd)  # closing releases the lock


def stage_config(config: ConfigFile, temp_name: str, new_text: str) -> None:
    """Step 3: write ``new_text`` to ``temp_name`` beside the real file ``config`` was read from.

    The file is created 0600 (it may hold secrets) and only then given the original's owner
    and mode, so it is never readable more widely than the file it replaces; then fsynced. A
    text holding a non-empty secret (plain or encrypted) stays 0600 whatever the original's
    mode, as ZeroClaw's every save leaves it. The folder entry is not yet durable. On failure
    the temporary file is removed and the ``OSError`` raised: an import's rollback and
    ``config set`` word it differently.
    """
    fd = os.open(
        temp_name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=config.dir_fd,
    )
    try:
        try:
            durable.write_all(fd, new_text.encode("utf-8"))
            if config.exists:
                _copy_owner(fd, config)
            os.fchmod(fd, 0o600 if _holds_secret(new_text) else config.mode)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _unlink_quietly(temp_name, config.dir_fd)
        raise


def _holds_secret(text: str) -> bool:
    try:
        return holds_secret(tomlcompat.loads(text))
    except (tomlcompat.TOMLDecodeError, RecursionError):
        return True  # never written wider than 0600 on a doubt


def _copy_owner(fd: int, config: ConfigFile) -> None:
    info = os.fstat(fd)
    if (info.st_uid, info.st_gid) != (config.uid, config.gid):
        # not ours to give away when unprivileged: the file then stays ours, with the same mode
        with suppress(PermissionError):
            os.fchown(fd, config.uid, config.gid)


def _unlink_quietly(name: str, dir_fd: int) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def check_config_unchanged(config: ConfigFile) -> None:
    """Refuse when ``config.toml`` is no longer the file ``config`` was read from.

    Bundler's writers hold :func:`config_lock`, so this only has to catch an editor outside it.
    """
    try:
        info = os.stat(config.name, dir_fd=config.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    else:
        now = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    if now != config.identity:
        raise ChangedMeanwhile(
            f"{config.where} changed since it was read; nothing was written, run the command again",
            path=config.where,
        )


def commit_config(config: ConfigFile, temp_name: str | None) -> None:
    """Step 4, the commit point: rename ``temp_name`` over the real file (None: unlink it).

    Refused (the staged file removed) when the file changed since ``config`` was read. Readers
    see the old file or the new one, never a mix. The folder is not yet fsynced: the caller
    decides what a failure to make the rename durable means (after the commit it cannot be
    rolled back). Any other failure raises the ``OSError``.
    """
    try:
        check_config_unchanged(config)
    except Refused:
        if temp_name is not None:
            _unlink_quietly(temp_name, config.dir_fd)
        raise
    with signals_deferred():  # the rename and the record that the command committed: one step
        if temp_name is None:
            # undo of an import into an empty install: before it there was no config.toml
            os.unlink(config.name, dir_fd=config.dir_fd)
        else:
            os.rename(temp_name, config.name, src_dir_fd=config.dir_fd, dst_dir_fd=config.dir_fd)
        commit_reached()


def write_config(config: ConfigFile, new_text: str) -> list[str]:
    """Steps 3 and 4 and the folder fsync: replace the file ``config`` was read from, durably.

    The caller holds :func:`config_lock`. Failures are ``Refused`` and leave no staged file;
    a failure after the commit point is returned as a warning (:func:`flush_committed`).
    """
    temp_name = durable.temporary_name(config.name)
    target = escape_display(_real_path(config))
    try:
        try:
            stage_config(config, temp_name, new_text)
        except OSError as err:
            raise os_failure(
                f"cannot write beside {target}: {err.strerror}", err, path=config.where
            ) from None
        try:
            commit_config(config, temp_name)
        except OSError as err:
            raise os_failure(
                f"cannot replace {target}: {err.strerror}", err, path=config.where
            ) from None
    except BaseException:
        # an interrupt included: the staged file goes (after the commit it is config.toml)
        _unlink_quietly(temp_name, config.dir_fd)
        raise
    return flush_committed(config)


def flush_committed(config: ConfigFile) -> list[str]:
    """The folder fsync that makes a committed rename durable; returns its failure as a warning.

    The new ``config.toml`` is in place and read by everyone already: nothing can undo it, so
    a failure here is one after the commit point, a warning with exit 0 (05 §2), never a
    refusal of a change that was made.
    """
    try:
        durable.fsync_dir(config.dir_fd)
    except OSError as err:
        return [
            f"{escape_display(_real_path(config))} is saved, but its folder was not flushed "
            f"({err.strerror}); a power loss may undo the change"
        ]
    return []


def _real_path(config: ConfigFile) -> str:
    return os.path.join(os.path.realpath(f"/proc/self/fd/{config.dir_fd}"), config.name)


# ------------------------------------------------------------------- for callers holding a path


@dataclass(frozen=True)
class StagedConfig:
    """A new ``config.toml`` written durably under a temporary name beside the real file."""

    directory: Path
    temp_name: str
    target_name: str


@contextmanager
def _config_for_writing(install_root: Path) -> Iterator[ConfigFile]:
    """``config.toml`` read now (absent allowed), in a folder a writer can fsync."""
    with open_install_root(install_root, for_writing=True) as install_fd, ExitStack() as stack:
        if install_fd is None:
            where = layout.config_file(install_root)
            raise NotFound(
                f"the install folder does not exist: {hints.looked_at(install_root)}",
                path=str(where),
            )
        yield read_config_file(install_fd, install_root, stack, missing_ok=True)


def stage_config_text(install_root: Path, new_text: str) -> StagedConfig:
    """:func:`stage_config` under a fresh temporary name, for a caller holding only a path."""
    with _config_for_writing(install_root) as config:
        temp_name = durable.temporary_name(config.name)
        try:
            stage_config(config, temp_name, new_text)
        except OSError as err:
            target = escape_display(_real_path(config))
            raise os_failure(
                f"cannot write beside {target}: {err.strerror}", err, path=config.where
            ) from None
        directory = Path(os.path.realpath(f"/proc/self/fd/{config.dir_fd}"))
        return StagedConfig(directory, temp_name, config.name)


def commit_staged_config(
    install_root: Path, staged: StagedConfig, expected_identity: ConfigIdentity | None
) -> list[str]:
    """:func:`commit_config` and the folder fsync, for a caller holding only a path; returns
    the warnings of after the commit point (:func:`flush_committed`).

    Refused (exit 1, the staged file removed) when ``config.toml`` changed since it was read:
    ``expected_identity`` None means it must still be absent.
    """
    with _config_for_writing(install_root) as current:
        config = replace(current, identity=expected_identity)
        try:
            commit_config(config, staged.temp_name)
        except OSError as err:
            _unlink_quietly(staged.temp_name, config.dir_fd)
            target = escape_display(_real_path(config))
            raise os_failure(
                f"cannot replace {target}: {err.strerror}", err, path=config.where
            ) from None
        return flush_committed(config)


def discard_staged_config(staged: StagedConfig) -> None:
    """Remove a staged config that will not be committed."""
    with suppress(FileNotFoundError):
        os.unlink(staged.directory / staged.temp_name)


def write_config_text(
    install_root: Path, new_text: str, expected_identity: ConfigIdentity | None
) -> list[str]:
    """:func:`write_config` for a caller holding a path and the identity it read earlier."""
    with _config_for_writing(install_root) as current:
        return write_config(replace(current, identity=expected_identity), new_text)


def append_audit(install_root: Path, path: str, old: Any, new: Any, via: str) -> None:
    """Append one JSON line to ``<install>/data/state/config-audit.jsonl`` and make it durable."""
    record = {
        "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "path": path,
        "old": old,
        "new": new,
        "user": _login_name(),
        "via": via,
    }
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    audit = install_root.joinpath(*AUDIT_RELATIVE_PATH)
    try:
        dir_fd = open_dir(install_root, follow=True)
        try:
            for name in AUDIT_RELATIVE_PATH[:-1]:
                dir_fd = _enter_or_create(dir_fd, name)
            fd = os.open(
                AUDIT_RELATIVE_PATH[-1],
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        raise os_failure(
            f"cannot append to {audit}: {err.strerror}", err, path=str(audit)
        ) from None


def _enter_or_create(dir_fd: int, name: str) -> int:
    """Open child folder ``name`` of ``dir_fd`` (created 0700 if absent); closes ``dir_fd``."""
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
            fsync_dir(dir_fd)
        except FileExistsError:
            pass
        return open_dir(name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
