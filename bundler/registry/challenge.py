"""The answer to a registry's 401: Basic, or a bearer token from the token service its
challenge names, given once.

A second 401 is an error, so a registry cannot loop us; credentials go over plain HTTP only to
a loopback host or one ``registries.conf`` marks insecure, and never to a host other than the
registry's; every token handed out is withheld from every message
(:meth:`bundler.registry.auth.Auth.remember`).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

from bundler.errors import CredentialsRefused, PolicyRefused, RegistryRefused
from bundler.registry.auth import (
    Auth,
    Challenge,
    Credentials,
    is_header_token,
    parse_challenge,
)
from bundler.registry.transport import (
    MAX_SMALL_BYTES,
    Body,
    Transport,
    rewind,
    web_address,
)
from bundler.rules.names import escape_display


class Authenticated(Transport):
    """A :class:`Transport` whose requests answer the registry's challenge: a 401 is met once
    with the credentials :mod:`bundler.registry.auth` finds (or a token they buy), and a 403,
    or a second 401, is :class:`~bundler.errors.CredentialsRefused`."""

    _authorization: str | None = None
    """The ``Authorization`` header every later request to the registry carries."""

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
                raise PolicyRefused(
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
        given = web_address("", realm)  # absolute only: the registry names its token service
        if given is None:
            raise RegistryRefused(
                f"registry {self.shown} names no usable token service in its challenge"
            )
        parts = given[1]
        if parts.scheme == "http" and self.scheme == "https":
            raise RegistryRefused(
                f"registry {self.shown} sends us to a token service over plain HTTP"
            )
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
            raise CredentialsRefused(self._denied_message())
        if response.status != 200:
            raise RegistryRefused(
                f"the token service of registry {self.shown} answered {response.status}; "
                "try again later"
            )
        try:
            answer = json.loads(data)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError, RecursionError):
            token = None
        if not isinstance(token, str) or not token or len(token) > 16384:
            raise RegistryRefused(
                f"the token service of registry {self.shown} sent no usable token"
            )
        if not is_header_token(token):
            # never shown: it is a credential, however malformed
            raise RegistryRefused(
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
                    raise CredentialsRefused(self._denied_message())
                return response
            if answered or netloc != self.ref.netloc or not self._answer(response):
                self._read(response, MAX_SMALL_BYTES)
                raise CredentialsRefused(self._denied_message())
            if start is None and body is not None:
                raise CredentialsRefused(self._denied_message())
            answered = True
            rewind(body, start)
