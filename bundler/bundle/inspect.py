"""``bundler bundle inspect``: what a bundle grants, shown before anything is imported (03 §2).

The report is made from :func:`bundler.bundle.verify.verify_bundle`'s recomputed facts (risk
flags, the closure, the required secrets), never from the manifest's claims; every string in it
is escaped for display.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundler.bundle import fragment as fragment_rules
from bundler.bundle.fragment import Problem
from bundler.bundle.manifest import MANIFEST_NAME
from bundler.bundle.sealed import sealed_summary
from bundler.bundle.verify import verify_bundle
from bundler.bundle.verify_report import VerifyReport
from bundler.rules.config_view import array, array_of_tables, table
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress
from bundler.rules.units import human_size

if TYPE_CHECKING:
    from bundler.bundle.archive_listing import ListedMember
    from bundler.bundle.walk import KnownDigests

# --------------------------------------------------------------------------- inspect

_ENTRY_TABLES = (
    "risk_profiles",
    "runtime_profiles",
    "skill_bundles",
    "knowledge_bundles",
    "mcp_bundles",
)
_COLUMNS = {
    "closure": ("kind", "entry"),
    "required secrets": ("config path", "will be sent to"),
    "risk flags (recomputed)": ("kind", "granted by", "detail"),
    "also found by bundler": ("kind", "granted by", "detail"),
    "dropped": ("path", "reason", "detail"),
}


@dataclass
class InspectReport:
    """What a bundle holds and grants (03 §2), built on a full :func:`verify_bundle` pass.

    Every string here comes from the bundle and is already escaped for display. ``entries``
    maps each kind of closure entry to its aliases (providers as ``<category>.<family>.<alias>``,
    MCP servers by name); ``secrets`` pairs each required secret with where it will be sent;
    ``risk_flags`` are recomputed, never the manifest's.
    """

    verify: VerifyReport
    root_agent: str = ""
    format_version: int | None = None
    provenance: dict[str, str] = field(default_factory=dict)
    entries: dict[str, list[str]] = field(default_factory=dict)
    secrets: list[tuple[str, str]] = field(default_factory=list)
    risk_flags: list[dict[str, str]] = field(default_factory=list)
    also_found: list[dict[str, str]] = field(default_factory=list)
    dropped: list[dict[str, str]] = field(default_factory=list)
    sealed_recipients: int = 0
    """How many recipients ``secrets.age`` is sealed to (0: nothing sealed)."""
    sealed_paths: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        """The bundle folder."""
        return self.verify.path

    def summary(self) -> list[tuple[str, str]]:
        """(label, value) rows of the header."""
        errors = len(self.verify.errors)
        verified = "yes" if not errors else f"NO: {errors} error(s), see below"
        files, size = str(self.verify.files), human_size(self.verify.bytes)
        if self.verify.not_here:
            left = " and ".join(f"{top}/" for top in self.verify.not_here)
            files += f" (not counting {left}, left in the registry)"
            size += " (the same)"
            if not errors:
                verified += f", all but {left}, which pull and import check"
        return [
            ("root agent", self.root_agent),
            ("format", str(self.format_version)),
            *((key.replace("_", " "), value) for key, value in self.provenance.items()),
            ("files", files),
            ("size", size),
            ("verified", verified),
            *(
                [("sealed", f"secrets sealed to {self.sealed_recipients} recipient(s)")]
                if self.sealed_recipients
                else []
            ),
        ]

    def sections(self) -> list[tuple[str, list[tuple[str, ...]]]]:
        """(title, rows) of each table, in reading order."""
        closure: list[tuple[str, ...]] = [
            (kind, alias) for kind, aliases in self.entries.items() for alias in aliases
        ]
        flags: list[tuple[str, ...]] = [
            (f["kind"], f["path"], f["detail"]) for f in self.risk_flags
        ]
        dropped: list[tuple[str, ...]] = [
            (d["path"], d["reason"], d["detail"]) for d in self.dropped
        ]
        also: list[tuple[str, ...]] = [(f["kind"], f["path"], f["detail"]) for f in self.also_found]
        sealed = set(self.sealed_paths)
        return [
            ("closure", closure),
            (
                "required secrets",
                [(path, f"{to} (sealed)" if path in sealed else to) for path, to in self.secrets],
            ),
            ("risk flags (recomputed)", flags),
            # beyond the rules of the exporter that wrote the bundle (02 §6.2)
            *([("also found by bundler", also)] if also else []),
            ("dropped", dropped),
        ]

    @staticmethod
    def columns(title: str) -> tuple[str, ...]:
        """Column headings of the section ``title``."""
        return _COLUMNS[title]

    def as_json(self) -> dict[str, Any]:
        """The ``bundle inspect --json`` payload."""
        return {
            "bundle": self.verify.reference or str(self.path),
            "root_agent": self.root_agent,
            "format_version": self.format_version,
            "provenance": self.provenance,
            "files": self.verify.files,
            "bytes": self.verify.bytes,
            "not_read": [f"{top}/" for top in self.verify.not_here],
            "entries": self.entries,
            "required_secrets": [{"path": p, "endpoint": e} for p, e in self.secrets],
            "sealed": {"recipients": self.sealed_recipients, "paths": self.sealed_paths}
            if self.sealed_recipients
            else None,
            "risk_flags": self.risk_flags,
            "also_found_by_bundler": self.also_found,
            "dropped": self.dropped,
            "errors": [{"path": p.path, "message": p.message} for p in self.verify.errors],
            "warnings": [{"path": p.path, "message": p.message} for p in self.verify.warnings],
        }


def _escaped(value: Any) -> str:
    return escape_display(str(value))


def _closure_entries(fragment: Mapping[str, Any]) -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    agents = fragment.get("agents")
    entries["agent"] = [_escaped(a) for a in table(agents)]
    for category, families in table(fragment.get("providers")).items():
        for family, aliases in table(families).items():
            for alias in table(aliases):
                entries.setdefault(f"provider ({_escaped(category)})", []).append(
                    _escaped(f"{family}.{alias}")
                )
    for name in _ENTRY_TABLES:
        if value := table(fragment.get(name)):
            entries[name.replace("_", " ").rstrip("s")] = [_escaped(alias) for alias in value]
    servers = fragment_rules.lookup(fragment, ["mcp", "servers"])[1]
    if isinstance(servers, list) and servers:
        entries["mcp server"] = [_escaped(table(s).get("name", "?")) for s in servers]
    return entries


def _secret_rows(fragment: Mapping[str, Any], paths: object) -> list[tuple[str, str]]:
    from bundler.errors import UsageError
    from bundler.rules.paths import parse_path

    rows: list[tuple[str, str]] = []
    for path in array(paths):
        try:
            endpoint = fragment_rules.secret_endpoint(fragment, parse_path(str(path)))
        except UsageError:
            endpoint = "(not a config path)"
        rows.append((_escaped(path), _escaped(endpoint)))
    return rows


def _escaped_rows(rows: object) -> list[dict[str, str]]:
    return [
        {
            key: _escaped(row.get(key, ""))
            for key in ("path", "reason", "kind", "detail")
            if key in row
        }
        for row in array_of_tables(rows)
    ]


def inspect_bundle(
    path: Path,
    *,
    progress: Progress | None = None,
    known_digests: KnownDigests | None = None,
    listed: Sequence[ListedMember] = (),
) -> InspectReport:
    """Verify ``path`` and describe it for a person (03 §2); raises like :func:`verify_bundle`.

    ``known_digests`` and ``listed``: as :func:`verify_bundle` takes them, for a registry
    artifact whose workspace inspect lists as it arrives and does not keep.

    Raises :class:`InvalidInput` when the manifest cannot be read at all (there is nothing to
    describe); otherwise the report carries the verification errors beside the description.
    """
    checked = verify_bundle(path, progress=progress, known_digests=known_digests, listed=listed)
    manifest = checked.manifest
    if manifest is None:
        first = checked.errors[0] if checked.errors else Problem(MANIFEST_NAME, "unreadable")
        # the entry path is relative to the bundle: name both
        raise first.error(f"{escape_display(str(path))}: {first}")
    report = InspectReport(verify=checked, root_agent=_escaped(manifest.get("root_agent", "")))
    report.format_version = checked.format_version
    provenance = manifest.get("provenance")
    if isinstance(provenance, dict):
        report.provenance = {_escaped(k): _escaped(v) for k, v in provenance.items()}
    fragment = checked.fragment or {}
    report.entries = _closure_entries(fragment)
    report.secrets = _secret_rows(fragment, manifest.get("required_secrets", []))
    sealed = sealed_summary(manifest)
    if sealed is not None:
        report.sealed_recipients = sealed[0]
        report.sealed_paths = [_escaped(p) for p in sealed[1]]
    report.risk_flags = [
        {key: _escaped(flag.get(key, "")) for key in ("kind", "path", "detail")}
        for flag in checked.risk_flags
    ]
    report.also_found = [
        {key: _escaped(flag.get(key, "")) for key in ("kind", "path", "detail")}
        for flag in checked.also_found
    ]
    report.dropped = [
        {key: row.get(key, "") for key in ("path", "reason", "detail")}
        for row in _escaped_rows(manifest.get("dropped", []))
    ]
    return report
