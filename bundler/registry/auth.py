"""Registry credentials as Docker keeps them, and the answers to a registry's challenges.

Credentials come from ``$DOCKER_CONFIG/config.json`` (else ``~/.docker/config.json``): a
``credHelpers`` entry for the host runs ``docker-credential-NAME get``, else an ``auths`` entry
(base64 ``auth``, or ``username``/``password``, or ``identitytoken``), else ``credsStore``.
They are read only when a registry asks (a 401), never printed: every value read, and every
token a token service hands out, is registered with :meth:`Auth.scrub`, which the push and pull
apply to every error they make (:func:`bundler.errors.withholding`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bundler.errors import Refused
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules.names import escape_display, is_text

MAX_DOCKER_CONFIG_BYTES = 1 << 20
"""Docker's ``config.json`` (credentials, helpers): a real one is a few KiB."""
HELPER_TIMEOUT = 30.0
WITHHELD = "[withheld]"

# what an Authorization header can carry as a bearer token: printable ASCII without spaces (RFC
# 6750's b64token, loosened to any visible character); anything else would break the header
_HEADER_TOKEN = re.compile(r"[\x21-\x7e]+")

_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)')


@dataclass(frozen=True)
class Credentials:
    """A user name and its secret; ``identity_token`` marks an OAuth refresh token."""

    username: str
    secret: str
    identity_token: bool = False

    def __repr__(self) -> str:
        return f"Credentials(username=<{len(self.username)} chars>, secret={WITHHELD})"


