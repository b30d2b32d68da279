"""``agents export``: the planner, the safe copier, the sweep and the publisher, joined (02).

Orchestration only; every decision lives in the module that owns it:

* :mod:`bundler.bundle.closure` — what travels (pure), :mod:`bundler.rules.risk`,
  :mod:`bundler.rules.secrets`;
* :mod:`bundler.fs.safefs` / :mod:`bundler.fs.copytree` — reading the sources without following
  links;
* :mod:`bundler.bundle.manifest` — the bytes of ``config.toml``, ``checksums.xxh3``, the manifest;
* :mod:`bundler.bundle.publish` — admission, staging, durability, the swap and the rollback;
* :mod:`bundler.fs.snapshot` — the consistent SQLite copy of format 2 (``--include-memory``).

The order matters for crash safety and truthfulness: the destination is admitted before
anything is created; the trees are copied (and swept, in the same pass) into staging; the
closure is finished from what was actually copied, rendered, re-proven and swept; the
checksums and then the manifest are written last; everything is flushed once; then the swap.
Any failure or signal before the swap removes staging and leaves the destination as it was.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import xxhash

from bundler import __version__
from bundler.bundle.checksum_spool import CREATE_FLAGS, GENERATED_MODE, ChecksumSpool
from bundler.bundle.closure import ExportPlan, finish_plan, plan_closure
from bundler.bundle.exclude import command_line_patterns
from bundler.bundle.export_copy import TreeCopy
from bundler.bundle.export_report import FORMAT_VERSION, MEMORY_FORMAT_VERSION, ExportReport
from bundler.bundle.history import record_destination
from bundler.bundle.manifest import (
    CHECKSUMS_NAME,
    CONFIG_NAME,
    MANIFEST_NAME,
    MEMORY_STORE,
    Contents,
    Dropped,
    Manifest,
    Memory,
    Provenance,
    exported_at,
    render_config,
    render_manifest,
)
from bundler.bundle.publish import Admission, Staging, admit, folder_beside, stage_build_publish
from bundler.bundle.recover import clear_abandoned_or_warn
from bundler.bundle.sealed import SEALED_NAME, SEALED_TABLE
from bundler.bundle.sweep import ExportSweep
from bundler.config.secretkey import read_key_at
from bundler.config.secretstore import open_stored
from bundler.config.store import load_config
from bundler.errors import BundlerError, PolicyRefused, UsageError, withholding
from bundler.fs import age, durable
from bundler.fs.copytree import CopiedFile
from bundler.fs.safefs import open_beneath
from bundler.fs.tally import tally
from bundler.rules import schema
from bundler.rules.exclusions import Pattern
from bundler.rules.layout import skill_bundle_dir, workspace_dir
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path
from bundler.rules.progress import Progress, phase
from bundler.rules.secrets import ScanSecrets, sweep_targets
from bundler.rules.sweeper import Sweeper

SCAN_MODES = tuple(mode.value for mode in ScanSecrets)


def protected_paths(config: Mapping[str, Any], install_root: Path) -> list[Path]:
    """The folders an export reads and must not write into (02 §8.1 step 2).

    The install root, and the workspace and skill folder of *every* agent and skill bundle of
    the config, not only the exported agent's: a bundle written into a sibling's workspace
    would be carried by that sibling's next export.
    """
    paths = [install_root]
    agents = config.get("agents")
    if isinstance(agents, Mapping):
        paths += [workspace_dir(config, alias, install_root) for alias in agents]
    bundles = config.get("skill_bundles")
    if isinstance(bundles, Mapping):
        paths += [skill_bundle_dir(config, alias, install_root) for alias in bundles]
    return paths


def export_agent(
    install_root: Path,
    alias: str,
    out: Path,
    *,
    force: bool = False,
    include_memory: bool = False,
    scan_secrets: ScanSecrets | str = ScanSecrets.REFUSE,
    exclude: Sequence[str] = (),
    exclude_from: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    archive: bool = False,
    seal_to: Sequence[str] = (),
) -> ExportReport:
    """Export agent ``alias`` of the install at ``install_root`` to the bundle folder ``out``.

    ``force`` replaces an existing bundle (never another folder). ``include_memory`` makes a
    format 2 bundle carrying a consistent snapshot of the SQLite memory (02 §10).
    ``scan_secrets`` (:class:`ScanSecrets`, or its value) is ``refuse`` (a known secret in a
    carried file fails the export), ``warn`` or ``off``. ``exclude`` (gitignore patterns) and
    the pattern files ``exclude_from`` keep workspace paths behind, after the workspace's own
    ``.bundlerignore``
    (:mod:`bundler.bundle.exclude`); each excluded path is a ``dropped`` row and is not swept.
    ``environ`` supplies the ``ZEROCLAW_*`` overrides and ``SOURCE_DATE_EPOCH`` (default:
    ``os.environ``). ``progress`` sees one phase, ``exporting``, whose totals are counted
    before the copy (only when ``progress`` is given). With ``archive``, ``out`` is a bundle
    archive (a tar file, :mod:`bundler.bundle.archive`), built from a bundle folder staged
    beside it; ``progress`` then sees the folder's verification and the packing too.
    ``seal_to`` (``--seal-to``: public keys, or ``@FILE`` of them, :mod:`bundler.fs.age`) seals
    the values of the bundle's ``required_secrets`` to those receivers as ``secrets.age``
    (:mod:`bundler.bundle.sealed`, 02 §12); the config still carries empty strings.

    Raises :class:`bundler.errors.BundlerError` subclasses (nothing is published then);
    problems after the bundle is published are returned in ``warnings``.
    """
    if scan_secrets not in SCAN_MODES:
        raise UsageError(f"--scan-secrets must be one of {', '.join(SCAN_MODES)}")
    mode = ScanSecrets(scan_secrets)
    env = os.environ if environ is None else environ
    # a malformed recipient is refused before the install or the destination is read
    recipients = tuple(age.parse_recipients(seal_to, "--seal-to")) if seal_to else ()
    loaded = load_config(install_root, environ=env)
    config = loaded.data
    plan = plan_closure(config, alias, install_root)
    if include_memory:
        _check_memory_backend(config, alias)
    # built even with --scan-secrets off: a secret in a file *name* must stay out of the report.
    # Its targets are the stored values and the overrides' values: both are this install's.
    # Stored-encrypted values are opened in memory (never written) and their plain text swept
    # for, with the key itself; only what does not open is counted, by reason.
    found_key = read_key_at(install_root)
    opened = open_stored([loaded.file_data, config], found_key)
    targets = [*sweep_targets(*opened.views)[0], *opened.targets]
    sweep = ExportSweep(Sweeper(targets) if targets else None, mode)
    encrypted = {} if mode is ScanSecrets.OFF else opened.unswept
    # every error made from here on withholds the secrets where it is made (errors.withholding)
    with withholding(sweep.withhold):
        # before the destination is touched: a wrong pattern file fails at once
        patterns = tuple(command_line_patterns(exclude, exclude_from))
        sealing = None
        if recipients:
            from bundler.bundle.sealed import sealed_values

            # a stored value that does not open refuses here, before the destination is touched
            values = sealed_values(loaded.file_data, plan.required_secrets, found_key)
            sealing = _Seal(recipients, values)
        run = _Run(
            install_root, plan, config, sweep, env, progress, include_memory, patterns, sealing
        )
        publish = _admit_build_pack if archive else _admit_build_publish
        report = publish(run, out, force=force, encrypted=encrypted)
    report.secret_hits = sweep.hits
    _redact_report(report, sweep)
    return report


@dataclass(frozen=True)
class _Seal:
    """What ``--seal-to`` seals: to whom, and the values (in memory only)."""

    recipients: tuple[age.Recipient, ...]
    values: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class _Run:
    """One export's fixed inputs, handed to each step instead of a dozen parameters."""

    install_root: Path
    plan: ExportPlan
    config: Mapping[str, Any]
    sweep: ExportSweep
    environ: Mapping[str, str]
    progress: Progress | None
    include_memory: bool
    patterns: tuple[Pattern, ...] = ()
    sealing: _Seal | None = None


