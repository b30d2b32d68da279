"""What an export did (02 §11): the report ``agents export`` prints and ``--json`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bundler.bundle.manifest import Dropped
from bundler.fs.safefs import SkipCounts
from bundler.rules.risk import RiskFlag
from bundler.rules.sweeper import Hit

FORMAT_VERSION = 1


MEMORY_FORMAT_VERSION = 2


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