@dataclass(frozen=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` header: the scheme (lowercased) and its parameters."""

    scheme: str
    params: dict[str, str]


def parse_challenge(header: str) -> Challenge | None:
    """``Basic realm="x"`` or ``Bearer realm="…",service="…",scope="…"``; None when neither."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() not in ("basic", "bearer"):
        return None
    params = {}
    for key, value in _PARAM.findall(rest):
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[key.lower()] = value
    return Challenge(scheme.lower(), params)


def is_header_token(value: str) -> bool:
    """Whether ``value`` can travel as a bearer token in an ``Authorization`` header."""
    return _HEADER_TOKEN.fullmatch(value) is not None


def docker_config_path(environ: dict[str, str] | os._Environ[str]) -> Path:
    """Where Docker's client config is: ``$DOCKER_CONFIG/config.json`` or ``~/.docker``."""
    folder = environ.get("DOCKER_CONFIG")
    if folder:
        return Path(folder) / "config.json"
    return Path(environ.get("HOME") or os.path.expanduser("~")) / ".docker" / "config.json"


def _server_key(key: str) -> str:
    """``https://host:port/v1/`` → ``host:port``: how Docker matches an ``auths`` key."""
    for prefix in ("https://", "http://"):
        key = key.removeprefix(prefix)
    return key.split("/", 1)[0].lower()


@dataclass
class Auth:
    """The credentials for one registry host, found lazily, and the secrets to withhold."""

    netloc: str
    environ: dict[str, str]
    secrets: list[str] = field(default_factory=list)
    _creds: Credentials | None = None
    _looked: bool = False

    def scrub(self, text: str) -> str:
        """``text`` with every credential and token this run has seen withheld."""
        for secret in self.secrets:
            if secret and secret in text:
                text = text.replace(secret, WITHHELD)
        return text

    def remember(self, secret: str) -> None:
        """Register a secret (and the encodings it travels in) for :meth:`scrub`."""
        if len(secret) >= 4 and secret not in self.secrets:
            self.secrets.append(secret)
            self.secrets.sort(key=len, reverse=True)

    def credentials(self) -> Credentials | None:
        """The configured credentials for :attr:`netloc`, read once; None when there are none."""
        if not self._looked:
            self._looked = True
            self._creds = self._find()
            if self._creds is not None:
                self.remember(self._creds.secret)
                self.remember(self.basic_value(self._creds))
        return self._creds

    @staticmethod
    def basic_value(creds: Credentials) -> str:
        """The base64 ``user:secret`` of a Basic ``Authorization`` header."""
        raw = f"{creds.username}:{creds.secret}".encode()
        return base64.b64encode(raw).decode("ascii")

    def _find(self) -> Credentials | None:
        path = docker_config_path(self.environ)
        config = _read_config(path)
        if config is None:
            return None
        host = self.netloc.lower()
        helpers = config.get("credHelpers")
        if isinstance(helpers, dict):
            for key, name in helpers.items():
                if _server_key(str(key)) == host and isinstance(name, str):
                    return self._helper(name, str(key))
        auths = config.get("auths")
        if isinstance(auths, dict):
            for key, entry in auths.items():
                if _server_key(str(key)) == host and isinstance(entry, dict):
                    found = self._from_entry(entry, path)
                    if found is not None:
                        return found
        store = config.get("credsStore")
        if isinstance(store, str) and store:
            return self._helper(store, self.netloc)
        return None

    def _from_entry(self, entry: dict[str, object], path: Path) -> Credentials | None:
        token = entry.get("identitytoken")
        raw = entry.get("auth")
        user = entry.get("username")
        password = entry.get("password")
        if isinstance(raw, str) and raw:
            try:
                decoded = base64.b64decode(raw, validate=True).decode("utf-8")
            except ValueError:  # not base64 (binascii.Error), not ASCII, not UTF-8 inside
                raise Refused(
                    f"{escape_display(str(path))}: the 'auth' of {escape_display(self.netloc)} "
                    "is not base64 of user:password; run 'docker login' again",
                    path=str(path),
                ) from None
            user, _, password = decoded.partition(":")
            self.remember(raw)
        found = None
        if isinstance(token, str) and token:
            found = Credentials(str(user or ""), token, identity_token=True)
        elif isinstance(user, str) and isinstance(password, str) and password:
            found = Credentials(user, password)
        if found is not None and not _is_text(found):
            raise Refused(
                f"{escape_display(str(path))}: the credentials of {escape_display(self.netloc)} "
                "are not valid text; run 'docker login' again",
                path=str(path),
            )
        return found

    def _helper(self, name: str, server: str) -> Credentials | None:
        """Run ``docker-credential-NAME get``; its output (secrets) is never shown."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise Refused(f"credential helper name {escape_display(name)} is not a plain name")
        program = f"docker-credential-{name}"
        try:
            done = subprocess.run(
                [program, "get"],
                input=server.encode("utf-8"),
                capture_output=True,
                timeout=HELPER_TIMEOUT,
                env=dict(self.environ),
                check=False,
            )
        except FileNotFoundError:
            raise Refused(
                f"the Docker config names the credential helper {program}, which is not "
                "installed; install it or remove it from the config"
            ) from None
        except subprocess.TimeoutExpired:
            raise Refused(f"{program} did not answer in {HELPER_TIMEOUT:.0f} s") from None
        except OSError as err:  # not executable, not a program (no #! line), ...
            raise Refused(
                f"cannot run the credential helper {program} ({err.strerror or err}); fix it "
                "or remove it from the Docker config"
            ) from None
        if done.returncode != 0:
            # "credentials not found" and real failures look alike; the registry's 401 says more
            return None
        try:
            answer = json.loads(done.stdout)
            user, secret = answer["Username"], answer["Secret"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise Refused(f"{program} answered something that is not its JSON form") from None
        if not isinstance(user, str) or not isinstance(secret, str) or not secret:
            return None
        found = Credentials(user, secret, identity_token=user == "<token>")
        if not _is_text(found):
            raise Refused(
                f"{program} answered credentials that are not valid text; fix it or remove it "
                "from the Docker config"
            )
        return found


def _is_text(creds: Credentials) -> bool:
    # JSON can escape a lone surrogate, which no encoding sends: caught here, before a request
    # would fail on it (and show it)
    return is_text(creds.username) and is_text(creds.secret)


def _read_config(path: Path) -> dict[str, object] | None:
    shown = escape_display(str(path))
    try:
        data = read_small_file(path, MAX_DOCKER_CONFIG_BYTES)
    except FileNotFoundError:
        return None
    except NotSmallFile as why:
        raise Refused(f"{shown} {why.reason}; it is not a Docker config", path=str(path)) from None
    except OSError as err:
        raise Refused(f"cannot read {shown} ({err.strerror})", path=str(path)) from None
    try:
        config = json.loads(data)
    except (ValueError, RecursionError):
        # never quote the parser's message: it shows the text around the error, a credential
        raise Refused(f"{shown} is not valid JSON; fix or remove it", path=str(path)) from None
    return config if isinstance(config, dict) else None
