"""Volumes (04 §2): the folders an agent's file tools may use, and the jail that keeps them in.

:func:`load_volumes` checks every rule of 04 §2 once, at load, and fixes each volume's real path
and identity. :func:`resolve` turns a tool's ``volume:path`` into an open parent folder plus a
final name, walking one component at a time with ``O_NOFOLLOW`` relative to the previous
folder's descriptor, so neither ``..`` nor a symbolic link (file or folder, planted before or
during the walk) can lead outside the volume. Results and errors name volumes
(``notes:todo.md``), never machine paths: the agent must not learn where a volume is.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bundler.errors import InvalidConfig, InvalidInput, JailError
from bundler.fs.durable import open_dir
from bundler.home.homes import (
    HomeResolution,
    expand_path,
    is_within,
    resolve_home_with_config,
    user_home,
)
from bundler.rules.names import escape_display

VOLUME_NAME_RE = re.compile(r"[a-z0-9-]{1,32}")
FILES = "files"
MAX_VOLUMES = 32
MAX_DESCRIPTION = 200
FILES_DESCRIPTION = "what the agent writes (the data home's files/)"
_KEYS = frozenset({"path", "mode", "description"})

Mode = Literal["rw", "ro"]
Access = Literal["read", "list", "copy", "write", "move", "delete"]
_WRITES = frozenset({"write", "move", "delete"})


@dataclass(frozen=True)
class Volume:
    """A named folder: ``path`` is its real path, fixed at load; ``identity`` its
    ``(st_dev, st_ino)`` then, so a folder swapped in later is noticed (None for ``files``
    before the home exists)."""

    name: str
    path: Path
    mode: Mode
    description: str
    identity: tuple[int, int] | None = field(default=None, compare=False)


def _volume_error(name: str, rule: str, what: str) -> InvalidInput:
    where = f"volumes.{escape_display(name)}"
    return InvalidConfig(f"Agent.yaml: {where}: {what} (rule: {rule})", path=f"Agent.yaml:{where}")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def _check_entry(name: Any, entry: Any) -> tuple[str, Mode, str]:
    """(path text, mode, description) of one volume entry, or the rule it breaks."""
    if not isinstance(name, str) or VOLUME_NAME_RE.fullmatch(name) is None:
        raise _volume_error(
            str(name), "names", "a volume name is 1-32 lowercase letters, digits and dashes"
        )
    if name == FILES:
        raise _volume_error(name, "names", "'files' is taken (it is the home's files/ folder)")
    if not isinstance(entry, dict):
        raise _volume_error(name, "keys", "must be a mapping with path, mode and description")
    unknown = sorted(str(key) for key in entry if key not in _KEYS)
    if unknown:
        key = escape_display(unknown[0])
        raise _volume_error(name, "keys", f"unknown key '{key}' (allowed: path, mode, description)")
    path = entry.get("path")
    if not isinstance(path, str) or not path:
        raise _volume_error(name, "path", "path must be a non-empty string")
    mode: Mode
    raw_mode = entry.get("mode", "ro")
    if raw_mode == "rw":
        mode = "rw"
    elif raw_mode == "ro":
        mode = "ro"
    else:
        raise _volume_error(name, "keys", "mode must be rw or ro")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise _volume_error(name, "keys", "description must be a string")
    if len(description) > MAX_DESCRIPTION:
        raise _volume_error(
            name, "keys", f"description is {len(description)} characters; at most {MAX_DESCRIPTION}"
        )
    return path, mode, description


def _check_width(name: str, written: str, real: Path, user: Path, home: Path) -> None:
    """The "too wide" rule: compared by real path."""
    shown = escape_display(written)
    if real == Path("/"):
        raise _volume_error(name, "too wide", f"path {shown} is / (the whole disk)")
    if real == user:
        raise _volume_error(name, "too wide", f"path {shown} is the user's home folder")
    if is_within(user, real):
        raise _volume_error(name, "too wide", f"path {shown} contains the user's home folder")
    if real == home:
        raise _volume_error(name, "too wide", f"path {shown} is the data home")
    if is_within(home, real):
        raise _volume_error(name, "too wide", f"path {shown} contains the data home")
    if is_within(real, home):
        raise _volume_error(name, "too wide", f"path {shown} is inside the data home")


def volumes_from(
    document: Mapping[str, Any], project: Path, resolution: HomeResolution, user: Path
) -> list[Volume]:
    """The volumes of a validated Agent.yaml, ``files`` first (see :func:`load_volumes`)."""
    raw = document.get("volumes")
    tool_options = document.get("toolOptions")
    bxai = tool_options.get("bxai") if isinstance(tool_options, dict) else None
    has_allowed_paths = isinstance(bxai, dict) and "allowedPaths" in bxai
    if has_allowed_paths:
        if raw:
            raise InvalidConfig(
                "Agent.yaml: volumes: cannot be combined with toolOptions.bxai.allowedPaths "
                "(rule: exclusive); remove one of them",
                path="Agent.yaml:volumes",
            )
        # an agent that sets its own allowed paths keeps them and has no volumes (04 §2)
        return []
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidConfig("Agent.yaml: volumes: must be a mapping", path="Agent.yaml:volumes")
    if len(raw) > MAX_VOLUMES:
        raise InvalidConfig(
            f"Agent.yaml: volumes: at most {MAX_VOLUMES} volumes besides files "
            f"(found {len(raw)}) (rule: names)",
            path="Agent.yaml:volumes",
        )
    real_user = Path(os.path.realpath(user))
    real_home = Path(os.path.realpath(resolution.home))
    # files/ itself is not resolved: were it a link, resolve() must refuse it, not follow it
    files_path = real_home / FILES
    volumes = [Volume(FILES, files_path, "rw", FILES_DESCRIPTION, _identity(files_path))]
    for name, entry in raw.items():
        written, mode, description = _check_entry(name, entry)
        where = f"Agent.yaml:volumes.{name}.path"
        lexical = expand_path(written, base=project, home=user, where=where)
        try:
            info = os.stat(lexical)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR):
                raise _volume_error(
                    name, "path", f"path {escape_display(written)} does not exist"
                ) from None
            reason = os.strerror(err.errno or 0)
            raise _volume_error(
                name, "path", f"path {escape_display(written)} cannot be read ({reason})"
            ) from None
        if not stat.S_ISDIR(info.st_mode):
            raise _volume_error(name, "keys", f"path {escape_display(written)} is not a folder")
        real = Path(os.path.realpath(lexical))
        _check_width(name, written, real, real_user, real_home)
        _check_width(name, written, lexical, user, resolution.home)
        volumes.append(Volume(name, real, mode, description, (info.st_dev, info.st_ino)))
    return volumes


def load_volumes(project: Path, *, environ: Mapping[str, str] | None = None) -> list[Volume]:
    """The agent's volumes, ``files`` first, every rule of 04 §2 checked.

    Each violation is :class:`InvalidInput` naming the volume and the rule. An agent that sets
    ``toolOptions.bxai.allowedPaths`` has no volumes (an empty list). Creates nothing.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    resolution, document = resolve_home_with_config(project, environ=env)
    return volumes_from(document, Path(os.path.abspath(project)), resolution, user_home(env))


