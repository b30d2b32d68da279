"""``oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]``: parsing and showing a registry reference."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from bundler.errors import UsageError
from bundler.rules.names import escape_display

SCHEME = "oci://"
DEFAULT_TAG = "latest"

# the distribution spec's grammar (distribution/reference): lowercase path components joined by
# '/', each separated internally by '.', '_', '__' or dashes; tags up to 128 characters
_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REPO = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)")
MAX_REPO = 255


@dataclass(frozen=True)
class Reference:
    """A parsed reference; exactly one of ``tag`` and ``digest`` is set."""

    host: str
    port: int | None
    repository: str
    tag: str | None
    digest: str | None

    @property
    def netloc(self) -> str:
        """``host[:port]`` as it goes into a URL and a Docker config key."""
        return self.host if self.port is None else f"{self.host}:{self.port}"

    @property
    def target(self) -> str:
        """What goes after ``/manifests/``: the digest when given, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    @property
    def loopback(self) -> bool:
        """True for ``localhost`` and loopback addresses: the only hosts plain HTTP may carry
        credentials to."""
        name = self.host.strip("[]")
        if name.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    def with_digest(self, digest: str) -> Reference:
        """The same repository pinned to ``digest``."""
        return Reference(self.host, self.port, self.repository, None, digest)

    def unpinned_warning(self, digest: str) -> str | None:
        """For a reference by tag, what to say after reading ``digest`` through it: a tag can
        be moved to another artifact, a digest cannot. ``None`` for a reference by digest."""
        if self.digest is not None:
            return None
        return (
            f"{escape_display(str(self))} is a tag, which can be moved to another artifact; "
            f"to read exactly this one again, pin its digest: "
            f"{escape_display(str(self.with_digest(digest)))}"
        )

    def __str__(self) -> str:
        tail = f"@{self.digest}" if self.digest else f":{self.tag or DEFAULT_TAG}"
        return f"{SCHEME}{self.netloc}/{self.repository}{tail}"


def is_tag(text: str) -> bool:
    """Whether ``text`` is a tag a registry can hold (the distribution specification's
    grammar): a tag list's other names go into no request."""
    return _TAG.fullmatch(text) is not None


def is_reference(text: str) -> bool:
    """True when ``text`` names a registry artifact rather than a local path."""
    return text.startswith(SCHEME)


def parse_reference(text: str) -> Reference:
    """Parse ``oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]``; a missing tag means ``latest``.

    Raises :class:`UsageError` naming what is wrong. Userinfo (``user:pass@``) is refused: a
    password in a reference ends up in shell history and process lists.
    """
    if not is_reference(text):
        raise UsageError(
            "not an oci:// reference: oci://HOST[:PORT]/REPO[:TAG|@sha256:DIGEST]"
            + _did_you_mean(text)
        )
    rest = text[len(SCHEME) :]
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        raise UsageError(
            "a registry reference may not carry credentials (user:password@); log in with "
            "'docker login' or put them in $DOCKER_CONFIG/config.json"
        )
    shown = escape_display(text)
    if not slash or not path:
        raise UsageError(f"{shown}: name a repository: oci://HOST[:PORT]/REPO[:TAG]")
    host, port = _split_host(netloc, shown)
    digest = tag = None
    if "@" in path:
        path, _, digest = path.partition("@")
        if not DIGEST.fullmatch(digest):
            raise UsageError(f"{shown}: a digest is sha256: and 64 lowercase hex digits")
    else:
        last = path.rsplit("/", 1)[-1]
        if ":" in last:
            path, _, tag = path.rpartition(":")
            if not _TAG.fullmatch(tag):
                raise UsageError(f"{shown}: a tag is up to 128 letters, digits, '_', '.', '-'")
    if len(path) > MAX_REPO or not _REPO.fullmatch(path):
        raise UsageError(
            f"{shown}: a repository is lowercase letters and digits in '/'-separated parts"
        )
    return Reference(host, port, path, tag if digest is None else None, digest)


def _did_you_mean(text: str) -> str:
    """ "; did you mean oci://…?" for what another tool would take as a registry reference:
    ``docker://HOST/REPO:TAG`` (skopeo's transport), or a bare ``HOST/REPO[:TAG]`` whose first
    part is a registry host (holds a dot or a port, or is ``localhost``); "" otherwise."""
    rest = text
    for prefix in ("docker://", "oci-archive://", "http://", "https://"):
        if text.lower().startswith(prefix):
            rest = text[len(prefix) :]
            break
    else:
        first = text.split("/", 1)[0]
        if (
            "/" not in text
            or not ("." in first or ":" in first or first.lower() == "localhost")
            or first in (".", "..")
        ):
            return ""
    try:
        parse_reference(SCHEME + rest)
    except UsageError:
        return ""
    return f"; did you mean {escape_display(SCHEME + rest)}?"


def _split_host(netloc: str, shown: str) -> tuple[str, int | None]:
    host, port_text = netloc, ""
    if netloc.startswith("["):
        end = netloc.find("]")
        host, port_text = netloc[: end + 1], netloc[end + 1 :].removeprefix(":")
    elif ":" in netloc:
        host, _, port_text = netloc.rpartition(":")
    if not _HOST.fullmatch(host):
        raise UsageError(f"{shown}: the registry host is not a host name or address")
    if port_text == "":
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"{shown}: the registry port is not a number from 1 to 65535")
    return host, int(port_text)
