"""``bundler doctor``: what can be checked without changing anything (05 §1, 02 §8.5).

Config validity and the leftovers of interrupted imports in an install, the filesystem's
``RENAME_EXCHANGE`` support and export leftovers in a destination folder, and the data home of a
project. Each check answers problems (doctor then exits 3) and notes; none creates, opens for
writing or removes anything. The CLI (:mod:`bundler.cli.doctor_cmds`) only words the report.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bundler.bundle.history import recent_destinations
from bundler.bundle.leftovers import abandoned_in, leftovers_beside, temporary_leftovers
from bundler.bundle.publish import rename_exchange_works
from bundler.config.file import find_install_root
from bundler.config.secretkey import key_leftovers, key_problem, read_key_at
from bundler.config.secretstore import census, encrypt_policy
from bundler.config.store import load_config
from bundler.config.write import LOCK_NAME
from bundler.errors import BundlerError, InvalidInput, os_failure
from bundler.fs.durable import held_by_another, open_dir
from bundler.fs.scratch import ARCHIVE_PREFIX, dead_scratch
from bundler.home.homes import is_writable, resolve_home
from bundler.home.restore import home_leftovers
from bundler.home.volumes import load_volumes
from bundler.install.journal import STAGING_PREFIX, UNPACK_PREFIX
from bundler.install.receipts import unfilled_secrets
from bundler.rules import hints, layout, sweep_hyperscan
from bundler.rules.names import escape_display
from bundler.rules.sweeper import ENGINE_VARIABLE, sweep_engine
from bundler.rules.validate import validate


@dataclass(frozen=True)
class Finding:
    """One thing doctor found: ``kind`` says what was checked, ``path`` where, ``detail`` what
    was found (escaped for display), ``fix`` the command that repairs it (``""`` if none)."""

    kind: str
    path: str
    detail: str
    fix: str = ""


@dataclass
class DoctorReport:
    """What doctor found: problems (any one makes it exit 3), warnings and notes."""

    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The ``doctor --json`` payload (without ``ok``)."""
        return {
            "problems": [asdict(f) for f in self.problems],
            "warnings": [asdict(f) for f in self.warnings],
            "notes": [asdict(f) for f in self.notes],
        }

    def add(self, other: DoctorReport) -> None:
        """Append another check's findings, each thing found once: two checks may come upon
        the same one (an export leftover beside a destination the install recorded, in the
        folder ``--path`` names), each naming it from where it looked."""
        for mine, theirs in (
            (self.problems, other.problems),
            (self.warnings, other.warnings),
            (self.notes, other.notes),
        ):
            seen = {(found.kind, found.detail, found.fix) for found in mine}
            mine += [found for found in theirs if (found.kind, found.detail, found.fix) not in seen]


def install_findings(install: Path) -> DoctorReport:
    """The install's config validity, the staging folders an interrupted import left, and what
    interrupted exports left beside the destinations recorded in this user's state folder (and
    in the install, by older versions: :mod:`bundler.bundle.history`)."""
    report = _config_findings(install)
    try:
        names = os.listdir(install)
    except OSError:
        names = []
    # a running import or undo holds the config lock over its staging folder's whole life
    staged = [] if held_by_another(install / LOCK_NAME) else names
    for name in sorted(n for n in staged if n.startswith(STAGING_PREFIX)):
        # its temporary config (.config.toml.bundler-<token>) is part of the same problem
        report.problems.append(
            Finding(
                "import-leftover",
                str(install / name),
                f"an interrupted import left {escape_display(name)} in "
                f"{escape_display(str(install))}",
                # explicit, whatever chose the install: recover's --install is its target
                hints.command("recover", "--install", str(install)),
            )
        )
    report.problems += [
        Finding(
            "import-leftover",
            str(install / name),
            f"an interrupted import of an archive left {escape_display(name)} in "
            f"{escape_display(str(install))}",
            hints.command("recover", "--install", str(install)),
        )
        for name in _dead_in(install, UNPACK_PREFIX)
    ]
    report.warnings += [
        Finding(
            # the kind of the archive's scratch keeps the name it had when it was the only one
            "archive-leftover"
            if os.path.basename(path).startswith(ARCHIVE_PREFIX)
            else "scratch-leftover",
            path,
            text,
            fix,
        )
        for path, text, fix in temporary_leftovers()
    ]
    for dest in recent_destinations(install):
        report.problems += [
            _leftover("export-leftover", dest, line) for line in leftovers_beside(Path(dest))
        ]
    return report


