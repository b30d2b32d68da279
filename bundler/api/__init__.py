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

The library modules below do the work; the API only chooses among them and converts its
options into theirs, so that the names here can stay put while the modules move. Nothing is
imported before it is needed: a name is imported from the module that holds it when first
asked for (``import bundler.api`` costs what ``bundler --help`` costs, and ``bundle verify``
of a folder loads the reading operations of :mod:`bundler.api.reading` only).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bundler.api.configuration import (
        get_config,
        list_agents,
        read_config_value,
        set_config,
        unset_config,
        validate_config,
    )
    from bundler.api.operations import (
        backup,
        backup_to_registry,
        doctor,
        export_agent,
        find_install,
        import_bundle,
        init_home,
        list_backups,
        list_imports,
        list_skills,
        list_tags,
        list_volumes,
        login,
        logout,
        pack,
        plan_import,
        prune_backups,
        prune_cache,
        prune_registry_backups,
        pull,
        push,
        recover,
        registry_backups,
        restore,
        restore_from_registry,
        save_skill,
        secrets_template,
        show_home,
        terminal_passphrase,
        terminal_prompter,
        undo_import,
        unpack,
        verify_backup,
    )
    from bundler.api.options import (
        BackupOptions,
        ConfigGetOptions,
        ConfigOptions,
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
    from bundler.api.reading import (
        inspect,
        leftovers_beside,
        verify,
    )
    from bundler.api.source import (
        LISTED_BY_INSPECT,
        BundleKind,
        OpenBundle,
        RegistryOptions,
        open_bundle,
    )
    from bundler.api.source import (
        REFERENCE_SCHEME as REFERENCE_SCHEME,
    )
    from bundler.bundle.archive import (
        ArchiveReport,
    )
    from bundler.bundle.export_report import (
        ExportReport,
    )
    from bundler.bundle.inspect import (
        InspectReport,
    )
    from bundler.bundle.verify_report import (
        VerifyReport,
    )
    from bundler.config.store import ConfigEdit
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
    )
    from bundler.home.backup import (
        BackupReport,
    )
    from bundler.home.keep import Listing as BackupListing
    from bundler.home.keep import PruneReport
    from bundler.home.restore import (
        RestoreReport,
    )
    from bundler.home.show import HomeInit, HomeReport
    from bundler.home.skills import SavedSkill, SkillInfo
    from bundler.home.verify import VerifyReport as BackupCheck
    from bundler.install.bind_secrets import (
        SECRET_ARGUMENT_WARNING,
        Prompter,
        split_assignment,
    )
    from bundler.install.config_report import AgentList, ConfigCheck, ConfigValue
    from bundler.install.doctor import (
        DoctorReport,
    )
    from bundler.install.import_types import (
        ImportReport,
    )
    from bundler.install.receipts import (
        ReceiptInfo,
    )
    from bundler.install.secrets_template import (
        SecretsTemplate,
    )
    from bundler.install.undo import (
        UndoReport,
    )
    from bundler.registry.backup_oci import (
        RegistryBackupListing,
        RegistryBackupReport,
        RegistryPruneReport,
        RegistryRestoreReport,
    )
    from bundler.registry.cache import (
        CachePruneReport,
    )
    from bundler.registry.login import (
        LoginReport,
        LogoutReport,
    )
    from bundler.registry.pull import (
        PullReport,
    )
    from bundler.registry.push import (
        PushReport,
    )
    from bundler.rules.actions import (
        RecoveryReport,
    )
    from bundler.rules.progress import (
        Progress,
    )
    from bundler.rules.secrets import (
        ScanSecrets,
    )

