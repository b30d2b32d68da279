"""What verify tests share: the facts of a report two ways of verifying must agree on, and a
bundle spread over many small files."""

from __future__ import annotations

from pathlib import Path

from bundler.bundle.verify_report import VerifyReport
from support import bundlefactory as bf


def facts(report: VerifyReport) -> tuple[object, ...]:
    return (
        report.errors,
        report.warnings,
        report.files,
        report.bytes,
        report.sizes,
        report.totals,
        report.checksums_digest,
        report.risk_flags,
        report.skill_bundles,
    )


def spread(bundle: Path, count: int) -> None:
    """``count`` small workspace files over 40 folders, then checksums and manifest to match."""
    for index in range(count):
        folder = bundle / "workspace" / f"spread-{index % 40:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"file-{index:06d}-{'x' * 40}.txt").write_bytes(b"%d\n" % index)
    bf.reseal(bundle)
