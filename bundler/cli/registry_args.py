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
    from bundler.bundle.archive_read import Digests

# bundler.registry.reference.SCHEME, spelled out here so that a local BUNDLE loads no registry
# module (the reference parser compiles its grammar at import); a test checks the two agree
REFERENCE_SCHEME = "oci://"


def add_registry_options(parser: argparse.ArgumentParser) -> None:
    """``--plain-http`` and ``--ca-file``, on every command that can take an ``oci://`` REF."""
    parser.add_argument(
        "--plain-http",
        action="store_true",
        help="talk to the registry over HTTP, not HTTPS (credentials go only to loopback hosts)",
    )
    parser.add_argument(
        "--ca-file", metavar="FILE", help="trust the registry certificates this CA file signed"
    )


def registry_options(args: argparse.Namespace) -> RegistryOptions:
    """The registry options given (``--plain-http``, ``--ca-file``)."""
    from bundler.api import RegistryOptions

    ca_file = getattr(args, "ca_file", None)
    return RegistryOptions(
        plain_http=bool(getattr(args, "plain_http", False)),
        ca_file=None if ca_file is None else Path(ca_file),
    )


def _no_registry_options(args: argparse.Namespace, what: str) -> None:
    if getattr(args, "plain_http", False) or getattr(args, "ca_file", None):
        raise UsageError(f"--plain-http and --ca-file go with an oci:// reference, not {what}")


@contextlib.contextmanager
def bundle_folder(
    args: argparse.Namespace,
    given: str,
    out: Output,
    *,
    list_only: frozenset[str] = frozenset(),
    listed: list[ListedMember] | None = None,
    digests: Digests | None = None,
) -> Iterator[tuple[Path, str | None]]:
    """The folder to read for a BUNDLE argument: the folder itself, or, for ``oci://``, a
    private pulled copy (removed after the block) and the reference pinned to its digest;
    ``list_only`` names the artifact's layers judged as they arrive and not written, whose
    members go to ``listed`` and whose files' digests, with the rest, to ``digests``
    (:func:`bundler.registry.pull.pulled`)."""
    if not given.startswith(REFERENCE_SCHEME):
        _no_registry_options(args, "a folder")
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
            digests.update(got.digests)
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
