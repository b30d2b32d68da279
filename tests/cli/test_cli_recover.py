"""``recover`` and ``doctor`` speak plainly: past tense for what was done,
"would" under ``--dry-run``; ``--json`` actions are ``{"action", "path", "done"}`` objects and
doctor's findings ``{"kind", "path", "detail", "fix"}``; a warning is labelled a warning."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from support import bundlefactory as bf
from support.installs import MINIMAL_CONFIG, make_install
from support.kit import run_cli

PAST = ("removed ", "restored ", "completed ", "rolled back ", "moved back ", "left alone: ")


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={"HOME": str(home)})


def interrupted_export(tmp_path: Path) -> Path:
    """A bundle moved aside as a --force export leaves it when killed mid-swap."""
    install = bf.write_install(tmp_path / "install")
    out = tmp_path / "exports" / "bundle"
    out.parent.mkdir()
    done = cli(
        "--install",
        str(install),
        "agents",
        "export",
        "researcher",
        "--out",
        str(out),
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    token = "Abcdef123456"
    (out.parent / f".zeroclaw-export-{token}.target").write_text("bundle\n")
    os.rename(out, out.parent / f".zeroclaw-export-old-{token}")
    (out.parent / f".zeroclaw-export-{token}").mkdir()
    return out


def test_recover_dest_says_would_then_did(tmp_path: Path) -> None:
    out = interrupted_export(tmp_path)
    before = sorted(os.listdir(out.parent))
    dry = cli("recover", str(out), "--dry-run", home=tmp_path)
    assert dry.returncode == 0, dry.stderr
    planned = dry.stdout.splitlines()
    assert planned and all(line.startswith("would ") for line in planned), planned
    assert sorted(os.listdir(out.parent)) == before
    done = cli("recover", str(out), "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    actions = json.loads(done.stdout)["actions"]
    assert [a["action"] for a in actions] == ["restore", "remove", "remove"]
    assert all(a["done"] is True and os.path.isabs(a["path"]) for a in actions)
    assert actions[0]["path"] == str(out) and (out / "zeroclaw-agent.toml").is_file()
    assert all(a["detail"].startswith(PAST) for a in actions), actions
    assert os.listdir(out.parent) == ["bundle"]


def test_recover_install_dry_run_says_would_and_changes_nothing(tmp_path: Path) -> None:
    install = make_install(tmp_path)
    leftover = install / ".bundler-import-AbCdEfGhIjKl"
    leftover.mkdir()
    dry = cli("--install", str(install), "recover", "--dry-run", "--json", home=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["actions"] == [
        {
            "action": "remove",
            "path": str(leftover),
            "done": False,
            "detail": "would remove .bundler-import-AbCdEfGhIjKl (no journal: nothing else was "
            "changed)",
        }
    ]
    assert leftover.is_dir()
    done = cli("--install", str(install), "recover", home=tmp_path)
    assert done.stdout.startswith("removed .bundler-import-AbCdEfGhIjKl"), done.stdout
    assert not leftover.exists()


def test_recover_scan_lists_objects_with_their_command(tmp_path: Path) -> None:
    out = interrupted_export(tmp_path)
    scan = cli("recover", "--scan", str(out.parent), "--json", home=tmp_path)
    listed = json.loads(scan.stdout)["actions"]
    assert len(listed) == 3
    for item in listed:
        assert item["done"] is False and item["fix"] == f"bundler recover {out}"
        assert os.path.dirname(item["path"]) == str(out.parent)


def test_recover_scan_leaves_out_a_running_exports_staging(tmp_path: Path) -> None:
    """recover --scan listed a running export's (or pull's) staging and record as 'an
    interrupted export', with the recover command to run, while recover DEST itself left them
    alone as live. A run holds its record locked; while it does, --scan lists nothing of it."""
    import fcntl

    out = interrupted_export(tmp_path)
    record = os.open(out.parent / ".zeroclaw-export-Abcdef123456.target", os.O_RDONLY)
    try:
        fcntl.flock(record, fcntl.LOCK_EX)  # as the running export holds it
        live = cli("recover", "--scan", str(out.parent), "--json", home=tmp_path)
        assert live.returncode == 0 and json.loads(live.stdout)["actions"] == [], live.stdout
    finally:
        os.close(record)
    dead = cli("recover", "--scan", str(out.parent), "--json", home=tmp_path)
    assert len(json.loads(dead.stdout)["actions"]) == 3


def test_doctor_labels_warnings_and_reports_objects(tmp_path: Path) -> None:
    dangling = MINIMAL_CONFIG.replace('model = "claude"', 'model = "claude"\nfallback = ["x.y"]')
    install = make_install(tmp_path, dangling)
    (install / ".bundler-import-AbCdEfGhIjKl").mkdir()
    done = cli("--install", str(install), "doctor", home=tmp_path)
    assert done.returncode == 3
    warned = [line for line in done.stdout.splitlines() if "fallback" in line]
    assert warned and all(line.startswith("warning: ") for line in warned), done.stdout
    document = json.loads(cli("--install", str(install), "doctor", "--json", home=tmp_path).stdout)
    assert document["problems"] == [
        {
            "kind": "import-leftover",
            "path": str(install / ".bundler-import-AbCdEfGhIjKl"),
            "detail": f"an interrupted import left .bundler-import-AbCdEfGhIjKl in {install}",
            "fix": f"bundler recover --install {install}",
        }
    ]
    warning = document["warnings"][0]
    assert set(warning) == {"kind", "path", "detail", "fix"}
    assert warning["path"] == "providers.models.anthropic.main.fallback[0]"


def test_recover_dest_puts_the_command_for_another_destination_on_its_own_line(
    tmp_path: Path,
) -> None:
    out = interrupted_export(tmp_path)
    other = out.parent / ".zeroclaw-export-Zyxwvu654321"
    other.mkdir()
    (out.parent / ".zeroclaw-export-Zyxwvu654321.target").write_text("other\n")
    done = cli("recover", str(out), home=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"  bundler recover {out.parent / 'other'}" in lines
    assert other.is_dir()
    document = json.loads(cli("recover", str(out), "--json", home=tmp_path).stdout)
    assert {a["fix"] for a in document["actions"]} == {f"bundler recover {out.parent / 'other'}"}


def test_recover_removes_a_record_killed_before_it_named_its_destination(tmp_path: Path) -> None:
    """An export killed while writing its ``.target`` record leaves it empty: it names nothing
    and no staging folder depends on it, so recovering the folder's destination removes it, and
    a record that names another destination stays."""
    out = tmp_path / "out"
    out.mkdir()
    empty = out / ".zeroclaw-export-AAAAAAAAAAAA.target"
    empty.write_bytes(b"")
    other = out / ".zeroclaw-export-BBBBBBBBBBBB.target"
    other.write_bytes(b"y.tar\n")
    result = run_cli(["recover", str(out / "x.tar")])
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out)) == [other.name]