def _admit_build_publish(
    run: _Run, out: Path, *, force: bool, encrypted: dict[str, int]
) -> ExportReport:
    """Admit the destination, build the bundle in staging, flush it and swap it in (02 §8)."""
    cleared = clear_abandoned_or_warn(out)
    admission = admit(out, force=force, protected=protected_paths(run.config, run.install_root))
    with admission:
        report = _started(run, admission, encrypted, cleared)
        outcome = stage_build_publish(admission, lambda staging: _build(staging, run, report))
    report.publish_method = outcome.method.value
    report.warnings += outcome.warnings
    return report


def _admit_build_pack(
    run: _Run, out: Path, *, force: bool, encrypted: dict[str, int]
) -> ExportReport:
    """Admit the archive ``out``, build the bundle in a folder staged beside it, verify it and
    pack it into the archive's staging file, then publish that (02 §8).

    Everything is staged beside the destination, as every publication is: a full disk is the
    destination's, named as such, and a kill leaves only what ``recover FILE.tar`` clears.
    """
    # here, not at the top: the archive code is the one-file form's alone
    from bundler.bundle.archive import looks_like_archive, pack_staged

    cleared = clear_abandoned_or_warn(out)
    admission = admit(
        out,
        force=force,
        protected=protected_paths(run.config, run.install_root),
        archive_check=looks_like_archive,
    )
    with admission:
        report = _started(run, admission, encrypted, cleared)

        def build(archive: Staging) -> None:
            with folder_beside(admission, report.warnings) as folder:
                _build(folder, run, report)
                pack_staged(folder, archive, run.progress)

        outcome = stage_build_publish(admission, build)
    report.publish_method = outcome.method.value
    report.warnings += outcome.warnings
    return report