def list_allowed_directories(volumes: list[Volume]) -> list[dict[str, str]]:
    """``listAllowedDirectories``: name, mode and description of each volume, never a path."""
    return [{"name": v.name, "mode": v.mode, "description": v.description} for v in volumes]


@dataclass
class ResolvedPath:
    """A tool path resolved inside its volume.

    ``dir_fd`` is an open descriptor of the folder holding ``name`` (owned: close it, or use
    the object as a context manager). For the volume's own root, ``name`` is ``"."`` and
    ``dir_fd`` is the root. ``display`` is ``volume:relative`` for results and messages.
    ``exists`` says whether ``name`` is there (as a file or a real folder); ``access`` is the
    mode it was resolved for, and :meth:`open` refuses write flags unless that was a write.
    """

    volume: Volume
    relative: str
    display: str
    dir_fd: int
    name: str
    exists: bool
    access: Access = "read"

    def close(self) -> None:
        """Close ``dir_fd``."""
        if self.dir_fd >= 0:
            fd, self.dir_fd = self.dir_fd, -1
            os.close(fd)

    def __enter__(self) -> ResolvedPath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
        """Open ``name`` below ``dir_fd`` with ``O_NOFOLLOW`` (and ``O_NONBLOCK`` for reads, so a
        FIFO swapped in cannot hang the tool); only a regular file is answered."""
        writing = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        if writing and (self.access not in _WRITES or self.volume.mode == "ro"):
            # a path resolved for reading must not become a way to write a read-only volume
            raise JailError(f"{self.display}: was resolved for {self.access}", path=self.display)
        safe_flags = flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(self.name, safe_flags, mode, dir_fd=self.dir_fd)
        except OSError as err:
            reason = (
                "is a symbolic link (refused)"
                if err.errno == errno.ELOOP
                else f"cannot be opened ({os.strerror(err.errno or errno.EIO)})"
            )
            raise JailError(f"{self.display}: {reason}", path=self.display) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise JailError(f"{self.display}: is not a regular file", path=self.display)
        os.set_blocking(fd, True)
        return fd