__all__ = [
    "AgentList",
    "ArchiveReport",
    "BackupCheck",
    "BackupListing",
    "BackupOptions",
    "BackupReport",
    "BundleKind",
    "BundlerError",
    "CachePruneReport",
    "CannotAccess",
    "ChangedMeanwhile",
    "ConfigCheck",
    "ConfigEdit",
    "ConfigGetOptions",
    "ConfigOptions",
    "ConfigValue",
    "CredentialsRefused",
    "Damaged",
    "DestinationExists",
    "DoctorOptions",
    "DoctorReport",
    "EnvironmentFailure",
    "ExportOptions",
    "ExportReport",
    "HomeInit",
    "HomeReport",
    "Hostile",
    "ImportOptions",
    "ImportReport",
    "InspectReport",
    "Interrupted",
    "InvalidConfig",
    "InvalidInput",
    "JailError",
    "LISTED_BY_INSPECT",
    "ListBackupsOptions",
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
    "PruneOptions",
    "PruneReport",
    "PullOptions",
    "PullReport",
    "PushOptions",
    "PushReport",
    "ReceiptInfo",
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
    "SECRET_ARGUMENT_WARNING",
    "SavedSkill",
    "ScanSecrets",
    "SecretFound",
    "SecretsTemplate",
    "SecretsTemplateOptions",
    "SkillInfo",
    "Tampered",
    "TooLarge",
    "Undecryptable",
    "UndoOptions",
    "UndoReport",
    "UnpackOptions",
    "UnsuitablePath",
    "Unsupported",
    "UsageError",
    "VerifyBackupOptions",
    "VerifyReport",
    "backup",
    "backup_to_registry",
    "doctor",
    "export_agent",
    "find_install",
    "get_config",
    "import_bundle",
    "init_home",
    "inspect",
    "leftovers_beside",
    "list_agents",
    "list_backups",
    "list_imports",
    "list_skills",
    "list_tags",
    "list_volumes",
    "login",
    "logout",
    "open_bundle",
    "pack",
    "plan_import",
    "prune_backups",
    "prune_cache",
    "prune_registry_backups",
    "pull",
    "push",
    "read_config_value",
    "recover",
    "registry_backups",
    "restore",
    "restore_from_registry",
    "save_skill",
    "secrets_template",
    "set_config",
    "show_home",
    "split_assignment",
    "terminal_passphrase",
    "terminal_prompter",
    "undo_import",
    "unpack",
    "unset_config",
    "validate_config",
    "verify",
    "verify_backup",
]

