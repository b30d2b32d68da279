"""Finding and reading the install's ``config.toml`` (01 §1); asking creates nothing.

* :func:`find_install_root`: ``--install``, else ``$ZEROCLAW_CONFIG_DIR``, else ``~/.zeroclaw``.
* :func:`read_config_file`: the one reader of ``config.toml``, for ``config`` commands, import,
  undo and recovery alike: the file's text and its identity, both from one descriptor, so a
  writer (:mod:`bundler.config.write`) can later tell whether the file changed since it was
  read (01 §6), with the folder its real file lives in. :func:`read_config_snapshot` is it for
  a caller holding no descriptor.
* :func:`parse_config_text`: TOML to plain data; errors give a position, never the text.
* :class:`LoadedConfig`: what :func:`bundler.config.store.load_config` answers.

No message built here contains a value from the config: any of them may be a secret.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from bundler.errors import (
    Malformed,
    NotFound,
    Refused,
    UnsuitablePath,
    UsageError,
    os_failure,
)
from bundler.rules import hints, layout, tomlcompat
from bundler.rules.layout import MAX_CONFIG_TOML_BYTES
from bundler.rules.names import escape_display
from bundler.rules.tomlcompat import toml_error_reason
from bundler.rules.units import human_size

__all__ = [
    "CONFIG_DIR_VARIABLE",
    "MAX_CONFIG_TOML_BYTES",
    "ConfigFile",
    "ConfigIdentity",
    "LoadedConfig",
    "find_install_root",
    "open_install_root",
    "parse_config_text",
    "read_config_file",
    "read_config_snapshot",
    "toml_error_reason",
]

CONFIG_DIR_VARIABLE = "ZEROCLAW_CONFIG_DIR"

ConfigIdentity = tuple[int, int, int, int]
"""(device, inode, size, mtime_ns) of ``config.toml`` when it was read."""

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def find_install_root(cli_install: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The install root (01 §1): ``--install``, else ``$ZEROCLAW_CONFIG_DIR``, else ``~/.zeroclaw``.

    Creates nothing and does not check that the folder exists; refuses a bundle folder (one
    holding a bundle manifest), whose config an edit would break against its checksums.
    """
    env = os.environ if environ is None else environ
    if cli_install:
        chosen = cli_install
    elif env.get(CONFIG_DIR_VARIABLE):
        chosen = env[CONFIG_DIR_VARIABLE]
    else:
        home = env.get("HOME") or os.path.expanduser("~")
        chosen = os.path.join(home, ".zeroclaw")
    if chosen.startswith("~"):
        chosen = os.path.expanduser(chosen)
    root = Path(os.path.abspath(chosen))
    if os.path.lexists(root / layout.MANIFEST_NAME):
        raise UsageError(
            f"{escape_display(str(root))} is a bundle, not an install (it holds "
            f"{layout.MANIFEST_NAME}): name the install root, and read the bundle with 'bundler "
            "bundle inspect' or import it with 'bundler agents import'",
            path=str(root),
        )
    return root


def no_config(install_root: Path) -> Refused:
    """The refusal of a command that needs ``config.toml`` and found none: which install it
    looked at and how to name another (a new user has often forgotten ``--install``)."""
    where = str(layout.config_file(install_root))
    return NotFound(f"no config.toml in {hints.looked_at(install_root)}", path=where)


@dataclass(frozen=True)
class ConfigFile:
    """``config.toml`` as read: its text, its identity, and where its real file lives.

    ``dir_fd`` is the folder holding the real file (the install, or a symlinked file's target
    folder), so a writer stages and commits beside the very file that was read. The descriptor
    belongs to the stack given to :func:`read_config_file`.
    """

    text: str
    identity: ConfigIdentity | None
    """None: there is no ``config.toml`` (only when the reader was told that is fine)."""
    mode: int
    uid: int
    gid: int
    dir_fd: int
    name: str
    where: str
    """``<install>/config.toml``: how messages name the file."""

    @property
    def exists(self) -> bool:
        """Whether there was a file to read."""
        return self.identity is not None

    @property
    def digest(self) -> str:
        """XXH3-128 of the bytes, or ``absent`` (journals and receipts compare these)."""
        return xxhash.xxh3_128(self.text.encode("utf-8")).hexdigest() if self.exists else "absent"

    def parse(self) -> dict[str, Any]:
        """The file's data: :func:`parse_config_text` naming this file."""
        return parse_config_text(self.text, self.where)


