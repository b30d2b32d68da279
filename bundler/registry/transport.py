"""The transport under the distribution API: connections, TLS, proxies, bounded reads, retries.

Rules this module keeps:

* every small answer (an error, a token, a manifest) is read with a bound and a deadline
  (:meth:`Transport._read`); a body left unread closes the connection, whose stream would be
  out of step;
* a connection goes through the proxy Go's rules pick (:mod:`bundler.rules.proxy`): HTTPS by
  ``CONNECT``, plain HTTP by absolute URL, the proxy's credentials withheld from every message;
* TLS is verified, against ``--ca-file`` when given, except for a host ``registries.conf``
  marks insecure (which falls back to plain HTTP when it speaks no TLS);
* a GET, a HEAD, or a PUT whose body can be sent again is retried on a busy answer or a
  connection that failed before an answer, as :mod:`bundler.rules.retry` bounds it.
"""

from __future__ import annotations

import base64
import http.client
import os
import random
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO, TypeVar

from bundler.errors import (
    PolicyRefused,
    Refused,
    RegistryRefused,
    RegistryUnreachable,
    UnsuitablePath,
)
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.registry import settings
from bundler.registry.auth import Auth, Credentials
from bundler.registry.network import (
    BUSY,
    CLOSED,
    TIMED_OUT,
    cause_of,
    lost,
    shown_host,
)
from bundler.registry.reference import Reference
from bundler.rules import retry
from bundler.rules.names import escape_display
from bundler.rules.proxy import Proxy, proxy_for
from bundler.rules.registries_conf import RegistriesConf

MAX_SMALL_BYTES = 64 << 10
CHUNK = 1 << 20
TIMEOUT = 60.0

Body = bytes | BinaryIO | None
_T = TypeVar("_T")
_S = TypeVar("_S", bound="Transport")


MAX_CA_FILE_BYTES = 16 << 20
"""A CA file holds certificates: a system bundle of hundreds is well under this."""


@dataclass(frozen=True)
class Options:
    """How to reach a registry: ``plain_http`` (``--plain-http``), ``ca_file`` (``--ca-file``);
    the credentials for this command alone (``--username``, ``--password-stdin``) and the one
    credentials file to read (``--authfile``), else the search order of
    :mod:`bundler.registry.auth`."""

    plain_http: bool = False
    ca_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    authfile: str | None = None
    insecure: bool = False
    """HTTPS without verifying the certificate, else plain HTTP (``registries.conf``'s
    ``insecure`` for a mirror)."""

    def given_credentials(self) -> Credentials | None:
        """The credentials given for this command, if any."""
        if self.password is None:
            return None
        return Credentials(self.username or "", self.password)


