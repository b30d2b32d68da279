"""01 §2: where workspaces and skill bundle folders are, computed from the config alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundler.rules import layout

ROOT = Path("/srv/install")


def test_workspace_default_is_under_agents() -> None:
    assert layout.workspace_dir({}, "researcher", ROOT) == ROOT / "agents/researcher/workspace"
    assert layout.default_workspace_dir(ROOT, "w") == ROOT / "agents/w/workspace"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/data/ws", Path("/data/ws")),
        ("spaces/ws", ROOT / "spaces/ws"),
        ("", ROOT / "agents/a/workspace"),
    ],
)
def test_workspace_path_absolute_relative_or_default(value: str, expected: Path) -> None:
    config = {"agents": {"a": {"workspace": {"path": value}}}}
    assert layout.workspace_dir(config, "a", ROOT) == expected


def test_workspace_path_expands_tilde(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    config = {"agents": {"a": {"workspace": {"path": "~/ws"}}}}
    assert layout.workspace_dir(config, "a", ROOT) == Path("/home/someone/ws")


@pytest.mark.parametrize(
    "junk", [None, 5, "x", ["a"], {"workspace": 3}, {"workspace": {"path": 7}}]
)
def test_workspace_of_malformed_entry_falls_back_to_default(junk: object) -> None:
    assert layout.workspace_dir({"agents": {"a": junk}}, "a", ROOT) == ROOT / "agents/a/workspace"


def test_skill_bundle_dir_default_and_directory() -> None:
    assert layout.skill_bundle_dir({}, "tools", ROOT) == ROOT / "shared/skills/tools"
    config = {"skill_bundles": {"tools": {"directory": "shared/other"}}}
    assert layout.skill_bundle_dir(config, "tools", ROOT) == ROOT / "shared/other"
    config = {"skill_bundles": {"tools": {"directory": "/opt/skills"}}}
    assert layout.skill_bundle_dir(config, "tools", ROOT) == Path("/opt/skills")


def test_lexically_inside_normalises_dotdot() -> None:
    shared = ROOT / "shared"
    assert layout.lexically_inside(ROOT / "shared/skills/../skills/x", shared, strict=True)
    assert not layout.lexically_inside(ROOT / "shared/../secrets", shared)
    assert not layout.lexically_inside(ROOT / "shared-evil/x", shared)
    assert layout.lexically_inside(shared, shared)
    assert not layout.lexically_inside(ROOT / "shared/x/..", shared, strict=True)
    assert layout.lexically_inside("//srv/install/shared/a", "/srv/install/shared")


def test_layout_touches_no_file_system(tmp_path: Path) -> None:
    root = tmp_path / "absent"
    layout.workspace_dir({}, "a", root)
    layout.skill_bundle_dir({}, "b", root)
    layout.lexically_inside(root / "x", root)
    assert not root.exists()


@given(st.lists(st.sampled_from(["a", "b", "..", ".", ""]), max_size=10))
def test_lexically_inside_agrees_with_normpath(parts: list[str]) -> None:
    candidate = "/base/" + "/".join(parts)
    normal = os.path.normpath(candidate)
    expected = normal == "/base" or normal.startswith("/base/")
    assert layout.lexically_inside(candidate, "/base") == expected
