"""The golden bundles ZeroClaw's own exporter writes, kept in the repository
(``tests/fixtures/zeroclaw-golden``, as rendered by the exporter of ZeroClaw's pull request), so
that every checkout tests against them.

Each folder holds the bundle plus ``NOTES.md`` and ``source-config.toml`` (the exporting
install), which are not part of the bundle: :func:`golden_copy` copies the bundle alone.
ZeroClaw's source is not in the repository: the tests that regenerate the config schema from it
(``../shared/interop/zeroclaw``) skip where it is not checked out beside this one, saying why.
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "zeroclaw-golden"
KIT = REPO.parent / "shared" / "interop" / "zeroclaw"
# ZeroClaw's config crate on master (what released builds write) and the pull request's copy
# (the exporter, agent_bundle.rs: the reference for the bundle format)
UPSTREAM_MASTER = KIT / "upstream-master"
UPSTREAM_PR = KIT / "upstream"
NAMES = ("a-minimal", "b-skills", "c-fallbacks", "d-mcp-missing-server", "g-skill-aliases")
NOT_IN_BUNDLE = ("NOTES.md", "source-config.toml")


def golden_copy(name: str, tmp_path: Path) -> Path:
    """A private copy of the golden bundle ``name`` without its notes."""
    source = GOLDEN / name
    assert (source / "zeroclaw-agent.toml").is_file(), f"golden bundle {name} missing"
    target = tmp_path / name
    shutil.copytree(source, target, symlinks=True)
    for extra in NOT_IN_BUNDLE:
        (target / extra).unlink(missing_ok=True)
    return target
