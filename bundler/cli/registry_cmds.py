"""``bundle push DIR|FILE REF`` and ``bundle pull REF DIR``, and the ``oci://`` form of the
commands that read a bundle (``bundle verify|inspect REF``, ``agents import REF``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler.api import PullOptions, PushOptions
from bundler.api import pull as pull_bundle
from bundler.api import push as push_bundle
from bundler.cli.output import Output, Result
from bundler.cli.registry_args import registry_options
from bundler.registry.reference import parse_reference
from bundler.rules.names import escape_display


def push(args: argparse.Namespace, out: Output) -> Result:
    """Push a bundle (a folder or an archive) to an ``oci://`` reference; print its digest."""
    ref = parse_reference(args.ref)
    options = PushOptions(force=args.force, registry=registry_options(args))
    with out.progress() as advance:
        report = push_bundle(args.source, args.ref, options, progress=advance)
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
    options = PullOptions(force=args.force, registry=registry_options(args))
    with out.progress() as advance:
        report = pull_bundle(args.ref, Path(args.dest), options, progress=advance)
    pinned = escape_display(str(ref.with_digest(report.digest)))
    text = [f"pulled {pinned} into {escape_display(report.bundle)}"]
    return Result(
        payload=report.as_json(),
        text=text,
        warnings=report.warnings,
        quiet_text=[escape_display(report.bundle)],
    )
