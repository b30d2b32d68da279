"""The distribution API (OCI distribution spec) over ``http.client``, streamed both ways.

Why not the ORAS Python SDK (``oras`` 0.2.x): its monolithic upload reads the whole blob into
memory (``fd.read()``), its download neither checks the digest nor bounds the size, it needs
``requests`` and ``jsonschema`` at run time, and its errors and debug logs carry the registry's
response text. What bundler needs is a dozen requests; they are here.

Rules this module keeps:

* every response body is read with a bound: a manifest at most :data:`MAX_MANIFEST_BYTES`, an
  error or token answer at most :data:`MAX_SMALL_BYTES`, a blob never more than the size its
  descriptor declares (and its sha256 is checked as it streams);
* a 401 is answered once (Basic, or a bearer token from the challenge's realm); a second 401 is
  an error, so a registry cannot loop us;
* redirects are followed only for a blob GET (registries send those to blob storage), at most
  :data:`MAX_REDIRECTS`, never from HTTPS to HTTP, and without credentials to any other host;
* credentials are sent over plain HTTP only to a loopback host.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import json
import os
import random
import socket
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO, TypeVar, cast

from bundler.errors import InvalidInput, Refused, UsageError
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.registry import settings
from bundler.registry.auth import (
    Auth,
    Challenge,
    Credentials,
    is_header_token,
    parse_challenge,
)
from bundler.registry.hashing import Sha256
from bundler.registry.network import (
    BUSY,
    CLOSED,
    TIMED_OUT,
    NetworkFailure,
    cause_of,
    lost,
    shown_host,
)
from bundler.registry.reference import DIGEST, Reference, parse_reference
from bundler.rules import retry
from bundler.rules.names import escape_display
from bundler.rules.proxy import Proxy, proxy_for
from bundler.rules.registries_conf import Mirror, RegistriesConf

MAX_MANIFEST_BYTES = 4 << 20
MAX_SMALL_BYTES = 64 << 10
MAX_REDIRECTS = 3
MAX_TAG_PAGE_BYTES = 4 << 20
MAX_TAGS = 100_000
CHUNK = 1 << 20
_TAIL = 64 << 10
"""A blob's last bytes, read against one deadline rather than a low mark (see
:meth:`BlobStream._watched_read`); more than the reader's buffer and a TLS record together."""
TIMEOUT = 60.0
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_REDIRECTS = (301, 302, 303, 307, 308)
ERROR_CODES = frozenset(
    {
        "BLOB_UNKNOWN",
        "BLOB_UPLOAD_INVALID",
        "BLOB_UPLOAD_UNKNOWN",
        "DIGEST_INVALID",
        "MANIFEST_BLOB_UNKNOWN",
        "MANIFEST_INVALID",
        "MANIFEST_UNKNOWN",
        "NAME_INVALID",
        "NAME_UNKNOWN",
        "SIZE_INVALID",
        "UNAUTHORIZED",
        "DENIED",
        "UNSUPPORTED",
        "TOOMANYREQUESTS",
    }
)
"""The error codes of the OCI distribution specification: the only words of a registry's
error body an error message repeats. Anything else there is the registry's text, which a
hostile or broken one can fill with what it was sent, credentials included."""

Body = bytes | BinaryIO | None
_T = TypeVar("_T")


class Denied(Refused):
    """The registry refused the credentials, or asked for some and none were found."""


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


