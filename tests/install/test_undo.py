"""``bundler agents import --undo RECEIPT`` (03 §4): exact removal, or a refusal naming changes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.installs import run_cli
from support.kit import one_error, tree_snapshot
from support.undo_kit import USER_CONFIG, bundler, imported

NOBODY = 65534


def folders(install: Path) -> set[str]:
    return {
        str(p.relative_to(install))
        for p in install.rglob("*")
        if "data" not in p.relative_to(install).parts
    }


def test_undo_restores_pre_import_config_bytes_and_removes_folders(tmp_path: Path) -> None:
    install, receipt = imported(tmp_path)
    result = bundler(install, "agents", "import", "--undo", str(receipt), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert "agents.researcher" in document["removed"]
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG
    assert folders(install) == {"config.toml", ".config.lock"}
    assert not [p for p in install.iterdir() if p.name.startswith(".bundler-import-")]


def test_undo_of_import_into_empty_install_removes_config(tmp_path: Path) -> None:
    install, receipt = imported(tmp_path, config=None)
    result = bundler(install, "agents", "import", "--undo", str(receipt))
    assert result.returncode == 0, result.stderr
    assert not (install / "config.toml").exists()
    # no longer an install: not even the config lock is left
    assert folders(install) == set()


def test_undo_ignores_secrets_filled_in_after_import(tmp_path: Path) -> None:
    install, receipt = imported(tmp_path)
    filled = bundler(
        install,
        "config",
        "set",
        "providers.models.openai.backup.api_key",
        "sk-filled-later-abcdefghijkl",
    )
    assert filled.returncode == 0, filled.stderr
    result = bundler(install, "agents", "import", "--undo", str(receipt))
    assert result.returncode == 0, result.stderr
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG


def test_undo_saves_an_entry_edited_since_the_import_then_removes_it(tmp_path: Path) -> None:
    install, receipt = imported(tmp_path)
    text = (install / "config.toml").read_text(encoding="utf-8")
    changed = text.replace('model = "gpt-4o"', 'model = "gpt-5"')
    assert changed != text
    (install / "config.toml").write_text(changed, encoding="utf-8")
    result = bundler(install, "agents", "import", "--undo", str(receipt))
    assert result.returncode == 0, result.stderr
    assert "edited since the import: providers.models.openai.backup.model (changed)" in (
        result.stdout
    )
    saved = next(receipt.parent.glob("*.edited-*.toml")).read_text(encoding="utf-8")
    assert 'model = "gpt-5"' in saved
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG


def test_undo_keeps_a_file_written_into_the_workspace_and_removes_the_rest(
    tmp_path: Path,
) -> None:
    install, receipt = imported(tmp_path)
    workspace = install / "agents" / "researcher" / "workspace"
    (workspace / "new.txt").write_text("the agent worked\n")
    result = bundler(install, "agents", "import", "--undo", str(receipt))
    assert result.returncode == 0, result.stderr
    assert f"kept {workspace}/new.txt (new since the import)" in result.stdout
    assert folders(install) == {
        "config.toml",
        ".config.lock",
        "agents",
        "agents/researcher",
        "agents/researcher/workspace",
        "agents/researcher/workspace/new.txt",
    }
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG


def test_undo_refuses_when_a_later_import_uses_the_entries(tmp_path: Path) -> None:
    install, receipt = imported(tmp_path)
    again = bundler(
        install, "agents", "import", str(tmp_path / "bundle"), "--as", "second", "--accept-risks"
    )
    assert again.returncode == 0, again.stderr
    before = bf.tree_snapshot(install)
    result = bundler(install, "agents", "import", "--undo", str(receipt))
    assert result.returncode == 3
    assert "agents.second" in result.stderr
    assert bf.tree_snapshot(install) == before


def test_undo_of_not_a_receipt_is_invalid_input(tmp_path: Path) -> None:
    install, _ = imported(tmp_path)
    bogus = tmp_path / "bogus.toml"
    bogus.write_text("hello = 1\n")
    result = bundler(install, "agents", "import", "--undo", str(bogus))
    assert result.returncode == 3 and "not an import receipt" in result.stderr


def test_undo_and_recover_never_show_a_secret_looking_value_of_a_broken_config(
    tmp_path: Path,
) -> None:
    # undo and recovery read config.toml through the one reader: a parse error names a position
    install, receipt = imported(tmp_path)
    secret = "sk-ant-UNDOPARSE-zqxjvwqzqxjvwqzq"
    broken = f'[risk_profiles."{secret}"]\nlevel = "readonly"\n[risk_profiles."{secret}"]\n'
    (install / "config.toml").write_text(broken, encoding="utf-8")
    undo = bundler(install, "agents", "import", "--undo", str(receipt))
    assert undo.returncode == 3, undo.stderr
    assert "invalid TOML" in undo.stderr and secret not in undo.stdout + undo.stderr
    (install / ".bundler-import-AAAAAAAAAAAA").mkdir()
    recover = bundler(install, "recover")
    assert recover.returncode == 0, recover.stderr
    assert secret not in recover.stdout + recover.stderr
    assert (install / "config.toml").read_text(encoding="utf-8") == broken


def test_import_and_undo_write_beside_a_symlinked_config_and_keep_the_link(
    tmp_path: Path,
) -> None:
    # the one writer stages and commits in the folder of the file it read, not over the link
    real = tmp_path / "real"
    real.mkdir()
    (real / "main.toml").write_text(USER_CONFIG, encoding="utf-8")
    (real / "main.toml").chmod(0o640)
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").symlink_to(real / "main.toml")
    bundle = bf.build_bundle(tmp_path / "bundle")
    done = bundler(install, "agents", "import", str(bundle), "--accept-risks", "--json")
    assert done.returncode == 0, done.stderr
    assert (install / "config.toml").is_symlink()
    assert "[agents.researcher]" in (real / "main.toml").read_text(encoding="utf-8")
    # it holds a key: 0600, as ZeroClaw leaves it on every save, whatever it was
    assert (real / "main.toml").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in real.iterdir()) == ["main.toml"]
    undo = bundler(install, "agents", "import", "--undo", json.loads(done.stdout)["receipt"])
    assert undo.returncode == 0, undo.stderr
    assert (install / "config.toml").is_symlink()
    assert (real / "main.toml").read_text(encoding="utf-8") == USER_CONFIG
    assert sorted(p.name for p in real.iterdir()) == ["main.toml"]


INLINE_CONFIG = (
    'providers = { models = { openai = { prod = { api_key = "sk-local-prod-key-1234567890", '
    'model = "gpt" } } } }\n\n'
    '[agents.lead]\nmodel_provider = "openai.prod"\nrisk_profile = "strict"\n\n'
    '[risk_profiles.strict]\nlevel = "readonly"\n'
)


def test_undo_into_a_config_of_inline_tables_gives_back_its_bytes(tmp_path: Path) -> None:
    """03 §4: undo removes exactly what the import added. Into inline tables the import made
    'anthropic = {...}' and the like; undo left them as empty tables ('anthropic = {}'), an
    'mcp.servers = []' and a blank line, equal as data but not the user's file."""
    install, receipt = imported(tmp_path, config=INLINE_CONFIG)
    assert (install / "config.toml").read_text(encoding="utf-8") != INLINE_CONFIG
    result = bundler(install, "agents", "import", "--undo", str(receipt))
    assert result.returncode == 0, result.stderr
    assert (install / "config.toml").read_text(encoding="utf-8") == INLINE_CONFIG


def test_an_unreadable_receipts_folder_is_one_error_naming_it_not_no_imports() -> None:
    """Taken for an empty folder, it made ``agents imports`` say "no imports" (exit 0) and
    ``--undo last`` "no import left to undo" while a receipt was there."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop privileges to uid 65534 in a child")
    base = Path(tempfile.mkdtemp(prefix="bundler-receipts-", dir="/tmp"))
    try:
        base.chmod(0o755)
        install, receipt = imported(base)
        for folder, dirs, files in os.walk(base):
            for entry in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(entry, NOBODY, NOBODY, follow_symlinks=False)
        before, mode = tree_snapshot(install), receipt.parent.stat().st_mode
        receipt.parent.chmod(0)
        expected = f"cannot read the import receipts in {receipt.parent} (Permission denied)"
        for args in (["agents", "imports"], ["agents", "import", "--undo", "last"]):
            done = run_cli(["--install", str(install), *args], cwd="/", as_nobody=True)
            assert done.returncode == 1 and one_error(done.stderr), (args, done.stderr)
            assert expected in done.stderr, done.stderr
        receipt.parent.chmod(mode)
        assert tree_snapshot(install) == before  # the undo refused before touching anything
    finally:
        shutil.rmtree(base)
