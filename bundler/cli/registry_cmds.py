"""``bundle push DIR|FILE REF`` and ``bundle pull REF DIR``, and the ``oci://`` form of the
commands that read a bundle (``bundle verify|inspect REF``, ``agents import REF``)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from bundler.bundle.archive import unpacked
from bundler.bundle.archive_kind import is_archive
from bundler.cli.output import Output, Result
from bundler.cli.registry_args import registry_options
from bundler.registry.pull import pull_bundle
from bundler.registry.pull_archive import pull_archive
from bundler.registry.push import push_bundle
from bundler.registry.reference import parse_reference
from bundler.rules.names import escape_display


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
    with _source_folder(args.source) as folder, out.progress() as advance:
        report = push_bundle(
            folder, ref, registry_options(args), force=args.force, progress=advance,
            named=args.source,
        )  # fmt: skip
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
    puller = pull_archive if args.dest.endswith(".tar") else pull_bundle
    with out.progress() as advance:
        report = puller(
            ref, Path(args.dest), registry_options(args), force=args.force, progress=advance
        )
    pinned = escape_display(str(ref.with_digest(report.digest)))
    text = [f"pulled {pinned} into {escape_display(report.bundle)}"]
    warning = ref.unpinned_warning(report.digest)
    if warning is not None:
        report.warnings.insert(0, warning)
    return Result(
        payload=report.as_json(),
        text=text,
        warnings=report.warnings,
        quiet_text=[escape_display(report.bundle)],
    )
