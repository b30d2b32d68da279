"""bundler: move AI agents between installations without losing data or leaking credentials.

The names below are the supported Python API (:mod:`bundler.api`). They are imported on first
use, so that ``bundler --help``, which imports this package, loads none of the library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.3.0"

if TYPE_CHECKING:
    from bundler.api import (
        ArchiveReport,
        BackupOptions,
        BackupReport,
        BundleKind,
        BundlerError,
        DoctorOptions,
        DoctorReport,
        EnvironmentFailure,
        ExportOptions,
        ExportReport,
        ImportOptions,
        ImportReport,
        InspectReport,
        Interrupted,
        InvalidInput,
        LoginReport,
        LogoutReport,
        OpenBundle,
        PackOptions,
        Progress,
        Prompter,
        PullOptions,
        PullReport,
        PushOptions,
        PushReport,
        RecoverOptions,
        RecoverWhat,
        RecoveryReport,
        Refused,
        RegistryOptions,
        RestoreOptions,
        RestoreReport,
        ScanSecrets,
        UndoOptions,
        UndoReport,
        UnpackOptions,
        UsageError,
        VerifyReport,
        backup,
        doctor,
        export_agent,
        import_bundle,
        inspect,
        list_tags,
        login,
        logout,
        open_bundle,
        pack,
        plan_import,
        pull,
        push,
        recover,
        restore,
        undo_import,
        unpack,
        verify,
    )

__all__ = [
    "__version__",
    "ArchiveReport",
    "BackupOptions",
    "BackupReport",
    "BundleKind",
    "BundlerError",
    "DoctorOptions",
    "DoctorReport",
    "EnvironmentFailure",
    "ExportOptions",
    "ExportReport",
    "ImportOptions",
    "ImportReport",
    "InspectReport",
    "Interrupted",
    "InvalidInput",
    "LoginReport",
    "LogoutReport",
    "OpenBundle",
    "PackOptions",
    "Progress",
    "Prompter",
    "PullOptions",
    "PullReport",
    "PushOptions",
    "PushReport",
    "RecoverOptions",
    "RecoverWhat",
    "RecoveryReport",
    "Refused",
    "RegistryOptions",
    "RestoreOptions",
    "RestoreReport",
    "ScanSecrets",
    "UndoOptions",
    "UndoReport",
    "UnpackOptions",
    "UsageError",
    "VerifyReport",
    "backup",
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
    "pull",
    "push",
    "recover",
    "restore",
    "undo_import",
    "unpack",
    "verify",
]


def __getattr__(name: str) -> object:
    """A name of the API, imported from :mod:`bundler.api` when first asked for."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module("bundler.api"), name)
    globals()[name] = value
    return value
