"""``bundle push DIR|FILE REF`` and ``bundle pull REF DIR``, and the ``oci://`` form of the
commands that read a bundle (``bundle verify|inspect REF``, ``agents import REF``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bundler.api import PullOptions, PushOptions
from bundler.api import pull as pull_bundle
from bundler.api import push as push_bundle
from bundler.cli.output import Output, Result
from bundler.cli.registry_args import read_password_stdin, registry_options
from bundler.errors import UsageError
from bundler.registry.reference import parse_reference
from bundler.rules.names import escape_display
from bundler.rules.units import human_size, parse_size


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

    from bundler.api import RegistryOptions
    from bundler.api import login as store_login

    interactive = not args.password_stdin and "stdin" not in out.closed and sys.stdin.isatty()
    username = args.username
    if username is None:
        if not interactive:
            raise UsageError("name the user: --username USER (the password on standard input)")
        username = _ask("Username: ", secret=False)
    password = _ask("Password: ", secret=True) if interactive else read_password_stdin()
    options = RegistryOptions(
        plain_http=args.plain_http,
        ca_file=None if args.ca_file is None else Path(args.ca_file),
        authfile=None if args.authfile is None else Path(args.authfile),
    )
    report = store_login(args.host, username, password, options)
    where = escape_display(report.file)
    if report.helper is not None:
        where = f"{report.helper} (named in {where})"
    return Result(
        payload=report.as_json(),
        text=[f"logged in to {escape_display(report.host)}; stored in {where}"],
    )


def logout(args: argparse.Namespace, out: Output) -> Result:
    """Remove a registry login from every credentials file that holds it."""
    from bundler.api import RegistryOptions
    from bundler.api import logout as remove_login

    options = RegistryOptions(authfile=None if args.authfile is None else Path(args.authfile))
    report = remove_login(args.host, options)
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
    from bundler.api import list_tags

    found = list_tags(args.ref, registry_options(args))
    text = [escape_display(tag) for tag in found]
    return Result(payload={"reference": args.ref, "tags": found}, text=text, verbatim=True)


def cache(args: argparse.Namespace, out: Output) -> Result:
    """Show the layer cache (what a prune would remove), or prune it (``--prune``)."""
    from bundler.api import prune_cache

    bound = None
    if args.max_size is not None:
        bound = parse_size(args.max_size)
        if bound is None:
            raise UsageError(
                f"--max-size {escape_display(args.max_size)} is no size; give bytes or a size "
                "with a unit, such as 500MiB"
            )
    report = prune_cache(bound, dry_run=not args.prune)
    text = [report.summary()]
    text += [
        f"  {'would remove' if report.dry_run else 'removed'} {item.digest[:19]}… "
        f"({human_size(item.size)}{', partial download' if item.partial else ''})"
        for item in report.removed
    ]
    return Result(payload=report.as_json(), text=text)
