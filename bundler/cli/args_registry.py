"""The parsers of ``bundler login`` and ``bundler logout``, and the registry options every
command that can take an ``oci://`` reference shares (how to reach it, which credentials)."""

from __future__ import annotations

import argparse
from typing import Any

from bundler.cli.parser import Tree

# command words -> "module:function" of its handler
HANDLERS: dict[tuple[str, ...], str] = {
    ("login",): "bundler.cli.registry_cmds:login",
    ("logout",): "bundler.cli.registry_cmds:logout",
}

# per command: example argument lists (05 §1)
EXAMPLES: dict[tuple[str, ...], list[list[str]]] = {
    ("login",): [
        ["registry.example", "--username", "me", "--password-stdin"],
        ["localhost:5000", "--plain-http"],
    ],
    ("logout",): [["registry.example"]],
}

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


def add(groups: Any, tree: Tree) -> None:
    """``login`` and ``logout``."""
    login = tree.command(
        groups, "login", "check a registry login and store it where it is read first"
    )
    login.add_argument("host", metavar="HOST", help="the registry, HOST[:PORT]")
    login.add_argument("--username", metavar="USER", help="the user name (else asked)")
    login.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from standard input (else asked, not echoed)",
    )
    add_authfile_option(login)
    add_connection_options(login)
    login.epilog = f"{CREDENTIALS_HELP}\n\n{login.epilog}"
    logout = tree.command(groups, "logout", "remove a registry login from every credentials file")
    logout.add_argument("host", metavar="HOST", help="the registry, HOST[:PORT]")
    add_authfile_option(logout)
