"""``bundle push BUNDLE REF``, ``bundle pull REF DIR``, ``bundle tags REF``, ``login`` and
``logout``: each calls :mod:`bundler.api` and prints its report."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler import api
from bundler.api.display import escape_display, human_size, parse_size
from bundler.cli.output import Output, Result
from bundler.cli.registry_args import opened_bundle, read_password_stdin, registry_options
from bundler.errors import UsageError


def push(args: argparse.Namespace, out: Output) -> Result:
    """Push a bundle (a folder, an archive or a reference) to an ``oci://`` reference; print
    its digest."""
    options = api.PushOptions(force=args.force, registry=registry_options(args))
    with opened_bundle(args, args.source, out, registry=options.registry) as opened:
        bundle, progress = opened
        report = api.push(bundle, args.ref, options, progress=progress)
    pinned = escape_display(report.pinned)
    if report.unchanged:
        text = [f"unchanged: {escape_display(report.reference)} already names {pinned}"]
    else:
        text = [f"pushed {escape_display(report.reference)}: {pinned}"]
        text.append(f"  uploaded: {', '.join(report.uploaded) or '(none)'}")
        text.append(f"  already there: {', '.join(report.skipped) or '(none)'}")
    return Result(payload=report.as_json(), text=text, quiet_text=[report.digest])


def pull(args: argparse.Namespace, out: Output) -> Result:
    """Pull an ``oci://`` reference into a bundle folder (or, for ``FILE.tar``, a bundle
    archive), verified, published atomically."""
    options = api.PullOptions(force=args.force, registry=registry_options(args))
    with out.progress() as advance:
        report = api.pull(args.ref, Path(args.dest), options, progress=advance)
    pinned = escape_display(report.pinned)
    text = [f"pulled {pinned} into {escape_display(report.bundle)}"]
    return Result(
        payload=report.as_json(),
        text=text,
        warnings=report.warnings,
        quiet_text=[escape_display(report.bundle)],
    )


def _ask(prompt: str, *, secret: bool) -> str:
    """A value typed at the terminal (the password without echo)."""
    import getpass

    try:
        value = getpass.getpass(prompt) if secret else input(prompt)
    except EOFError:
        raise UsageError("nothing was typed (end of input); run bundler login again") from None
    if not value:
        raise UsageError("nothing was typed; run bundler login again")
    return value


def login(args: argparse.Namespace, out: Output) -> Result:
    """Check a login against the registry, then store it where pushes and pulls read first."""
    import sys

    interactive = not args.password_stdin and "stdin" not in out.closed and sys.stdin.isatty()
    username = args.username
    if username is None:
        if not interactive:
            raise UsageError("name the user: --username USER (the password on standard input)")
        username = _ask("Username: ", secret=False)
    password = _ask("Password: ", secret=True) if interactive else read_password_stdin()
    options = api.RegistryOptions(
        plain_http=args.plain_http,
        ca_file=None if args.ca_file is None else Path(args.ca_file),
        authfile=None if args.authfile is None else Path(args.authfile),
    )
    report = api.login(args.host, username, password, options)
    where = escape_display(report.file)
    if report.helper is not None:
        where = f"{report.helper} (named in {where})"
    return Result(
        payload=report.as_json(),
        text=[f"logged in to {escape_display(report.host)}; stored in {where}"],
    )


def logout(args: argparse.Namespace, out: Output) -> Result:
    """Remove a registry login from every credentials file that holds it."""
    options = api.RegistryOptions(authfile=None if args.authfile is None else Path(args.authfile))
    report = api.logout(args.host, options)
    host = escape_display(report.host)
    if not report.removed:
        text = [f"not logged in to {host}: no credentials file holds it"]
    else:
        text = [
            f"logged out of {host}: removed from {', '.join(map(escape_display, report.removed))}"
        ]
    return Result(payload=report.as_json(), text=text)


def tags(args: argparse.Namespace, out: Output) -> Result:
    """List the tags of an ``oci://HOST/REPO`` repository, one a line."""
    found = api.list_tags(args.ref, registry_options(args))
    text = [escape_display(tag) for tag in found]
    return Result(payload={"reference": args.ref, "tags": found}, text=text, verbatim=True)


def cache(args: argparse.Namespace, out: Output) -> Result:
    """Show the layer cache (what a prune would remove), or prune it (``--prune``)."""
    bound = None
    if args.max_size is not None:
        bound = parse_size(args.max_size)
        if bound is None:
            raise UsageError(
                f"--max-size {escape_display(args.max_size)} is no size; give bytes or a size "
                "with a unit, such as 500MiB"
            )
    report = api.prune_cache(bound, dry_run=not args.prune)
    text = [report.summary()]
    text += [
        f"  {'would remove' if report.dry_run else 'removed'} {item.digest[:19]}… "
        f"({human_size(item.size)}{', partial download' if item.partial else ''})"
        for item in report.removed
    ]
    return Result(payload=report.as_json(), text=text)
