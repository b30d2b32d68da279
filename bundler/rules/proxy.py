"""Which proxy a registry request goes through, decided from the environment as Go decides it.

docker, podman and skopeo are Go programs that read ``HTTPS_PROXY``, ``HTTP_PROXY`` and
``NO_PROXY`` through Go's ``ProxyFromEnvironment``; fleets set those variables once for all of
them, so bundler follows the same rules rather than Python's (``urllib`` reads the variables
differently: no CIDR blocks, no ports in ``NO_PROXY``):

* an ``https`` request uses ``HTTPS_PROXY``, an ``http`` one ``HTTP_PROXY``; the upper-case name
  wins over the lower-case one when both are set and non-empty; ``HTTP_PROXY`` is ignored
  inside a CGI request (``REQUEST_METHOD`` set), where a client could have set it;
* a proxy value without a scheme is read as ``http://VALUE``;
* ``localhost`` and loopback addresses are never proxied;
* ``NO_PROXY`` is a comma-separated list: ``*`` (nothing is proxied), an IP address or a CIDR
  block, ``[v6]:port`` or ``v4:port``, or a domain — ``example.com`` matches it and every
  subdomain, ``.example.com`` and ``*.example.com`` only subdomains — with an optional
  ``:port`` that restricts the entry to that port; a domain entry never matches an IP address.

Pure: the environment is passed in as a mapping.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from bundler.errors import UsageError

DEFAULT_PORTS = {"http": 80, "https": 443}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy: requests to ``https`` registries go through it with ``CONNECT``."""

    scheme: str
    host: str
    port: int
    username: str | None
    password: str | None
    variable: str
    """The environment variable it came from, for messages."""

    @property
    def netloc(self) -> str:
        """``host:port``, bracketed for IPv6, without credentials: safe in a message."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def shown(self) -> str:
        """The proxy as a message names it: its address and variable, credentials masked."""
        user = "***@" if self.username is not None or self.password is not None else ""
        return f"{self.scheme}://{user}{self.netloc} (from {self.variable})"


def _first_set(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        value = env.get(name, "")
        if value:
            return name, value
    return None


def parse_proxy(value: str, variable: str) -> Proxy:
    """Read a proxy variable's value; a value that is no usable address is a usage error that
    names the variable, never the value (it may hold a password)."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise UsageError(
            f"${variable} is not a proxy address; set it to http://HOST:PORT or unset it"
        ) from None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise UsageError(
            f"${variable} names a proxy bundler cannot use (only http:// and https:// proxies); "
            "set it to http://HOST:PORT or unset it"
        )
    return Proxy(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port if port is not None else DEFAULT_PORTS[parts.scheme],
        username=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
        variable=variable,
    )


@dataclass(frozen=True)
class _Entry:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    domain: str | None
    """A leading-dot suffix, e.g. ``.example.com``."""
    domain_itself: bool
    """Whether the entry also matches the domain without a subdomain."""
    port: int | None


def _split_host_port(entry: str) -> tuple[str, int | None] | None:
    """``host:port``, ``[v6]:port`` or a bare host; None for an entry that is malformed."""
    if entry.startswith("["):
        close = entry.find("]")
        if close < 0:
            return None
        host, rest = entry[1:close], entry[close + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":") or not rest[1:].isdigit():
            return None
        return host, int(rest[1:])
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if not port.isdigit():
            return None
        return host, int(port)
    return entry, None


def _parse_no_proxy(value: str) -> list[_Entry] | None:
    """The entries of ``NO_PROXY``; None when it is ``*`` (no request is proxied)."""
    entries: list[_Entry] = []
    for raw in value.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return None
        try:
            entries.append(_Entry(ipaddress.ip_network(entry, strict=False), None, False, None))
            continue
        except ValueError:
            pass
        split = _split_host_port(entry)
        if split is None or not split[0]:
            continue
        host, port = split
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            entries.append(_Entry(ipaddress.ip_network(address), None, False, port))
            continue
        if host.startswith("*."):
            host = host[1:]
        itself = not host.startswith(".")
        entries.append(_Entry(None, host if not itself else "." + host, itself, port))
    return entries


def _in_domain(host: str, entry: _Entry) -> bool:
    assert entry.domain is not None
    return host.endswith(entry.domain) or (entry.domain_itself and host == entry.domain[1:])


def _bypassed(host: str, port: int, entries: list[_Entry] | None) -> bool:
    if entries is None:
        return True
    host = host.lower().rstrip(".")
    try:
        address: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    for entry in entries:
        if entry.port is not None and entry.port != port:
            continue
        if entry.network is not None:
            if address is not None and address in entry.network:
                return True
        elif address is None and entry.domain is not None and _in_domain(host, entry):
            return True
    return False


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address: never proxied."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def proxy_for(scheme: str, host: str, port: int | None, env: Mapping[str, str]) -> Proxy | None:
    """The proxy a request to ``scheme://host:port`` goes through under ``env``, or None."""
    if scheme == "https":
        found = _first_set(env, "HTTPS_PROXY", "https_proxy")
    elif scheme == "http":
        found = None if env.get("REQUEST_METHOD") else _first_set(env, "HTTP_PROXY", "http_proxy")
    else:
        found = None
    if found is None or is_loopback(host):
        return None
    no_proxy = _first_set(env, "NO_PROXY", "no_proxy")
    entries = _parse_no_proxy(no_proxy[1]) if no_proxy is not None else []
    if _bypassed(host, port if port is not None else DEFAULT_PORTS[scheme], entries):
        return None
    # read only when it is used: a bad value for a bypassed host stops nothing
    return parse_proxy(found[1], found[0])
