"""Install-side file access for import, undo and recovery: descriptor-relative, no-follow.

Every path below the install is opened beneath the install's descriptor without following a
link (:func:`bundler.fs.safefs.open_beneath`), so a link planted inside the install can neither
redirect a write nor hide a target. Also here: the digests the journal and receipts compare
(XXH3-128 of bytes, of a folder's files, of a config entry with its secrets removed), and the
decorator that turns an unexpected I/O error before a transaction into a one-line refusal.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import xxhash

from bundler.config.write import LOCK_NAME
from bundler.errors import NotFound, UnsuitablePath, os_failure
from bundler.fs import copytree, durable, safefs
from bundler.rules import hints, layout, schema
from bundler.rules.names import escape_display

CONFIG = layout.CONFIG_NAME


DIR_MODE = 0o755
FORBIDDEN_MODE_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | 0o022
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


P = ParamSpec("P")
R = TypeVar("R")


def io_errors_refused(action: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn an unexpected I/O error (EIO, ENOSPC, EACCES…) into a one-line refusal (05 §3).

    Failures inside a transaction are handled there (rollback, or a warning after the commit);
    this covers reading the bundle, the config and the targets before anything changes.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return function(*args, **kwargs)
            except OSError as err:
                reason = os.strerror(err.errno) if err.errno else str(err)
                where = escape_display(os.fsdecode(err.filename)) if err.filename else ""
                at = f" at {where}" if where else ""
                raise os_failure(
                    f"{action} failed{at} ({reason}); nothing was committed", err, path=where
                ) from None

        return wrapper

    return decorate


def xxh(data: bytes) -> str:
    """XXH3-128 hex digest of ``data``."""
    return xxhash.xxh3_128(data).hexdigest()


def entry_digest(value: Any, segments: Sequence[str]) -> str:
    """Digest of a config entry with every ``x-secret`` value removed (undo compares these)."""

    def strip(node: Any, path: list[str]) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v, [*path, k]) for k, v in node.items() if not schema.is_secret([*path, k])
            }
        return node

    canonical = json.dumps(strip(value, list(segments)), sort_keys=True, default=str)
    return xxh(canonical.encode("utf-8"))


def field_digests(value: Any, segments: Sequence[str]) -> dict[str, str]:
    """Per-key digests of a table entry (secret keys left out), so undo can name which field
    changed without the receipt holding any value."""
    if not isinstance(value, dict):
        return {}
    return {
        key: entry_digest(sub, [*segments, key])
        for key, sub in value.items()
        if not schema.is_secret([*segments, key])
    }


def public_value(value: Any, segments: Sequence[str]) -> Any:
    """``value`` with every ``x-secret`` field removed, in tables and in arrays of tables."""
    if isinstance(value, dict):
        return {
            key: public_value(sub, [*segments, key])
            for key, sub in value.items()
            if not schema.is_secret([*segments, key])
        }
    if isinstance(value, list):
        return [public_value(item, [*segments, "0"]) for item in value]
    return value


def tree_digest(files: Iterable[tuple[str, int, str]]) -> str:
    """Digest of a folder's regular files: ``(path inside it, size, XXH3-128)`` in walk order."""
    hasher = xxhash.xxh3_128()
    for file in files:
        tree_line(hasher, file)
    return hasher.hexdigest()


def tree_line(hasher: xxhash.xxh3_128, file: tuple[str, int, str]) -> None:
    """Add one file, ``(path inside the folder, size, XXH3-128)``, to a :func:`tree_digest`
    being made a file at a time, in walk order."""
    rel, size, digest = file
    hasher.update(f"{rel}\0{size}\0{digest}\n".encode("utf-8", "surrogateescape"))


def relative_to_install(path: Path, root: Path) -> str:
    """``path`` relative to the install ``root`` (``..``-prefixed when it lies outside)."""
    return os.path.relpath(layout.normalise(path), layout.normalise(root))