class Transport:
    """Requests to one registry, kept-alive connections to it (and to the hosts it sends us
    to), through the proxy the environment names, with TLS as the options and
    ``registries.conf`` ask; a busy answer or a failed connection tried again. The answer to a
    401 is :class:`bundler.registry.challenge.Authenticated`'s; the endpoints are
    :class:`bundler.registry.distribution.Session`'s."""

    def __init__(
        self,
        ref: Reference,
        options: Options,
        *,
        push: bool = False,
        environ: Mapping[str, str] | None = None,
        conf: RegistriesConf | None = None,
        mirrors: bool = True,
    ) -> None:
        self.ref = ref
        self.options = options
        env = dict(os.environ if environ is None else environ)
        self.conf = settings.load(env) if conf is None else conf
        found = self.conf.settings_for(ref.netloc)
        if found is not None and found.blocked:
            raise PolicyRefused(
                f"registry {escape_display(ref.netloc)} is blocked in "
                f"{escape_display(found.source)}; remove blocked = true there to use it",
                path=found.source,
            )
        self.insecure = not options.plain_http and (
            options.insecure or (found is not None and found.insecure)
        )
        self.mirrors = (
            [] if found is None or not mirrors else found.mirrors_for(ref.digest is not None)
        )
        self.notes: list[str] = list(self.conf.ignored)
        """What a report should warn of: ignored settings, mirrors that failed."""
        self.scheme = "http" if options.plain_http else "https"
        self.auth = Auth(
            ref.netloc,
            env,
            repository=ref.repository,
            given=options.given_credentials(),
            authfile=options.authfile,
        )
        self.scope = f"repository:{ref.repository}:{'pull,push' if push else 'pull'}"
        self._context = self._ssl_context(options.ca_file) if self.scheme == "https" else None
        if self._context is not None and self.insecure:
            # registries.conf marks the host insecure: its certificate is not checked
            self._context.check_hostname = False
            self._context.verify_mode = ssl.CERT_NONE
        self._conns: dict[tuple[str, str], http.client.HTTPConnection] = {}
        self._proxied: dict[tuple[str, str], Proxy] = {}

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
        if ca_file is None:
            return ssl.create_default_context()
        try:
            # read here, bounded: OpenSSL would read /dev/zero to its end
            pem = read_small_file(ca_file, MAX_CA_FILE_BYTES, streams=True)
            return ssl.create_default_context(cadata=pem.decode("ascii"))
        except (OSError, ssl.SSLError, NotSmallFile, UnicodeDecodeError):
            raise UnsuitablePath(
                f"--ca-file {escape_display(ca_file)} is not a readable PEM certificate file",
                path=ca_file,
            ) from None

    def close(self) -> None:
        """Close every connection."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def shown(self) -> str:
        """The registry as error messages name it."""
        return escape_display(self.ref.netloc)

    def url(self, path: str) -> str:
        """An absolute URL on the registry for an API path."""
        return f"{self.scheme}://{self.ref.netloc}{path}"

    def _conn(self, scheme: str, netloc: str) -> http.client.HTTPConnection:
        key = (scheme, netloc)
        conn = self._conns.get(key)
        if conn is None:
            proxy = self._proxy(scheme, netloc)
            address = netloc if proxy is None else proxy.netloc
            if scheme == "https":
                context = self._context or ssl.create_default_context()
                conn = http.client.HTTPSConnection(
                    address, timeout=TIMEOUT, context=context, blocksize=CHUNK
                )
                if proxy is not None:
                    # CONNECT: the proxy relays the TLS it cannot read
                    conn.set_tunnel(netloc, headers=self._proxy_headers(proxy))
            else:
                conn = http.client.HTTPConnection(address, timeout=TIMEOUT, blocksize=CHUNK)
                if proxy is not None:
                    self._proxied[key] = proxy
            self._conns[key] = conn
        return conn

    def _proxy(self, scheme: str, netloc: str) -> Proxy | None:
        """The proxy the environment names for ``scheme://netloc`` (Go's rules), or None."""
        parts = urllib.parse.urlsplit(f"//{netloc}")
        proxy = proxy_for(scheme, parts.hostname or "", parts.port, self.auth.environ)
        if proxy is not None and proxy.scheme != "http":
            raise PolicyRefused(
                f"${proxy.variable} names a proxy reached over HTTPS, which bundler cannot use; "
                "name its http:// address"
            )
        return proxy

    def _proxy_headers(self, proxy: Proxy) -> dict[str, str]:
        """``Proxy-Authorization`` for a proxy whose address carries credentials (withheld from
        every message, as a registry's are)."""
        if proxy.username is None and proxy.password is None:
            return {}
        raw = f"{proxy.username or ''}:{proxy.password or ''}".encode()
        value = base64.b64encode(raw).decode("ascii")
        for secret in (proxy.password or "", value):
            self.auth.remember(secret)
        return {"Proxy-Authorization": f"Basic {value}"}

    def _target(self, parts: urllib.parse.SplitResult) -> str:
        """The request target: the path, or for plain HTTP through a proxy the absolute URL."""
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        if (parts.scheme, parts.netloc) in self._proxied:
            return f"{parts.scheme}://{parts.netloc}{path}"
        return path

    def _proxy_failure(self, parts: urllib.parse.SplitResult, err: OSError) -> Refused | None:
        """The error for a proxy that refused or dropped the tunnel to the registry, naming the
        proxy without its credentials; None when no proxy is in the way."""
        proxy = self._proxy(parts.scheme, parts.netloc)
        if proxy is None:
            return None
        shown = escape_display(proxy.shown())
        text = str(err)
        if text.startswith("Tunnel connection failed:"):
            code = text.removeprefix("Tunnel connection failed:").split()[:1]
            status = code[0] if code and code[0].isdigit() else "?"
            hint = (
                "it asks for credentials: put them in the proxy's address"
                if status in ("401", "407")  # tinyproxy answers a CONNECT 401
                else "check the proxy and NO_PROXY"
            )
            return RegistryRefused(
                f"the proxy {shown} refused the connection to registry "
                f"{shown_host(parts.netloc)} (HTTP {status}); {hint}"
            )
        cause = cause_of(err)
        message = (
            f"cannot talk to registry {shown_host(parts.netloc)} through the proxy {shown} "
            f"({escape_display(failure_reason(err))}); check the proxy, then try again"
        )
        return (
            RegistryRefused(message)
            if cause is None
            else RegistryUnreachable(message, host=shown_host(parts.netloc), cause=cause)
        )

    def _drop(self, scheme: str, netloc: str) -> None:
        conn = self._conns.pop((scheme, netloc), None)
        if conn is not None:
            conn.close()

    def _send(
        self, method: str, url: str, headers: dict[str, str], body: Body
    ) -> http.client.HTTPResponse:
        """One request; a kept-alive connection the server closed meanwhile is reopened once."""
        parts = urllib.parse.urlsplit(url)
        start = body_start(body)
        for attempt in (0, 1):
            fresh = (parts.scheme, parts.netloc) not in self._conns
            try:
                conn = self._conn(parts.scheme, parts.netloc)
                proxied = self._proxied.get((parts.scheme, parts.netloc))
                if proxied is not None:
                    headers = {**headers, **self._proxy_headers(proxied)}
                conn.request(method, self._target(parts), body=body, headers=headers)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as err:
                self._drop(parts.scheme, parts.netloc)
                through = self._proxy_failure(parts, err) if fresh else None
                if through is not None:
                    raise through from None
                if fresh or attempt or (start is None and body is not None):
                    cause = cause_of(err) or CLOSED
                    raise lost(parts.netloc, cause, "a request", waited=TIMEOUT) from None
                rewind(body, start)
            except ssl.SSLCertVerificationError:
                self._drop(parts.scheme, parts.netloc)
                raise RegistryRefused(
                    f"registry {escape_display(parts.netloc)}: its TLS certificate is not "
                    "trusted; pass --ca-file FILE with the CA that signed it",
                ) from None
            except ssl.SSLError as err:
                self._drop(parts.scheme, parts.netloc)
                if self.insecure and parts.scheme == "https" and parts.netloc == self.ref.netloc:
                    # an insecure host that speaks no TLS: plain HTTP, as containers falls back
                    self.scheme = "http"
                    parts = parts._replace(scheme="http")
                    rewind(body, start)
                    continue
                # OpenSSL's reason when the answer to the handshake is no TLS record at all
                hint = (
                    " (it may speak plain HTTP: pass --plain-http)"
                    if err.reason == "WRONG_VERSION_NUMBER"
                    else ""
                )
                raise self._unreachable(parts.netloc, f"TLS failed{hint}", None) from None
            except (OSError, http.client.HTTPException) as err:
                self._drop(parts.scheme, parts.netloc)
                through = (
                    self._proxy_failure(parts, err) if fresh and isinstance(err, OSError) else None
                )
                if through is not None:
                    raise through from None
                raise self._unreachable(parts.netloc, failure_reason(err), cause_of(err)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _unreachable(netloc: str, reason: str, cause: str | None) -> Refused:
        """A request that found no answer: a :class:`RegistryUnreachable` when ``cause`` (of
        :func:`cause_of`) names the network's failure, else the registry's (a TLS handshake
        refused, an answer that is no HTTP)."""
        host = shown_host(netloc)
        message = (
            f"cannot talk to registry {host} ({escape_display(reason)}); "
            "check that it runs and the address, then try again"
        )
        return (
            RegistryRefused(message)
            if cause is None
            else RegistryUnreachable(message, host=host, cause=cause)
        )

    @staticmethod
    def _put_head(
        conn: http.client.HTTPConnection,
        method: str,
        target: str,
        headers: dict[str, str],
    ) -> None:
        conn.putrequest(method, target)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()

    def _network(self, netloc: str, step: Callable[[], _T], doing: str = "") -> _T:
        """``step()``, whose every failure (refused, reset, timed out, a garbled answer) is the
        registry's or the network's: raised as :meth:`_unreachable`, or, once the exchange
        was under way ``doing`` something, a dropped connection as :func:`lost`."""
        try:
            return step()
        except (OSError, http.client.HTTPException) as err:
            cause = cause_of(err)
            if doing and cause is not None:
                raise lost(netloc, cause, doing, waited=TIMEOUT) from None
            raise self._unreachable(netloc, failure_reason(err), cause) from None

    # ------------------------------------------------------------------ requests

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: Body = None,
        url: str | None = None,
    ) -> http.client.HTTPResponse:
        """Send a request to the registry (each try one :meth:`_request_once`, which answers a 401
        where a subclass can); the response is the caller's.

        A GET, a HEAD, or a PUT whose body can be sent again is retried on a busy answer (429,
        502, 503, 504) or a connection that failed before an answer, as
        :mod:`bundler.rules.retry` bounds it; after the last try it is a
        :class:`RegistryUnreachable` saying to try again."""
        start = body_start(body)
        repeatable = method in ("GET", "HEAD") or (
            method == "PUT" and (start is not None or body is None)
        )
        if not repeatable:
            return self._request_once(method, path, headers, body, url, start)
        timings = retry.timings(self.auth.environ)
        began = time.monotonic()
        failed = 0
        while True:
            try:
                response = self._request_once(method, path, headers, body, url, start)
            except RegistryUnreachable as err:
                failed += 1
                wait = self._wait(failed, None, began, timings)
                if wait is None:
                    raise RegistryUnreachable(
                        f"{err} (tried {failed} times in {time.monotonic() - began:.0f} s)",
                        host=err.host,
                        cause=err.cause,
                    ) from None
            else:
                if response.status not in retry.RETRY_STATUSES:
                    return response
                failed += 1
                header = response.getheader("Retry-After")
                self._read(response, MAX_SMALL_BYTES)
                wait = self._wait(failed, header, began, timings)
                if wait is None:
                    raise RegistryUnreachable(
                        f"the registry {self.shown} answered {response.status} (busy or "
                        f"overloaded) {failed} times in {time.monotonic() - began:.0f} s; "
                        "try again later",
                        host=self.shown,
                        cause=BUSY,
                    )
            time.sleep(wait)
            rewind(body, start)

    def _wait(
        self, failed: int, header: str | None, began: float, timings: retry.Timings
    ) -> float | None:
        return retry.next_wait(
            failed,
            header,
            now=time.time(),
            elapsed=time.monotonic() - began,
            timings=timings,
            unit=random.random(),  # noqa: S311 - jitter, not a secret
        )

    def _request_once(
        self,
        method: str,
        path: str,
        headers: dict[str, str] | None,
        body: Body,
        url: str | None,
        start: int | None,
    ) -> http.client.HTTPResponse:
        """One exchange of :meth:`request` (no retry): here the request sent as it is; a
        subclass that answers challenges sends it again with its answer."""
        return self._send(method, url or self.url(path), dict(headers or {}), body)

    def _read(self, response: http.client.HTTPResponse, limit: int) -> bytes:
        """The body, at most ``limit`` bytes plus one (so a caller can tell it was longer); a
        body left unread closes the connections, whose stream would be out of step.

        A small document must arrive whole within the small-document deadline
        (:mod:`bundler.rules.retry`): read piece by piece, each wait bounded by what is left
        of it, so a registry sending a byte a second cannot hold the command; past it, a
        :class:`RegistryUnreachable`."""
        allowed = retry.timings(self.auth.environ).small_deadline
        deadline = time.monotonic() + allowed
        sock = socket_of(response)
        pieces: list[bytes] = []
        got = 0
        try:
            while got <= limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if sock is not None:
                    sock.settimeout(min(TIMEOUT, left))
                piece = response.read1(limit + 1 - got)
                if not piece:
                    if response.length == 0:
                        response.read()  # the body's end: the connection stays for the next
                    break
                pieces.append(piece)
                got += len(piece)
        except TimeoutError:
            self.drop_response(response)
            raise RegistryUnreachable(
                f"registry {self.shown} did not send a small answer (a manifest, a token, an "
                f"error) within {allowed:g} s; try again",
                host=self.shown,
                cause=TIMED_OUT,
            ) from None
        except (OSError, http.client.HTTPException):
            pass
        finally:
            if sock is not None and sock.fileno() >= 0:
                sock.settimeout(TIMEOUT)
        data = b"".join(pieces)
        if not response.isclosed():
            self.drop_response(response)
        return data

    def drop_response(self, response: http.client.HTTPResponse) -> None:
        response.close()
        self.close()


