"""The supported Python API: what the command line does, for a program to call.

Automation (a fleet's deploy script, a CI job) calls these functions instead of running
``bundler`` and parsing its ``--json``. Each operation takes its inputs, one frozen options
object (modes are enums, never strings) and, where it runs long, a ``progress`` that sees its
phases (:class:`~bundler.rules.progress.Progress`); it returns the report the command prints,
whose ``as_json()`` is the ``--json`` payload, and raises the exceptions of
:mod:`bundler.errors` (each carrying the exit code the command would end with).

A BUNDLE is a folder, an archive file or an ``oci://`` reference: :func:`open_bundle` resolves
it once, and the operations that read a bundle take what it yields (or the name itself, which
they open for the length of the call).

The library modules below do the work; this module only chooses among them and converts its
options into theirs, so that the names here can stay put while the modules move. Nothing is
imported before it is needed: ``import bundler`` costs what ``bundler --help`` costs.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.errors import (
    BundlerError,
    CannotAccess,
    ChangedMeanwhile,
    CredentialsRefused,
    Damaged,
    DestinationExists,
    EnvironmentFailure,
    Hostile,
    Interrupted,
    InvalidConfig,
    InvalidInput,
    JailError,
    Locked,
    Malformed,
    NoAnswer,
    NoSpace,
    NotABundle,
    NotFound,
    PolicyRefused,
    RecoveryNeeded,
    Refused,
    RefusedWithList,
    RegistryRefused,
    RegistryUnreachable,
    SecretFound,
    Tampered,
    TooLarge,
    Undecryptable,
    UnsuitablePath,
    Unsupported,
    UsageError,
    withholding,
)
from bundler.rules.progress import Progress
from bundler.rules.secrets import ScanSecrets

if TYPE_CHECKING:
    from bundler.bundle.archive import ArchiveReport
    from bundler.bundle.archive_listing import ListedMember
    from bundler.bundle.archive_spill import SpilledDigests
    from bundler.bundle.export_report import ExportReport
    from bundler.bundle.inspect import InspectReport
    from bundler.bundle.verify_report import VerifyReport
    from bundler.home.backup import BackupReport
    from bundler.home.restore import RestoreReport
    from bundler.install.bind_secrets import Prompter
    from bundler.install.doctor import DoctorReport
    from bundler.install.import_types import ImportReport
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
    from bundler.registry.transport import Options
    from bundler.rules.actions import RecoveryReport

__all__ = [
    "ArchiveReport",
    "BackupOptions",
    "BackupReport",
    "BundleKind",
    "BundlerError",
    "CachePruneReport",
    "CannotAccess",
    "ChangedMeanwhile",
    "CredentialsRefused",
    "Damaged",
    "DestinationExists",
    "DoctorOptions",
    "DoctorReport",
    "EnvironmentFailure",
    "ExportOptions",
    "ExportReport",
    "Hostile",
    "ImportOptions",
    "ImportReport",
    "InspectReport",
    "Interrupted",
    "InvalidConfig",
    "InvalidInput",
    "JailError",
    "Locked",
    "LoginReport",
    "LogoutReport",
    "Malformed",
    "NoAnswer",
    "NoSpace",
    "NotABundle",
    "NotFound",
    "OpenBundle",
    "PackOptions",
    "PolicyRefused",
    "Progress",
    "Prompter",
    "PullOptions",
    "PullReport",
    "PushOptions",
    "PushReport",
    "RecoverOptions",
    "RecoverWhat",
    "RecoveryNeeded",
    "RecoveryReport",
    "Refused",
    "RefusedWithList",
    "RegistryBackupListing",
    "RegistryBackupOptions",
    "RegistryBackupReport",
    "RegistryOptions",
    "RegistryPruneOptions",
    "RegistryPruneReport",
    "RegistryRefused",
    "RegistryRestoreOptions",
    "RegistryRestoreReport",
    "RegistryUnreachable",
    "RestoreOptions",
    "RestoreReport",
    "ScanSecrets",
    "SecretFound",
    "Tampered",
    "TooLarge",
    "Undecryptable",
    "UndoOptions",
    "UndoReport",
    "UnpackOptions",
    "UnsuitablePath",
    "Unsupported",
    "UsageError",
    "VerifyReport",
    "backup",
    "backup_to_registry",
    "doctor",
    "export_agent",
    "import_bundle",
    "inspect",
    "list_tags",
    "login",
    "logout",
    "open_bundle",
    "pack",
    "plan_import",
    "prune_cache",
    "prune_registry_backups",
    "pull",
    "push",
    "recover",
    "registry_backups",
    "restore",
    "restore_from_registry",
    "undo_import",
    "unpack",
    "verify",
]

# the report types live with the code that makes them, and are imported on first use: naming
# one costs nothing until a program asks for it
_REPORTS = {
    "ArchiveReport": "bundler.bundle.archive",
    "CachePruneReport": "bundler.registry.cache",
    "BackupReport": "bundler.home.backup",
    "DoctorReport": "bundler.install.doctor",
    "ExportReport": "bundler.bundle.export_report",
    "ImportReport": "bundler.install.import_types",
    "InspectReport": "bundler.bundle.inspect",
    "Prompter": "bundler.install.bind_secrets",
    "LoginReport": "bundler.registry.login",
    "LogoutReport": "bundler.registry.login",
    "PullReport": "bundler.registry.pull",
    "PushReport": "bundler.registry.push",
    "RegistryBackupListing": "bundler.registry.backup_oci",
    "RegistryBackupReport": "bundler.registry.backup_oci",
    "RegistryPruneReport": "bundler.registry.backup_oci",
    "RegistryRestoreReport": "bundler.registry.backup_oci",
    "RecoveryReport": "bundler.rules.actions",
    "RestoreReport": "bundler.home.restore",
    "UndoReport": "bundler.install.undo",
    "VerifyReport": "bundler.bundle.verify",
}


def __getattr__(name: str) -> object:
    """A report type, imported from its module when first named."""
    where = _REPORTS.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


REFERENCE_SCHEME = "oci://"
"""How a BUNDLE names a registry artifact (:data:`bundler.registry.reference.SCHEME`; a test
checks the two agree, so that telling a reference apart loads no registry code)."""

LISTED_BY_INSPECT = frozenset({"workspace"})
"""The layers :func:`inspect` of a reference judges as they arrive without keeping them (the
bulk of an agent): every rule and every file's digest, as a pulled folder's verify judges."""


# --- options ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RegistryOptions:
    """How to reach an OCI registry: over plain HTTP (credentials then go to loopback hosts
    only), and which CA file's certificates to trust besides the system's. ``username`` and
    ``password`` are credentials for this call alone; ``authfile`` the one credentials file to
    read; without them credentials are searched where podman, skopeo and docker keep them
    (:mod:`bundler.registry.auth`). ``no_cache``: a pull (``pull``, and ``open_bundle`` of a
    reference, under ``verify``, ``inspect`` and the import) neither reads nor writes the
    layer cache (:mod:`bundler.registry.cache`); every blob is downloaded."""

    plain_http: bool = False
    ca_file: Path | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    authfile: Path | None = None
    no_cache: bool = False

    def _library(self) -> Options:
        from bundler.registry.transport import Options

        return Options(
            plain_http=self.plain_http,
            ca_file=None if self.ca_file is None else os.fspath(self.ca_file),
            username=self.username,
            password=self.password,
            authfile=None if self.authfile is None else os.fspath(self.authfile),
        )


class BundleKind(enum.Enum):
    """What a BUNDLE named: a bundle folder, an archive file, or an ``oci://`` reference."""

    FOLDER = "folder"
    ARCHIVE = "archive"
    REFERENCE = "reference"


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """``agents export``'s options: replace an existing bundle (``force``), carry the memory
    store (a format 2 bundle), what a known secret found in a carried file does, the
    gitignore patterns (given, and read from files) that keep workspace paths behind, and the
    receivers to seal the required secrets to (``seal_to``: age or SSH public keys, or
    ``@FILE`` of them; the bundle then holds ``secrets.age``, 02 §12)."""

    force: bool = False
    include_memory: bool = False
    scan_secrets: ScanSecrets = ScanSecrets.REFUSE
    exclude: tuple[str, ...] = ()
    exclude_from: tuple[Path, ...] = ()
    seal_to: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ImportOptions:
    """``agents import``'s options: the alias to import as, local references to bind entries
    to (entry path → local reference), secrets as ``PATH=VALUE``, a secrets file, consent to
    the bundle's risk flags, and who answers questions (``None``: nobody; a missing secret
    stays unfilled and unconsented risks refuse the import). ``age_identities`` (age identity
    files or unprotected SSH private keys) open a sealed bundle's ``secrets.age``, whose
    values fill the required secrets not given otherwise (03 §3.1)."""

    as_alias: str | None = None
    binds: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    secrets_file: Path | None = None
    age_identities: tuple[Path, ...] = ()
    accept_risks: bool = False
    prompt: Prompter | None = None
    registry: RegistryOptions = RegistryOptions()


