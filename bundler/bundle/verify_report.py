"""What ``bundle verify`` found (03 §1), and the checks a caller that reads the bundle again
makes against it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.bundle.checksum_check import not_matching
from bundler.bundle.fragment import Problem
from bundler.bundle.manifest import CHECKSUMS_NAME, MANIFEST_NAME
from bundler.errors import InvalidInput, Tampered
from bundler.rules import hints
from bundler.rules.names import escape_display


@dataclass
class VerifyReport:
    """The outcome of :func:`bundler.bundle.verify.verify_bundle`.

    ``errors`` and ``warnings`` hold every finding. ``risk_flags`` and ``skill_bundles`` are
    recomputed from the bundle (``None``/empty when the fragment could not be read):
    ``risk_flags`` under both rule sets, ``also_found`` those of bundler's rules that the rules
    of the exporter which wrote the bundle do not raise and its manifest does not list; ``files``
    and ``bytes`` count the regular files found under ``config.toml``, ``workspace/``,
    ``skills/`` and ``memory/``, and ``sizes`` the size of each by its bundle path;
    ``checksums_digest`` is the XXH3-128 of ``checksums.xxh3`` and ``checksums`` the digests it
    lists, by bundle path (empty when it could not be read); ``manifest_digest`` is the
    XXH3-128 of the manifest as read; ``entries`` every folder and file the walk admitted,
    (name, is a folder) in checksum order: what an archive of a sound bundle holds
    (:func:`bundler.bundle.archive_write.archive_order`). ``workspace_digests_deferred``:
    the contents of ``workspace/`` were not compared with their digests (the caller does).
    ``not_here``: top folders that were not there to be read (see
    :func:`bundler.bundle.verify.verify_bundle`).
    ``reference``: the registry reference pinned to its digest when ``path`` is a private pulled
    copy; the report names the bundle by it.
    """

    path: Path
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    fragment: dict[str, Any] | None = None
    risk_flags: list[dict[str, str]] = field(default_factory=list)
    also_found: list[dict[str, str]] = field(default_factory=list)
    skill_bundles: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    totals: dict[str, list[int]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    checksums_digest: str = ""
    checksums: dict[str, str] = field(default_factory=dict)
    manifest_digest: str = ""
    entries: list[tuple[str, bool]] = field(default_factory=list)
    integrity_unproven: bool = False
    per_file: bool = False
    workspace_digests_deferred: bool = False
    not_here: tuple[str, ...] = ()
    reference: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing is wrong (warnings allowed)."""
        return not self.errors

    @property
    def format_version(self) -> int | None:
        """The manifest's format, when it has a usable one."""
        value = (self.manifest or {}).get("format_version")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def as_json(self) -> dict[str, Any]:
        """The ``{"errors", "warnings", ...}`` payload of ``bundle verify --json`` (05 §3)."""
        named = {"bundle": self.reference, "reference": self.reference} if self.reference else {}
        return {
            "bundle": str(self.path),
            **named,
            "errors": [{"path": p.path, "message": p.message} for p in self.errors],
            "warnings": [{"path": p.path, "message": p.message} for p in self.warnings],
            "format_version": self.format_version,
            "root_agent": escape_display(str((self.manifest or {}).get("root_agent", ""))),
            "files": self.files,
            "bytes": self.bytes,
            "checksums_xxh3_128": self.checksums_digest,
            "also_found_by_bundler": self.also_found,
        }


def confirm_read(report: VerifyReport, read: Mapping[str, str]) -> None:
    """What a caller read of a verified bundle against what was verified, added to
    ``report.errors``; ``read`` holds the XXH3-128 of each file as the caller read it, by
    bundle path. This is the check :func:`bundler.bundle.verify.verify_deferring_workspace`
    leaves to its caller for the workspace, whose contents it did not read: each file against
    ``checksums.xxh3``.
    ``report`` must have been made with ``per_file``.

    A workspace file verification found and the caller did not read, or read and verification
    never found, is an error, and so is any other file read whose digest is not the one
    verified: the folder changed in between, and the bytes read are not the verified bundle.
    """
    if not report.per_file:
        raise ValueError("confirm_read needs a report made with per_file")
    found = {rel for rel in report.sizes if rel.startswith("workspace/")}
    if report.workspace_digests_deferred:
        for rel in sorted(found ^ {rel for rel in read if rel.startswith("workspace/")}):
            report.errors.append(_changed_while_read(rel))
    for rel, digest in read.items():
        if rel == MANIFEST_NAME:
            expected: str | None = report.manifest_digest
        elif rel == CHECKSUMS_NAME:
            expected = report.checksums_digest
        else:
            expected = report.checksums.get(rel) if report.checksums else None
        if expected is None or expected == digest:
            continue
        in_workspace = rel in found and report.workspace_digests_deferred
        report.errors.append(not_matching(rel) if in_workspace else _changed_while_read(rel))


def _changed_while_read(rel: str) -> Problem:
    return Problem(
        escape_display(rel), "changed while it was read: verify the bundle again", Tampered
    )


def unsound(report: VerifyReport, source: str) -> InvalidInput:
    """The one-line refusal of a bundle that failed verification: its first error, how many
    more there are, and the command that lists every one."""
    first = report.errors[0]
    every = hints.command("bundle", "verify", os.path.abspath(source))
    more = len(report.errors) - 1
    tail = f" (and {more} more; every one: {every})" if more else ""
    return first.error(f"{escape_display(source)} is not a sound bundle: {first}{tail}")


def unique_problems(problems: Sequence[Problem]) -> list[Problem]:
    seen: set[Problem] = set()
    out: list[Problem] = []
    for problem in problems:
        if problem not in seen:
            seen.add(problem)
            out.append(problem)
    return out
