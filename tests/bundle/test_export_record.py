"""The record of export destinations is the user's, never the install's (02: export is
read-only on the install); ``doctor`` reads it, and the record older versions left in an
install, to find what interrupted exports left.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.export_kit import API_KEY, export_cmd, make_install, run
from support.kit import cli_command, run_cli, tree_snapshot

from bundler.bundle.history import RECORD_NAME, recent_destinations
from bundler.bundle.leftovers import encode_record

NOBODY = 65534


def _full_listing(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry with its mode, bytes, mtime (folders' too), inode and size."""
    return tree_snapshot(
        root, mtimes=True, dir_mtimes=True, inodes=True, sizes=True, include_root=True
    )


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder another user can traverse (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="bundler-record-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop privileges to uid 65534")
@pytest.mark.parametrize("name", ["bundle", "bundle.tar"])
def test_an_install_the_exporter_cannot_write_is_exported_and_left_exactly_as_it_was(
    shared_tmp: Path, name: str
) -> None:
    install = make_install(shared_tmp / "install")
    for folder, _dirs, files in os.walk(shared_tmp):
        os.chmod(folder, 0o755)  # readable by all, writable by root only
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    outdir = shared_tmp / "out"
    state = shared_tmp / "state"
    for folder in (outdir, state):
        folder.mkdir()
        os.chown(folder, NOBODY, NOBODY)
    before = _full_listing(install)
    out = outdir / name
    done = run(
        [*cli_command(as_nobody=True), *export_cmd(install, out)[3:]],
        env={**os.environ, "XDG_STATE_HOME": str(state)},
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # not even a warning about a state folder
    assert os.listdir(outdir) == [name]
    assert run_cli(["bundle", "verify", str(out)]).returncode == 0
    assert _full_listing(install) == before
    # the record is the exporting user's, in their state folder, private to them
    record = state / "bundler" / RECORD_NAME
    assert json.loads(record.read_text())["destinations"] == [str(out)]
    assert stat.S_IMODE((state / "bundler").stat().st_mode) == 0o700
    assert (state / "bundler").stat().st_uid == NOBODY


def test_the_record_goes_to_the_default_state_folder_under_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install = make_install(tmp_path / "install")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(home))
    out = tmp_path / "bundle"
    done = run(export_cmd(install, out), env=os.environ)
    assert done.returncode == 0, done.stderr
    record = home / ".local" / "state" / "bundler" / RECORD_NAME
    assert json.loads(record.read_text())["destinations"] == [str(out)]
    for folder in (home / ".local", home / ".local" / "state", record.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert not (install / "data").exists()


def test_a_state_folder_that_cannot_be_made_costs_the_export_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install = make_install(tmp_path / "install")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker / "state"))
    out = tmp_path / "bundle"
    done = run([*export_cmd(install, out), "--json"], env=os.environ)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["warnings"] == []
    assert done.stderr == ""
    assert (out / "zeroclaw-agent.toml").is_file()
    assert not (install / "data").exists()


def test_a_destination_whose_name_holds_a_known_secret_is_not_recorded(tmp_path: Path) -> None:
    install = make_install(tmp_path / "install")
    secret_named = tmp_path / f"{API_KEY}-dir" / "bundle"
    secret_named.parent.mkdir()
    plain = tmp_path / "bundle"
    for out in (secret_named, plain):
        done = run(export_cmd(install, out), env=os.environ)
        assert done.returncode == 0, done.stderr
    assert recent_destinations() == [str(plain)]
    for path in Path(os.environ["XDG_STATE_HOME"]).rglob("*"):
        assert API_KEY not in str(path)
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path
    assert not (install / "data").exists()


def _dead_run_beside(dest: Path) -> Path:
    """What a killed export to ``dest`` leaves: its record and its staging folder."""
    token = "AAAAAAAAAAAA"
    (dest.parent / f".zeroclaw-export-{token}.target").write_bytes(encode_record(dest.name))
    staging = dest.parent / f".zeroclaw-export-{token}"
    staging.mkdir()
    return staging


def test_doctor_finds_a_dead_export_through_the_users_record(tmp_path: Path) -> None:
    install = make_install(tmp_path / "install")
    out = tmp_path / "out" / "bundle"
    out.parent.mkdir()
    assert run(export_cmd(install, out), env=os.environ).returncode == 0
    staging = _dead_run_beside(out)
    checked = run_cli(["--install", str(install), "doctor", "--json"])
    assert checked.returncode == 3, checked.stdout + checked.stderr
    problems = json.loads(checked.stdout)["problems"]
    assert any(staging.name in problem["detail"] for problem in problems), problems


def test_doctor_still_reads_the_record_an_older_version_left_in_the_install(
    tmp_path: Path,
) -> None:
    install = make_install(tmp_path / "install")
    out = tmp_path / "out" / "bundle"
    out.parent.mkdir()
    legacy = install / "data" / "state" / RECORD_NAME
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps({"format": 1, "destinations": [str(out)]}))
    staging = _dead_run_beside(out)
    checked = run_cli(["--install", str(install), "doctor", "--json"])
    problems = json.loads(checked.stdout)["problems"]
    assert any(staging.name in problem["detail"] for problem in problems), problems
    # and an export never writes it again
    before = _full_listing(install)
    assert run(export_cmd(install, tmp_path / "other"), env=os.environ).returncode == 0
    assert _full_listing(install) == before