def web_address(base: str, given: str) -> tuple[str, urllib.parse.SplitResult] | None:
    """``given``, an address a registry sent (a Location, a token realm), resolved against
    ``base``: the URL and its parts, or None when it is no web address to reach (not HTTP or
    HTTPS, no host, a malformed host or port, a character a request line cannot carry). The
    registry's text is hostile input: nothing here raises on it."""
    if not given.isascii() or not given.isprintable():
        return None
    try:
        url = urllib.parse.urljoin(base, given)
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is no number in range
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return url, parts


def socket_of(response: http.client.HTTPResponse) -> socket.socket | None:
    """The socket an answer is read from (to bound each wait), when it is still open."""
    raw = getattr(response.fp, "raw", None)
    sock = getattr(raw, "_sock", None)  # socket.SocketIO keeps its socket there
    return sock if isinstance(sock, socket.socket) else None


def failure_reason(err: OSError | http.client.HTTPException) -> str:
    """How a failed exchange with a registry is named: the system's words for an OSError
    ("Connection reset by peer"), the time waited for a timeout, else the kind of HTTP
    failure."""
    if isinstance(err, TimeoutError):
        return f"no answer in {TIMEOUT:g} s"
    return str(getattr(err, "strerror", None) or type(err).__name__)


def body_start(body: Body) -> int | None:
    """Where a file body starts (to send it again after a 401); None for a one-pass body."""
    if body is None or isinstance(body, bytes):
        return 0
    tell = getattr(body, "tell", None)
    return int(tell()) if tell is not None else None


def rewind(body: Body, start: int | None) -> None:
    """Put a file body back where :func:`body_start` found it, to send it again."""
    if start is not None and body is not None and not isinstance(body, bytes):
        body.seek(start)
