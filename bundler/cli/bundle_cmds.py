"""``bundle verify|inspect DIR|FILE`` (03 §1, §2), ``bundle secrets-template``, and ``bundle
pack`` / ``bundle unpack``: printing only."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundler.bundle.archive_kind import is_archive
from bundler.bundle.leftovers import leftovers_beside
from bundler.bundle.verify import verify_bundle
from bundler.cli.output import Output, Result
from bundler.cli.registry_args import bundle_folder
from bundler.errors import EXIT_INVALID, DestinationExists, error_kind, os_failure
from bundler.rules.names import escape_display
from bundler.rules.units import human_size

LISTED_BY_INSPECT = frozenset({"workspace"})
"""The layer ``bundle inspect oci://…`` judges as it arrives and never writes (the bulk of an
agent); the memory store is read for its content, so it is unpacked like the rest."""

if TYPE_CHECKING:
    from bundler.bundle.archive import ArchiveReport
    from bundler.bundle.archive_listing import ListedMember
    from bundler.bundle.inspect import InspectReport

# bundler.bundle.archive (the archive reader and writer, and the publisher) is imported by the
# handlers that meet an archive only: a folder's verify starts without it


def _error_lines(first: str, rest: list[str], json_mode: bool) -> str:
    """The failure message: one ``error:`` line per error on a terminal, the first in JSON."""
    if json_mode or not rest:
        return first
    return "\nerror: ".join([first, *rest])


def _problem_lines(bundle: str, problems: Sequence[object]) -> list[str]:
    """One line per problem, naming the bundle as well: entry paths are relative to it."""
    # "bundle/: NOTES.md" reads as a path of its own: drop a completed path's trailing slash
    where = escape_display(str(bundle).rstrip("/") or "/")
    return [f"{where}: {problem}" for problem in problems]


def verify(args: argparse.Namespace, out: Output) -> Result:
    """Verify a bundle; exit 3 listing every error when anything is wrong."""
    with bundle_folder(args, args.dir, out) as (folder, pinned):
        with out.progress() as progress:
            if pinned is None and is_archive(folder):
                from bundler.bundle.archive import verify_any

                report = verify_any(folder)
            else:
                report = verify_bundle(folder, progress=progress)
        if pinned is not None:
            report.path = Path(args.dir)
    payload = report.as_json()
    warnings = [f"{w.path}: {w.message}" for w in report.warnings]
    beside = [] if pinned else leftovers_beside(Path(args.dir))
    if pinned is not None:
        payload["path"] = payload["reference"] = pinned
    warnings += beside
    payload["warnings"] += [{"path": str(args.dir), "message": line} for line in beside]
    if report.ok:
        text = [
            f"ok: {escape_display(pinned or str(report.path))}: "
            f"format {report.format_version} bundle "
            f"of agent {payload['root_agent']}, {report.files} files, "
            f"{human_size(report.bytes)} verified"
        ]
        return Result(payload=payload, text=[] if out.quiet else text, warnings=warnings)
    lines = _problem_lines(args.dir, report.errors)
    first = report.errors[0]
    return Result(
        payload=payload,
        code=EXIT_INVALID,
        # a refused bundle's report starts with why it is refused, as import's does; a tolerant
        # reader's warnings (no checksums, dangling names) would only bury that (--json keeps them)
        warnings=[],
        error_message=_error_lines(lines[0], lines[1:], out.json_mode),
        error_path=first.path,
        error_kind=error_kind(first.concept),
    )


def _plain(report: InspectReport, shown: str) -> list[str]:
    lines = [f"bundle: {escape_display(shown)}"]
    for label, value in report.summary():
        lines.append(f"{label}: {value}")
    for title, rows in report.sections():
        lines.append(f"{title}:")
        lines += [f"  {'  '.join(row)}" for row in rows] or ["  (none)"]
    return lines


def _rich(report: InspectReport, shown: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    summary = Table(show_header=False, box=None)
    summary.add_row("bundle", Text(escape_display(shown)))
    for label, value in report.summary():
        summary.add_row(label, Text(value))
    console.print(summary)
    for title, rows in report.sections():
        table = Table(title=title, title_justify="left")
        for column in report.columns(title):
            # fold, never truncate: a cut-off path or command could hide what is granted
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        if not rows:
            table.add_row(*(["(none)"] + [""] * (len(report.columns(title)) - 1)))
        console.print(table)


def inspect(args: argparse.Namespace, out: Output) -> Result:
    """Show what a bundle holds and grants: a table on a terminal, plain lines otherwise."""
    from bundler.bundle.archive_spill import SpilledDigests
    from bundler.bundle.inspect import inspect_bundle  # not for verify's start-up

    # a reference is judged as its pulled folder would be: the workspace, the bulk of an
    # agent, is listed as it arrives (every rule, each file's digest) and never written
    listed: list[ListedMember] = []
    with (
        SpilledDigests() as digests,
        bundle_folder(
            args, args.dir, out, list_only=LISTED_BY_INSPECT, listed=listed, digests=digests
        ) as (folder, pinned),
    ):
        if pinned is None and is_archive(folder):
            from bundler.bundle.archive import unpacked

            with unpacked(folder) as inner:
                report = inspect_bundle(inner)
            report.verify.path = Path(os.path.abspath(args.dir))
        else:
            known = digests if pinned is not None else None
            with out.progress() as progress:
                report = inspect_bundle(
                    folder, progress=progress, known_digests=known, listed=listed
                )
    shown = pinned or str(report.path)
    payload: dict[str, Any] = report.as_json()
    if pinned is not None:
        # the private copy it was read from is gone: the bundle is the reference
        payload["bundle"] = payload["path"] = payload["reference"] = pinned
    warnings = [f"{w.path}: {w.message}" for w in report.verify.warnings]
    text: list[str] = []
    if not out.json_mode:
        if sys.stdout.isatty():
            _rich(report, shown)
        else:
            text = _plain(report, shown)
    if report.verify.ok:
        return Result(payload=payload, text=text, warnings=warnings)
    lines = _problem_lines(args.dir, report.verify.errors)
    return Result(
        payload=payload,
        text=text,
        code=EXIT_INVALID,
        warnings=warnings,
        error_message=_error_lines(lines[0], lines[1:], out.json_mode),
        error_path=report.verify.errors[0].path,
        error_kind=error_kind(report.verify.errors[0].concept),
    )


def _refuse_replacing_another_file(dir_fd: int, target: Path) -> None:
    """``--force`` replaces a secrets file, never a device, a link, a folder or another file
    (the install's config.toml, say, whose keys it would wipe)."""
    from bundler.fs.smallfile import NotSmallFile, read_small_file
    from bundler.install.bind_secrets import is_secrets_file

    shown = escape_display(str(target))
    try:
        raw = read_small_file(target.name, 16 << 20, dir_fd=dir_fd, follow=False)
    except FileNotFoundError:
        return
    except (NotSmallFile, OSError):
        raw = None
    if raw is None or not is_secrets_file(raw):
        raise DestinationExists(
            f"{shown} exists and is not a secrets file; --force replaces only one: choose "
            "another file, or remove it yourself first",
            path=str(target),
        )


def _write_private(target: Path, text: str, *, force: bool) -> None:
    """Create ``target`` 0600 holding ``text``; an existing file is replaced only with ``force``."""
    from bundler.fs import durable

    shown = escape_display(str(target))
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise os_failure(
            f"cannot write {shown} ({os.strerror(exc.errno or errno.EIO)})", exc, path=str(target)
        ) from None
    # paths in the text keep their bytes, as the command they are pasted into needs them
    data = text.encode("utf-8", "surrogateescape")
    try:
        if force:
            _refuse_replacing_another_file(dir_fd, target)
            durable.atomic_write(dir_fd, target.name, data, mode=0o600)
        else:
            durable.create_synced(dir_fd, target.name, data, mode=0o600)
    except FileExistsError:
        raise DestinationExists(
            f"{shown} exists (it may hold secrets already filled in); choose another file, "
            "or add --force to replace it",
            path=str(target),
        ) from None
    except OSError as exc:
        raise os_failure(
            f"cannot write {shown} ({os.strerror(exc.errno or errno.EIO)})", exc, path=str(target)
        ) from None
    finally:
        os.close(dir_fd)


def secrets_template(args: argparse.Namespace, out: Output) -> Result:
    """``bundle secrets-template BUNDLE [--out FILE [--force]]``: the ``--secrets-file``
    skeleton of a verified bundle's required secrets, on stdout or in a new 0600 file."""
    from bundler.bundle.archive import verify_any
    from bundler.install.bind_secrets import secrets_template as render

    with out.progress() as progress:
        report = (
            verify_any(Path(args.dir))
            if is_archive(Path(args.dir))
            else verify_bundle(Path(args.dir), progress=progress)
        )
    if not report.ok or report.manifest is None:
        lines = _problem_lines(args.dir, report.errors) or [
            f"{escape_display(str(args.dir))}: the bundle cannot be read"
        ]
        return Result(
            payload=report.as_json(),
            code=EXIT_INVALID,
            error_message=_error_lines(lines[0], lines[1:], out.json_mode),
            error_path=report.errors[0].path if report.errors else str(args.dir),
            error_kind=error_kind(report.errors[0].concept) if report.errors else "",
        )
    required = [p for p in report.manifest.get("required_secrets", []) if isinstance(p, str)]
    text = render(
        report.fragment or {}, required, bundle=str(args.dir), out=args.out, install=args.install
    )
    payload: dict[str, Any] = {"required_secrets": required, "out": args.out}
    if args.out is None:
        if out.json_mode:
            payload["template"] = text
            return Result(payload=payload)
        # a file's content, to be saved or copied: never folded
        return Result(payload=payload, text=text.splitlines(), verbatim=True)
    _write_private(Path(args.out), text, force=args.force)
    shown = escape_display(args.out)
    return Result(payload=payload, text=[] if out.quiet else [f"wrote {shown}"])


def _archive_result(report: ArchiveReport, verb: str, out: Output) -> Result:
    text = [
        # how it was published (the kernel call) is for --json readers, not for people
        f"{verb} {escape_display(report.source)} to {escape_display(report.destination)}: "
        f"{report.members} members"
    ]
    return Result(
        payload=report.as_json(),
        text=[] if out.quiet else text,
        quiet_text=[escape_display(report.destination)],
        warnings=report.warnings,
    )


def pack(args: argparse.Namespace, out: Output) -> Result:
    """``bundle pack DIR FILE [--force]``: the bundle folder as one deterministic tar file."""
    from bundler.bundle.archive import pack_bundle

    with out.progress() as progress:
        report = pack_bundle(Path(args.dir), Path(args.file), force=args.force, progress=progress)
    return _archive_result(report, "packed", out)


def unpack(args: argparse.Namespace, out: Output) -> Result:
    """``bundle unpack FILE DIR [--force]``: a bundle archive as a verified bundle folder."""
    from bundler.bundle.archive import unpack_archive

    with out.progress() as progress:
        report = unpack_archive(
            Path(args.file), Path(args.dir), force=args.force, progress=progress
        )
    return _archive_result(report, "unpacked", out)
