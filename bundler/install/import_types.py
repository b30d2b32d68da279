"""What the caller asks of an import (:class:`ImportOptions`), what it reports
(:class:`ImportReport`), and one run's fixed inputs, shared by the import's steps."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.bundle.verify_report import VerifyReport
from bundler.config.file import ConfigFile
from bundler.config.secretstore import SecretWriter
from bundler.fs.age import AskPassphrase
from bundler.install import merge
from bundler.install.bind_secrets import Prompter
from bundler.rules.progress import Progress


@dataclass
class ImportReport:
    """What an import did (or, with ``dry_run``, would do). Holds no secret value."""

    bundle: str
    plan: merge.MergePlan
    risk_flags: list[dict[str, str]]
    dry_run: bool
    workspace_target: str
    also_found: list[dict[str, str]] = field(default_factory=list)
    approval_changes: list[str] = field(default_factory=list)
    skill_targets: dict[str, str] = field(default_factory=dict)
    skills_differ: list[str] = field(default_factory=list)
    missing_commands: list[str] = field(default_factory=list)
    endpoints: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    receipt: str = ""
    sealed_filled: list[str] = field(default_factory=list)
    """The bundle paths whose secret came from its sealed ``secrets.age``."""

    @property
    def agent(self) -> str:
        """The alias the agent has in this install."""
        return self.plan.agent

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` payload of 05 §3 plus the plan's details."""
        return {
            **self.plan.summary(),
            "risk_flags": self.risk_flags,
            # of risk_flags, those the bundle's exporter's own rules do not raise (02 §6.2)
            "also_found_by_bundler": self.also_found,
            "approval_changes": self.approval_changes,
            "receipt": self.receipt,
            "dry_run": self.dry_run,
            "workspace": self.workspace_target,
            "skill_targets": self.skill_targets,
            "skills_differ": self.skills_differ,
            "reused_with_secrets": self.plan.reused_with_secrets,
            "secrets_filled": self.plan.secrets_filled,
            "secrets_from_seal": list(self.sealed_filled),
            "secret_endpoints": self.endpoints,
            "mcp_commands_missing": self.missing_commands,
            "notes": self.notes,
            "unused": self.plan.unused,
        }


@dataclass(frozen=True)
class ImportOptions:
    """What the caller asked of an import: the options of ``agents import``.

    ``binds`` maps fragment entry paths to local references; ``secrets`` are ``PATH=VALUE``
    strings as given to ``--secret``; ``prompt`` (a terminal) asks for missing secrets and for
    consent. With ``dry_run`` nothing is changed or created. ``progress`` sees two phases,
    ``verifying`` and ``copying``, stopped before anything is asked and after the copy.
    """

    as_alias: str | None = None
    binds: Mapping[str, str] | None = None
    secrets: Sequence[str] = ()
    secrets_file: Path | None = None
    accept_risks: bool = False
    dry_run: bool = False
    prompt: Prompter | None = None
    progress: Progress | None = None
    environ: Mapping[str, str] | None = None
    """Where ``ZEROCLAW_secrets__encrypt`` is looked up (a warning when it disagrees with the
    file's policy); ``os.environ`` when None."""
    age_identities: Sequence[Path] = ()
    """Identity files (age, or SSH private keys) that open the bundle's sealed ``secrets.age``:
    its values fill the required secrets not given with ``secrets``/``secrets_file``."""
    age_passphrase: AskPassphrase | None = None
    """Asks, without echo, for the passphrase of a protected SSH key among ``age_identities``;
    None: such a key is refused (there is no terminal to ask on)."""
    source: Path | str | None = None
    """The bundle as the user named it when the folder read is not it (an unpacked archive, or
    as a ``str`` a registry reference pinned to its digest, pulled into a private folder):
    reports, the receipt and the commands they suggest name this instead."""

    def shown(self, bundle: Path) -> Path | str:
        """The bundle to name to the user."""
        return self.source if self.source is not None else bundle

    def argument(self, bundle: Path) -> str:
        """The bundle as a suggested command's argument: a reference as it is, a path absolute."""
        shown = self.shown(bundle)
        return shown if isinstance(shown, str) else os.path.abspath(shown)


@dataclass(frozen=True)
class ImportRun:
    """One import's fixed inputs, handed to each step instead of a dozen parameters."""

    install_fd: int
    install_root: Path
    bundle: Path
    report: VerifyReport
    config: ConfigFile
    required: list[str]
    options: ImportOptions
    store: SecretWriter
    """What each secret value given becomes under the install's policy and key."""
    sealed: frozenset[str] = frozenset()
    """The bundle paths whose value came from ``secrets.age``."""
