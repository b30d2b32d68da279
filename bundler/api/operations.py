"""The API's operations but the read-only ones of :mod:`bundler.api.reading`: export,
import and undo, registry, archive, backup and recovery operations, and the helpers a
command line shares with programs (the install root, the terminal prompts).

Part of :mod:`bundler.api`: import the names from there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.api.options import (
    BackupOptions,
    DoctorOptions,
    ExportOptions,
    ImportOptions,
    ListBackupsOptions,
    PackOptions,
    PruneOptions,
    PullOptions,
    PushOptions,
    RecoverOptions,
    RecoverWhat,
    RegistryBackupOptions,
    RegistryPruneOptions,
    RegistryRestoreOptions,
    RestoreOptions,
    SecretsTemplateOptions,
    UndoOptions,
    UnpackOptions,
    VerifyBackupOptions,
)
from bundler.api.source import (
    BundleKind,
    OpenBundle,
    RegistryOptions,
    bundle_kind,
    name_as_given,
    opened,
)
from bundler.errors import NotFound, UsageError
from bundler.rules.progress import Progress

if TYPE_CHECKING:
    from bundler.bundle.archive import ArchiveReport
    from bundler.bundle.export_report import ExportReport
    from bundler.home.backup import BackupReport
    from bundler.home.keep import Listing as BackupListing
    from bundler.home.keep import PruneReport
    from bundler.home.restore import RestoreReport
    from bundler.home.show import HomeInit, HomeReport
    from bundler.home.skills import SavedSkill, SkillInfo
    from bundler.home.verify import VerifyReport as BackupCheck
    from bundler.install.bind_secrets import Prompter
    from bundler.install.doctor import DoctorReport
    from bundler.install.import_types import ImportReport
    from bundler.install.receipts import ReceiptInfo
    from bundler.install.secrets_template import SecretsTemplate
    from bundler.install.undo import UndoReport
    from bundler.registry.backup_oci import (
        RegistryBackupListing,
        RegistryBackupReport,
        RegistryPruneReport,
        RegistryRestoreReport,
    )
    from bundler.registry.cache import CachePruneReport
    from bundler.registry.login import LoginReport, LogoutReport
    from bundler.registry.pull import PullReport
    from bundler.registry.push import PushReport
    from bundler.rules.actions import RecoveryReport


def export_agent(
    install: Path,
    alias: str,
    out: Path,
    options: ExportOptions = ExportOptions(),
    *,
    progress: Progress | None = None,
) -> ExportReport:
    """Export agent ``alias`` of the install at ``install`` to ``out``: a bundle folder, or an
    archive for a name ending ``.tar`` (02 §8, §11). Nothing is published on failure."""
    from bundler.bundle import export
    from bundler.bundle.archive import ARCHIVE_SUFFIXES

    return export.export_agent(
        install,
        alias,
        out,
        force=options.force,
        include_memory=options.include_memory,
        scan_secrets=options.scan_secrets,
        exclude=options.exclude,
        exclude_from=options.exclude_from,
        seal_to=options.seal_to,
        progress=progress,
        archive=os.fspath(out).endswith(ARCHIVE_SUFFIXES),
    )


def _import(
    install: Path,
    bundle: OpenBundle | str | os.PathLike[str],
    options: ImportOptions,
    progress: Progress | None,
    *,
    dry_run: bool,
) -> ImportReport:
    from bundler.install import importer
    from bundler.install.import_types import ImportOptions as LibraryImportOptions

    chosen = LibraryImportOptions(
        as_alias=options.as_alias,
        binds=dict(options.binds),
        secrets=options.secrets,
        secrets_file=options.secrets_file,
        age_identities=options.age_identities,
        age_passphrase=options.age_passphrase,
        accept_risks=options.accept_risks,
        dry_run=dry_run,
        prompt=options.prompt,
        progress=progress,
    )
    if not isinstance(bundle, OpenBundle) and bundle_kind(os.fspath(bundle)) is BundleKind.ARCHIVE:
        bundle = OpenBundle(os.fspath(bundle), BundleKind.ARCHIVE, Path(bundle), unpacked=False)
    if isinstance(bundle, OpenBundle) and not bundle.unpacked:
        from bundler.install.from_archive import import_archive

        # unpacked inside the install, where its files are moved into place, not copied, and
        # its recovery finds what a kill leaves
        return import_archive(install, Path(bundle.source), chosen)
    with opened(bundle, options.registry, progress) as read:
        source: Path | str | None = read.reference
        if read.kind is BundleKind.ARCHIVE:
            source = Path(os.path.abspath(read.source))
        report = importer.import_bundle(install, read.folder, replace(chosen, source=source))
        warning = read.tag_warning()
        if warning is not None:
            report.warnings.insert(0, warning)
        return report


def plan_import(
    install: Path,
    bundle: OpenBundle | str | os.PathLike[str],
    options: ImportOptions = ImportOptions(),
    *,
    progress: Progress | None = None,
) -> ImportReport:
    """What importing ``bundle`` into the install would do (``agents import --dry-run``):
    verified and planned in full, nothing changed or created."""
    return _import(install, bundle, options, progress, dry_run=True)


def import_bundle(
    install: Path,
    bundle: OpenBundle | str | os.PathLike[str],
    options: ImportOptions = ImportOptions(),
    *,
    progress: Progress | None = None,
) -> ImportReport:
    """Import ``bundle`` into the install, transactionally (03 §3): on any failure the install
    is as it was. The report's ``receipt`` is what :func:`undo_import` takes."""
    return _import(install, bundle, options, progress, dry_run=False)


