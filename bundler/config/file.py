"""Finding and reading the install's ``config.toml`` (01 §1); asking creates nothing.

* :func:`find_install_root`: ``--install``, else ``$ZEROCLAW_CONFIG_DIR``, else ``~/.zeroclaw``.
* :func:`read_config_snapshot`: the file's text and its identity, both from one descriptor, so
  a writer can later tell whether the file changed since it was read (01 §6).
* :func:`parse_config_text`: TOML to plain data; errors give a position, never the text.
* :class:`LoadedConfig`: what :func:`bundler.config.store.load_config` answers.

No message built here contains a value from the config: any of them may be a secret.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.errors import InvalidInput, Refused
from bundler.rules import layout, tomlcompat

__all__ = [
    "CONFIG_DIR_VARIABLE",
    "MAX_CONFIG_BYTES",
    "ConfigIdentity",
    "LoadedConfig",
    "config_target",
    "find_install_root",
    "parse_config_text",
    "read_config_snapshot",
]

CONFIG_DIR_VARIABLE = "ZEROCLAW_CONFIG_DIR"
# a config this large is not a config; refusing it keeps a hostile file from exhausting memory
MAX_CONFIG_BYTES = 64 * 1024 * 1024

ConfigIdentity = tuple[int, int, int, int]
"""(device, inode, size, mtime_ns) of ``config.toml`` when it was read."""


def find_install_root(cli_install: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The install root (01 §1): ``--install``, else ``$ZEROCLAW_CONFIG_DIR``, else ``~/.zeroclaw``.

    Creates nothing and does not check that the folder exists.
    """
    env = os.environ if environ is None else environ
    if cli_install:
        chosen = cli_install
    elif env.get(CONFIG_DIR_VARIABLE):
        chosen = env[CONFIG_DIR_VARIABLE]
    else:
        home = env.get("HOME") or os.path.expanduser("~")
        return Path(os.path.abspath(os.path.join(home, ".zeroclaw")))
    if chosen.startswith("~"):
        chosen = os.path.expanduser(chosen)
    return Path(os.path.abspath(chosen))


def config_target(install_root: Path) -> Path:
    """The real file behind ``<install>/config.toml`` (its symlink's target, if it is one)."""
    return Path(os.path.realpath(layout.config_file(install_root)))


def read_config_snapshot(
    install_root: Path, *, missing_ok: bool = False
) -> tuple[str, ConfigIdentity | None]:
    """Read ``config.toml``: its text and its identity, taken from the very descriptor read.

    A missing file raises ``Refused("no config.toml in <install>")`` unless ``missing_ok``, in
    which case the answer is ``("", None)`` (``agents import`` may create the file).
    """
    path = layout.config_file(install_root)
    try:
        # O_NONBLOCK: a FIFO planted as config.toml must fail the S_ISREG check, not hang open()
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        if missing_ok:
            return "", None
        raise Refused(f"no config.toml in {install_root}", path=str(path)) from None
    except OSError as err:
        raise Refused(f"cannot open {path}: {err.strerror}", path=str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{path} is not a regular file", path=str(path))
        if info.st_size > MAX_CONFIG_BYTES:
            raise Refused(f"{path} is larger than {MAX_CONFIG_BYTES} bytes", path=str(path))
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError as err:
        raise Refused(f"cannot read {path}: {err.strerror}", path=str(path)) from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad_at = err.start
    else:
        bad_at = -1
    if bad_at >= 0:
        # raised outside the handler: the decode error holds the file's bytes (secrets) in its
        # args, and an error raised inside would keep it as __context__, even "from None"
        raise InvalidInput(f"{path}: not UTF-8 at byte {bad_at}", path=str(path))
    return text, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def parse_config_text(text: str, where: str) -> dict[str, Any]:
    """Parse config TOML; bad TOML is ``InvalidInput`` naming ``where`` with line and column.

    The parser's messages state a position and a reason, never the text found there.
    """
    try:
        return tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as err:
        reason = _safe_toml_reason(err)
    except RecursionError:
        reason = "nested too deeply"
    # raised outside the handler: newer parsers keep the whole document (secrets) on the
    # decode error (``doc``), which would stay reachable as __context__, even "from None"
    raise InvalidInput(f"{where}: invalid TOML: {reason}", path=where)


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
_TOML_PUNCTUATION = frozenset("=[]{},.#\"'")


def _safe_toml_reason(err: ValueError) -> str:
    def keep_punctuation(match: re.Match[str]) -> str:
        quoted = match.group(1)
        return match.group(0) if quoted and set(quoted) <= _TOML_PUNCTUATION else ""

    return " ".join(_QUOTED.sub(keep_punctuation, str(err)).split())


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
