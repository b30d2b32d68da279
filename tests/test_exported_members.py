"""The public names are pinned: one changes only on purpose, with a deprecation warning for one
minor release while the version is 0.x (CHANGELOG.md), and this list changes with it."""

from __future__ import annotations

import subprocess
import sys

from support.kit import clean_env

import bundler
from bundler import api

EXPORTED = [
    "__version__",
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


def test_the_package_exports_exactly_the_pinned_names() -> None:
    assert bundler.__all__ == EXPORTED
    assert api.__all__ == EXPORTED[1:]


def test_every_exported_name_is_the_api_s_own() -> None:
    for name in EXPORTED[1:]:
        assert getattr(bundler, name) is getattr(api, name), name
    assert not hasattr(bundler, "no_such_name")


def test_importing_the_package_loads_none_of_the_library() -> None:
    """``bundler --help`` imports the package: the API (and all below it) waits for first use."""
    code = (
        "import sys, bundler; "
        "print(sorted(m for m in sys.modules if m.startswith('bundler.'))); "
        "bundler.open_bundle; "
        "print('bundler.api' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True"]