def _started(
    run: _Run, admission: Admission, encrypted: dict[str, int], cleared: list[str]
) -> ExportReport:
    """The report of an export to an admitted destination, noted in the user's record."""
    report = ExportReport(
        bundle=admission.dest_path,
        root_agent=run.plan.alias,
        format_version=MEMORY_FORMAT_VERSION if run.include_memory else FORMAT_VERSION,
        encrypted_not_swept=sum(encrypted.values()),
        encrypted_not_swept_why=dict(encrypted),
        # the plan's findings (a non-portable root alias, 01 §3) come first, then the repairs
        warnings=[*run.plan.warnings, *cleared],
    )
    _note_destination(admission.dest_path, run.sweep)
    return report


def _note_destination(dest: str, sweep: ExportSweep) -> None:
    """Add ``dest`` to the user's record of destinations (:mod:`bundler.bundle.history`), before
    the staging exists, so that ``doctor`` can find what a crash leaves beside it.

    Best effort and quiet: a state folder that cannot be written (a read-only home, a sandbox)
    costs only ``doctor``'s look beside this destination, which ``recover DEST`` and the next
    export to it do not need. A destination with a known secret in one of its names is left
    out: the record is a plain file, and a name with its secret withheld leads nowhere.
    """
    if sweep.redact(dest) != dest:
        return
    with contextlib.suppress(OSError):
        record_destination(dest)


def _redact_report(report: ExportReport, sweep: ExportSweep) -> None:
    """Withhold name components that hold a known secret from every listed path and text."""
    report.bundle = sweep.withhold(report.bundle)
    report.warnings = [sweep.withhold(warning) for warning in report.warnings]
    skipped = report.skipped
    skipped.paths = [sweep.redact(path) for path in skipped.paths]
    skipped.non_portable_names = [sweep.redact(path) for path in skipped.non_portable_names]
    report.dropped = [
        Dropped(sweep.redact(row.path), row.reason, sweep.withhold(row.detail))
        if row.path.startswith(("workspace/", "skills/"))
        else row
        for row in report.dropped
    ]
    # a flag's detail quotes a value of the config (an endpoint), which may hold a credential
    # that --scan-secrets warn let travel: the bundle has it, the report never shows it
    report.risk_flags = [
        replace(flag, detail=sweep.withhold(flag.detail)) for flag in report.risk_flags
    ]


def _build(staging: Staging, run: _Run, report: ExportReport) -> None:
    """Fill the staging folder; the manifest is the last file written."""
    extra: list[Dropped] = []
    estimate = _estimate(run) if run.progress is not None else (None, None)
    with (
        ChecksumSpool() as checksums,
        phase(run.progress, "exporting", *estimate),
        run.sweep.beside(),
    ):
        copy = TreeCopy(
            staging.fd,
            run.install_root,
            run.sweep,
            report,
            extra,
            run.progress,
            checksums,
            sealed=run.sealing is not None,
        )
        try:
            _build_in(staging, run, copy, report, extra, checksums)
        except BundlerError:
            # a secret already found in what was copied is what to fix first: the refusal
            # listing it wins over a later complaint (the closure proof runs after the copy)
            run.sweep.refuse_if_found()
            raise


def _estimate(run: _Run) -> tuple[int, int]:
    """The files and bytes the copy is expected to carry, counted for the progress bar."""
    directories = [source.directory for source in run.plan.skill_sources]
    # the root memory/ stays behind; format 2 carries its database (counted just below) and
    # the root MEMORY_SNAPSHOT.md, format 1 neither
    left = {"memory"} if run.include_memory else {"memory", "MEMORY_SNAPSHOT.md"}
    files, nbytes = tally([run.plan.workspace], skip_top=left)
    more_files, more_bytes = tally(directories)
    files, nbytes = files + more_files, nbytes + more_bytes
    if run.include_memory:
        with contextlib.suppress(OSError):
            nbytes += os.lstat(run.plan.workspace / "memory" / "brain.db").st_size
            files += 1
    return files, nbytes


