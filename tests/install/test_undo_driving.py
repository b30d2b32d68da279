"""Undo that people can drive, through the real CLI.

``agents import --undo last``, ``agents imports`` (receipts newest first with alias, bundle,
date and state), ``--dry-run`` for an undo, and one clear "already undone".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.undo_kit import USER_CONFIG, bundler, imported


def _second_import(tmp_path: Path, install: Path) -> Path:
    bundle = bf.build_bundle(tmp_path / "bundle2")
    done = bundler(
        install, "agents", "import", str(bundle), "--as", "second", "--accept-risks", "--json"
    )
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["receipt"])


def test_imports_lists_receipts_newest_first_with_alias_bundle_date_and_state(
    tmp_path: Path,
) -> None:
    install, first = imported(tmp_path)
    second = _second_import(tmp_path, install)
    listed = bundler(install, "agents", "imports", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["imports"]
    assert [row["receipt"] for row in rows] == [str(second), str(first)]
    assert [row["agent"] for row in rows] == ["second", "researcher"]
    assert rows[0]["bundle"] == str(tmp_path / "bundle2")
    assert all(row["state"] == "imported" and row["imported_at"] for row in rows)
    text = bundler(install, "agents", "imports").stdout.splitlines()
    assert "second" in text[0] and "researcher" in text[1]
    assert bundler(install, "agents", "import", "--undo", str(second)).returncode == 0
    rows = json.loads(bundler(install, "agents", "imports", "--json").stdout)["imports"]
    assert [row["state"] for row in rows] == ["undone", "imported"]


def test_undo_last_undoes_the_newest_import_still_in_place(tmp_path: Path) -> None:
    install, first = imported(tmp_path)
    second = _second_import(tmp_path, install)
    done = bundler(install, "agents", "import", "--undo", "last", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["receipt"] == str(second)
    done = bundler(install, "agents", "import", "--undo", "last", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["receipt"] == str(first)
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG
    done = bundler(install, "agents", "import", "--undo", "last")
    assert done.returncode == 1
    assert "no import left to undo" in done.stderr


def test_undo_dry_run_says_what_would_go_and_changes_nothing(tmp_path: Path) -> None:
    install, receipt = imported(tmp_path)
    before = (install / "config.toml").read_bytes()
    done = bundler(install, "agents", "import", "--undo", str(receipt), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "would remove agents.researcher" in done.stdout
    assert (install / "config.toml").read_bytes() == before
    assert (install / "agents" / "researcher").exists()


def test_undo_twice_says_already_undone_once(tmp_path: Path) -> None:
    install, receipt = imported(tmp_path)
    assert bundler(install, "agents", "import", "--undo", str(receipt)).returncode == 0
    again = bundler(install, "agents", "import", "--undo", str(receipt))
    assert again.returncode == 1
    assert "already undone" in again.stderr
    assert "(removed)" not in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1


def _edit(install: Path, old: str, new: str) -> None:
    text = (install / "config.toml").read_text(encoding="utf-8")
    assert old in text
    (install / "config.toml").write_text(text.replace(old, new), encoding="utf-8")


def test_undo_names_each_field_edited_since_the_import(tmp_path: Path) -> None:
    install, receipt = imported(tmp_path)
    _edit(install, 'model = "gpt-4o"', 'model = "gpt-5"\ntemperature = 0.2')
    done = bundler(install, "agents", "import", "--undo", str(receipt), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "providers.models.openai.backup.model (changed)" in done.stdout
    assert "providers.models.openai.backup.temperature (added)" in done.stdout
    assert "would save" in done.stdout


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_undo_saves_the_edited_values_beside_the_receipt_then_removes(
    tmp_path: Path, force: list[str]
) -> None:
    """--force is no longer needed for it, and still accepted."""
    install, receipt = imported(tmp_path)
    _edit(install, 'model = "gpt-4o"', 'model = "gpt-5"')
    done = bundler(install, "agents", "import", "--undo", str(receipt), *force, "--json")
    assert done.returncode == 0, done.stdout
    saved = Path(json.loads(done.stdout)["saved"])
    assert saved.parent == receipt.parent and saved.stat().st_mode & 0o077 == 0
    text = saved.read_text(encoding="utf-8")
    assert 'model = "gpt-5"' in text and "providers.models.openai.backup" in text
    assert "api_key" not in text
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG
