"""The write protocol of 01 §6 for ``config.toml``, shared by ``config set``, import and undo.

A writer goes through these steps; what is durable after each:

1. :func:`config_lock`: an exclusive ``flock`` on ``<install>/.config.lock`` (the empty lock
   file is created 0600 if absent). The lock serialises bundler's writers and is released when
   the process dies, so a crash never leaves the install locked.
2. :func:`bundler.config.file.read_config_snapshot`: the text and its identity (device, inode,
   size, mtime) from the descriptor read. Nothing written.
3. :func:`stage_config_text`: the new text in ``.config.toml.tmp-<random>`` beside the real
   file (behind a symlinked ``config.toml``, beside its target), created 0600, then given the
   original's owner and mode, then fsynced. Durable: the staged file's bytes; ``config.toml``
   is untouched, so a crash here leaves only a stray temporary file.
4. :func:`commit_staged_config`: if the identity still matches, rename the staged file over
   ``config.toml`` (the commit point: readers see the old file or the new one, never a mix),
   then fsync the folder. Durable after the folder fsync: the new file under its real name.
   A changed identity removes the staged file and refuses; nothing is written. Bundler's
   writers hold the lock, so the identity check only has to catch an editor outside it.
5. :func:`append_audit`: one JSON line appended to ``data/state/config-audit.jsonl`` and
   fsynced, with any folder it had to create. Durable: the record.

:func:`write_config_text` is steps 3 and 4 together, for callers that stage nothing else.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bundler.config.file import ConfigIdentity, config_target
from bundler.errors import Refused
from bundler.fs.durable import fsync_dir, open_dir, random_token
from bundler.rules import layout

__all__ = [
    "AUDIT_RELATIVE_PATH",
    "LOCK_NAME",
    "StagedConfig",
    "append_audit",
    "commit_staged_config",
    "config_lock",
    "discard_staged_config",
    "stage_config_text",
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
            raise Refused(
                f"cannot open the config lock {path}: {err.strerror}", path=str(path)
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


@dataclass(frozen=True)
class StagedConfig:
    """A new ``config.toml`` written durably under a temporary name beside the real file."""

    directory: Path
    temp_name: str
    target_name: str


def stage_config_text(install_root: Path, new_text: str) -> StagedConfig:
    """Write ``new_text`` to a temporary file beside the real ``config.toml`` and fsync it.

    The file is created 0600 (it may hold secrets) and only then given the original's owner
    and mode, so it is never readable more widely than the file it replaces.
    """
    target = config_target(install_root)
    try:
        original: os.stat_result | None = os.stat(target, follow_symlinks=False)
    except FileNotFoundError:
        original = None
    temp_name = f".{target.name}.tmp-{random_token()}"
    dir_fd = _open_config_dir(target)
    try:
        fd = os.open(
            temp_name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
        try:
            try:
                view = memoryview(new_text.encode("utf-8"))
                while view:
                    view = view[os.write(fd, view) :]
                if original is not None:
                    _copy_owner_and_mode(fd, original)
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            _unlink_quietly(temp_name, dir_fd)
            raise
    except OSError as err:
        raise Refused(f"cannot write beside {target}: {err.strerror}", path=str(target)) from None
    finally:
        os.close(dir_fd)
    return StagedConfig(target.parent, temp_name, target.name)


def _open_config_dir(target: Path) -> int:
    try:
        return open_dir(target.parent, follow=True)
    except OSError as err:
        raise Refused(
            f"cannot open {target.parent}: {err.strerror}", path=str(target.parent)
        ) from None


def _copy_owner_and_mode(fd: int, original: os.stat_result) -> None:
    info = os.fstat(fd)
    if (info.st_uid, info.st_gid) != (original.st_uid, original.st_gid):
        # not ours to give away when unprivileged: the file then stays ours, with the same mode
        with suppress(PermissionError):
            os.fchown(fd, original.st_uid, original.st_gid)
    os.fchmod(fd, stat.S_IMODE(original.st_mode))


def _unlink_quietly(name: str, dir_fd: int) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def _identity_now(target: Path) -> ConfigIdentity | None:
    try:
        info = os.stat(target, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def commit_staged_config(
    install_root: Path, staged: StagedConfig, expected_identity: ConfigIdentity | None
) -> None:
    """Rename a staged config over the real one (the commit point), then fsync the folder.

    Refused (exit 1, the staged file removed) when ``config.toml`` changed since it was read:
    ``expected_identity`` None means it must still be absent.
    """
    target = staged.directory / staged.target_name
    dir_fd = _open_config_dir(target)
    try:
        if _identity_now(target) != expected_identity:
            _unlink_quietly(staged.temp_name, dir_fd)
            raise Refused(
                f"{layout.config_file(install_root)} changed since it was read; nothing was "
                "written, run the command again",
                path=str(target),
            )
        try:
            os.rename(staged.temp_name, staged.target_name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as err:
            _unlink_quietly(staged.temp_name, dir_fd)
            raise Refused(f"cannot replace {target}: {err.strerror}", path=str(target)) from None
        fsync_dir(dir_fd)
    finally:
        os.close(dir_fd)


def discard_staged_config(staged: StagedConfig) -> None:
    """Remove a staged config that will not be committed."""
    with suppress(FileNotFoundError):
        os.unlink(staged.directory / staged.temp_name)


def write_config_text(
    install_root: Path, new_text: str, expected_identity: ConfigIdentity | None
) -> None:
    """Replace ``config.toml`` atomically and durably; the caller holds :func:`config_lock`."""
    staged = stage_config_text(install_root, new_text)
    commit_staged_config(install_root, staged, expected_identity)


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
        raise Refused(f"cannot append to {audit}: {err.strerror}", path=str(audit)) from None


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
