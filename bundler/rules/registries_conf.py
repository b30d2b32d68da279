"""Per-registry settings as containers keeps them: ``registries.conf``, version 2, pure.

podman, skopeo and buildah read ``registries.conf`` (containers-registries.conf(5)); a host
marked there is the same host for bundler, so its flags are not repeated on every command.
bundler reads the part of the format that applies to pulling and pushing one reference on a
named host:

* ``[[registry]]`` tables with ``location = "HOST[:PORT]"`` (no path), and ``prefix`` absent or
  equal to the location;
* ``insecure = true``: plain HTTP, or HTTPS without verifying the certificate, for that host;
* ``blocked = true``: the host is refused;
* ``[[registry.mirror]]`` with ``location = "HOST[:PORT][/PATH]"``, ``insecure`` and
  ``pull-from-mirror`` (``all``, ``digest-only``, ``tag-only``), and the registry's
  ``mirror-by-digest-only``. Tags are always resolved on the registry itself; mirrors serve
  only digest-addressed content, checked against its digest.

Everything else is ignored and named once in the warnings: a table whose ``prefix`` differs
from its location or holds a wildcard (namespace remapping), a location with a path,
``[aliases]`` and short-name settings, ``unqualified-search-registries``, and the version 1
tables (``[registries.*]``).

Files are read in load order by the caller (``registry/settings``); a later file's table for a
host replaces an earlier one, as in containers/image.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bundler.errors import InvalidInput, Malformed
from bundler.rules.names import escape_display
from bundler.rules.tomlcompat import TOMLDecodeError, loads, toml_error_reason

PULL_FROM_MIRROR = ("all", "digest-only", "tag-only")
_HOST_PORT = re.compile(
    r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(?::\d{1,5})?"
)
_IGNORED_TOP_LEVEL = {
    "unqualified-search-registries": "unqualified-search-registries (short names)",
    "short-name-mode": "short-name-mode (short names)",
    "aliases": "[aliases] (short names)",
    "registries": "version 1 tables ([registries.*])",
    "credential-helpers": "credential-helpers",
}


@dataclass(frozen=True)
class Mirror:
    """A pull-through cache or copy of a registry's digest-addressed content."""

    netloc: str
    """``host[:port]``."""
    path: str
    """A repository prefix on the mirror (``""`` for none)."""
    insecure: bool
    pull_from_mirror: str

    def serves(self, by_digest: bool) -> bool:
        """Whether this mirror is asked for a pull by digest (``by_digest``) or by tag."""
        if self.pull_from_mirror == "digest-only":
            return by_digest
        if self.pull_from_mirror == "tag-only":
            return not by_digest
        return True

    def repository(self, repository: str) -> str:
        """The repository's name on the mirror."""
        return f"{self.path}/{repository}" if self.path else repository


@dataclass(frozen=True)
class RegistrySettings:
    """What ``registries.conf`` says of one host."""

    netloc: str
    source: str
    """The file the table came from, for messages."""
    insecure: bool = False
    blocked: bool = False
    mirrors: tuple[Mirror, ...] = ()

    def mirrors_for(self, by_digest: bool) -> list[Mirror]:
        """The mirrors a pull by digest (or by tag) tries, in order, before the registry."""
        return [m for m in self.mirrors if m.serves(by_digest)]


@dataclass
class RegistriesConf:
    """The merged settings of every file read, and what was ignored in them."""

    hosts: dict[str, RegistrySettings] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    """One line per ignored key or table, naming its file: warned once per command."""

    def settings_for(self, netloc: str) -> RegistrySettings | None:
        """The settings of ``host[:port]``, or None when no file names it."""
        return self.hosts.get(netloc.lower())


def _bad(source: str, where: str, what: str) -> InvalidInput:
    return Malformed(
        f"{escape_display(source)}: {where} {what}; fix or remove it "
        "(see containers-registries.conf(5))",
        path=source,
    )


def _bool(table: dict[str, Any], key: str, source: str, where: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise _bad(source, where, f"has {key} that is not true or false")
    return value


def _location(table: dict[str, Any], source: str, where: str) -> tuple[str, str]:
    location = table.get("location")
    if not isinstance(location, str) or not location.strip():
        raise _bad(source, where, "has no location")
    text = location.strip().rstrip("/")
    host, _, path = text.partition("/")
    if not _HOST_PORT.fullmatch(host):
        raise _bad(source, where, "has a location that is not HOST[:PORT][/PATH]")
    return host.lower(), path


def _mirror(table: object, source: str, where: str) -> Mirror:
    if not isinstance(table, dict):
        raise _bad(source, where, "is not a table")
    netloc, path = _location(table, source, where)
    pull = table.get("pull-from-mirror", "all")
    if pull not in PULL_FROM_MIRROR:
        raise _bad(source, where, "has pull-from-mirror other than all, digest-only, tag-only")
    return Mirror(netloc, path, _bool(table, "insecure", source, where), pull)


def _registry(
    table: object, index: int, source: str, ignored: list[str]
) -> RegistrySettings | None:
    where = f"[[registry]] number {index + 1}"
    if not isinstance(table, dict):
        raise _bad(source, where, "is not a table")
    netloc, path = _location(table, source, where)
    prefix = table.get("prefix")
    if prefix is not None and not isinstance(prefix, str):
        raise _bad(source, where, "has a prefix that is not a string")
    if path or (prefix is not None and prefix.strip().rstrip("/").lower() != netloc):
        ignored.append(
            f"{escape_display(source)}: {where} ({escape_display(netloc)}) maps a prefix or a "
            "namespace, which bundler does not read; it is ignored"
        )
        return None
    by_digest_only = _bool(table, "mirror-by-digest-only", source, where)
    raw_mirrors = table.get("mirror", [])
    if not isinstance(raw_mirrors, list):
        raise _bad(source, where, "has mirror that is not an array of tables")
    mirrors = []
    for number, raw in enumerate(raw_mirrors):
        mirror = _mirror(raw, source, f"{where}, mirror number {number + 1},")
        if by_digest_only:
            mirror = Mirror(mirror.netloc, mirror.path, mirror.insecure, "digest-only")
        mirrors.append(mirror)
    return RegistrySettings(
        netloc=netloc,
        source=source,
        insecure=_bool(table, "insecure", source, where),
        blocked=_bool(table, "blocked", source, where),
        mirrors=tuple(mirrors),
    )


def parse_into(conf: RegistriesConf, text: str, source: str) -> None:
    """Read one file's ``text`` into ``conf``; a later file's table for a host replaces an
    earlier one. Malformed TOML or a malformed table is :class:`InvalidInput` naming ``source``."""
    try:
        document = loads(text)
    except TOMLDecodeError as exc:
        raise Malformed(
            f"{escape_display(source)} is not valid TOML ({toml_error_reason(exc)}); fix it "
            "or remove it",
            path=source,
        ) from None
    for key, what in _IGNORED_TOP_LEVEL.items():
        if key in document:
            conf.ignored.append(f"{escape_display(source)}: {what} is not read by bundler")
    tables = document.get("registry", [])
    if not isinstance(tables, list):
        raise _bad(source, "registry", "is not an array of [[registry]] tables")
    for index, table in enumerate(tables):
        settings = _registry(table, index, source, conf.ignored)
        if settings is not None:
            conf.hosts[settings.netloc] = settings


def parse_files(files: Iterable[tuple[str, str]]) -> RegistriesConf:
    """Merge ``(source, text)`` pairs in load order."""
    conf = RegistriesConf()
    for source, text in files:
        parse_into(conf, text, source)
    return conf