def undo_import(
    install: Path, receipt: Path | str, options: UndoOptions = UndoOptions()
) -> UndoReport:
    """Remove what the import recorded in ``receipt`` added (03 §4); ``"last"`` names the newest
    import not yet undone. Never a byte written since: the report lists the files kept."""
    from bundler.install import undo
    from bundler.install.receipts import resolve_receipt

    path = resolve_receipt(install, receipt) if receipt == "last" else Path(receipt)
    return undo.undo_import(install, path, dry_run=options.dry_run)


def push(
    bundle: OpenBundle | str | os.PathLike[str],
    reference: str,
    options: PushOptions = PushOptions(),
    *,
    progress: Progress | None = None,
) -> PushReport:
    """Verify ``bundle`` and push it to the ``oci://`` tag ``reference``; the report names the
    digest the tag now names (pin to it: a tag can move)."""
    from bundler.registry.push import push_bundle
    from bundler.registry.reference import parse_reference

    ref = parse_reference(reference)
    with opened(bundle, options.registry, progress) as read:
        return push_bundle(
            read.folder,
            ref,
            options.registry._library(),
            force=options.force,
            progress=progress,
            named=read.shown,
        )


def pull(
    reference: str,
    dest: Path,
    options: PullOptions = PullOptions(),
    *,
    progress: Progress | None = None,
) -> PullReport:
    """Pull the ``oci://`` ``reference`` into the bundle folder ``dest`` (or, for a name ending
    ``.tar``, a bundle archive), verified before it is published atomically. Pulling by tag
    adds a warning naming the digest to pin to."""
    from bundler.bundle.archive import ARCHIVE_SUFFIXES
    from bundler.registry.pull import pull_bundle
    from bundler.registry.pull_archive import pull_archive
    from bundler.registry.reference import parse_reference

    ref = parse_reference(reference)
    puller = pull_archive if os.fspath(dest).endswith(ARCHIVE_SUFFIXES) else pull_bundle
    report = puller(
        ref,
        dest,
        options.registry._library(),
        force=options.force,
        progress=progress,
        cache=not options.registry.no_cache,
    )
    warning = ref.unpinned_warning(report.digest)
    if warning is not None:
        report.warnings.insert(0, warning)
    return report


def prune_cache(max_bytes: int | None = None, *, dry_run: bool = False) -> CachePruneReport:
    """Remove the least recently used blobs of the layer cache (``bundle cache --prune``)
    until it holds at most ``max_bytes`` (default: ``$BUNDLER_CACHE_MAX_SIZE``, else 2 GiB);
    a partial download another pull is writing is left. The report lists what was removed
    (with ``dry_run``, what would be: ``bundle cache``) and what is kept."""
    from bundler.registry.cache import prune

    return prune(os.environ, max_bytes, dry_run=dry_run)


def list_tags(reference: str, registry: RegistryOptions = RegistryOptions()) -> list[str]:
    """The tags of the repository ``oci://HOST[:PORT]/REPO`` names, sorted (every page of the
    registry's list, bounded); :class:`Refused` when the repository does not exist."""
    from bundler.errors import withholding
    from bundler.registry.distribution import Session
    from bundler.registry.reference import parse_reference

    ref = parse_reference(reference)
    if ref.tag is not None or ref.digest is not None:
        raise UsageError(f"{reference}: name a repository, without a tag or digest")
    with Session(ref, registry._library()) as session, withholding(session.auth.scrub):
        found = session.list_tags()
        if found is None:
            raise NotFound(
                f"registry {session.shown} has no repository {ref.repository}; check its name"
            )
        return sorted(found)


