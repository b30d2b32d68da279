"""The golden bundles ZeroClaw's own exporter writes (``../shared/interop/zeroclaw/bundles``).

Each folder holds the bundle plus ``NOTES.md`` and ``source-config.toml`` (the exporting
install), which are not part of the bundle: :func:`golden_copy` copies the bundle alone.
CI has ``../shared``; elsewhere the tests that use these skip, saying why.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KIT = REPO.parent / "shared" / "interop" / "zeroclaw"
GOLDEN = KIT / "bundles"
# ZeroClaw's config crate on master (what released builds write) and the pull request's copy
# (the exporter, agent_bundle.rs: the reference for the bundle format)
UPSTREAM_MASTER = KIT / "upstream-master"
UPSTREAM_PR = KIT / "upstream"
NAMES = ("a-minimal", "b-skills", "c-fallbacks", "d-mcp-missing-server", "g-skill-aliases")
NOT_IN_BUNDLE = ("NOTES.md", "source-config.toml")


def golden_copy(name: str, tmp_path: Path) -> Path:
    """A private copy of the golden bundle ``name`` without its notes; skips when absent."""
    source = GOLDEN / name
    if not (source / "zeroclaw-agent.toml").is_file():
        pytest.skip(f"golden ZeroClaw bundles not found at {GOLDEN} (../shared is not checked out)")
    target = tmp_path / name
    shutil.copytree(source, target, symlinks=True)
    for extra in NOT_IN_BUNDLE:
        (target / extra).unlink(missing_ok=True)
    return target
