"""The options of the API's operations: one frozen object per operation, modes as enums.

Part of :mod:`bundler.api`, which re-exports every public name here; import them from there.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.api.source import RegistryOptions
from bundler.rules.secrets import ScanSecrets

if TYPE_CHECKING:
    from bundler.install.bind_secrets import Prompter


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
    age_passphrase: Callable[[str], str] | None = None
    """Asks for the passphrase of a protected SSH key among ``age_identities`` (given the
    key as shown); ``None``: such a key is refused, never read blind."""
    accept_risks: bool = False
    prompt: Prompter | None = None
    registry: RegistryOptions = RegistryOptions()


@dataclass(frozen=True, kw_only=True)
class SecretsTemplateOptions:
    """``bundle secrets-template``'s options: the file to create (mode 0600; default: none,
    the template is only returned), whether to replace an existing secrets file there
    (``force``; never any other file), the install the template's import command names
    (default: none named), and how to reach a registry for a reference."""

    out: Path | str | None = None
    force: bool = False
    install: Path | str | None = None
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
    age_passphrase: Callable[[str], str] | None = None
    """Asks for the passphrase of a protected SSH key among ``age_identities`` (given the
    key as shown); ``None``: such a key is refused, never read blind."""


@dataclass(frozen=True, kw_only=True)
class VerifyBackupOptions:
    """``home verify-backup``'s options: the identities that open an encrypted backup
    (``age_identities``: age identity files or unprotected SSH private keys; 04 §5.6)."""

    age_identities: tuple[Path, ...] = ()
    age_passphrase: Callable[[str], str] | None = None
    """Asks for the passphrase of a protected SSH key among ``age_identities``; ``None``:
    such a key is refused, never read blind."""


@dataclass(frozen=True, kw_only=True)
class ListBackupsOptions:
    """``home backups``' options: the folder of backups (default: the home's ``backups/``), and
    whether to check each one fully, as :func:`verify_backup` does (``verify``; an encrypted
    one only when ``age_identities`` open it, 04 §5.6)."""

    to: Path | None = None
    verify: bool = False
    age_identities: tuple[Path, ...] = ()
    age_passphrase: Callable[[str], str] | None = None
    """Asks for the passphrase of a protected SSH key among ``age_identities``; ``None``:
    such a key is refused, never read blind."""


@dataclass(frozen=True, kw_only=True)
class PruneOptions:
    """``home prune``'s options: the folder of backups (default: the home's ``backups/``); how
    many of the newest backups (``keep_last``) and of the latest days, ISO weeks and months
    (the newest backup of each) to keep, by restic's ``forget`` rules; with ``dry_run`` only
    say what would go. A policy keeping nothing is refused."""

    to: Path | None = None
    keep_last: int = 0
    keep_daily: int = 0
    keep_weekly: int = 0
    keep_monthly: int = 0
    dry_run: bool = False


@dataclass(frozen=True, kw_only=True)
class RestoreOptions:
    """``home restore``'s options: the home to restore into (default: the project's),
    whether to restore over a database that looks in use (``force``), and the identities that
    open an encrypted backup (``age_identities``: age identity files or unprotected SSH private
    keys; 04 §5.6)."""

    home: Path | None = None
    force: bool = False
    age_identities: tuple[Path, ...] = ()
    age_passphrase: Callable[[str], str] | None = None
    """Asks for the passphrase of a protected SSH key among ``age_identities``; ``None``:
    such a key is refused, never read blind."""


@dataclass(frozen=True, kw_only=True)
class RegistryBackupOptions:
    """``home backup --to oci://…``'s options: the deflate level of the backup's entries
    (``compression``: ``fast``, ``default``, ``best`` or ``none``), and how to reach the
    registry. No base: the registry keeps each unchanged part once. ``encrypt_to`` (age or SSH
    public keys, or ``@FILE`` of them) pushes the ``NAME.zip.age`` of :class:`BackupOptions`'
    ``encrypt_to`` instead, whole, as one layer (04 §5.5, §5.6)."""

    compression: str = "default"
    encrypt_to: tuple[str, ...] = ()
    registry: RegistryOptions = RegistryOptions()


@dataclass(frozen=True, kw_only=True)
class RegistryRestoreOptions:
    """``home restore oci://…``'s options: those of :class:`RestoreOptions` (the identities
    that open an encrypted backup, ``age_identities``, included), and how to reach the
    registry."""

    home: Path | None = None
    force: bool = False
    age_identities: tuple[Path, ...] = ()
    age_passphrase: Callable[[str], str] | None = None
    """Asks for the passphrase of a protected SSH key among ``age_identities``; ``None``:
    such a key is refused, never read blind."""
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
    """What :func:`recover` tidies: an export destination, an install, or a data home (or
    what it only lists: the leftovers among a folder's children)."""

    DESTINATION = "destination"
    INSTALL = "install"
    HOME = "home"
    LEFTOVERS = "leftovers"
    """Only list what interrupted runs left among a folder's children and in the temporary
    folder, each with the command that clears it; nothing is changed."""


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


@dataclass(frozen=True, kw_only=True)
class ConfigOptions:
    """``config validate|set``'s options: the ``--install`` that the commands a report or an
    error suggests repeat, as the user gave it (``named_install``; ``None``: they name no
    install, and find it as :func:`find_install` does with none given)."""

    named_install: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConfigGetOptions:
    """``config get``'s options: open every stored-encrypted string and mask nothing
    (``reveal``; otherwise a secret, and any string holding one, reads ``***``), and the
    ``--install`` the suggested commands repeat (as :class:`ConfigOptions` says)."""

    reveal: bool = False
    named_install: str | None = None
