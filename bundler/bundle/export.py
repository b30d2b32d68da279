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
import errno
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import xxhash

from bundler import __version__
from bundler.bundle import walk as bundle_walk
from bundler.bundle.checksum_spool import CREATE_FLAGS, GENERATED_MODE, ChecksumSpool
from bundler.bundle.closure import ExportPlan, finish_plan, plan_closure
from bundler.bundle.exclude import PatternExclude, command_line_patterns, workspace_patterns
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
from bundler.bundle.walk import past_entry_limit
from bundler.config.secretstore import open_stored, read_key_at
from bundler.config.store import load_config
from bundler.errors import BundlerError, Refused, UsageError, withholding
from bundler.fs import age, durable
from bundler.fs.copytree import CopiedFile, copy_tree, digest_fd
from bundler.fs.safefs import (
    SkipCounts,
    WorkspaceExclude,
    open_beneath,
    open_dir_nofollow,
    open_source_root,
    refuse_unreadable,
    select_skills,
)
from bundler.fs.snapshot import snapshot_database
from bundler.fs.tally import tally
from bundler.rules import schema
from bundler.rules.exclusions import IGNORE_FILE, Exclusions, Pattern
from bundler.rules.layout import skill_bundle_dir, workspace_dir
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path
from bundler.rules.progress import Progress, phase
from bundler.rules.risk import RiskFlag
from bundler.rules.secrets import ScanSecrets, sweep_targets
from bundler.rules.sweeper import Hit, Sweeper

FORMAT_VERSION = 1
MEMORY_FORMAT_VERSION = 2
MEMORY_STORE_SOURCE = "workspace/memory/brain.db"

SCAN_MODES = tuple(mode.value for mode in ScanSecrets)
_MKDIR_MODE = 0o700

CARRIED_AS_IS = (
    "carried files are copied as they are and were only swept for this install's own known "
    "secrets; review them before sharing the bundle"
)