def _dead_in(folder: Path, prefix: str) -> list[str]:
    """Scratch folders with ``prefix`` in ``folder`` that no living run holds."""
    try:
        fd = open_dir(folder, follow=True)
    except OSError:
        return []
    try:
        return dead_scratch(fd, prefix)
    finally:
        os.close(fd)


def _leftover(kind: str, where: str, line: str) -> Finding:
    """A leftover line of the layers below as a finding, its fix command kept apart."""
    if isinstance(line, hints.Hinted):
        return Finding(kind, where, line.sentence, line.fix)
    return Finding(kind, where, line)


def _config_findings(install: Path) -> DoctorReport:
    report = DoctorReport()
    config_file = str(layout.config_file(install))
    try:
        os.lstat(config_file)
    except (FileNotFoundError, NotADirectoryError):
        detail = f"no install (no config.toml) at {hints.looked_at(install)}"
        report.notes.append(Finding("install", str(install), detail))
        return report
    except OSError:
        pass  # load_config names the file and the reason
    try:
        loaded = load_config(install)
    except BundlerError as err:
        report.problems.append(Finding("config", err.path or config_file, err.message))
        return report
    errors, warnings = validate(loaded.data, install)
    report.problems += [
        Finding("config", e.path, f"{e.kind} {e.path}: {escape_display(e.message)}") for e in errors
    ]
    report.warnings += [
        Finding("config", w.path, f"{w.kind} {w.path}: {escape_display(w.message)}")
        for w in warnings
    ]
    report.add(_store_findings(install, loaded.file_data))
    for path, agent in unfilled_secrets(install, loaded.data):
        detail = (
            f"required secret {escape_display(path)} is empty (left unfilled by the import of "
            f"agent {escape_display(agent)})"
        )
        fix = hints.command("config", "set", path, install=str(install))
        report.warnings.append(Finding("secret", path, detail, fix))
    if not errors:
        detail = f"{escape_display(config_file)} is valid"
        report.notes.append(Finding("config", config_file, detail))
    return report


def _store_findings(install: Path, file_data: dict[str, Any]) -> DoctorReport:
    """ZeroClaw's secret store: the policy, the key (present, missing, unreadable, too open),
    how many stored values open under it and how many do not (never which ones: ZeroClaw
    refuses to start on the first that does not, so that is found before more are added)."""
    report = DoctorReport()
    found = read_key_at(install)
    where = found.where
    try:
        policy, _warning = encrypt_policy(file_data, {})
    except InvalidInput as err:
        report.problems.append(Finding("secret-store", err.path, err.message))
        policy = True
    stored = (
        "encrypted (secrets.encrypt = true)"
        if policy
        else "in plain text (secrets.encrypt = false)"
    )
    report.notes.append(Finding("secret-store", where, f"secrets are stored {stored}"))
    opened, closed = census(file_data, found)
    if found.state == "unreadable":
        report.problems.append(Finding("secret-store", where, key_problem(found)))
    elif found.state == "missing":
        detail = f"no {where}: " + (
            f"{closed} stored secret(s) cannot be decrypted, and ZeroClaw will not start; restore "
            "the install's own key file"
            if closed
            else "it is created by the first secret written"
        )
        (report.problems if closed else report.notes).append(Finding("secret-store", where, detail))
    else:
        if found.too_open:
            report.warnings.append(Finding("secret-store", where, found.mode_warning()))
        if closed:
            report.problems.append(
                Finding(
                    "secret-store",
                    where,
                    f"{closed} stored secret(s) do not decrypt under {where} ({opened} do): "
                    "ZeroClaw will not start; restore the key they were encrypted under, or set "
                    "each again with 'bundler config set'",
                )
            )
        else:
            report.notes.append(
                Finding("secret-store", where, f"{opened} stored secret(s) decrypt under {where}")
            )
    try:
        fd = open_dir(install, follow=True)
    except OSError:
        return report
    try:
        temporaries = key_leftovers(fd)
    except OSError:
        temporaries = []
    finally:
        os.close(fd)
    report.warnings += [
        Finding(
            "import-leftover",
            str(install / name),
            f"a key never published was left as {escape_display(name)}",
            hints.command("recover", "--install", str(install)),
        )
        for name in temporaries
    ]
    return report