def read_config_file(
    install_fd: int,
    install_root: Path,
    stack: ExitStack,
    *,
    missing_ok: bool = False,
    for_writing: bool = True,
) -> ConfigFile:
    """Read ``config.toml`` below the open install folder: the one reader of the install config.

    A symlinked ``config.toml`` is read in its target's folder (the operator's link, followed
    once); the file itself is opened without following, non-blocking (a FIFO fails the regular
    file check instead of hanging), and read only up to :data:`MAX_CONFIG_TOML_BYTES`. A missing
    file raises ``Refused("no config.toml in <install>")`` unless ``missing_ok``; the answer
    is then empty text with no identity, and a new file would be created 0600 by this user.
    Without ``for_writing`` a symlinked file's folder is opened ``O_PATH`` (searching it is
    enough to read), so ``dir_fd`` then serves to read only.
    """
    where = str(layout.config_file(install_root))
    name = layout.CONFIG_NAME
    dir_fd = install_fd
    try:
        linked = stat.S_ISLNK(os.stat(name, dir_fd=install_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        linked = False
    except OSError as err:
        raise os_failure(f"cannot open {where}: {err.strerror}", err, path=where) from None
    if linked:
        real = Path(os.path.realpath(f"/proc/self/fd/{install_fd}/{name}"))
        try:
            access = os.O_RDONLY if for_writing else os.O_PATH
            dir_fd = os.open(real.parent, access | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            if isinstance(err, FileNotFoundError) and not missing_ok:
                raise no_config(install_root) from None
            # a link into a missing folder cannot be read, nor written beside
            shown = escape_display(str(real.parent))
            raise os_failure(f"cannot open {shown}: {err.strerror}", err, path=where) from None
        stack.callback(os.close, dir_fd)
        name = real.name
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not missing_ok:
            raise no_config(install_root) from None
        return ConfigFile("", None, 0o600, os.getuid(), os.getgid(), dir_fd, name, where)
    except OSError as err:
        raise os_failure(f"cannot open {where}: {err.strerror}", err, path=where) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsuitablePath(f"{where} is not a regular file", path=where)
        raw = _read_limited(fd, where)
    except OSError as err:
        raise os_failure(f"cannot read {where}: {err.strerror}", err, path=where) from None
    finally:
        os.close(fd)
    text = tomlcompat.decode_utf8(raw)
    if text is None:
        # raised outside any handler: the decode error holds the file's bytes (secrets) in its
        # args, and an error raised inside one would keep it as __context__, even "from None"
        raise Malformed(f"{where}: not UTF-8 at byte {_first_bad_byte(raw)}", path=where)
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    return ConfigFile(
        text, identity, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid, dir_fd, name, where
    )


def _first_bad_byte(raw: bytes) -> int:
    """Where ``raw`` stops being UTF-8 (only the offset leaves this function, never the bytes)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start
    return -1


def _read_limited(fd: int, where: str) -> bytes:
    """Every byte of ``fd``; refused past :data:`MAX_CONFIG_TOML_BYTES`, even if it grows
    meanwhile."""
    chunks: list[bytes] = []
    held = 0
    while chunk := os.read(fd, 1 << 20):
        held += len(chunk)
        if held > MAX_CONFIG_TOML_BYTES:
            raise UnsuitablePath(
                f"{where} is larger than {human_size(MAX_CONFIG_TOML_BYTES)}", path=where
            )
        chunks.append(chunk)
    return b"".join(chunks)


@contextmanager
def open_install_root(install_root: Path, *, for_writing: bool = False) -> Iterator[int | None]:
    """The install folder opened (links above it are the operator's); None when it is absent.

    For reading only it is opened ``O_PATH``: a folder the user may search but not list still
    lets its ``config.toml`` be read. A writer needs a descriptor it can fsync.
    """
    access = os.O_RDONLY if for_writing else os.O_PATH
    try:
        fd: int | None = os.open(install_root, access | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None
    except OSError as err:
        where = layout.config_file(install_root)
        raise os_failure(f"cannot open {where}: {err.strerror}", err, path=str(where)) from None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def read_config_snapshot(
    install_root: Path, *, missing_ok: bool = False
) -> tuple[str, ConfigIdentity | None]:
    """Read ``config.toml``: its text and its identity, taken from the very descriptor read.

    :func:`read_config_file` for a caller that holds no descriptor: a missing file raises
    ``Refused("no config.toml in <install>")`` unless ``missing_ok``, in which case the answer
    is ``("", None)`` (``agents import`` may create the file).
    """
    with open_install_root(install_root) as install_fd, ExitStack() as stack:
        if install_fd is None:
            if missing_ok:
                return "", None
            raise no_config(install_root)
        config = read_config_file(
            install_fd, install_root, stack, missing_ok=missing_ok, for_writing=False
        )
        return config.text, config.identity


def parse_config_text(text: str, where: str) -> dict[str, Any]:
    """Parse config TOML; bad TOML is ``InvalidInput`` naming ``where`` with line and column.

    The parser's messages state a position and a reason, never the text found there.
    """
    try:
        return tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as err:
        reason = toml_error_reason(err)
    except RecursionError:
        reason = "nested too deeply"
    # raised outside the handler: newer parsers keep the whole document (secrets) on the
    # decode error (``doc``), which would stay reachable as __context__, even "from None"
    raise Malformed(f"{where}: invalid TOML: {reason}", path=where)


@dataclass
class LoadedConfig:
    """A loaded ``config.toml``: plain data (overrides applied), the file's text and identity."""

    install_root: Path
    data: dict[str, Any]
    text: str
    identity: ConfigIdentity | None
    overridden: set[str] = field(default_factory=set)
    """Config paths (formatted) whose value comes from an environment override."""
    override_vars: dict[str, str] = field(default_factory=dict)
    """Formatted config path -> the ``ZEROCLAW_*`` variable that set it."""
    file_data: dict[str, Any] = field(default_factory=dict)
    """The data as the file has it, before overrides."""
