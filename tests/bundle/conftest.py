"""Fixtures shared by the bundle tests."""

from __future__ import annotations

from pathlib import Path

import bundlefactory as bf
import pytest


@pytest.fixture(scope="module")
def two_bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(old, new): two different bundles of one agent, made by the real exporter."""
    base = tmp_path_factory.mktemp("bundles")
    install = bf.write_install(base / "install")
    old = bf.export_bundle(install, base / "old")
    (install / "agents" / bf.ROOT_AGENT / "workspace" / "added.md").write_text("new\n")
    new = bf.export_bundle(install, base / "new")
    return old, new
