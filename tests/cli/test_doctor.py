"""``bundler doctor``: config validity, leftovers with the command that clears them, whether
RENAME_EXCHANGE works where exports go, the data home; it changes nothing (02 §8.5, 05)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from support.kit import run_cli, tree_snapshot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def doctor(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={"HOME": str(home)})


def tree(folder: Path) -> dict[str, tuple[Any, ...]]:
    return tree_snapshot(folder, mtimes=True, dir_mtimes=True)


@pytest.fixture
def install(tmp_path: Path) -> Path:
    root = tmp_path / "install"
    shutil.copytree(EXAMPLES / "install", root)
    return root


def test_doctor_reports_a_valid_install_and_exits_0(install: Path, tmp_path: Path) -> None:
    done = doctor("--install", str(install), "doctor", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "is valid" in done.stdout


def test_doctor_names_each_config_error_and_exits_3(install: Path, tmp_path: Path) -> None:
    config = install / "config.toml"
    config.write_text(
        config.read_text().replace('risk_profile = "careful"', 'risk_profile = "nope"', 1)
    )
    done = doctor("--install", str(install), "doctor", "--json", home=tmp_path)
    assert done.returncode == 3
    payload = json.loads(done.stdout)
    assert payload["ok"] is False and payload["error"]["code"] == 3
    assert any("risk_profile" in problem["detail"] for problem in payload["problems"])
    problem = next(p for p in payload["problems"] if "risk_profile" in p["detail"])
    assert problem["kind"] == "config" and problem["path"] == "agents.researcher.risk_profile"


def test_doctor_lists_an_interrupted_import_with_the_command_that_clears_it(
    install: Path, tmp_path: Path
) -> None:
    (install / ".bundler-import-AbCdEfGhIjKl").mkdir()
    done = doctor("--install", str(install), "doctor", home=tmp_path)
    assert done.returncode == 3
    assert ".bundler-import-AbCdEfGhIjKl" in done.stdout
    assert f"bundler recover --install {install}" in done.stdout


def test_doctor_lists_export_leftovers_and_checks_rename_exchange_where_exports_go(
    install: Path, tmp_path: Path
) -> None:
    parent = tmp_path / "exports"
    parent.mkdir()
    (parent / ".zeroclaw-export-Tok3nTok3nAB").mkdir()
    (parent / ".zeroclaw-export-Tok3nTok3nAB.target").write_bytes(b"bundle\n")
    done = doctor("--install", str(install), "doctor", "--path", str(parent), home=tmp_path)
    assert done.returncode == 3
    assert f"bundler recover {parent / 'bundle'}" in done.stdout
    assert "exports replace a bundle here in one atomic step" in done.stdout


def test_doctor_with_a_project_reports_the_data_home_and_the_rule(
    install: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "project", project)
    done = doctor("--install", str(install), "doctor", "--project", str(project), home=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rule 2" in done.stdout or "data.home" in done.stdout


def test_doctor_changes_nothing(install: Path, tmp_path: Path) -> None:
    (install / ".bundler-import-AbCdEfGhIjKl").mkdir()
    before = tree(tmp_path)
    doctor("--install", str(install), "doctor", home=tmp_path)
    assert tree(tmp_path) == before


def test_doctor_rename_probe_leaves_nothing_behind(install: Path, tmp_path: Path) -> None:
    """The RENAME_EXCHANGE probe must create two entries where exports go; it removes them, so
    only the folder's own mtime may differ afterwards."""
    parent = tmp_path / "exports"
    parent.mkdir()
    (parent / ".zeroclaw-export-Tok3nTok3nAB").mkdir()
    (parent / ".zeroclaw-export-Tok3nTok3nAB.target").write_bytes(b"bundle\n")
    before = tree(tmp_path)
    doctor("--install", str(install), "doctor", "--path", str(parent), home=tmp_path)
    after = tree(tmp_path)
    assert sorted(after) == sorted(before)
    assert {k: v for k, v in after.items() if k != "exports"} == {
        k: v for k, v in before.items() if k != "exports"
    }


def test_doctor_checks_are_a_library_the_cli_only_words(install: Path, tmp_path: Path) -> None:
    # the checks answer a report to any caller; the CLI prints the same findings
    from bundler.install.doctor import diagnose

    (install / ".bundler-import-AAAAAAAAAAAA").mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    before = tree(install)
    report = diagnose(str(install), dest)
    assert tree(install) == before and list(dest.iterdir()) == []
    assert any(
        "interrupted import left .bundler-import-AAAAAAAAAAAA" in p.detail for p in report.problems
    )
    assert any(note.kind == "rename-exchange" for note in report.notes)
    done = doctor("--install", str(install), "doctor", "--path", str(dest), "--json", home=tmp_path)
    assert done.returncode == 3
    document = json.loads(done.stdout)
    assert (document["problems"], document["notes"]) == (
        [asdict(p) for p in report.problems],
        [asdict(n) for n in report.notes],
    )


def test_a_running_imports_staging_folder_is_not_reported_as_interrupted(
    install: Path, tmp_path: Path
) -> None:
    """An import or undo holds the config lock over its staging folder's whole life. doctor
    reported a live import's folder as 'an interrupted import left ...', exit 3 (a cron
    doctor raised an alarm at every import). While another process holds the lock the folder
    is not a finding; once the lock is free it is."""
    import fcntl
    import os

    (install / ".bundler-import-AAAAAAAAAAAA").mkdir()
    fd = os.open(install / ".config.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a running import holds it
        running = doctor("--install", str(install), "doctor", home=tmp_path)
    finally:
        os.close(fd)
    assert running.returncode == 0, running.stdout + running.stderr
    assert "interrupted import" not in running.stdout + running.stderr
    dead = doctor("--install", str(install), "doctor", home=tmp_path)
    assert dead.returncode == 3 and "interrupted import left" in dead.stdout + dead.stderr
