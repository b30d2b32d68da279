"""Where containers keeps ``registries.conf``, read once per command (the rules of the format
are :mod:`bundler.rules.registries_conf`).

The files, as podman and skopeo load them (containers-registries.conf(5)):
``$CONTAINERS_REGISTRIES_CONF`` alone when set; else ``$XDG_CONFIG_HOME/containers/
registries.conf`` (``~/.config/…``) when it exists, which replaces ``/etc/containers/
registries.conf``; then the drop-ins of ``/etc/containers/registries.conf.d/`` and of
``~/.config/containers/registries.conf.d/``, each folder's ``*.conf`` in name order, a later
file's table for a host replacing an earlier one. A missing file is no error; one that cannot
be read, or is not the format, is refused naming it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from bundler.errors import Malformed, UnsuitablePath, os_failure
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules.names import escape_display
from bundler.rules.registries_conf import RegistriesConf, parse_files

SYSTEM_DIR = Path("/etc/containers")
"""Where the system's ``registries.conf`` and ``registries.conf.d/`` are."""
MAX_CONF_BYTES = 1 << 20
VARIABLE = "CONTAINERS_REGISTRIES_CONF"


def conf_files(environ: Mapping[str, str], system: Path = SYSTEM_DIR) -> list[Path]:
    """The ``registries.conf`` files to read, in load order (see the module's docstring)."""
    chosen = environ.get(VARIABLE)
    if chosen:
        return [Path(chosen)]
    config_home = environ.get("XDG_CONFIG_HOME")
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    user = (Path(config_home) if config_home else home / ".config") / "containers"
    main = user / "registries.conf"
    files = [main if main.exists() else system / "registries.conf"]
    for folder in (system / "registries.conf.d", user / "registries.conf.d"):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".conf"))
        except OSError:
            continue
        files += [folder / name for name in names]
    return files


def load(environ: Mapping[str, str], system: Path = SYSTEM_DIR) -> RegistriesConf:
    """Every ``registries.conf`` of :func:`conf_files`, merged."""
    texts = []
    for path in conf_files(environ, system):
        shown = escape_display(str(path))
        try:
            data = read_small_file(path, MAX_CONF_BYTES)
        except FileNotFoundError:
            continue
        except NotSmallFile as why:
            raise UnsuitablePath(
                f"{shown} {why.reason}; fix or remove it", path=str(path)
            ) from None
        except OSError as err:
            raise os_failure(f"cannot read {shown} ({err.strerror})", err, path=str(path)) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise Malformed(
                f"{shown} is not UTF-8 text; fix or remove it", path=str(path)
            ) from None
        texts.append((str(path), text))
    return parse_files(texts)


__all__ = ["SYSTEM_DIR", "VARIABLE", "conf_files", "load"]