@dataclass
class ExportReport:
    """What an export did (02 §11); :meth:`as_json` is the ``--json`` object of 05 §3."""

    bundle: str
    root_agent: str
    format_version: int = FORMAT_VERSION
    files: int = 0
    bytes: int = 0
    skill_bundles: list[str] = field(default_factory=list)
    skipped: SkipCounts = field(default_factory=SkipCounts)
    required_secrets: list[str] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    risk_flags: list[RiskFlag] = field(default_factory=list)
    secret_hits: list[Hit] = field(default_factory=list)
    encrypted_not_swept: int = 0
    encrypted_not_swept_why: dict[str, int] = field(default_factory=dict)
    """How many of them for each reason: no key, key unreadable, does not decrypt under the
    key, op:// reference."""
    publish_method: str = ""
    warnings: list[str] = field(default_factory=list)
    sealed_recipients: int = 0
    """How many recipients ``secrets.age`` is sealed to (0: no seal was asked for)."""
    sealed_paths: list[str] = field(default_factory=list)

    @property
    def note(self) -> str:
        """What every export's reader should know: carried files are copied as they are."""
        return CARRIED_AS_IS

    def as_json(self) -> dict[str, Any]:
        """The payload of ``agents export --json`` (without ``ok``)."""
        return {
            "bundle": self.bundle,
            "format_version": self.format_version,
            "root_agent": self.root_agent,
            "files": self.files,
            "bytes": self.bytes,
            "skill_bundles": list(self.skill_bundles),
            "skipped": self.skipped.as_json(),
            "skipped_paths": list(self.skipped.paths),
            "non_portable_names": list(self.skipped.non_portable_names),
            "required_secrets": list(self.required_secrets),
            "dropped": [
                {"path": d.path, "reason": d.reason, "detail": d.detail} for d in self.dropped
            ],
            "risk_flags": [
                {"kind": f.kind, "path": f.path, "detail": f.detail} for f in self.risk_flags
            ],
            "secret_hits": [
                {"file": h.file, "secret_path": h.secret_path, "encoding": h.encoding}
                for h in self.secret_hits
            ],
            "encrypted_not_swept": self.encrypted_not_swept,
            "encrypted_not_swept_why": dict(self.encrypted_not_swept_why),
            "publish_method": self.publish_method,
            "sealed": {"recipients": self.sealed_recipients, "paths": list(self.sealed_paths)}
            if self.sealed_recipients
            else None,
            "warnings": list(self.warnings),
        }


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
    scan_secrets: str = "refuse",
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
    ``scan_secrets`` is ``refuse`` (a known secret in a carried file fails the export),
    ``warn`` or ``off``. ``exclude`` (gitignore patterns) and the pattern files ``exclude_from``
    keep workspace paths behind, after the workspace's own ``.bundlerignore``
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
    sweep = ExportSweep(Sweeper(targets) if targets else None, scan_secrets)
    encrypted = {} if scan_secrets == "off" else opened.unswept
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
        copy = _Copy(
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
    copy: _Copy,
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


class _Copy:
    """Copies the workspace and the skills into staging, collecting what the report needs."""

    def __init__(
        self,
        root: int,
        install_root: Path,
        sweep: ExportSweep,
        report: ExportReport,
        dropped: list[Dropped],
        progress: Progress | None,
        checksums: ChecksumSpool,
        sealed: bool = False,
    ) -> None:
        self.root = root
        self.install_root = install_root
        self.sweep = sweep
        self.report = report
        self.dropped = dropped
        self.progress = progress
        self.checksums = checksums
        # the root files written after the copy (config.toml, checksums.xxh3, the manifest)
        # are part of the bundle from the start: a limit they would pass stops the copy
        self.entries = len(_ROOT_FILES) + (1 if sealed else 0)

    def made(self, relpath: str) -> None:
        """Count one entry made in the bundle, ``relpath``; refuse as soon as the bundle would
        hold more entries than ``bundle verify`` and ``agents import`` accept, counted the
        way they count (:func:`bundler.bundle.walk.past_entry_limit`), so that nothing a
        reader refuses is ever published, and a huge tree is refused without being copied."""
        self.entries += 1
        if past_entry_limit(self.entries):
            raise Refused(
                f"the bundle would hold more than {bundle_walk.MAX_ENTRIES} files and folders "
                f"({self.entries} counted at {escape_display(relpath)}), which no bundler "
                "accepts; keep some workspace paths behind with --exclude PATTERN (or a "
                ".bundlerignore in the workspace) and export again",
                path=relpath,
            )

    def _folder(self, relpath: str) -> None:
        self.made(relpath)
        self.sweep.folder(relpath)

    def _tree(
        self,
        src_fd: int,
        dst_fd: int,
        prefix: str,
        *,
        section: str,
        counted: bool = True,
        **extra: Any,
    ) -> None:
        skipped = self.report.skipped
        for copied in copy_tree(
            src_fd,
            dst_fd,
            prefix=prefix,
            on_skip=skipped.record if counted else None,
            on_non_portable=skipped.record_non_portable if counted else None,
            on_folder=self._folder,
            observer=self.sweep.observer,
            **extra,
        ):
            self.made(copied.relpath)
            self.sweep.file_done(copied.relpath)
            self.checksums.add(section, copied)
            if self.progress is not None:
                self.progress(1, copied.size)

    def workspace(self, plan: ExportPlan, patterns: Sequence[Pattern] = ()) -> None:
        """``workspace/``: the tree minus root memory, live stores reported as dropped (02 §7.1).

        ``patterns`` (the command line's) follow the workspace's own ``.bundlerignore``; what
        they exclude is reported as dropped, never copied, never swept.
        """
        self.made("workspace")
        dst = _mkdir_open(self.root, "workspace")
        try:
            src = open_source_root(plan.workspace, install_root=self.install_root)
            if src is None:
                return  # a missing workspace is an empty one
            try:
                # root memory/ and MEMORY_SNAPSHOT.md: finish_plan reports them (always, format 1)
                shown = f"{escape_display(str(plan.workspace))}/{IGNORE_FILE}"
                exclusions = Exclusions([*workspace_patterns(src, shown), *patterns])
                private = WorkspaceExclude(src, prefix="workspace/")
                exclude = (
                    PatternExclude(
                        private,
                        exclusions,
                        prefix="workspace/",
                        rows=self.dropped,
                        redact=self.sweep.redact,
                        withhold=self.sweep.withhold,
                    )
                    if exclusions
                    else private
                )
                live: list[str] = []
                self._tree(
                    src,
                    dst,
                    "workspace/",
                    section="workspace",
                    exclude=exclude,
                    on_live_store=live.append,
                )
                self.dropped += [
                    Dropped(path, "not_yet_portable", _LIVE_STORE_DETAIL) for path in live
                ]
            finally:
                os.close(src)
        finally:
            os.close(dst)

    def memory(self, plan: ExportPlan) -> None:
        """Format 2 (02 §10): a consistent snapshot of ``memory/brain.db`` and the root snapshot.

        The workspace and its ``memory`` folder are opened no-follow and then addressed through
        ``/proc/self/fd``, so SQLite reads exactly the folders that were checked, and writes into
        exactly our staging folder, whatever is renamed meanwhile.
        """
        src = open_source_root(plan.workspace, install_root=self.install_root)
        if src is None:
            raise _no_brain(plan)
        try:
            try:
                memory_fd = open_dir_nofollow(src, "memory")
            except OSError as err:
                if err.errno == errno.ENOENT:
                    raise _no_brain(plan) from None
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise refuse_unreadable("workspace/memory", err) from err
                raise Refused(
                    f"{escape_display(str(plan.workspace))}/memory is not a folder or is a "
                    f"symbolic link ({err.strerror}): point the config at the real workspace",
                    path="workspace/memory",
                ) from err
            self.made("memory")
            dst = _mkdir_open(self.root, "memory")
            try:
                source = Path(f"/proc/self/fd/{memory_fd}/brain.db")
                # not os.path.lexists: it answers False for a store it cannot examine
                try:
                    os.stat("brain.db", dir_fd=memory_fd, follow_symlinks=False)
                except FileNotFoundError:
                    raise _no_brain(plan) from None
                except OSError as err:
                    raise refuse_unreadable(MEMORY_STORE_SOURCE, err) from err
                # the root MEMORY_SNAPSHOT.md alone, under 7.2's rules (its skips were counted
                # by the workspace walk already); first, as "M" sorts before "b" (02 §9.2)
                self._tree(
                    src,
                    dst,
                    "memory/",
                    section="memory",
                    exclude=_only_memory_snapshot,
                    counted=False,
                )
                snapshot_database(
                    source,
                    Path(f"/proc/self/fd/{dst}/brain.db"),
                    method="backup",
                    shown=escape_display(str(plan.workspace / "memory" / "brain.db")),
                )
                fd = os.open("brain.db", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst)
                try:
                    size, digest = digest_fd(fd, relpath=MEMORY_STORE, observer=self.sweep.observer)
                finally:
                    os.close(fd)
                self.made(MEMORY_STORE)
                self.sweep.file_done(MEMORY_STORE)
                self.checksums.add("memory", CopiedFile(MEMORY_STORE, size, digest))
                if self.progress is not None:
                    self.progress(1, size)
            finally:
                os.close(dst)
                os.close(memory_fd)
        finally:
            os.close(src)

    def skills(self, plan: ExportPlan) -> list[str]:
        """``skills/<b>/<skill>/`` per skill bundle that yields a skill; returns the aliases."""
        carried: list[str] = []
        skills_fd = -1
        try:
            for source in plan.skill_sources:
                src = open_source_root(source.directory, install_root=self.install_root)
                if src is None:
                    self.dropped.append(
                        Dropped(
                            f"skills/{source.alias}",
                            "source_missing",
                            "the bundle folder does not exist",
                        )
                    )
                    continue
                try:
                    selection = select_skills(
                        src,
                        include=source.include,
                        exclude=source.exclude,
                        prefix=f"skills/{source.alias}/",
                    )
                    self.dropped += [
                        Dropped(f"skills/{source.alias}/{name}", "not_yet_portable", _NOT_A_SKILL)
                        for name in selection.not_copied
                    ]
                    if not selection.admitted:
                        self.dropped.append(
                            Dropped(
                                f"skills/{source.alias}",
                                "source_missing",
                                "no skill in the bundle folder was carried",
                            )
                        )
                        continue
                    if skills_fd < 0:
                        self.made("skills")
                        skills_fd = _mkdir_open(self.root, "skills")
                    self._folder(f"skills/{source.alias}")
                    bundle_fd = _mkdir_open(skills_fd, source.alias)
                    try:
                        for name, lst in selection.admitted:
                            prefix = f"skills/{source.alias}/{name}/"
                            self._skill(src, bundle_fd, name, lst, prefix)
                    finally:
                        os.close(bundle_fd)
                    carried.append(source.alias)
                finally:
                    os.close(src)
        finally:
            if skills_fd >= 0:
                os.close(skills_fd)
        return carried

    def _skill(
        self, bundle_src: int, bundle_dst: int, name: str, lst: os.stat_result, prefix: str
    ) -> None:
        try:
            src = open_dir_nofollow(bundle_src, name, lst)
        except OSError as err:
            if err.errno not in _CHANGED_ERRNOS:
                raise refuse_unreadable(prefix.rstrip("/"), err) from err
            raise Refused(
                f"{escape_display(prefix)} changed while it was being exported ({err.strerror}); "
                "stop the agent and try again",
                path=prefix,
            ) from err
        try:
            self._folder(prefix.rstrip("/"))
            dst = _mkdir_open(bundle_dst, name)
            try:
                # one section per bundle: its skills come in name order already
                self._tree(src, dst, prefix, section="/".join(prefix.split("/")[:2]))
            finally:
                os.close(dst)
        finally:
            os.close(src)


# what a skill folder swapped after selection answers: a link, a file, gone, another folder
_CHANGED_ERRNOS = frozenset({errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.ESTALE})

_ROOT_FILES = (CONFIG_NAME, CHECKSUMS_NAME, MANIFEST_NAME)

_LIVE_STORE_DETAIL = (
    "a SQLite database with a -wal or -journal beside it is a live store: copying it file by "
    "file can tear it"
)
_NOT_A_SKILL = "not a skill folder holding SKILL.md, or a skill whose name is not portable"


def _only_memory_snapshot(rel: str, _st: os.stat_result) -> bool:
    return rel != "MEMORY_SNAPSHOT.md"


def _no_brain(plan: ExportPlan) -> Refused:
    where = escape_display(str(plan.workspace))
    return Refused(
        f"--include-memory: there is no {where}/memory/brain.db to carry; export without it",
        path="workspace/memory/brain.db",
    )


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
        raise Refused(
            f"--include-memory carries only SQLite memory, and {escape_display(where)} is "
            f"{escape_display(str(backend))}; export without --include-memory",
            path=where,
        )


def _mkdir_open(parent_fd: int, name: str) -> int:
    os.mkdir(name, _MKDIR_MODE, dir_fd=parent_fd)
    return open_dir_nofollow(parent_fd, name)


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