def _build_in(
    staging: Staging,
    run: _Run,
    copy: TreeCopy,
    report: ExportReport,
    extra: list[Dropped],
    checksums: ChecksumSpool,
) -> None:
    """The body of :func:`_build`, with the copier and the checksum spool in hand."""
    plan, sweep, environ = run.plan, run.sweep, run.environ
    version = report.format_version
    root = staging.fd
    carried = copy.skills(plan)
    copy.workspace(plan, run.patterns)
    if version == MEMORY_FORMAT_VERSION:
        copy.memory(plan)
    identity_present = plan.identity_path is None or _identity_present(root, plan.identity_path)
    # finish_plan proves the closure on an otherwise empty install before we write it
    fragment, dropped, risk_flags = finish_plan(plan, carried, identity_present, extra, version)
    config_bytes = render_config(fragment)
    sweep.scan(CONFIG_NAME, config_bytes)
    digest = _write_new(root, CONFIG_NAME, config_bytes)
    checksums.add(CONFIG_NAME, CopiedFile(CONFIG_NAME, len(config_bytes), digest))
    checksums_digest = checksums.write(root, CHECKSUMS_NAME)
    report.files = checksums.files
    report.bytes = checksums.bytes
    manifest = Manifest(
        format_version=version,
        root_agent=plan.alias,
        required_secrets=list(plan.required_secrets),
        skill_bundles=carried,
        provenance=Provenance(exporter=f"bundler {__version__}", exported_at=exported_at(environ)),
        contents=Contents(
            files=report.files,
            bytes=report.bytes,
            checksums=CHECKSUMS_NAME,
            checksums_xxh3_128=checksums_digest,
        ),
        dropped=list(dropped),
        risk_flags=list(risk_flags),
        memory=Memory(backend="sqlite", store=MEMORY_STORE, snapshot_at=exported_at(environ))
        if version == MEMORY_FORMAT_VERSION
        else None,
    )
    if run.sealing is not None:
        _seal_into(root, manifest, run.sealing, report)
    manifest_bytes = render_manifest(manifest)
    sweep.scan(MANIFEST_NAME, manifest_bytes)
    # every carried byte and name was swept: under refuse, one error lists all the hits
    sweep.refuse_if_found()
    _write_new(root, MANIFEST_NAME, manifest_bytes)
    report.skill_bundles = carried
    report.required_secrets = list(plan.required_secrets)
    report.dropped = list(dropped)
    report.risk_flags = list(risk_flags)


def _seal_into(root: int, manifest: Manifest, sealing: _Seal, report: ExportReport) -> None:
    """Write ``secrets.age`` into staging and name it in ``manifest``'s ``[sealed]`` table
    (02 §12): after ``checksums.xxh3``, whose digest the sealed plain text names, and before
    the manifest, which names the file's sha256. It is ciphertext, never swept: the values it
    holds are this install's own, which the sweep looks for in every other file."""
    from bundler.bundle.sealed import seal

    sealed = seal(manifest.as_dict(), sealing.values, sealing.recipients)
    _write_new(root, SEALED_NAME, sealed.data)
    manifest.extra[SEALED_TABLE] = sealed.table
    report.sealed_recipients = len(sealing.recipients)
    report.sealed_paths = list(sealed.table["paths"])


def _check_memory_backend(config: Mapping[str, Any], alias: str) -> None:
    """Format 2 carries only a SQLite store (02 §10); any other backend is refused."""
    agent = config.get("agents", {}).get(alias, {})
    memory = agent.get("memory") if isinstance(agent, Mapping) else None
    node = schema.resolve(["agents", alias, "memory", "backend"])[1]
    backend = memory.get("backend") if isinstance(memory, Mapping) else None
    if backend is None:
        backend = schema.default_of(node)
    if backend != "sqlite":
        where = format_path(["agents", alias, "memory", "backend"])
        raise PolicyRefused(
            f"--include-memory carries only SQLite memory, and {escape_display(where)} is "
            f"{escape_display(str(backend))}; export without --include-memory",
            path=where,
        )


def _write_new(dir_fd: int, name: str, data: bytes) -> str:
    """Create ``name`` (never over an existing entry) holding ``data``; returns its XXH3-128."""
    fd = os.open(name, CREATE_FLAGS, GENERATED_MODE, dir_fd=dir_fd)
    try:
        durable.write_all(fd, data)
        # the creation mode went through the umask; the bundle's bytes and modes must not
        os.fchmod(fd, GENERATED_MODE)
    finally:
        os.close(fd)
    return str(xxhash.xxh3_128_hexdigest(data))


def _identity_present(root: int, identity_path: str) -> bool:
    """True when ``workspace/<identity_path>`` was carried as a regular file."""
    folder, _, name = f"workspace/{identity_path}".rpartition("/")
    try:
        fd = open_beneath(root, folder)
    except OSError:
        return False
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(fd)
    return stat.S_ISREG(st.st_mode)