def destination_findings(path: Path) -> DoctorReport:
    """A destination folder: ``RENAME_EXCHANGE`` support and what interrupted exports left."""
    shown = escape_display(str(path))
    try:
        works = rename_exchange_works(path)
    except OSError as err:
        raise os_failure(
            f"--path {shown}: cannot check it ({err.strerror}); name an existing folder "
            "where exports go",
            err,
            path=str(path),
        ) from None
    if works:
        detail = f"{shown}: exports replace a bundle here in one atomic step"
    else:
        detail = (
            f"{shown}: this filesystem cannot swap two folders in one step; --force exports "
            "replace a bundle with two renames (if interrupted, 'bundler recover' repairs it)"
        )
    return DoctorReport(
        problems=[_leftover("export-leftover", str(path), line) for line in abandoned_in(path)],
        notes=[Finding("rename-exchange", str(path), detail)],
    )


def home_findings(project: Path) -> list[Finding]:
    """Findings about the data home for ``bundler doctor --project``: where it is, the rule
    that found it, whether it can be written. Creates nothing; a problem raises
    :class:`~bundler.errors.BundlerError` (unwritable home: :class:`InvalidInput`)."""
    resolution = resolve_home(project)
    where = str(project)
    home = escape_display(str(resolution.home))
    source = escape_display(resolution.source)
    notes = [Finding("data-home", where, f"data home {home} (rule {resolution.rule}: {source})")]
    if not is_writable(resolution.home):
        message = f"data home {home} (rule {resolution.rule}) cannot be written"
        raise InvalidInput(message, path=str(resolution.home))
    notes.append(Finding("data-home", where, f"data home {home} can be written"))
    if not resolution.home.exists():
        notes.append(
            Finding(
                "data-home",
                where,
                f"data home {home} does not exist yet",
                hints.command("home", "init", "--project", os.path.abspath(project)),
            )
        )
    volumes = load_volumes(project)
    notes.append(
        Finding("data-home", where, f"volumes: {', '.join(v.name for v in volumes) or 'none'}")
    )
    return notes


def sweep_engine_finding() -> Finding:
    """Which engine the secret sweep of an export runs on here: said once, here,
    rather than on every export, since the pure-Python fallback is only slower."""
    if sweep_engine() == "hyperscan":
        detail = f"secret sweep engine: Hyperscan {sweep_hyperscan.version()}".rstrip()
    elif sweep_hyperscan.available():
        detail = f"secret sweep engine: pure Python ({ENGINE_VARIABLE}=python)"
    else:
        detail = "secret sweep engine: pure Python (hyperscan not available)"
    return Finding("sweep-engine", "", detail)


def diagnose(
    install_arg: str | None, destination: Path | None = None, project: Path | None = None
) -> DoctorReport:
    """Every check doctor was asked for: the install always (``--install`` or where
    :func:`~bundler.config.file.find_install_root` looks), a destination and a project if given."""
    report = install_findings(find_install_root(install_arg))
    report.notes.append(sweep_engine_finding())
    if destination is not None:
        report.add(destination_findings(destination))
    if project is not None:
        try:
            report.notes += home_findings(project)
            home = resolve_home(project).home
            report.problems += [
                _leftover("home-leftover", str(home), line) for line in home_leftovers(home)
            ]
        except BundlerError as err:
            report.problems.append(Finding("data-home", err.path, f"data home: {err.message}"))
    return report
