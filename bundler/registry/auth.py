"""Registry credentials where the container tools keep them, and the answers to a registry's
challenges.

The search order is the one podman and skopeo use (containers-auth.json(5)), so that whatever
login a person already made is found, and a newer one is never shadowed by an older one:

1. credentials given for one command (``--username`` and ``--password-stdin``);
2. ``--authfile FILE``, else ``$REGISTRY_AUTH_FILE``: that file alone;
3. else containers' ``$XDG_RUNTIME_DIR/containers/auth.json``, then
   ``$XDG_CONFIG_HOME/containers/auth.json`` (``~/.config/…``), then Docker's
   ``$DOCKER_CONFIG/config.json`` (else ``~/.docker/config.json``);
4. else none: anonymous.

In each file a ``credHelpers`` entry for the host runs ``docker-credential-NAME get``, else an
``auths`` entry (base64 ``auth``, or ``username``/``password``, or ``identitytoken``; a key
``host/namespace`` applies to that namespace, the longest match first), else ``credsStore``.
They are read only when a registry asks (a 401), never printed: every value read, and every
token a token service hands out, is registered with :meth:`Auth.scrub`, which the push and pull
apply to every error they make (:func:`bundler.errors.withholding`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bundler.errors import CredentialsRefused, os_failure
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules.names import escape_display, is_text

MAX_DOCKER_CONFIG_BYTES = 1 << 20
"""A credentials file (Docker's ``config.json``, containers' ``auth.json``): a real one is a
few KiB."""
MAX_HELPER_OUTPUT = 64 << 10
"""A credential helper's answer is one small JSON object; more is not one, and is not read."""
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


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or os.path.expanduser("~"))


def docker_config_path(environ: Mapping[str, str]) -> Path:
    """Where Docker's client config is: ``$DOCKER_CONFIG/config.json`` or ``~/.docker``."""
    folder = environ.get("DOCKER_CONFIG")
    if folder:
        return Path(folder) / "config.json"
    return _home(environ) / ".docker" / "config.json"


def credential_files(environ: Mapping[str, str], authfile: str | None = None) -> list[Path]:
    """The credentials files to read, in the order they are consulted (see the module's
    docstring): ``authfile`` or ``$REGISTRY_AUTH_FILE`` alone, else containers' two
    ``auth.json`` and Docker's ``config.json``."""
    chosen = authfile or environ.get("REGISTRY_AUTH_FILE")
    if chosen:
        return [Path(chosen)]
    files = []
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime:
        files.append(Path(runtime) / "containers" / "auth.json")
    config_home = environ.get("XDG_CONFIG_HOME")
    base = Path(config_home) if config_home else _home(environ) / ".config"
    files.append(base / "containers" / "auth.json")
    files.append(docker_config_path(environ))
    return files


def login_file(environ: Mapping[str, str], authfile: str | None = None) -> Path:
    """Where a login is written: ``authfile``, else ``$REGISTRY_AUTH_FILE``, else the first
    file of :func:`credential_files` that exists (so the new login is the one read first),
    else containers' first ``auth.json`` (created)."""
    files = credential_files(environ, authfile)
    for path in files:
        if os.path.lexists(path):
            return path
    return files[0]


def server_key(key: str) -> tuple[str, str]:
    """``https://host:port/v1/`` → (``host:port``, ``""``), ``host/ns`` → (``host``, ``ns``):
    how an ``auths`` key is matched (Docker writes URLs, containers host and namespace)."""
    for prefix in ("https://", "http://"):
        key = key.removeprefix(prefix)
    host, _, path = key.partition("/")
    if path in ("v1/", "v2/", "v1", "v2"):
        path = ""
    return host.lower(), path.rstrip("/")


def _applies(key: str, host: str, repository: str) -> int:
    """How well the ``auths`` key ``key`` matches ``host`` and ``repository``: -1 not at all,
    else the length of its namespace (the longest wins)."""
    key_host, path = server_key(key)
    if key_host != host:
        return -1
    if not path:
        return 0
    if repository == path or repository.startswith(path + "/"):
        return len(path)
    return -1


