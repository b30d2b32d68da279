"""``bundler doctor``: what can be checked without changing anything (05 §1, 02 §8.5).

Config validity and the leftovers of interrupted imports in an install, the filesystem's
``RENAME_EXCHANGE`` support and export leftovers in a destination folder, and the data home of a
project. Each check answers problems (doctor then exits 3) and notes; none creates, opens for
writing or removes anything. The CLI (:mod:`bundler.cli.doctor_cmds`) only words the report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from bundler.bundle.history import recent_destinations
from bundler.bundle.publish import abandoned_in, leftovers_beside, rename_exchange_works
from bundler.config.file import find_install_root
from bundler.config.store import load_config
from bundler.errors import BundlerError, InvalidInput
from bundler.home.homes import is_writable, resolve_home
from bundler.home.restore import home_leftovers
from bundler.home.volumes import load_volumes
from bundler.install.journal import STAGING_PREFIX
from bundler.rules import layout
from bundler.rules.names import escape_display
from bundler.rules.validate import validate

__all__ = [
    "DoctorReport",
    "destination_findings",
    "diagnose",
    "home_findings",
    "install_findings",
]


@dataclass
class DoctorReport:
    """What doctor found: problems (any one makes it exit 3) and notes."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, other: DoctorReport) -> None:
        """Append another check's findings."""
        self.problems += other.problems
        self.notes += other.notes


def install_findings(install: Path) -> DoctorReport:
    """The install's config validity, the staging folders an interrupted import left, and what
    interrupted exports left beside the destinations the install recorded."""
    report = _config_findings(install)
    try:
        names = os.listdir(install)
    except OSError:
        names = []
    for name in sorted(n for n in names if n.startswith(STAGING_PREFIX)):
        # its temporary config (.config.toml.bundler-<token>) is part of the same problem
        report.problems.append(
            f"interrupted import left {escape_display(name)}: "
            f"run 'bundler recover --install {escape_display(str(install))}'"
        )
    for dest in recent_destinations(install):
        report.problems += leftovers_beside(Path(dest))
    return report


def _config_findings(install: Path) -> DoctorReport:
    report = DoctorReport()
    config = layout.config_file(install)
    if not config.exists():
        report.notes.append(f"no install at {escape_display(str(install))} (no config.toml)")
        return report
    try:
        loaded = load_config(install)
    except BundlerError as err:
        report.problems.append(f"config: {err.message}")
        return report
    errors, warnings = validate(loaded.data, install)
    report.problems += [f"config: {e.kind} {e.path}: {escape_display(e.message)}" for e in errors]
    report.notes += [
        f"config warning: {w.kind} {w.path}: {escape_display(w.message)}" for w in warnings
    ]
    if not errors:
        report.notes.append(f"config: {escape_display(str(config))} is valid")
    return report


def destination_findings(path: Path) -> DoctorReport:
    """A destination folder: ``RENAME_EXCHANGE`` support and what interrupted exports left."""
    report = DoctorReport()
    shown = escape_display(str(path))
    if rename_exchange_works(path):
        report.notes.append(f"{shown}: RENAME_EXCHANGE works (exports replace bundles atomically)")
    else:
        report.notes.append(
            f"{shown}: RENAME_EXCHANGE is not supported; --force exports use the two-rename "
            "fallback"
        )
    report.problems += abandoned_in(path)
    return report


def home_findings(project: Path) -> list[str]:
    """Findings about the data home for ``bundler doctor --project``: where it is, the rule
    that found it, whether it can be written. Creates nothing; a problem raises
    :class:`~bundler.errors.BundlerError` (unwritable home: :class:`InvalidInput`)."""
    resolution = resolve_home(project)
    home = escape_display(str(resolution.home))
    notes = [f"data home {home} (rule {resolution.rule}: {escape_display(resolution.source)})"]
    if not is_writable(resolution.home):
        where = str(resolution.home)
        message = f"data home {home} (rule {resolution.rule}) cannot be written"
        raise InvalidInput(message, path=where)
    notes.append(f"data home {home} can be written")
    if not resolution.home.exists():
        notes.append(f"data home {home} does not exist yet ('bundler home init' creates it)")
    volumes = load_volumes(project)
    notes.append(f"volumes: {', '.join(v.name for v in volumes) or 'none'}")
    return notes


def diagnose(
    install_arg: str | None, destination: Path | None = None, project: Path | None = None
) -> DoctorReport:
    """Every check doctor was asked for: the install always (``--install`` or where
    :func:`~bundler.config.store.find_install_root` looks), a destination and a project if given."""
    report = install_findings(find_install_root(install_arg))
    if destination is not None:
        report.add(destination_findings(destination))
    if project is not None:
        try:
            report.notes += home_findings(project)
            report.problems += home_leftovers(resolve_home(project).home)
        except BundlerError as err:
            report.problems.append(f"data home: {err.message}")
    return report
