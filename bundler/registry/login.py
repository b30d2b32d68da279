"""``bundler login HOST`` and ``bundler logout HOST``: credentials written where the container
tools read them (:mod:`bundler.registry.auth`), checked against the registry first.

A login is written to the file read first (:func:`bundler.registry.auth.login_file`), so it is
never shadowed by an older entry, and through that file's credential store when it names one
(``credHelpers`` for the host, else ``credsStore``: the secret then goes to the helper and the
file keeps an empty entry, as ``docker login`` leaves it). The file is replaced atomically,
mode 0600, its folder created 0700 when missing; a symbolic link is not replaced (it would
become a file): ``--authfile`` names the file to write then. A logout removes the host from
every file of the search order, and from the credential store each names.
"""

from __future__ import annotations

import base64
import errno
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bundler.errors import CredentialsRefused, UnsuitablePath, UsageError, os_failure
from bundler.fs.durable import atomic_write, fsync_dir, open_dir
from bundler.registry.auth import (
    Credentials,
    credential_files,
    helper_program,
    login_file,
    read_credentials_file,
    run_helper,
    server_key,
)
from bundler.registry.distribution import Session
from bundler.registry.reference import parse_reference
from bundler.registry.transport import Options
from bundler.rules.names import escape_display


@dataclass(frozen=True)
class LoginReport:
    """Where a login was stored: ``file``, and ``helper`` when a credential store holds the
    secret."""

    host: str
    file: str
    helper: str | None

    def as_json(self) -> dict[str, object]:
        """The ``--json`` payload of ``bundler login``."""
        return {"host": self.host, "file": self.file, "helper": self.helper}


@dataclass(frozen=True)
class LogoutReport:
    """The files (and credential stores) a logout removed the host from; empty when none held
    it."""

    host: str
    removed: list[str]

    def as_json(self) -> dict[str, object]:
        """The ``--json`` payload of ``bundler logout``."""
        return {"host": self.host, "removed": list(self.removed)}


def checked_host(host: str) -> str:
    """``HOST[:PORT]`` as a login names it (a URL's scheme and path are dropped, as docker
    does); :class:`UsageError` when it is no registry host."""
    name, _ = server_key(host)
    try:
        parse_reference(f"oci://{name}/x")
    except UsageError:
        raise UsageError(
            f"{escape_display(host)} is not a registry host: HOST[:PORT], as in oci://HOST/REPO"
        ) from None
    return name


def login(
    host: str,
    creds: Credentials,
    options: Options,
    *,
    environ: Mapping[str, str] | None = None,
) -> LoginReport:
    """Check ``creds`` against the registry ``host`` (its ``/v2/`` answered with them), then
    store them; :class:`Refused` when the registry refuses them (nothing is written)."""
    env = dict(os.environ if environ is None else environ)
    name = checked_host(host)
    ref = parse_reference(f"oci://{name}/x")
    given = Options(
        plain_http=options.plain_http,
        ca_file=options.ca_file,
        username=creds.username,
        password=creds.secret,
    )
    with Session(ref, given, environ=env) as session:
        session.scope = ""  # a login asks for no repository's rights, as docker's does
        session.check_login()
    path = login_file(env, options.authfile)
    config = _existing(path)
    helper = _helper_for(config, name, path)
    if helper is not None:
        data = json.dumps({"ServerURL": name, "Username": creds.username, "Secret": creds.secret})
        code, _ = run_helper(helper, "store", data.encode("utf-8"), env, path)
        if code != 0:
            raise CredentialsRefused(
                f"the credential helper {helper} named in {escape_display(str(path))} could not "
                "store the login; nothing was written"
            )
    auths = config.get("auths")
    if not isinstance(auths, dict):
        auths = {}
    for key in [k for k in auths if server_key(str(k)) == (name, "")]:
        del auths[key]
    raw = f"{creds.username}:{creds.secret}".encode()
    auths[name] = {} if helper is not None else {"auth": base64.b64encode(raw).decode("ascii")}
    config["auths"] = auths
    _write(path, config)
    return LoginReport(name, str(path), helper)


def logout(
    host: str, *, authfile: str | None = None, environ: Mapping[str, str] | None = None
) -> LogoutReport:
    """Remove ``host`` from every credentials file of the search order (and from the credential
    stores they name)."""
    env = dict(os.environ if environ is None else environ)
    name = checked_host(host)
    removed = []
    for path in credential_files(env, authfile):
        config = read_credentials_file(path)
        if config is None:
            continue
        helper = _helper_for(config, name, path)
        auths = config.get("auths")
        keys = (
            [k for k in auths if server_key(str(k))[0] == name] if isinstance(auths, dict) else []
        )
        if helper is not None:
            code, _ = run_helper(helper, "erase", name.encode("utf-8"), env, path)
            if code == 0:
                removed.append(f"{path} ({helper})")
        if keys and isinstance(auths, dict):
            for key in keys:
                del auths[key]
            _write(path, config)
            removed.append(str(path))
    return LogoutReport(name, removed)


def _existing(path: Path) -> dict[str, object]:
    if path.is_symlink():
        raise UnsuitablePath(
            f"{escape_display(str(path))} is a symbolic link, which bundler does not replace; "
            "name the file to write with --authfile",
            path=str(path),
        )
    config = read_credentials_file(path)
    return {} if config is None else config


def _helper_for(config: Mapping[str, object], name: str, path: Path) -> str | None:
    helpers = config.get("credHelpers")
    if isinstance(helpers, dict):
        for key, helper in helpers.items():
            if server_key(str(key))[0] == name and isinstance(helper, str):
                return helper_program(helper, path)
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        return helper_program(store, path)
    return None


def _write(path: Path, config: Mapping[str, object]) -> None:
    """Replace ``path`` with ``config`` (0600), creating its folder (0700) when missing."""
    shown = escape_display(str(path))
    if path.is_symlink():
        raise UnsuitablePath(
            f"{shown} is a symbolic link, which bundler does not replace; name the file to "
            "write with --authfile",
            path=str(path),
        )
    data = (json.dumps(config, indent="\t") + "\n").encode("utf-8")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        dir_fd = open_dir(path.parent, follow=True)
        try:
            atomic_write(dir_fd, path.name, data, mode=0o600)
            fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        reason = err.strerror or errno.errorcode.get(err.errno or 0, str(err))
        raise os_failure(f"cannot write {shown} ({reason})", err, path=str(path)) from None


__all__ = ["LoginReport", "LogoutReport", "checked_host", "login", "logout"]
