"""``bundle push DIR|FILE REF`` and ``bundle pull REF DIR``, and the ``oci://`` form of the
commands that read a bundle (``bundle verify|inspect REF``, ``agents import REF``)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from bundler.bundle.archive import is_archive, pack_bundle, unpacked
from bundler.cli.output import Output, Result
from bundler.errors import UsageError
from bundler.registry.http import Options
from bundler.registry.pull import PullReport, pull_bundle, pulled
from bundler.registry.push import push_bundle
from bundler.registry.reference import is_reference, parse_reference
from bundler.rules.names import escape_display


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


def registry_options(args: argparse.Namespace) -> Options:
    """The registry options given, checked against a local path argument."""
    return Options(
        plain_http=bool(getattr(args, "plain_http", False)), ca_file=getattr(args, "ca_file", None)
    )


def _no_registry_options(args: argparse.Namespace, what: str) -> None:
    if getattr(args, "plain_http", False) or getattr(args, "ca_file", None):
        raise UsageError(f"--plain-http and --ca-file go with an oci:// reference, not {what}")


@contextlib.contextmanager
def bundle_folder(
    args: argparse.Namespace, given: str, out: Output
) -> Iterator[tuple[Path, str | None]]:
    """The folder to read for a BUNDLE argument: the folder itself, or, for ``oci://``, a
    private pulled copy (removed after the block) and the reference pinned to its digest."""
    if not is_reference(given):
        _no_registry_options(args, "a folder")
        yield Path(given), None
        return
    ref = parse_reference(given)
    with (
        out.progress("pulling", None) as advance,
        pulled(ref, registry_options(args), progress=advance) as (folder, digest),
    ):
        yield folder, str(ref.with_digest(digest))


@contextlib.contextmanager
def _source_folder(given: str) -> Iterator[Path]:
    """A bundle folder as given, or a bundle archive unpacked into a private scratch folder."""
    path = Path(given)
    if not is_archive(path):
        yield path
        return
    with unpacked(path) as folder:
        yield folder


def push(args: argparse.Namespace, out: Output) -> Result:
    """Push a bundle (a folder or an archive) to an ``oci://`` reference; print its digest."""
    ref = parse_reference(args.ref)
    with _source_folder(args.source) as folder, out.progress("pushing", None) as advance:
        report = push_bundle(
            folder, ref, registry_options(args), force=args.force, progress=advance
        )
    pinned = escape_display(str(ref.with_digest(report.digest)))
    if report.unchanged:
        text = [f"unchanged: {escape_display(str(ref))} already names {pinned}"]
    else:
        text = [f"pushed {escape_display(str(ref))}: {pinned}"]
        text.append(f"  uploaded: {', '.join(report.uploaded) or '(none)'}")
        text.append(f"  already there: {', '.join(report.skipped) or '(none)'}")
    return Result(payload=report.as_json(), text=text, quiet_text=[report.digest])


def pull(args: argparse.Namespace, out: Output) -> Result:
    """Pull an ``oci://`` reference into a bundle folder (or, for ``FILE.tar``, a bundle
    archive), verified, published atomically."""
    ref = parse_reference(args.ref)
    if args.dest.endswith(".tar"):
        with (
            out.progress("pulling", None) as advance,
            pulled(ref, registry_options(args), progress=advance) as (folder, digest),
        ):
            packed = pack_bundle(folder, Path(args.dest), force=args.force)
        report = PullReport(str(ref), digest, packed.destination, warnings=list(packed.warnings))
    else:
        with out.progress("pulling", None) as advance:
            report = pull_bundle(
                ref, Path(args.dest), registry_options(args), force=args.force, progress=advance
            )
    pinned = escape_display(str(ref.with_digest(report.digest)))
    text = [f"pulled {pinned} into {escape_display(report.bundle)}"]
    return Result(
        payload=report.as_json(),
        text=text,
        warnings=report.warnings,
        quiet_text=[escape_display(report.bundle)],
    )