def login(
    host: str, username: str, password: str, registry: RegistryOptions = RegistryOptions()
) -> LoginReport:
    """Check ``username`` and ``password`` against the registry ``host`` and store them where
    the next push or pull reads them first (``registry.authfile``, else
    ``$REGISTRY_AUTH_FILE``, else the first credentials file that exists, else containers'
    ``auth.json``), through its credential store when it names one."""
    from bundler.registry.auth import Credentials
    from bundler.registry.login import login as store_login

    return store_login(host, Credentials(username, password), registry._library())


def logout(host: str, registry: RegistryOptions = RegistryOptions()) -> LogoutReport:
    """Remove ``host`` from every credentials file (and credential store) that holds it."""
    from bundler.registry.login import logout as remove_login

    authfile = None if registry.authfile is None else os.fspath(registry.authfile)
    return remove_login(host, authfile=authfile)


def pack(
    folder: Path,
    out: Path,
    options: PackOptions = PackOptions(),
    *,
    progress: Progress | None = None,
) -> ArchiveReport:
    """Verify the bundle folder ``folder`` and publish it as one deterministic tar at ``out``."""
    from bundler.bundle.archive import pack_bundle

    return pack_bundle(folder, out, force=options.force, progress=progress)


def unpack(
    archive: Path,
    out: Path,
    options: UnpackOptions = UnpackOptions(),
    *,
    progress: Progress | None = None,
) -> ArchiveReport:
    """Unpack the bundle archive ``archive``, verify it, and publish it as the folder ``out``."""
    from bundler.bundle.archive import unpack_archive

    return unpack_archive(archive, out, force=options.force, progress=progress)


def backup(
    project: Path, options: BackupOptions = BackupOptions(), *, progress: Progress | None = None
) -> BackupReport:
    """Back up the data home of ``project`` to one verified zip (04 §5.1)."""
    from bundler.home.backup import backup_home

    return backup_home(
        project,
        to=options.to,
        progress=progress,
        base=options.base,
        full=options.full,
        compression=options.compression,
        encrypt_to=options.encrypt_to,
        age_identities=options.age_identities,
        age_passphrase=options.age_passphrase,
    )


def verify_backup(
    backup_zip: Path,
    options: VerifyBackupOptions = VerifyBackupOptions(),
    *,
    progress: Progress | None = None,
) -> BackupCheck:
    """Check a backup zip completely, changing nothing (04 §5.2): every entry allowed, every
    digest matching ``backup.json``, the database passing its integrity check; an encrypted
    one (``NAME.zip.age``) decrypted with ``options.age_identities`` first (04 §5.6). A fault
    raises :class:`InvalidInput` naming the entry."""
    from bundler.home.verify import verify_backup as check

    return check(
        backup_zip,
        progress=progress,
        age_identities=options.age_identities,
        age_passphrase=options.age_passphrase,
    )


def list_backups(
    project: Path, options: ListBackupsOptions = ListBackupsOptions()
) -> BackupListing:
    """The backups of the data home of ``project`` (or of ``options.to``), oldest first, each
    with its time, size and files, and whether it passed a full check when asked for one."""
    from bundler.home import keep

    return keep.list_backups(
        keep.backups_folder(project, options.to),
        verify=options.verify,
        age_identities=options.age_identities,
        age_passphrase=options.age_passphrase,
    )


def prune_backups(project: Path, options: PruneOptions) -> PruneReport:
    """Remove the backups of the data home of ``project`` (or of ``options.to``) that the
    retention policy of ``options`` does not keep; the report says which rule kept each."""
    from bundler.home import keep
    from bundler.rules.retention import Policy

    policy = Policy(
        options.keep_last, options.keep_daily, options.keep_weekly, options.keep_monthly
    )
    folder = keep.backups_folder(project, options.to)
    return keep.prune_backups(folder, policy, dry_run=options.dry_run)