@dataclass(frozen=True, kw_only=True)
class UndoOptions:
    """``agents import --undo``'s options: say what would go and stay (``dry_run``). An entry
    edited since the import is always saved beside the receipt before it is removed."""

    dry_run: bool = False


@dataclass(frozen=True, kw_only=True)
class PushOptions:
    """``bundle push``'s options: move a tag that names another artifact (``force``)."""

    force: bool = False
    registry: RegistryOptions = RegistryOptions()


@dataclass(frozen=True, kw_only=True)
class PullOptions:
    """``bundle pull``'s options: replace an existing bundle or archive (``force``)."""

    force: bool = False
    registry: RegistryOptions = RegistryOptions()


@dataclass(frozen=True, kw_only=True)
class PackOptions:
    """``bundle pack``'s options: replace an existing archive (``force``)."""

    force: bool = False


@dataclass(frozen=True, kw_only=True)
class UnpackOptions:
    """``bundle unpack``'s options: replace an existing bundle folder (``force``)."""

    force: bool = False


@dataclass(frozen=True, kw_only=True)
class BackupOptions:
    """``home backup``'s options: the zip to create (default: a new one in the home's
    ``backups/``); the earlier backup whose unchanged entries are copied (``base``, default the
    newest in the target folder), or none (``full``); the deflate level of new entries
    (``compression``: ``fast``, ``default``, ``best`` or ``none``). ``encrypt_to`` (age or SSH
    public keys, or ``@FILE`` of them) writes ``NAME.zip.age`` instead, the zip encrypted to
    them; ``age_identities`` (age identity files or unprotected SSH private keys) then open an
    encrypted base, which is otherwise not used (04 §5.6)."""

    to: Path | None = None
    base: Path | None = None
    full: bool = False
    compression: str = "default"
    encrypt_to: tuple[str, ...] = ()
    age_identities: tuple[Path, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RestoreOptions:
    """``home restore``'s options: the home to restore into (default: the project's),
    whether to restore over a database that looks in use (``force``), and the identities that
    open an encrypted backup (``age_identities``: age identity files or unprotected SSH private
    keys; 04 §5.6)."""

    home: Path | None = None
    force: bool = False
    age_identities: tuple[Path, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RegistryBackupOptions:
    """``home backup --to oci://…``'s options: the deflate level of the backup's entries
    (``compression``: ``fast``, ``default``, ``best`` or ``none``), and how to reach the
    registry. No base: the registry keeps each unchanged part once."""

    compression: str = "default"
    registry: RegistryOptions = RegistryOptions()


@dataclass(frozen=True, kw_only=True)
class RegistryRestoreOptions:
    """``home restore oci://…``'s options: those of :class:`RestoreOptions`, and how to reach
    the registry."""

    home: Path | None = None
    force: bool = False
    registry: RegistryOptions = RegistryOptions()


@dataclass(frozen=True, kw_only=True)
class RegistryPruneOptions:
    """``home prune --to oci://…``'s options: how many backups, or days, ISO weeks and months
    with one, to keep (restic's ``forget`` rules, 04 §5.4; at least one), whether to only say
    what would go (``dry_run``), and how to reach the registry."""

    keep_last: int = 0
    keep_daily: int = 0
    keep_weekly: int = 0
    keep_monthly: int = 0
    dry_run: bool = False
    registry: RegistryOptions = RegistryOptions()


class RecoverWhat(enum.Enum):
    """What :func:`recover` tidies: an export destination, an install, or a data home."""

    DESTINATION = "destination"
    INSTALL = "install"
    HOME = "home"


@dataclass(frozen=True, kw_only=True)
class RecoverOptions:
    """``recover``'s options: say what would be done, changing nothing (``dry_run``)."""

    dry_run: bool = False


@dataclass(frozen=True, kw_only=True)
class DoctorOptions:
    """``doctor``'s options: the install (default: where ``bundler`` finds one), and an export
    destination and a project (its data home) to check as well."""

    install: Path | None = None
    destination: Path | None = None
    project: Path | None = None


# --- the bundle source -----------------------------------------------------------------------


@dataclass(frozen=True)
class OpenBundle:
    """A BUNDLE resolved to a folder to read, for the length of :func:`open_bundle`'s block.

    ``source`` is the name as given; ``folder`` the bundle folder (the folder itself, or a
    private copy of an archive or of a registry artifact, removed when the block ends);
    ``reference`` the registry reference pinned to the digest read (``None`` for a local
    bundle). ``scrub`` withholds the credentials a registry was sent: what a registry serves is
    its text, so whatever a caller shows of the copy goes through it.
    """

    source: str
    kind: BundleKind
    folder: Path
    reference: str | None = None
    scrub: Callable[[str], str] = str
    listed: list[ListedMember] = field(default_factory=list)
    """Members of the layers judged as they arrived and not written (a reference only)."""
    digests: SpilledDigests | None = None
    """The digests the pull recorded of its files, those layers' included (a reference only)."""

    @property
    def shown(self) -> str:
        """The bundle as reports name it: the pinned reference, or the path as given."""
        return self.reference if self.reference is not None else self.source

    @property
    def digest(self) -> str | None:
        """The artifact's digest (``sha256:…``) for a reference, else ``None``."""
        if self.reference is None:
            return None
        return self.reference.rsplit("@", 1)[1]


def _kind(source: str) -> BundleKind:
    if source.startswith(REFERENCE_SCHEME):
        return BundleKind.REFERENCE
    from bundler.bundle.archive_kind import is_archive

    return BundleKind.ARCHIVE if is_archive(Path(source)) else BundleKind.FOLDER


@contextlib.contextmanager
def open_bundle(
    source: str | os.PathLike[str],
    *,
    registry: RegistryOptions = RegistryOptions(),
    progress: Progress | None = None,
    list_only: frozenset[str] = frozenset(),
) -> Iterator[OpenBundle]:
    """Resolve BUNDLE ``source`` once: a bundle folder is read where it is, an archive is
    unpacked into a private scratch folder, an ``oci://`` reference is pulled into one (the
    layers ``list_only`` names are judged as they arrive and not written: their members and
    digests are in the answer's ``listed`` and ``digests``); a scratch copy is removed when the
    block ends, however it ends, and a killed run's by the next run, ``recover`` and ``doctor``.

    ``registry`` applies to a reference only.
    Nothing is verified here: :func:`verify` (or the operation the bundle is for) does that.
    """
    given = os.fspath(source)
    kind = _kind(given)
    if kind is BundleKind.FOLDER:
        yield OpenBundle(given, kind, Path(given))
        return
    if kind is BundleKind.ARCHIVE:
        from bundler.bundle.archive import unpacked

        with unpacked(Path(given)) as folder:
            yield OpenBundle(given, kind, folder)
        return
    from bundler.bundle.archive_spill import SpilledDigests
    from bundler.registry.pull import pulled
    from bundler.registry.reference import parse_reference

    ref = parse_reference(given)
    listed: list[ListedMember] = []
    library = registry._library()
    with (
        SpilledDigests() as digests,
        pulled(
            ref,
            library,
            progress=progress,
            list_only=list_only,
            listed=listed,
            digests=digests,
            cache=not registry.no_cache,
        ) as copy,
    ):
        folder, digest, scrub = copy
        pinned = str(ref.with_digest(digest))
        yield OpenBundle(given, kind, folder, pinned, scrub, listed, digests)


@contextlib.contextmanager
def _opened(
    bundle: OpenBundle | str | os.PathLike[str],
    registry: RegistryOptions,
    progress: Progress | None,
    list_only: frozenset[str] = frozenset(),
) -> Iterator[OpenBundle]:
    """``bundle`` as it is when already open, else opened for the block (and errors made in it
    withhold what the registry was sent)."""
    if isinstance(bundle, OpenBundle):
        with withholding(bundle.scrub):
            yield bundle
        return
    with (
        open_bundle(bundle, registry=registry, progress=progress, list_only=list_only) as opened,
        withholding(opened.scrub),
    ):
        yield opened


def _name(report: VerifyReport, bundle: OpenBundle) -> None:
    """Make ``report`` name the bundle as given, not its scratch copy: an archive by its
    absolute path, a registry artifact by its reference pinned to the digest read."""
    if bundle.kind is BundleKind.ARCHIVE:
        report.path = Path(os.path.abspath(bundle.source))
    elif bundle.kind is BundleKind.REFERENCE:
        report.reference = bundle.reference


# --- the operations --------------------------------------------------------------------------


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
        scan_secrets=options.scan_secrets.value,
        exclude=options.exclude,
        exclude_from=options.exclude_from,
        seal_to=options.seal_to,
        progress=progress,
        archive=os.fspath(out).endswith(ARCHIVE_SUFFIXES),
    )


def verify(
    bundle: OpenBundle | str | os.PathLike[str],
    *,
    registry: RegistryOptions = RegistryOptions(),
    progress: Progress | None = None,
) -> VerifyReport:
    """Check a bundle completely (03 §1), changing nothing. Every fault found in the bundle is
    an error of the report (``ok`` is then false); a bundle that cannot be read at all raises."""
    from bundler.bundle.verify import verify_bundle

    with _opened(bundle, registry, progress) as opened:
        report = verify_bundle(opened.folder, progress=progress)
        _name(report, opened)
        return report


def inspect(
    bundle: OpenBundle | str | os.PathLike[str],
    *,
    registry: RegistryOptions = RegistryOptions(),
    progress: Progress | None = None,
) -> InspectReport:
    """Verify a bundle and describe what it holds and grants (03 §2). A reference given by
    name has its workspace judged as it arrives, never written: the same rules and digests as
    a pulled folder's verify, without a copy of the bulk of an agent."""
    from bundler.bundle.inspect import inspect_bundle

    list_only = LISTED_BY_INSPECT if not isinstance(bundle, OpenBundle) else frozenset()
    with _opened(bundle, registry, progress, list_only) as opened:
        report = inspect_bundle(
            opened.folder, progress=progress, known_digests=opened.digests, listed=opened.listed
        )
        _name(report.verify, opened)
        return report


def _import(
    install: Path,
    bundle: OpenBundle | str | os.PathLike[str],
    options: ImportOptions,
    progress: Progress | None,
    *,
    dry_run: bool,
) -> ImportReport:
    from bundler.install import importer
    from bundler.install.import_types import ImportOptions

    chosen = ImportOptions(
        as_alias=options.as_alias,
        binds=dict(options.binds),
        secrets=options.secrets,
        secrets_file=options.secrets_file,
        age_identities=options.age_identities,
        accept_risks=options.accept_risks,
        dry_run=dry_run,
        prompt=options.prompt,
        progress=progress,
    )
    if not isinstance(bundle, OpenBundle) and _kind(os.fspath(bundle)) is BundleKind.ARCHIVE:
        from bundler.install.from_archive import import_archive

        # unpacked inside the install, where its recovery finds what a kill leaves
        return import_archive(install, Path(os.fspath(bundle)), chosen)
    with _opened(bundle, options.registry, progress) as opened:
        source: Path | str | None = opened.reference
        if opened.kind is BundleKind.ARCHIVE:
            source = Path(os.path.abspath(opened.source))
        return importer.import_bundle(install, opened.folder, replace(chosen, source=source))


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
    with _opened(bundle, options.registry, progress) as opened:
        return push_bundle(
            opened.folder,
            ref,
            options.registry._library(),
            force=options.force,
            progress=progress,
            named=opened.shown,
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
    )


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
    again, tagged by the backup's time (04 §5.5). The report pins the digest to restore."""
    from bundler.registry.backup_oci import backup_to_registry as push_backup
    from bundler.registry.reference import parse_reference

    return push_backup(
        project,
        parse_reference(reference),
        options.registry._library(),
        compression=options.compression,
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
    a backup zip and restored as :func:`restore` restores one."""
    from bundler.registry.backup_oci import restore_from_registry as pull_restore
    from bundler.registry.reference import parse_reference

    return pull_restore(
        project,
        parse_reference(reference),
        options.registry._library(),
        home=options.home,
        force=options.force,
        progress=progress,
    )


def recover(
    path: Path, what: RecoverWhat, options: RecoverOptions = RecoverOptions()
) -> RecoveryReport:
    """Finish or roll back what an interrupted run left at ``path`` (02 §8.5, 03 §3, 04 §5.3):
    an export destination, an install, or a data home, as ``what`` says."""
    from bundler.rules.actions import RecoveryReport

    if what is RecoverWhat.DESTINATION:
        from bundler.bundle.recover import recover_destination

        return RecoveryReport(recover_destination(path, dry_run=options.dry_run))
    if what is RecoverWhat.INSTALL:
        from bundler.install.recovery import recover_install

        return RecoveryReport(recover_install(path, dry_run=options.dry_run))
    from bundler.home.restore import recover_home

    return RecoveryReport(recover_home(path, dry_run=options.dry_run))


def doctor(options: DoctorOptions = DoctorOptions()) -> DoctorReport:
    """Check the install (and a destination and a project, if given) without changing
    anything; any ``problems`` make ``bundler doctor`` exit 3."""
    from bundler.install.doctor import diagnose

    install = None if options.install is None else os.fspath(options.install)
    return diagnose(install, options.destination, options.project)
