"""Crash leftovers of backups: what an interrupted backup left is named, once per run, by
the next backup and by doctor, with the command that clears it. Through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from support.hostile_zips import clean_env, make_project, run_cli


def test_backup_and_doctor_name_an_interrupted_backup_once(tmp_path: Path) -> None:
    (tmp_path / "user").mkdir()
    env = clean_env(tmp_path / "user")
    project, home = make_project(tmp_path)
    # one dead run: its snapshot and its half-written zip share a token
    (home / "backups" / ".backup-abcdefabcdef.db").write_bytes(b"x" * 100)
    (home / "backups" / ".backup-abcdefabcdef.zip").write_bytes(b"PK")
    done = run_cli("home", "backup", "--project", str(project), "--json", env=env)
    assert done.returncode == 0, done.stdout
    named = [w for w in json.loads(done.stdout)["warnings"] if "interrupted backup" in w]
    assert len(named) == 1 and named[0].endswith(f"; run: bundler recover --home {home}")
    found = run_cli(
        "doctor", "--install", str(tmp_path / "none"), "--project", str(project), "--json", env=env
    )
    problems = json.loads(found.stdout)["problems"]
    assert len(problems) == 1, problems
    assert problems[0]["fix"] == f"bundler recover --home {home}", problems
    assert run_cli("recover", "--home", str(home), env=env).returncode == 0
    assert sorted(p.name for p in (home / "backups").iterdir() if p.name.startswith(".")) == []
    found = run_cli(
        "doctor", "--install", str(tmp_path / "none"), "--project", str(project), "--json", env=env
    )
    assert json.loads(found.stdout)["ok"] is True, found.stdout