# every name, and the module it is imported from when first asked for ("module:name" where
# the module calls it otherwise)
_WHERE = {
    "AgentList": "bundler.install.config_report",
    "ArchiveReport": "bundler.bundle.archive",
    "BackupCheck": "bundler.home.verify:VerifyReport",
    "BackupListing": "bundler.home.keep:Listing",
    "BackupOptions": "bundler.api.options",
    "BackupReport": "bundler.home.backup",
    "BundleKind": "bundler.api.source",
    "BundlerError": "bundler.errors",
    "CachePruneReport": "bundler.registry.cache",
    "CannotAccess": "bundler.errors",
    "ChangedMeanwhile": "bundler.errors",
    "ConfigCheck": "bundler.install.config_report",
    "ConfigEdit": "bundler.config.store",
    "ConfigGetOptions": "bundler.api.options",
    "ConfigOptions": "bundler.api.options",
    "ConfigValue": "bundler.install.config_report",
    "CredentialsRefused": "bundler.errors",
    "Damaged": "bundler.errors",
    "DestinationExists": "bundler.errors",
    "DoctorOptions": "bundler.api.options",
    "DoctorReport": "bundler.install.doctor",
    "EnvironmentFailure": "bundler.errors",
    "ExportOptions": "bundler.api.options",
    "ExportReport": "bundler.bundle.export_report",
    "HomeInit": "bundler.home.show",
    "HomeReport": "bundler.home.show",
    "Hostile": "bundler.errors",
    "ImportOptions": "bundler.api.options",
    "ImportReport": "bundler.install.import_types",
    "InspectReport": "bundler.bundle.inspect",
    "Interrupted": "bundler.errors",
    "InvalidConfig": "bundler.errors",
    "InvalidInput": "bundler.errors",
    "JailError": "bundler.errors",
    "LISTED_BY_INSPECT": "bundler.api.source",
    "ListBackupsOptions": "bundler.api.options",
    "Locked": "bundler.errors",
    "LoginReport": "bundler.registry.login",
    "LogoutReport": "bundler.registry.login",
    "Malformed": "bundler.errors",
    "NoAnswer": "bundler.errors",
    "NoSpace": "bundler.errors",
    "NotABundle": "bundler.errors",
    "NotFound": "bundler.errors",
    "OpenBundle": "bundler.api.source",
    "PackOptions": "bundler.api.options",
    "PolicyRefused": "bundler.errors",
    "Progress": "bundler.rules.progress",
    "Prompter": "bundler.install.bind_secrets",
    "PruneOptions": "bundler.api.options",
    "PruneReport": "bundler.home.keep",
    "PullOptions": "bundler.api.options",
    "PullReport": "bundler.registry.pull",
    "PushOptions": "bundler.api.options",
    "PushReport": "bundler.registry.push",
    "REFERENCE_SCHEME": "bundler.api.source",
    "ReceiptInfo": "bundler.install.receipts",
    "RecoverOptions": "bundler.api.options",
    "RecoverWhat": "bundler.api.options",
    "RecoveryNeeded": "bundler.errors",
    "RecoveryReport": "bundler.rules.actions",
    "Refused": "bundler.errors",
    "RefusedWithList": "bundler.errors",
    "RegistryBackupListing": "bundler.registry.backup_oci",
    "RegistryBackupOptions": "bundler.api.options",
    "RegistryBackupReport": "bundler.registry.backup_oci",
    "RegistryOptions": "bundler.api.source",
    "RegistryPruneOptions": "bundler.api.options",
    "RegistryPruneReport": "bundler.registry.backup_oci",
    "RegistryRefused": "bundler.errors",
    "RegistryRestoreOptions": "bundler.api.options",
    "RegistryRestoreReport": "bundler.registry.backup_oci",
    "RegistryUnreachable": "bundler.errors",
    "RestoreOptions": "bundler.api.options",
    "RestoreReport": "bundler.home.restore",
    "SECRET_ARGUMENT_WARNING": "bundler.install.bind_secrets",
    "SavedSkill": "bundler.home.skills",
    "ScanSecrets": "bundler.rules.secrets",
    "SecretFound": "bundler.errors",
    "SecretsTemplate": "bundler.install.secrets_template",
    "SecretsTemplateOptions": "bundler.api.options",
    "SkillInfo": "bundler.home.skills",
    "Tampered": "bundler.errors",
    "TooLarge": "bundler.errors",
    "Undecryptable": "bundler.errors",
    "UndoOptions": "bundler.api.options",
    "UndoReport": "bundler.install.undo",
    "UnpackOptions": "bundler.api.options",
    "UnsuitablePath": "bundler.errors",
    "Unsupported": "bundler.errors",
    "UsageError": "bundler.errors",
    "VerifyBackupOptions": "bundler.api.options",
    "VerifyReport": "bundler.bundle.verify_report",
    "backup": "bundler.api.operations",
    "backup_to_registry": "bundler.api.operations",
    "doctor": "bundler.api.operations",
    "export_agent": "bundler.api.operations",
    "find_install": "bundler.api.operations",
    "get_config": "bundler.api.configuration",
    "import_bundle": "bundler.api.operations",
    "init_home": "bundler.api.operations",
    "inspect": "bundler.api.reading",
    "leftovers_beside": "bundler.api.reading",
    "list_agents": "bundler.api.configuration",
    "list_backups": "bundler.api.operations",
    "list_imports": "bundler.api.operations",
    "list_skills": "bundler.api.operations",
    "list_tags": "bundler.api.operations",
    "list_volumes": "bundler.api.operations",
    "login": "bundler.api.operations",
    "logout": "bundler.api.operations",
    "open_bundle": "bundler.api.source",
    "pack": "bundler.api.operations",
    "plan_import": "bundler.api.operations",
    "prune_backups": "bundler.api.operations",
    "prune_cache": "bundler.api.operations",
    "prune_registry_backups": "bundler.api.operations",
    "pull": "bundler.api.operations",
    "push": "bundler.api.operations",
    "read_config_value": "bundler.api.configuration",
    "recover": "bundler.api.operations",
    "registry_backups": "bundler.api.operations",
    "restore": "bundler.api.operations",
    "restore_from_registry": "bundler.api.operations",
    "save_skill": "bundler.api.operations",
    "secrets_template": "bundler.api.operations",
    "set_config": "bundler.api.configuration",
    "show_home": "bundler.api.operations",
    "split_assignment": "bundler.install.bind_secrets",
    "terminal_passphrase": "bundler.api.operations",
    "terminal_prompter": "bundler.api.operations",
    "undo_import": "bundler.api.operations",
    "unpack": "bundler.api.operations",
    "unset_config": "bundler.api.configuration",
    "validate_config": "bundler.api.configuration",
    "verify": "bundler.api.reading",
    "verify_backup": "bundler.api.operations",
}


def __getattr__(name: str) -> object:
    """A name of the API, imported from the module that holds it when first asked for."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    value: object = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value