def split_volume(user_path: str) -> tuple[str, str]:
    """(volume name, path inside it): the text before the first ``:`` names a volume only when
    it matches the volume-name grammar; otherwise the whole text is a path in ``files``."""
    prefix, colon, rest = user_path.partition(":")
    if colon and VOLUME_NAME_RE.fullmatch(prefix):
        return prefix, rest
    return FILES, user_path


def _components(volume: str, inner: str, shown: str) -> list[str]:
    """The normalised components of ``inner``; ``..`` may step back but never above the root."""
    if inner.startswith("/") or inner == "~" or inner.startswith("~/"):
        # not echoed: a guessed machine path must not come back confirmed in any form
        raise JailError(
            f"full machine paths are refused; write volume:path, e.g. {volume}:notes.md",
            path=f"{volume}:",
        )
    if "\0" in inner:
        raise JailError(f"{shown}: contains a NUL character", path=shown)
    parts: list[str] = []
    for part in inner.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise JailError(f"{shown}: climbs out of volume {volume} with ..", path=shown)
            parts.pop()
            continue
        parts.append(part)
    return parts


def _open_root(volume: Volume, shown: str) -> int:
    try:
        fd = open_dir(volume.path)
    except OSError:
        raise JailError(f"{shown}: volume {volume.name} is not available", path=shown) from None
    info = os.fstat(fd)
    if volume.identity is not None and (info.st_dev, info.st_ino) != volume.identity:
        os.close(fd)
        raise JailError(
            f"{shown}: volume {volume.name} was replaced since it was loaded", path=shown
        )
    return fd


def resolve(user_path: str, mode: Access, volumes: list[Volume]) -> ResolvedPath:
    """Resolve a file tool's path (04 §2.1) for ``mode``; raises :class:`JailError`.

    ``notes:todo.md`` is ``todo.md`` in volume ``notes``; a path without a volume is in
    ``files``. Refused: an unknown volume, a full machine path, ``..`` climbing above the
    volume, any component that is a symbolic link (or not a folder where one is needed), and
    ``write``/``move``/``delete`` in a read-only volume. Intermediate folders must exist.
    """
    volume_name, inner = split_volume(user_path)
    by_name = {v.name: v for v in volumes}
    shown = escape_display(user_path)
    volume = by_name.get(volume_name)
    if volume is None:
        raise JailError(f"{shown}: there is no volume named {volume_name}", path=shown)
    parts = _components(volume_name, inner, shown)
    display = f"{volume_name}:{'/'.join(parts)}"
    if mode in _WRITES and volume.mode == "ro":
        raise JailError(
            f"{display}: volume {volume_name} is read-only ({mode} refused)", path=display
        )
    if not parts and mode in _WRITES:
        raise JailError(f"{display}: cannot {mode} the volume itself", path=display)
    fd = _open_root(volume, display)
    try:
        for index, part in enumerate(parts[:-1]):
            child = _step(fd, part, display, "/".join(parts[: index + 1]), volume_name)
            fd, parent = child, fd
            os.close(parent)
        if not parts:
            return ResolvedPath(volume, "", display, fd, ".", True, mode)
        name = parts[-1]
        exists = _check_final(fd, name, display)
        if not exists and mode not in ("write",):
            raise JailError(f"{display}: does not exist", path=display)
        return ResolvedPath(volume, "/".join(parts), display, fd, name, exists, mode)
    except BaseException:
        os.close(fd)
        raise


def _step(fd: int, part: str, display: str, walked: str, volume_name: str) -> int:
    """Open folder ``part`` below ``fd`` without following a link."""
    try:
        return open_dir(part, dir_fd=fd)
    except OSError as err:
        here = f"{volume_name}:{escape_display(walked)}"
        try:
            info: os.stat_result | None = os.stat(part, dir_fd=fd, follow_symlinks=False)
        except OSError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise JailError(
                f"{display}: {here} is a symbolic link (refused)", path=display
            ) from None
        if err.errno == errno.ENOENT:
            raise JailError(f"{display}: folder {here} does not exist", path=display) from None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            raise JailError(f"{display}: {here} is not a folder", path=display) from None
        reason = os.strerror(err.errno or errno.EIO)
        raise JailError(f"{display}: {here} cannot be reached ({reason})", path=display) from None


def _check_final(fd: int, name: str, display: str) -> bool:
    """Whether the final component exists; a symbolic link there is refused in every mode."""
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as err:
        reason = os.strerror(err.errno or errno.EIO)
        raise JailError(f"{display}: cannot be reached ({reason})", path=display) from None
    if stat.S_ISLNK(info.st_mode):
        raise JailError(f"{display}: is a symbolic link (refused)", path=display)
    return True