@dataclass
class Auth:
    """The credentials for one registry host, found lazily, and the secrets to withhold.

    ``given`` are the credentials of ``--username``/``--password-stdin``; ``authfile`` the
    file of ``--authfile``. :attr:`source` names where the credentials were found."""

    netloc: str
    environ: dict[str, str]
    repository: str = ""
    given: Credentials | None = None
    authfile: str | None = None
    secrets: list[str] = field(default_factory=list)
    source: str | None = None
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
            if self.given is not None:
                self._creds, self.source = self.given, "--username/--password-stdin"
            else:
                self._creds = self._find()
            if self._creds is not None:
                self.remember(self._creds.secret)
                self.remember(self.basic_value(self._creds))
        return self._creds

    def searched(self) -> str:
        """The files the credentials are looked for in, as a message names them."""
        return ", ".join(
            escape_display(str(p)) for p in credential_files(self.environ, self.authfile)
        )

    @staticmethod
    def basic_value(creds: Credentials) -> str:
        """The base64 ``user:secret`` of a Basic ``Authorization`` header."""
        raw = f"{creds.username}:{creds.secret}".encode()
        return base64.b64encode(raw).decode("ascii")

    def _find(self) -> Credentials | None:
        for path in credential_files(self.environ, self.authfile):
            config = read_credentials_file(path)
            if config is None:
                continue
            found = self._from_config(config, path)
            if found is not None:
                self.source = str(path)
                return found
        return None

    def _from_config(self, config: dict[str, object], path: Path) -> Credentials | None:
        host = self.netloc.lower()
        helpers = config.get("credHelpers")
        if isinstance(helpers, dict):
            for key, name in helpers.items():
                if server_key(str(key))[0] == host and isinstance(name, str):
                    return self._helper(name, str(key), path)
        auths = config.get("auths")
        if isinstance(auths, dict):
            matches = sorted(
                (
                    (_applies(str(key), host, self.repository), str(key))
                    for key, entry in auths.items()
                    if isinstance(entry, dict)
                ),
                reverse=True,
            )
            for rank, key in matches:
                if rank < 0:
                    break
                entry = auths[key]
                found = self._from_entry(entry, path)
                if found is not None:
                    return found
        store = config.get("credsStore")
        if isinstance(store, str) and store:
            return self._helper(store, self.netloc, path)
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
                raise CredentialsRefused(
                    f"{escape_display(str(path))}: the 'auth' of {escape_display(self.netloc)} "
                    "is not base64 of user:password; log in again "
                    f"('bundler login {escape_display(self.netloc)}')",
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
            raise CredentialsRefused(
                f"{escape_display(str(path))}: the credentials of {escape_display(self.netloc)} "
                f"are not valid text; log in again ('bundler login {escape_display(self.netloc)}')",
                path=str(path),
            )
        return found

    def _helper(self, name: str, server: str, path: Path) -> Credentials | None:
        """Run ``docker-credential-NAME get``; its output (secrets) is never shown."""
        program = helper_program(name, path)
        code, out = run_helper(program, "get", server.encode("utf-8"), self.environ, path)
        if code != 0:
            # "credentials not found" and real failures look alike; the registry's 401 says more
            return None
        try:
            answer = json.loads(out)
            user, secret = answer["Username"], answer["Secret"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise CredentialsRefused(
                f"{program} answered something that is not its JSON form"
            ) from None
        if not isinstance(user, str) or not isinstance(secret, str) or not secret:
            return None
        found = Credentials(user, secret, identity_token=user == "<token>")
        if not _is_text(found):
            raise CredentialsRefused(
                f"{program} answered credentials that are not valid text; fix it or remove it "
                f"from {escape_display(str(path))}"
            )
        return found


def helper_program(name: str, path: Path) -> str:
    """``docker-credential-NAME`` for the helper ``name`` that the file ``path`` names."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise CredentialsRefused(
            f"{escape_display(str(path))}: credential helper name {escape_display(name)} is "
            "not a plain name",
            path=str(path),
        )
    return f"docker-credential-{name}"


def run_helper(
    program: str, verb: str, data: bytes, environ: Mapping[str, str], path: Path
) -> tuple[int, bytes]:
    """Run the credential helper ``program verb`` with ``data`` on its standard input: its exit
    status and at most :data:`MAX_HELPER_OUTPUT` bytes of its output (more is refused), within
    :data:`HELPER_TIMEOUT` seconds. Its output holds secrets: no message quotes it."""
    shown = escape_display(str(path))
    try:
        proc = subprocess.Popen(
            [program, verb],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(environ),
        )
    except FileNotFoundError:
        raise CredentialsRefused(
            f"{shown} names the credential helper {program}, which is not installed; install "
            "it or remove it from that file",
            path=str(path),
        ) from None
    except OSError as err:  # not executable, not a program (no #! line), ...
        raise CredentialsRefused(
            f"cannot run the credential helper {program} ({err.strerror or err}); fix it or "
            f"remove it from {shown}",
            path=str(path),
        ) from None
    assert proc.stdin is not None and proc.stdout is not None
    try:
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except OSError:
            pass  # a helper that does not read its input answers (or fails) all the same
        out = bytearray()
        deadline = time.monotonic() + HELPER_TIMEOUT
        fd = proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CredentialsRefused(f"{program} did not answer in {HELPER_TIMEOUT:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
            if len(out) > MAX_HELPER_OUTPUT:
                raise CredentialsRefused(
                    f"{program} answered more than {MAX_HELPER_OUTPUT >> 10} KiB, which is no "
                    "credential; fix it or remove it from " + shown
                )
        try:
            code = proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise CredentialsRefused(
                f"{program} did not answer in {HELPER_TIMEOUT:.0f} s"
            ) from None
        return code, bytes(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _is_text(creds: Credentials) -> bool:
    # JSON can escape a lone surrogate, which no encoding sends: caught here, before a request
    # would fail on it (and show it)
    return is_text(creds.username) and is_text(creds.secret)


def read_credentials_file(path: Path) -> dict[str, object] | None:
    """The JSON object of the credentials file ``path``; None when there is no such file (or it
    holds no object). A symbolic link is followed (dotfiles are often linked) to a regular file
    of at most :data:`MAX_DOCKER_CONFIG_BYTES`; anything else is refused, naming the file."""
    shown = escape_display(str(path))
    try:
        data = read_small_file(path, MAX_DOCKER_CONFIG_BYTES)
    except FileNotFoundError:
        return None
    except NotSmallFile as why:
        raise CredentialsRefused(
            f"{shown} {why.reason}; it is not a credentials file: fix or remove it",
            path=str(path),
        ) from None
    except OSError as err:
        raise os_failure(f"cannot read {shown} ({err.strerror})", err, path=str(path)) from None
    try:
        config = json.loads(data)
    except (ValueError, RecursionError):
        # never quote the parser's message: it shows the text around the error, a credential
        raise CredentialsRefused(
            f"{shown} is not valid JSON; fix or remove it", path=str(path)
        ) from None
    return config if isinstance(config, dict) else None