def restore(
    project: Path,
    backup_zip: Path,
    options: RestoreOptions = RestoreOptions(),
    *,
    progress: Progress | None = None,
) -> RestoreReport:
    """Restore ``backup_zip`` into the data home of ``project`` (04 §5.3); every check runs
    before anything changes, and what was there is kept as ``*.before-restore``."""
    from bundler.home.restore import restore_home

    return restore_home(
        project,
        backup_zip,
        home=options.home,
        force=options.force,
        progress=progress,
        age_identities=options.age_identities,
        age_passphrase=options.age_passphrase,
    )


def backup_to_registry(
    project: Path,
    reference: str,
    options: RegistryBackupOptions = RegistryBackupOptions(),
    *,
    progress: Progress | None = None,
) -> RegistryBackupReport:
    """Back up the data home of ``project`` to the repository ``oci://HOST/REPO``
    (``reference``, without a tag): one layer per part, a part the repository holds not sent
    again, tagged by the backup's time (04 §5.5); with ``options.encrypt_to``, the encrypted
    ``NAME.zip.age`` as one layer (04 §5.6). The report pins the digest to restore."""
    from bundler.registry.backup_oci import backup_to_registry as push_backup
    from bundler.registry.reference import parse_reference

    return push_backup(
        project,
        parse_reference(reference),
        options.registry._library(),
        compression=options.compression,
        encrypt_to=options.encrypt_to,
        progress=progress,
    )


def registry_backups(
    reference: str, registry: RegistryOptions = RegistryOptions()
) -> RegistryBackupListing:
    """The backups in the repository ``oci://HOST/REPO``, oldest first, with the time, bytes
    and files their manifests carry (04 §5.5)."""
    from bundler.registry.backup_oci import list_registry_backups
    from bundler.registry.reference import parse_reference

    return list_registry_backups(parse_reference(reference), registry._library())