class Session:
    """Requests to one registry repository, with its credentials and kept-alive connections."""

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
            raise Refused(
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
        self._authorization: str | None = None

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
            raise Refused(
                f"--ca-file {escape_display(ca_file)} is not a readable PEM certificate file",
                path=ca_file,
            ) from None

    def close(self) -> None:
        """Close every connection."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> Session:
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
            raise Refused(
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
            return Refused(
                f"the proxy {shown} refused the connection to registry "
                f"{shown_host(parts.netloc)} (HTTP {status}); {hint}"
            )
        cause = cause_of(err)
        message = (
            f"cannot talk to registry {shown_host(parts.netloc)} through the proxy {shown} "
            f"({escape_display(_failure(err))}); check the proxy, then try again"
        )
        return (
            Refused(message)
            if cause is None
            else NetworkFailure(message, host=shown_host(parts.netloc), cause=cause)
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
        start = _position(body)
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
                _rewind(body, start)
            except ssl.SSLCertVerificationError:
                self._drop(parts.scheme, parts.netloc)
                raise Refused(
                    f"registry {escape_display(parts.netloc)}: its TLS certificate is not "
                    "trusted; pass --ca-file FILE with the CA that signed it",
                ) from None
            except ssl.SSLError as err:
                self._drop(parts.scheme, parts.netloc)
                if self.insecure and parts.scheme == "https" and parts.netloc == self.ref.netloc:
                    # an insecure host that speaks no TLS: plain HTTP, as containers falls back
                    self.scheme = "http"
                    parts = parts._replace(scheme="http")
                    _rewind(body, start)
                    continue
                hint = (
                    " (it may speak plain HTTP: pass --plain-http)"
                    if "WRONG_VERSION" in str(err)
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
                raise self._unreachable(parts.netloc, _failure(err), cause_of(err)) from None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _unreachable(netloc: str, reason: str, cause: str | None) -> Refused:
        """A request that found no answer: a :class:`NetworkFailure` when ``cause`` (of
        :func:`cause_of`) names the network's failure, else the registry's (a TLS handshake
        refused, an answer that is no HTTP)."""
        host = shown_host(netloc)
        message = (
            f"cannot talk to registry {host} ({escape_display(reason)}); "
            "check that it runs and the address, then try again"
        )
        return (
            Refused(message) if cause is None else NetworkFailure(message, host=host, cause=cause)
        )

    # ------------------------------------------------------------------ auth

    def _auth_headers(self, netloc: str) -> dict[str, str]:
        if netloc != self.ref.netloc or self._authorization is None:
            return {}
        return {"Authorization": self._authorization}

    def _may_send_credentials(self, scheme: str, netloc: str) -> bool:
        # plain HTTP only to a loopback host, or to one registries.conf marks insecure: a flag
        # given on one command never sends a password in clear
        return scheme == "https" or (
            netloc == self.ref.netloc and (self.ref.loopback or self.insecure)
        )

    def _answer(self, response: http.client.HTTPResponse) -> bool:
        """Prepare the Authorization for a 401; False when nothing can answer it."""
        header = response.getheader("WWW-Authenticate") or ""
        self._read(response, MAX_SMALL_BYTES)
        challenge = parse_challenge(header)
        if challenge is None:
            return False
        creds = self.auth.credentials()
        if challenge.scheme == "basic":
            if creds is None or creds.identity_token:
                return False
            if not self._may_send_credentials(self.scheme, self.ref.netloc):
                raise Refused(
                    f"registry {self.shown} asks for a password over plain HTTP; bundler sends "
                    "credentials over HTTP only to loopback hosts: use HTTPS"
                )
            self._authorization = f"Basic {Auth.basic_value(creds)}"
            return True
        token = self._token(challenge, creds)
        self.auth.remember(token)
        self._authorization = f"Bearer {token}"
        return True

    def _token(self, challenge: Challenge, creds: Credentials | None) -> str:
        """A bearer token from the challenge's realm (the token service the registry names)."""
        realm = challenge.params.get("realm", "")
        given = _web_address("", realm)  # absolute only: the registry names its token service
        if given is None:
            raise Refused(f"registry {self.shown} names no usable token service in its challenge")
        parts = given[1]
        if parts.scheme == "http" and self.scheme == "https":
            raise Refused(f"registry {self.shown} sends us to a token service over plain HTTP")
        scope = challenge.params.get("scope") or self.scope
        query = {"scope": scope} if scope else {}
        if "service" in challenge.params:
            query["service"] = challenge.params["service"]
        headers = {"Accept": "application/json"}
        method, body = "GET", None
        may_send = creds is not None and self._may_send_credentials(parts.scheme, parts.netloc)
        if creds is not None and may_send and creds.identity_token:
            method = "POST"
            form = {**query, "grant_type": "refresh_token", "refresh_token": creds.secret}
            form["client_id"] = "bundler"
            body = urllib.parse.urlencode(form).encode("ascii")
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif creds is not None and may_send:
            headers["Authorization"] = f"Basic {Auth.basic_value(creds)}"
        sep = "&" if parts.query else "?"
        url = f"{realm}{sep}{urllib.parse.urlencode(query)}"
        response = self._send(method, url, headers, body)
        data = self._read(response, MAX_SMALL_BYTES)
        if response.status in (401, 403):
            raise Denied(self._denied_message())
        if response.status != 200:
            raise Refused(
                f"the token service of registry {self.shown} answered {response.status}; "
                "try again later"
            )
        try:
            answer = json.loads(data)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError, RecursionError):
            token = None
        if not isinstance(token, str) or not token or len(token) > 16384:
            raise Refused(f"the token service of registry {self.shown} sent no usable token")
        if not is_header_token(token):
            # never shown: it is a credential, however malformed
            raise Refused(
                f"the token service of registry {self.shown} sent a token with characters no "
                "request header can carry; refused"
            )
        return token

    def _denied_message(self) -> str:
        login = f"'bundler login {self.shown}'"
        if self.auth.credentials() is not None:
            source = escape_display(self.auth.source or "")
            return (
                f"registry {self.shown} refused the credentials from {source} for "
                f"{escape_display(self.ref.repository)}; log in again ({login}) or check them"
            )
        return (
            f"registry {self.shown} needs credentials for {escape_display(self.ref.repository)} "
            f"and none were found (looked in {self.auth.searched()}); log in ({login})"
        )

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
        """Send a request to the registry, answering one 401; the response is the caller's.

        A GET, a HEAD, or a PUT whose body can be sent again is retried on a busy answer (429,
        502, 503, 504) or a connection that failed before an answer, as
        :mod:`bundler.rules.retry` bounds it; after the last try it is a
        :class:`NetworkFailure` saying to try again."""
        start = _position(body)
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
            except NetworkFailure as err:
                failed += 1
                wait = self._wait(failed, None, began, timings)
                if wait is None:
                    raise NetworkFailure(
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
                    raise NetworkFailure(
                        f"the registry {self.shown} answered {response.status} (busy or "
                        f"overloaded) {failed} times in {time.monotonic() - began:.0f} s; "
                        "try again later",
                        host=self.shown,
                        cause=BUSY,
                    )
            time.sleep(wait)
            _rewind(body, start)

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
        target = url or self.url(path)
        netloc = urllib.parse.urlsplit(target).netloc
        answered = False
        while True:
            sent = {**(headers or {}), **self._auth_headers(netloc)}
            response = self._send(method, target, sent, body)
            if response.status != 401:
                if response.status == 403:
                    self._read(response, MAX_SMALL_BYTES)
                    raise Denied(self._denied_message())
                return response
            if answered or netloc != self.ref.netloc or not self._answer(response):
                self._read(response, MAX_SMALL_BYTES)
                raise Denied(self._denied_message())
            if start is None and body is not None:
                raise Denied(self._denied_message())
            answered = True
            _rewind(body, start)

    def fail(self, response: http.client.HTTPResponse, what: str) -> Refused:
        """The error for an unexpected answer, with the registry's own error code when it is
        one of :data:`ERROR_CODES` (its message is not shown: it is the registry's text)."""
        data = self._read(response, MAX_SMALL_BYTES)
        code = ""
        try:
            errors = json.loads(data).get("errors")
            if isinstance(errors, list) and errors and isinstance(errors[0], dict):
                raw = errors[0].get("code")
                code = f", {raw}" if isinstance(raw, str) and raw in ERROR_CODES else ""
        except (ValueError, AttributeError, RecursionError):
            pass
        hint = "try again, or check the repository name and your access"
        if response.status == 400 and self.scheme == "http":
            hint = "it may speak HTTPS only: try without --plain-http"
        return Refused(
            f"registry {self.shown}: {what} failed (HTTP {response.status}{code}); {hint}"
        )

    # ------------------------------------------------------------------ API

    def base_path(self) -> str:
        """``/v2/REPO``."""
        return f"/v2/{self.ref.repository}"

    def check_login(self) -> None:
        """Ask the registry's ``/v2/`` with the credentials given (answering its challenge):
        :class:`Refused` unless it lets them in."""
        try:
            response = self.request("GET", "/v2/")
        except Denied:
            raise Refused(
                f"registry {self.shown} refused the user name and password; nothing was written"
            ) from None
        self._read(response, MAX_SMALL_BYTES)
        if response.status != 200:
            raise self.fail(response, "checking the login")

    def manifest_digest(self, target: str) -> str | None:
        """The digest a tag or digest points at (HEAD), or None when the registry has none."""
        response = self.request(
            "HEAD",
            f"{self.base_path()}/manifests/{target}",
            headers={"Accept": OCI_MANIFEST},
        )
        self._read(response, MAX_SMALL_BYTES)
        if response.status == 404:
            return None
        if response.status != 200:
            raise self.fail(response, f"looking up {escape_display(target)}")
        digest = response.getheader("Docker-Content-Digest") or ""
        return digest if DIGEST.fullmatch(digest) else "unknown"

    def get_manifest(self, target: str) -> tuple[bytes, str]:
        """(bytes, media type) of the manifest ``target`` names, at most 4 MiB."""
        response = self.request(
            "GET", f"{self.base_path()}/manifests/{target}", headers={"Accept": OCI_MANIFEST}
        )
        if response.status == 404:
            self._read(response, MAX_SMALL_BYTES)
            raise Refused(self._missing())
        if response.status in _REDIRECTS:
            raise self.fail(response, "reading the manifest (a redirect where none belongs)")
        if response.status != 200:
            raise self.fail(response, "reading the manifest")
        media = (response.getheader("Content-Type") or "").split(";")[0].strip()
        declared = response.getheader("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_MANIFEST_BYTES:
            self._drop(self.scheme, self.ref.netloc)
            raise InvalidInput(
                f"registry {self.shown}: the manifest is larger than 4 MiB; it is not a bundle's"
            )
        data = self._read(response, MAX_MANIFEST_BYTES)
        if len(data) > MAX_MANIFEST_BYTES:
            self._drop(self.scheme, self.ref.netloc)
            raise InvalidInput(
                f"registry {self.shown}: the manifest is larger than 4 MiB; it is not a bundle's"
            )
        return data, media

    def _missing(self) -> str:
        """What a 404 for the manifest means: which of the repository and the tag is missing,
        and the tags there are (the first few)."""
        shown = escape_display(str(self.ref))
        if self.ref.digest is not None:
            return f"registry {self.shown} has no {shown}; check the digest"
        try:
            tags = self.list_tags(max_tags=10_000)
        except (Refused, InvalidInput):
            return f"registry {self.shown} has no {shown}; check the repository and tag"
        repo = escape_display(self.ref.repository)
        if tags is None:
            return f"registry {self.shown} has no repository {repo}; check its name"
        if not tags:
            return f"registry {self.shown} has no tag in {repo} yet"
        listed = ", ".join(escape_display(t) for t in sorted(tags)[:10])
        more = f" and {len(tags) - 10} more" if len(tags) > 10 else ""
        return (
            f"registry {self.shown} has no tag {escape_display(self.ref.tag or 'latest')} in "
            f"{repo}; it has {listed}{more}"
        )

    def put_manifest(self, tag: str, data: bytes) -> None:
        """Store the manifest under ``tag``: the push's commit point."""
        response = self.request(
            "PUT",
            f"{self.base_path()}/manifests/{tag}",
            headers={"Content-Type": OCI_MANIFEST, "Content-Length": str(len(data))},
            body=data,
        )
        if response.status not in (200, 201):
            raise self.fail(response, "storing the manifest")
        self._read(response, MAX_SMALL_BYTES)

    def blob_exists(self, digest: str) -> bool:
        """True when the repository holds the blob (a HEAD)."""
        response = self.request("HEAD", f"{self.base_path()}/blobs/{digest}")
        self._read(response, MAX_SMALL_BYTES)
        if response.status == 200:
            return True
        if response.status == 404:
            return False
        raise self.fail(response, "checking a blob")

    def repository_is_empty(self) -> bool:
        """True when the repository holds no tag (or does not exist yet): nothing in it can
        spare an upload, since blobs an interrupted push left there are referenced by nothing."""
        response = self.request("GET", f"{self.base_path()}/tags/list?n=1")
        data = self._read(response, MAX_SMALL_BYTES)
        if response.status == 404:
            return True
        if response.status != 200:
            raise self.fail(response, "listing the repository's tags")
        try:
            tags = json.loads(data).get("tags")
        except (ValueError, AttributeError, RecursionError):
            raise Refused(f"registry {self.shown} sent an unreadable tag list") from None
        return not tags

    def list_tags(self, *, max_tags: int = MAX_TAGS) -> list[str] | None:
        """Every tag of the repository, following the ``Link`` pagination (distribution spec):
        None when the repository does not exist. A page larger than
        :data:`MAX_TAG_PAGE_BYTES`, more than ``max_tags`` tags, a next page that loops back,
        or one on another host or scheme is :class:`InvalidInput`."""
        url: str | None = self.url(f"{self.base_path()}/tags/list")
        seen: set[str] = set()
        tags: list[str] = []
        while url is not None:
            seen.add(url)
            response = self.request("GET", "", url=url)
            if response.status == 404:
                self._read(response, MAX_SMALL_BYTES)
                return None
            if response.status != 200:
                raise self.fail(response, "listing the repository's tags")
            link = response.getheader("Link")
            data = self._read(response, MAX_TAG_PAGE_BYTES)
            if len(data) > MAX_TAG_PAGE_BYTES:
                raise InvalidInput(
                    f"registry {self.shown} sent a page of tags larger than "
                    f"{MAX_TAG_PAGE_BYTES >> 20} MiB; refused"
                )
            try:
                page = json.loads(data).get("tags")
            except (ValueError, AttributeError, RecursionError):
                page = "unreadable"
            if page is None:
                page = []
            if not isinstance(page, list) or not all(isinstance(t, str) for t in page):
                raise InvalidInput(f"registry {self.shown} sent an unreadable tag list")
            tags += page
            if len(tags) > max_tags:
                raise InvalidInput(
                    f"registry {self.shown} lists more than {max_tags} tags for "
                    f"{escape_display(self.ref.repository)}; refused"
                )
            url = self._next_page(url, link)
            if url is not None and url in seen:
                raise InvalidInput(
                    f"registry {self.shown}: the tag list's next page loops back to one already "
                    "read; refused"
                )
        return tags

    def _next_page(self, url: str, link: str | None) -> str | None:
        """The ``rel="next"`` address of a ``Link`` header, which must be on this registry."""
        if not link:
            return None
        for part in link.split(","):
            target, _, params = part.strip().partition(";")
            if "next" not in params.replace(" ", "").lower() or not target.startswith("<"):
                continue
            given = _web_address(url, target.strip().strip("<>"))
            if given is None or (given[1].scheme, given[1].netloc) != (
                urllib.parse.urlsplit(url).scheme,
                self.ref.netloc,
            ):
                raise InvalidInput(
                    f"registry {self.shown} sends the next page of its tag list to another "
                    "host or to no web address; refused"
                )
            return given[0]
        return None

    def _start_upload(self) -> str:
        """POST for an upload session; its absolute URL, which must be on this registry."""
        response = self.request(
            "POST", f"{self.base_path()}/blobs/uploads/", headers={"Content-Length": "0"}
        )
        if response.status != 202:
            raise self.fail(response, "starting a blob upload")
        self._read(response, MAX_SMALL_BYTES)
        return self._upload_location(response, f"{self.base_path()}/blobs/uploads/")

    def _upload_location(self, response: http.client.HTTPResponse, base: str) -> str:
        location = response.getheader("Location") or ""
        given = _web_address(self.url(base), location) if location else None
        if given is None or (given[1].scheme, given[1].netloc) != (self.scheme, self.ref.netloc):
            raise Refused(
                f"registry {self.shown} sent its upload elsewhere; bundler uploads only to the "
                "registry named in the reference"
            )
        return given[0]

    def _finish_upload(self, target: str, digest: str, size: int, body: Body) -> None:
        """PUT ``?digest=``: the registry checks the bytes against it and commits the blob."""
        sep = "&" if urllib.parse.urlsplit(target).query else "?"
        response = self.request(
            "PUT",
            "",
            url=f"{target}{sep}{urllib.parse.urlencode({'digest': digest})}",
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            body=body,
        )
        if response.status != 201:
            raise self.fail(response, "uploading a blob")
        self._read(response, MAX_SMALL_BYTES)

    def upload_blob(self, digest: str, size: int, source: BinaryIO) -> None:
        """A monolithic upload (POST for a session, PUT of the bytes) streamed from ``source``."""
        self._finish_upload(self._start_upload(), digest, size, source)

    def upload_streamed(self, produce: Callable[[BinaryIO], None]) -> tuple[str, int]:
        """Upload the bytes ``produce`` writes, hashed as they go: (digest, size).

        One pass and nothing spooled: a PATCH whose body is sent in chunked transfer encoding
        while ``produce`` makes it, then the PUT that names the digest (the registry checks it).
        Used when the digest cannot be known before the bytes exist. An exception from
        ``produce`` abandons the upload session (the registry discards it; no blob is made).
        """
        target = self._start_upload()
        path = urllib.parse.urlsplit(target).path
        response, raw = self._send_produced("PATCH", target, None, produce)
        if response.status != 202:
            raise self.fail(response, "uploading a blob")
        self._read(response, MAX_SMALL_BYTES)
        digest = f"sha256:{raw.hash.hexdigest()}"
        self._finish_upload(self._upload_location(response, path), digest, 0, b"")
        return digest, raw.size

    def upload_produced(self, digest: str, size: int, produce: Callable[[BinaryIO], None]) -> None:
        """A monolithic upload (POST for a session, one PUT naming ``digest``) of the ``size``
        bytes ``produce`` writes, sent as they are made: for bytes made a second time rather
        than kept in a file (push hashes a layer's tar first, then makes it again to send it
        only when the registry lacks it). Bytes that are not the ones hashed before (another
        length or another sha256: what they are made of changed meanwhile) are refused and the
        request abandoned, so no blob is stored.
        """
        timings = retry.timings(self.auth.environ)
        began = time.monotonic()
        failed = 0
        while True:
            # each try is a whole upload (a new session, the bytes made again and checked
            # against the digest again): a PUT naming its digest stores that blob or nothing
            target = self._start_upload()
            sep = "&" if urllib.parse.urlsplit(target).query else "?"
            url = f"{target}{sep}{urllib.parse.urlencode({'digest': digest})}"
            header: str | None = None
            try:
                response, _raw = self._send_produced("PUT", url, (digest, size), produce)
            except _NotAsHashed:
                raise Refused(
                    f"registry {self.shown}: the bytes made to send blob {digest[:19]}… are "
                    "not the ones hashed before (a file changed meanwhile); nothing was "
                    "stored, push again"
                ) from None
            except NetworkFailure as err:
                failed += 1
                if self._wait(failed, None, began, timings) is None:
                    raise
                lost_error: NetworkFailure | None = err
            else:
                if response.status not in retry.RETRY_STATUSES:
                    break
                failed += 1
                header = response.getheader("Retry-After")
                self._read(response, MAX_SMALL_BYTES)
                lost_error = None
            wait = self._wait(failed, header, began, timings)
            if wait is None:
                if lost_error is not None:
                    raise lost_error
                raise NetworkFailure(
                    f"the registry {self.shown} answered the upload of blob {digest[:19]}… as "
                    f"busy {failed} times in {time.monotonic() - began:.0f} s; try again later",
                    host=self.shown,
                    cause=BUSY,
                )
            time.sleep(wait)
        if response.status != 201:
            raise self.fail(response, "uploading a blob")
        self._read(response, MAX_SMALL_BYTES)

    def _send_produced(
        self,
        method: str,
        target: str,
        declared: tuple[str, int] | None,
        produce: Callable[[BinaryIO], None],
    ) -> tuple[http.client.HTTPResponse, _BodySink]:
        """One request to ``target`` whose body ``produce`` writes while it is sent: in chunked
        transfer encoding, or, with ``declared`` (digest, size), as a body of that length whose
        sha256 must be that digest (else :class:`_NotAsHashed`, the connection dropped before
        the answer). Answers 401 and 403 raise; any other is the caller's."""
        parts = urllib.parse.urlsplit(target)
        conn = self._conn(parts.scheme, parts.netloc)
        length = None if declared is None else declared[1]
        raw = _BodySink(
            conn,
            lambda err: lost(
                parts.netloc, cause_of(err) or CLOSED, "the upload of a blob", waited=TIMEOUT
            ),
            length,
        )
        headers = {
            "Content-Type": "application/octet-stream",
            **(
                {"Transfer-Encoding": "chunked"}
                if length is None
                else {"Content-Length": str(length)}
            ),
            **self._auth_headers(parts.netloc),
            **(
                self._proxy_headers(self._proxied[(parts.scheme, parts.netloc)])
                if (parts.scheme, parts.netloc) in self._proxied
                else {}
            ),
        }
        try:
            # the request line and headers: any failure is the network's
            target_line = self._target(parts)
            self._network(parts.netloc, lambda: self._put_head(conn, method, target_line, headers))
            # the body: its own sends raise Refused, and an OSError from produce() is the
            # bundle's (a read error), not the network's
            # tar headers and paddings are small writes: gather them into chunks of CHUNK
            sink = io.BufferedWriter(cast(io.RawIOBase, raw), CHUNK)
            try:
                produce(cast(BinaryIO, sink))
                sink.flush()
            finally:
                sink.detach()
            raw.end(None if declared is None else declared[0])
            response = self._network(parts.netloc, conn.getresponse, "the upload of a blob")
        except BaseException:
            self._drop(parts.scheme, parts.netloc)
            raise
        if response.status in (401, 403):
            self._read(response, MAX_SMALL_BYTES)
            raise Denied(self._denied_message())
        return response, raw

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
            raise self._unreachable(netloc, _failure(err), cause) from None

    def download_blob(
        self, digest: str, size: int, sink: BinaryIO, progress: Callable[[int], None] | None = None
    ) -> None:
        """Stream the blob ``digest`` into ``sink``, reading at most ``size`` bytes, checking
        its sha256 as it goes; raises :class:`InvalidInput` when it is not what was declared."""
        with self.open_blob(digest, size, progress) as blob:
            while chunk := blob.read(CHUNK):
                sink.write(chunk)

    def open_blob(
        self, digest: str, size: int, progress: Callable[[int], None] | None = None
    ) -> BlobStream:
        """The blob ``digest`` as a stream to read (:class:`BlobStream`): at most ``size``
        bytes, and the read that finds its end checks them against ``digest``."""
        for mirror in self.mirrors:
            spooled = self._from_mirror(mirror, digest, size, progress)
            if spooled is not None:
                return spooled
        response, netloc = self._get_blob(digest)
        declared = response.getheader("Content-Length")
        if declared is not None and (not declared.isdigit() or int(declared) != size):
            self._drop_response(response)
            raise self._not_declared(digest, "its length is not the size the manifest declares")
        return BlobStream(self, response, netloc, digest, size, declared is not None, progress)

    def _from_mirror(
        self,
        mirror: Mirror,
        digest: str,
        size: int,
        progress: Callable[[int], None] | None,
    ) -> BlobStream | None:
        """The blob from ``mirror``, whole and checked against ``digest`` before a byte of it is
        given out (spooled to an unnamed temporary file); None, with a note, when the mirror
        cannot serve it or serves other bytes, which are dropped."""
        shown = escape_display(mirror.netloc)
        try:
            ref = parse_reference(
                f"oci://{mirror.netloc}/{mirror.repository(self.ref.repository)}@{digest}"
            )
            options = Options(ca_file=self.options.ca_file, insecure=mirror.insecure)
            with Session(
                ref, options, environ=self.auth.environ, conf=self.conf, mirrors=False
            ) as session:
                spool = tempfile.TemporaryFile(prefix="bundler-mirror-")  # noqa: SIM115 - handed on open
                try:
                    with session.open_blob(digest, size) as blob:
                        while chunk := blob.read(CHUNK):
                            spool.write(chunk)
                except BaseException:
                    spool.close()
                    raise
        except (Refused, InvalidInput, UsageError) as err:
            self.notes.append(
                f"mirror {shown} did not serve blob {digest[:19]}… ({err}); it came from the "
                f"registry {self.shown}"
            )
            return None
        spool.seek(0)
        return _Spooled(self, spool, digest, size, progress)

    def _read(self, response: http.client.HTTPResponse, limit: int) -> bytes:
        """The body, at most ``limit`` bytes plus one (so a caller can tell it was longer); a
        body left unread closes the connections, whose stream would be out of step.

        A small document must arrive whole within the small-document deadline
        (:mod:`bundler.rules.retry`): read piece by piece, each wait bounded by what is left
        of it, so a registry sending a byte a second cannot hold the command; past it, a
        :class:`NetworkFailure`."""
        allowed = retry.timings(self.auth.environ).small_deadline
        deadline = time.monotonic() + allowed
        sock = _socket_of(response)
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
            self._drop_response(response)
            raise NetworkFailure(
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
            self._drop_response(response)
        return data

    def _drop_response(self, response: http.client.HTTPResponse) -> None:
        response.close()
        self.close()

    def _not_declared(self, digest: str, why: str) -> InvalidInput:
        return InvalidInput(
            f"registry {self.shown}: blob {digest[:19]}… refused: {why}; nothing was written"
        )

    def _get_blob(self, digest: str) -> tuple[http.client.HTTPResponse, str]:
        """The answer to the blob's GET, redirects followed, and the host it came from."""
        url = self.url(f"{self.base_path()}/blobs/{digest}")
        response = self.request("GET", "", url=url)
        hops = 0
        while response.status in _REDIRECTS:
            location = response.getheader("Location") or ""
            self._read(response, MAX_SMALL_BYTES)
            hops += 1
            if hops > MAX_REDIRECTS or not location:
                raise Refused(f"registry {self.shown} redirects a blob download too often")
            given = _web_address(url, location)
            if given is None or (
                given[1].scheme == "http" and urllib.parse.urlsplit(url).scheme == "https"
            ):
                raise Refused(
                    f"registry {self.shown} redirects a blob download to plain HTTP or a "
                    "non-web address; refused"
                )
            url, parts = given
            if parts.netloc == self.ref.netloc:
                response = self.request("GET", "", url=url)
            else:
                # blob storage on another host gets no credential of ours
                response = self._send("GET", url, {}, None)
        if response.status != 200:
            if response.status == 404:
                self._read(response, MAX_SMALL_BYTES)
                raise InvalidInput(
                    f"registry {self.shown} has no blob {digest[:19]}… that the manifest names; "
                    "push the bundle again"
                )
            raise self.fail(response, "downloading a blob")
        return response, urllib.parse.urlsplit(url).netloc


class BlobStream:
    """A blob as the registry sends it, read chunk by chunk: never more than its declared
    size, and :meth:`read` raises :class:`InvalidInput` instead of giving the end when the
    bytes that arrived were not the ones declared (longer, another sha256), and
    :class:`NetworkFailure` when the connection to ``netloc`` (the host that sends the blob)
    closed, was reset or timed out before they all arrived. Bytes read before the
    end are not yet checked: a caller acts on them only in ways it can undo. Use it as a
    context manager: leaving early drops the connection, whose stream would be out of step."""

    def __init__(
        self,
        session: Session,
        response: http.client.HTTPResponse,
        netloc: str,
        digest: str,
        size: int,
        length_declared: bool,
        progress: Callable[[int], None] | None,
    ) -> None:
        self._session = session
        self._response = response
        self._netloc = netloc
        self._digest = digest
        self._left = size
        self._length_declared = length_declared
        self._progress = progress
        self._hash = Sha256(size)
        self._checked = False
        self._sock = _socket_of(response)
        self._timings = retry.timings(session.auth.environ)
        self._tail_deadline: float | None = None

    def __enter__(self) -> BlobStream:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._hash.close()
        if not self._checked:
            self._session._drop_response(self._response)
        self._unwatch()

    def _unwatch(self) -> None:
        """The socket as every other answer reads it: any byte wakes a read."""
        if self._sock is not None and self._sock.fileno() >= 0:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            self._sock.settimeout(TIMEOUT)

    def read(self, limit: int) -> bytes:
        """Up to ``limit`` bytes (``limit`` > 0), or ``b""`` at the end once it is checked."""
        if not self._left:
            self._check()
            return b""
        chunk = self._receive(min(limit, self._left))
        if not chunk:
            # the end of the stream before the declared size: whether the answer declared its
            # length or runs to the close, the connection closed before the blob was whole
            raise self._lost(CLOSED)
        self._hash.update(chunk)
        self._left -= len(chunk)
        if self._progress is not None:
            self._progress(len(chunk))
        return chunk

    def _lost(self, cause: str) -> NetworkFailure:
        doing = f"the download of blob {self._digest[:19]}…"
        return lost(self._netloc, cause, doing, waited=TIMEOUT)

    def _watched_read(self, size: int) -> bytes:
        """Read up to ``size`` bytes, a stall (:mod:`bundler.rules.retry`) raising
        ``TimeoutError``. The bulk of a blob is read as it always is, in chunks of up to
        :data:`CHUNK`, with no work per chunk beyond one ``setsockopt``: the kernel wakes the
        read only once a stall window's worth of bytes (1 KiB/s over 60 s) has arrived, and
        the socket's timeout is that window. Its last :data:`_TAIL` bytes, which may be fewer
        than that, are read piece by piece against one deadline of a window."""
        if self._sock is None:
            return self._response.read(size)
        window = self._timings.stall_window
        if self._left > _TAIL:
            # bytes that may already sit in the reader's and TLS's buffers never reach the
            # kernel's queue again: the low mark counts only bytes still to come
            low = min(int(self._timings.stall_rate * window), self._left - _TAIL)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, max(1, low))
            self._sock.settimeout(window)
            return self._response.read(min(size, self._left - _TAIL))
        if self._tail_deadline is None:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            self._tail_deadline = time.monotonic() + window
        left = self._tail_deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self._sock.settimeout(left)
        piece = self._response.read1(size)
        if self._response.length == 0:
            self._response.read()  # read1 leaves the answer open at its end; read closes it
        return piece

    def _receive(self, size: int) -> bytes:
        # the connection broke or timed out (the network's failure), or the framing of the
        # body is not HTTP's (the registry's): never taken for an error of the local disk
        try:
            return self._watched_read(size)
        except TimeoutError:
            host = shown_host(self._netloc)
            raise NetworkFailure(
                f"{host} sent less than {self._timings.stall_rate >> 10} KiB/s for "
                f"{self._timings.stall_window:g} s during the download of blob "
                f"{self._digest[:19]}…; try again",
                host=host,
                cause=TIMED_OUT,
            ) from None
        except (OSError, http.client.HTTPException) as err:
            cause = cause_of(err)
            if cause is not None:
                raise self._lost(cause) from None
            raise Refused(
                f"registry {self._session.shown}: the download of blob {self._digest[:19]}… "
                f"broke off ({escape_display(_failure(err))}); nothing was kept, try again"
            ) from None

    def _check(self) -> None:
        if self._checked:
            return
        if not self._length_declared and self._receive(1):
            raise self._session._not_declared(
                self._digest, "it is longer than the manifest declares"
            )
        if f"sha256:{self._hash.hexdigest()}" != self._digest:
            raise self._session._not_declared(
                self._digest, "its sha256 does not match the manifest"
            )
        self._checked = True
        self._unwatch()


class _Spooled(BlobStream):
    """A blob already whole and checked (a mirror's, spooled to an unnamed file), read back
    as a :class:`BlobStream` is read."""

    def __init__(
        self,
        session: Session,
        spool: BinaryIO,
        digest: str,
        size: int,
        progress: Callable[[int], None] | None,
    ) -> None:
        self._session = session
        self._spool = spool
        self._digest = digest
        self._progress = progress
        self._checked = True

    def __exit__(self, *_exc: object) -> None:
        self._spool.close()

    def read(self, limit: int) -> bytes:
        chunk = self._spool.read(limit)
        if chunk and self._progress is not None:
            self._progress(len(chunk))
        return chunk


class _NotAsHashed(Exception):
    """A body made a second time is not the one hashed the first time."""


class _BodySink(io.RawIOBase):
    """The body of a request as a raw write-only stream: each ``write`` is hashed, counted and
    sent at once, as one chunk of chunked transfer encoding, or as it is when the body's
    ``length`` was declared (never past it: :class:`_NotAsHashed`; its last byte is sent only
    once :meth:`end` has checked the digest). A failed send raises what
    ``broken`` makes of the send's ``OSError``, so that it is never taken for an error reading
    the bundle, which the writer raises as ``OSError``."""

    def __init__(
        self,
        conn: http.client.HTTPConnection,
        broken: Callable[[OSError], Refused],
        length: int | None,
    ) -> None:
        super().__init__()
        self.conn = conn
        self.broken = broken
        self.length = length
        self.hash = hashlib.sha256()
        self.size = 0
        self.held = b""  # see write()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        if not data:
            return 0
        if self.length is not None and self.size + len(data) > self.length:
            raise _NotAsHashed
        self.hash.update(data)
        self.size += len(data)
        try:
            if self.length is None:
                self.conn.send(b"%x\r\n" % len(data))
                self.conn.send(data)
                self.conn.send(b"\r\n")
            elif self.size == self.length:
                # the body's last byte waits for end() to check the digest: a registry never
                # holds a whole body that is not the one hashed before
                view = memoryview(data)
                self.conn.send(view[:-1])
                self.held = bytes(view[-1:])
            else:
                self.conn.send(data)
        except OSError as err:
            raise self.broken(err) from None
        return len(data)

    def end(self, digest: str | None) -> None:
        """After the last write: the last, empty chunk; or, for a declared length, the check
        that the body was that long and had that ``digest``."""
        if self.length is not None and (
            self.size != self.length or f"sha256:{self.hash.hexdigest()}" != digest
        ):
            raise _NotAsHashed
        try:
            self.conn.send(b"0\r\n\r\n" if self.length is None else self.held)
        except OSError as err:
            raise self.broken(err) from None


def _web_address(base: str, given: str) -> tuple[str, urllib.parse.SplitResult] | None:
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


def _socket_of(response: http.client.HTTPResponse) -> socket.socket | None:
    """The socket an answer is read from (to bound each wait), when it is still open."""
    raw = getattr(response.fp, "raw", None)
    sock = getattr(raw, "_sock", None)  # socket.SocketIO keeps its socket there
    return sock if isinstance(sock, socket.socket) else None


def _failure(err: OSError | http.client.HTTPException) -> str:
    """How a failed exchange with a registry is named: the system's words for an OSError
    ("Connection reset by peer"), the time waited for a timeout, else the kind of HTTP
    failure."""
    if isinstance(err, TimeoutError):
        return f"no answer in {TIMEOUT:g} s"
    return str(getattr(err, "strerror", None) or type(err).__name__)


def _position(body: Body) -> int | None:
    """Where a file body starts (to send it again after a 401); None for a one-pass body."""
    if body is None or isinstance(body, bytes):
        return 0
    tell = getattr(body, "tell", None)
    return int(tell()) if tell is not None else None


def _rewind(body: Body, start: int | None) -> None:
    if start is not None and body is not None and not isinstance(body, bytes):
        body.seek(start)


__all__ = ["OCI_MANIFEST", "Options", "Session"]
