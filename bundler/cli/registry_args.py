"""The command-line side of ``oci://`` references shared by every command that reads a bundle.

Kept apart from :mod:`bundler.cli.registry_cmds` and free of the registry client's imports
(HTTP, TLS, the archive code): ``bundler --help`` and ``bundle verify DIR`` load this module
and must start fast; the client is imported only when a reference is actually given.
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
    from bundler.api import RegistryOptions
    from bundler.bundle.archive_listing import ListedMember
    from bundler.bundle.archive_spill import SpilledDigests

# bundler.registry.reference.SCHEME, spelled out here so that a local BUNDLE loads no registry
# module (the reference parser compiles its grammar at import); a test checks the two agree
REFERENCE_SCHEME = "oci://"


CREDENTIALS_HELP = """\
credentials, the first found: --username with --password-stdin; the file --authfile
or $REGISTRY_AUTH_FILE names (then no other); $XDG_RUNTIME_DIR/containers/auth.json;
~/.config/containers/auth.json (as podman and skopeo write them); $DOCKER_CONFIG/config.json,
else ~/.docker/config.json (credHelpers, auths, credsStore); else none. 'bundler login HOST'
stores a login where it is read first."""


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--plain-http`` and ``--ca-file``: how to reach a registry."""
    parser.add_argument(
        "--plain-http",
        action="store_true",
        help="talk to the registry over HTTP, not HTTPS (credentials go only to loopback hosts)",
    )
    parser.add_argument(
        "--ca-file", metavar="FILE", help="trust the registry certificates this CA file signed"
    )


def add_authfile_option(parser: argparse.ArgumentParser) -> None:
    """``--authfile FILE``: the one credentials file to read (and write, for a login)."""
    parser.add_argument(
        "--authfile",
        metavar="FILE",
        help="the credentials file to use instead of the search order (as podman's)",
    )


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    """The registry options of every command that can take an ``oci://`` REF: how to reach it
    and which credentials to use."""
    add_connection_options(parser)
    add_authfile_option(parser)
    parser.add_argument(
        "--username", metavar="USER", help="log in as USER for this command (with --password-stdin)"
    )
    parser.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password for --username from standard input",
    )


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--no-cache``: for a command that pulls an ``oci://`` REF."""
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the layer cache of pulled blobs: download every layer",
    )


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
    ``--username`` with ``--password-stdin``, the password read here)."""
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
def bundle_folder(
    args: argparse.Namespace,
    given: str,
    out: Output,
    *,
    list_only: frozenset[str] = frozenset(),
    listed: list[ListedMember] | None = None,
    digests: SpilledDigests | None = None,
) -> Iterator[tuple[Path, str | None]]:
    """The folder to read for a BUNDLE argument: the folder itself, or, for ``oci://``, a
    private pulled copy (removed after the block) and the reference pinned to its digest;
    ``list_only`` names the artifact's layers judged as they arrive and not written, whose
    members go to ``listed`` and whose files' digests, with the rest, to ``digests``
    (:func:`bundler.registry.pull.pulled`)."""
    if not given.startswith(REFERENCE_SCHEME):
        no_registry_options(args, "a folder")
        yield Path(given), None
        return
    from bundler.api import open_bundle

    with (
        out.progress() as advance,
        open_bundle(
            given, registry=registry_options(args), progress=advance, list_only=list_only
        ) as got,
    ):
        # a registry's bundle is its text: no report of it may repeat what it was sent
        out.withhold(got.scrub)
        if listed is not None:
            listed.extend(got.listed)
        if digests is not None and got.digests is not None:
            digests.take(got.digests)
        yield got.folder, got.reference


def tag_warnings(given: str, pinned: str | None) -> list[str]:
    """What to say of BUNDLE ``given`` read as ``pinned`` (:func:`bundle_folder`'s): for a
    reference by tag, that a tag can move, and the digest to pin (nothing otherwise)."""
    if pinned is None:
        return []
    from bundler.registry.reference import parse_reference

    digest = parse_reference(pinned).digest or ""
    warning = parse_reference(given).unpinned_warning(digest)
    return [warning] if warning is not None else []
