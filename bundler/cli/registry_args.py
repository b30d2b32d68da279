"""The BUNDLE argument of every command that reads a bundle, opened through
:func:`bundler.api.open_bundle`, and the registry options given for a reference.

Free of the registry client's imports (HTTP, TLS, the archive code): ``bundler --help`` and
``bundle verify DIR`` load this module and must start fast; :mod:`bundler.api` imports the
client only when a reference is actually given.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.cli.output import Output
from bundler.errors import UsageError

if TYPE_CHECKING:
    from bundler.api import OpenBundle, Progress, RegistryOptions


def read_password_stdin() -> str:
    """The password piped to standard input: its first line (a trailing newline dropped)."""
    import sys

    raw = sys.stdin.buffer.read(1 << 16)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("the password read from standard input is not UTF-8 text") from None
    text = text.split("\n", 1)[0].removesuffix("\r")
    if not text:
        raise UsageError("no password on standard input (--password-stdin)")
    return text


def registry_options(args: argparse.Namespace) -> RegistryOptions:
    """The registry options given (``--plain-http``, ``--ca-file``, ``--authfile``,
    ``--username`` with ``--password-stdin``, the password read here; ``--no-cache``)."""
    from bundler.api import RegistryOptions

    ca_file = getattr(args, "ca_file", None)
    authfile = getattr(args, "authfile", None)
    username = getattr(args, "username", None)
    password = None
    if getattr(args, "password_stdin", False):
        if username is None:
            raise UsageError("--password-stdin goes with --username USER")
        password = read_password_stdin()
    elif username is not None:
        raise UsageError("--username goes with --password-stdin (the password is read there)")
    return RegistryOptions(
        plain_http=bool(getattr(args, "plain_http", False)),
        ca_file=None if ca_file is None else Path(ca_file),
        username=username,
        password=password,
        authfile=None if authfile is None else Path(authfile),
        no_cache=bool(getattr(args, "no_cache", False)),
    )


def no_registry_options(args: argparse.Namespace, what: str) -> None:
    """Refuse the registry options where no ``oci://`` reference was given."""
    given = [
        flag
        for flag, name in (
            ("--plain-http", "plain_http"),
            ("--ca-file", "ca_file"),
            ("--authfile", "authfile"),
            ("--username", "username"),
            ("--password-stdin", "password_stdin"),
            ("--no-cache", "no_cache"),
        )
        if getattr(args, name, None)
    ]
    if given:
        raise UsageError(f"{' and '.join(given)} go with an oci:// reference, not {what}")


@contextlib.contextmanager
def opened_bundle(
    args: argparse.Namespace,
    given: str,
    out: Output,
    *,
    list_only: frozenset[str] = frozenset(),
    registry: RegistryOptions | None = None,
) -> Iterator[tuple[OpenBundle, Progress | None]]:
    """BUNDLE ``given`` opened (:func:`bundler.api.open_bundle`): a folder as it is, an
    archive left for the operation to unpack where it needs it, a reference pulled into a
    private copy (``list_only``: its layers judged as they arrive, never written); with the
    progress the operation reports to. What a registry serves is its text: from here on, no
    output repeats what the registry was sent. ``registry``: the registry options of a
    command that talks to a registry anyway (a push), then not refused for a local BUNDLE."""
    from bundler import api

    own = registry is None

    with (
        out.progress() as advance,
        api.open_bundle(
            given,
            registry=registry_options(args) if registry is None else registry,
            progress=advance,
            list_only=list_only,
            unpack=False,
        ) as bundle,
    ):
        if own and bundle.kind is not api.BundleKind.REFERENCE:
            no_registry_options(args, f"a bundle {bundle.kind.value}")
        out.withhold(bundle.scrub)
        yield bundle, advance