@contextlib.contextmanager
def open_install(install_root: Path, *, create: bool) -> Iterator[int]:
    """The install root opened as a folder (links above it are the operator's and followed).

    With ``create`` a missing install folder is made (an empty install is valid, 01 §1); when
    the import then fails, the folder (and the lock file made in it) is removed again.
    """
    created = False
    if create:
        try:
            os.mkdir(install_root, DIR_MODE)
            created = True
        except FileExistsError:
            pass
    try:
        fd = os.open(install_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFound(
            f"the install folder does not exist: {hints.looked_at(install_root)}",
            path=str(install_root),
        ) from None
    except NotADirectoryError:
        raise UnsuitablePath(f"{install_root} is not a folder", path=str(install_root)) from None
    try:
        yield fd
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                os.unlink(LOCK_NAME, dir_fd=fd)
            with contextlib.suppress(OSError):
                os.rmdir(install_root)
        raise
    finally:
        os.close(fd)


def ensure_dirs(install_fd: int, rel: str) -> tuple[int, list[str]]:
    """Open ``rel`` below the install, creating missing folders 0755; (fd, created rel paths)."""
    created: list[str] = []
    fd = os.dup(install_fd)
    done: list[str] = []
    try:
        for part in [p for p in rel.split("/") if p]:
            done.append(part)
            try:
                os.mkdir(part, DIR_MODE, dir_fd=fd)
                created.append("/".join(done))
                durable.fsync_dir(fd)
            except FileExistsError:
                pass
            child = safefs.open_dir_nofollow(fd, part)
            fd, parent = child, fd
            os.close(parent)
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def lstat_rel(install_fd: int, rel: str) -> os.stat_result | None:
    """lstat of ``rel`` below the install without following a link on the way (None: absent)."""
    head, _, name = rel.rpartition("/")
    try:
        parent = safefs.open_beneath(install_fd, head) if head else os.dup(install_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsuitablePath(
                f"{escape_display(head)} is a symbolic link or not a folder: import refuses to "
                "write through it",
                path=head,
            ) from None
        raise
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(parent)


def target_state(install_fd: int, rel: str) -> str:
    """``absent``, ``empty`` (an empty real folder) or ``occupied`` for an import target."""
    st = lstat_rel(install_fd, rel)
    if st is None:
        return "absent"
    if not stat.S_ISDIR(st.st_mode):
        return "occupied"
    fd = safefs.open_beneath(install_fd, rel)
    try:
        return "occupied" if os.listdir(fd) else "empty"
    finally:
        os.close(fd)


def missing_parents(install_fd: int, rel: str) -> list[str]:
    """The ancestors of ``rel`` (install-relative) that do not exist yet, outermost first."""
    parts = rel.split("/")[:-1]
    missing: list[str] = []
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        if missing or lstat_rel(install_fd, prefix) is None:
            missing.append(prefix)
    return missing


def _hash_tree(dir_fd: int) -> str:
    """:func:`tree_digest` of a folder on disk, read through descriptors without following."""
    files: list[tuple[str, int, str]] = []
    buf = bytearray(copytree.BUFFER_SIZE)

    def refuse(kind: safefs.SkipKind, path: str) -> None:
        files.append((f"\0skipped:{kind.value}:{path}", 0, ""))

    for entry in safefs.walk(dir_fd, on_skip=refuse):
        if entry.kind == "file":
            size, digest = copytree.digest_fd(entry.fd, relpath=entry.relpath, buffer=buf)
            files.append((entry.rel, size, digest))
    return tree_digest(files)


def tree_at(install_fd: int, rel: str) -> str | None:
    """Digest of the folder ``rel`` below the install, or None when it is not a real folder."""
    try:
        fd = safefs.open_beneath(install_fd, rel)
    except OSError:
        return None
    try:
        return _hash_tree(fd)
    finally:
        os.close(fd)


def rename_noreplace(src_fd: int, src_name: str, dst_fd: int, dst_name: str) -> None:
    """Rename ``src_name`` to ``dst_name`` between two open folders, never over an existing
    entry (``FileExistsError``). The entry itself is renamed, a symbolic link included: never
    what it points to. Not made durable here (the caller fsyncs both folders)."""
    try:
        durable.renameat2(src_fd, src_name, dst_fd, dst_name, durable.RENAME_NOREPLACE)
    except OSError as exc:
        if exc.errno not in durable.UNSUPPORTED_ERRNOS:
            raise
        if os.path.lexists(f"/proc/self/fd/{dst_fd}/{dst_name}"):
            raise FileExistsError(errno.EEXIST, "target appeared", dst_name) from None
        os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def rename_rel(install_fd: int, src: str, dst: str, *, replace_empty: bool) -> None:
    """Rename install-relative ``src`` to ``dst``, never over anything but an empty folder."""
    src_head, _, src_name = src.rpartition("/")
    dst_head, _, dst_name = dst.rpartition("/")
    src_fd = safefs.open_beneath(install_fd, src_head) if src_head else os.dup(install_fd)
    try:
        dst_fd = safefs.open_beneath(install_fd, dst_head) if dst_head else os.dup(install_fd)
        try:
            if replace_empty:
                # rename(2) replaces a folder only when it is empty: the kernel re-checks it
                os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            else:
                rename_noreplace(src_fd, src_name, dst_fd, dst_name)
            durable.fsync_dir(dst_fd)
            if src_head != dst_head:
                durable.fsync_dir(src_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def rmdir_rel(install_fd: int, rel: str) -> bool:
    """Remove the folder ``rel`` when it is empty; True when it is gone."""
    head, _, name = rel.rpartition("/")
    try:
        fd = safefs.open_beneath(install_fd, head) if head else os.dup(install_fd)
    except OSError:
        return False
    try:
        os.rmdir(name, dir_fd=fd)
        durable.fsync_dir(fd)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def prune_empty(install_fd: int, rel: str) -> list[str]:
    """Remove the folder ``rel`` and every folder below it that is (then) empty, deepest
    first; returns the install-relative folders removed.

    Never follows a link (a link, a file or a missing ``rel`` is left as it is) and removes
    only with ``rmdir``, which the kernel refuses for a folder that is not empty: a file
    written into one meanwhile keeps it. Each parent is fsynced after its removals.
    """
    head, _, name = rel.rpartition("/")
    try:
        parent = safefs.open_beneath(install_fd, head) if head else os.dup(install_fd)
    except OSError:
        return []
    removed: list[str] = []
    try:
        if _prune_below(parent, name, rel, removed, 0):
            durable.fsync_dir(parent)
    finally:
        os.close(parent)
    return removed


def _prune_below(parent_fd: int, name: str, rel: str, removed: list[str], depth: int) -> bool:
    """:func:`prune_empty` of ``name`` in ``parent_fd``: True when it was removed."""
    try:
        fd = safefs.open_dir_nofollow(parent_fd, name)
    except OSError:
        return False  # gone, a link or not a folder: nothing of ours to remove
    try:
        empty = True
        pruned = False
        for child in os.listdir(fd):
            try:
                st = os.stat(child, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (
                stat.S_ISDIR(st.st_mode)
                and depth < safefs.MAX_DEPTH
                and _prune_below(fd, child, f"{rel}/{child}", removed, depth + 1)
            ):
                pruned = True
            else:
                empty = False
        if pruned:
            durable.fsync_dir(fd)
    finally:
        os.close(fd)
    if not empty:
        return False
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except OSError:
        return False  # filled meanwhile (ENOTEMPTY), or not ours to remove
    removed.append(rel)
    return True


def remaining_entries(install_fd: int, rel: str) -> list[str] | None:
    """Every entry but folders below the folder ``rel`` (install-relative paths, display-safe),
    in walk order: regular files, and the links, special files and undecodable names a walk
    does not enter. None when ``rel`` is not a real folder (missing, a link, a file)."""
    try:
        fd = safefs.open_beneath(install_fd, rel)
    except OSError:
        return None
    found: list[str] = []

    def note(kind: safefs.SkipKind, path: str) -> None:
        if kind is not safefs.SkipKind.VANISHED:
            found.append(path)

    try:
        for entry in safefs.walk(fd, prefix=f"{rel}/", on_skip=note, unopened=_never_open):
            if entry.kind == "file":
                found.append(entry.relpath)
    finally:
        os.close(fd)
    return found


def _never_open(_rel: str, _st: os.stat_result) -> bool:
    return True


def mkdir_rel(install_fd: int, rel: str, mode: int) -> None:
    """Create the folder ``rel`` below the install with ``mode``; an existing one is kept."""
    head, _, name = rel.rpartition("/")
    fd = safefs.open_beneath(install_fd, head) if head else os.dup(install_fd)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=fd)
            os.chmod(name, mode, dir_fd=fd)
            durable.fsync_dir(fd)
    finally:
        os.close(fd)


def partial_name(stem: str) -> str:
    """The temporary name a receipt is written under before it gets its real name."""
    return f".{stem}.partial"


def write_new_file(
    dir_fd: int,
    stem: str,
    suffix: str,
    data: bytes,
    *,
    before_link: Callable[[str], None] | None = None,
) -> str:
    """Write ``data`` durably under ``stem + suffix`` or ``stem-2 + suffix``…; never replaces.

    The bytes go to :func:`partial_name` first and are fsynced; only a complete file is linked
    to its real name, so a reader (and recovery) never meets a torn receipt. ``before_link``
    is called with the free name chosen just before the file is linked to it (a receipt's
    listing is published under it first).
    """
    tmp = partial_name(stem)
    try:
        # the partial name is ours alone (recovery removes it), so a leftover is reused
        durable.write_synced(dir_fd, tmp, data, truncate=True)
        counter = 1
        while True:
            name = f"{stem}{suffix}" if counter == 1 else f"{stem}-{counter}{suffix}"
            if before_link is not None:
                if lstat_rel(dir_fd, name) is not None:
                    counter += 1
                    continue
                before_link(name)
            try:
                os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                break
            except FileExistsError:
                counter += 1
        os.unlink(tmp, dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    durable.fsync_dir(dir_fd)
    return name