def prune_registry_backups(
    reference: str, options: RegistryPruneOptions = RegistryPruneOptions()
) -> RegistryPruneReport:
    """Delete the backups of the repository ``oci://HOST/REPO`` the retention rules do not
    keep (04 §5.4, §5.5); never the newest, never a manifest a kept tag names."""
    from bundler.registry.backup_oci import prune_registry_backups as prune
    from bundler.registry.reference import parse_reference
    from bundler.rules.retention import Policy

    for name in ("keep_last", "keep_daily", "keep_weekly", "keep_monthly"):
        if getattr(options, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be 0 or more")
    policy = Policy(
        options.keep_last, options.keep_daily, options.keep_weekly, options.keep_monthly
    )
    return prune(
        parse_reference(reference), options.registry._library(), policy, dry_run=options.dry_run
    )


def restore_from_registry(
    project: Path,
    reference: str,
    options: RegistryRestoreOptions = RegistryRestoreOptions(),
    *,
    progress: Progress | None = None,
) -> RegistryRestoreReport:
    """Restore the backup ``oci://HOST/REPO@sha256:…`` (or ``:TAG``) into the data home of
    ``project`` (04 §5.5): pulled into a private folder, every digest checked, put together as
    a backup zip and restored as :func:`restore` restores one; an encrypted one opened with
    ``options.age_identities`` and decrypted only into the restore's staging (04 §5.6)."""
    from bundler.registry.backup_oci import restore_from_registry as pull_restore
    from bundler.registry.reference import parse_reference

    return pull_restore(
        project,
        parse_reference(reference),
        options.registry._library(),
        home=options.home,
        force=options.force,
        age_identities=options.age_identities,
        age_passphrase=options.age_passphrase,
        progress=progress,
    )


def recover(
    path: Path, what: RecoverWhat, options: RecoverOptions = RecoverOptions()
) -> RecoveryReport:
    """Finish or roll back what an interrupted run left at ``path`` (02 §8.5, 03 §3, 04 §5.3):
    an export destination, an install, or a data home, as ``what`` says."""
    from bundler.rules.actions import RecoveryReport

    if what is RecoverWhat.LEFTOVERS:
        from bundler.bundle.leftovers import explain_leftovers, temporary_leftovers
        from bundler.rules.actions import Action

        # what a killed archive export or pull left lies in the temporary folder, not in the
        # folder, and names no destination: listed whatever the folder is
        found = explain_leftovers(path) + temporary_leftovers()
        return RecoveryReport(
            [
                Action(line, action="found", path=where, done=False, fix=fix)
                for where, line, fix in found
            ]
        )
    if what is RecoverWhat.DESTINATION:
        from bundler.bundle.recover import recover_destination

        return RecoveryReport(recover_destination(path, dry_run=options.dry_run))
    if what is RecoverWhat.INSTALL:
        from bundler.install.recovery import recover_install

        return RecoveryReport(recover_install(path, dry_run=options.dry_run))
    from bundler.home.restore_journal import recover_home

    return RecoveryReport(recover_home(path, dry_run=options.dry_run))


def doctor(options: DoctorOptions = DoctorOptions()) -> DoctorReport:
    """Check the install (and a destination and a project, if given) without changing
    anything; any ``problems`` make ``bundler doctor`` exit 3."""
    from bundler.install.doctor import diagnose

    install = None if options.install is None else os.fspath(options.install)
    return diagnose(install, options.destination, options.project)


def secrets_template(
    bundle: OpenBundle | str | os.PathLike[str],
    options: SecretsTemplateOptions = SecretsTemplateOptions(),
    *,
    progress: Progress | None = None,
) -> SecretsTemplate:
    """Verify ``bundle`` and make the ``--secrets-file`` skeleton of its required secrets (03
    §3.1): one empty value per path, under where it will be sent; written to a new 0600 file
    when ``options.out`` names one. A bundle that fails verification gives a report whose
    ``ok`` is false and whose ``verify`` says why."""
    from bundler.bundle.verify import verify_bundle
    from bundler.install.secrets_template import make_template

    with opened(bundle, options.registry, progress) as read:
        report = verify_bundle(read.folder, progress=progress)
        name_as_given(report, read)
        local = read.kind is not BundleKind.REFERENCE
        return make_template(
            report,
            bundle=read.source if local else read.shown,
            source=os.path.abspath(read.source) if local else read.shown,
            out=None if options.out is None else os.fspath(options.out),
            force=options.force,
            install=None if options.install is None else os.fspath(options.install),
        )


def find_install(given: str | os.PathLike[str] | None = None) -> Path:
    """The install root (01 §1): ``given``, else ``$ZEROCLAW_CONFIG_DIR``, else
    ``~/.zeroclaw``. Nothing is created or checked but that it is no bundle folder."""
    from bundler.config.file import find_install_root

    return find_install_root(None if given is None else os.fspath(given))


def list_imports(install: Path) -> list[ReceiptInfo]:
    """The install's import receipts, newest first, each with its agent, bundle, date and state
    (what :func:`undo_import` takes is each one's ``path``). Reads only."""
    from bundler.install.receipts import list_receipts

    return list_receipts(install)


def terminal_prompter() -> Prompter | None:
    """A :class:`Prompter` on the controlling terminal (secrets asked without echo, consent
    asked on the terminal itself), or ``None`` when standard input is no terminal."""
    from bundler.install.bind_secrets import default_prompter

    return default_prompter()


def terminal_passphrase() -> Callable[[str], str] | None:
    """An :attr:`ImportOptions.age_passphrase` asking on the terminal without echo, or
    ``None`` when standard input is no terminal (a protected key is then refused)."""
    from bundler.install.bind_secrets import passphrase_prompter

    return passphrase_prompter()


def init_home(project: Path) -> HomeInit:
    """Create the data home of ``project`` (the folder holding Agent.yaml) as the agent's first
    start does (04 §1.2); the report lists each step taken."""
    from bundler.home.show import init_project_home

    return init_project_home(project)


def show_home(project: Path) -> HomeReport:
    """The data home of ``project``: where and why, writable or not, its database, sizes,
    volumes and the copy a restore kept (04 §4). Creates nothing."""
    from bundler.home.show import show_home as show

    return show(project)


def list_volumes(project: Path) -> list[dict[str, str]]:
    """The agent's volumes as the runtime's ``GET /volumes`` lists them: name, mode and
    description, never a path."""
    from bundler.home.show import allowed_directories

    return allowed_directories(project)


def list_skills(project: Path) -> list[SkillInfo]:
    """The skills the agent of ``project`` sees (the runtime's ``GET /skills``), with each
    agent skill another of the same name shadows marked ``shadowed``."""
    from bundler.home.show import project_skills

    return project_skills(project)


def save_skill(
    project: Path, name: str, description: str, file: Path | str, *, force: bool = False
) -> SavedSkill:
    """Save the text of ``file`` as the agent skill ``name`` of ``project``, with every limit
    of 04 §3; an agent skill of that name is replaced only with ``force``."""
    from bundler.home.show import save_skill_file

    return save_skill_file(project, name, description, os.fspath(file), force=force)
