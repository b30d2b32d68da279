"""``home backups`` and ``home prune`` (04 §5.4): listing, restic's forget rules, only what a
backup made is ever removed, and a kill at any unlink leaves every kept backup intact."""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from support.faultinject import (
    kill_at_each,
    ptrace_unavailable,
    sample,
    slow_sample_count,
    trace_calls,
)
from support.hostile_zips import clean_env, make_project, run_cli

from bundler.home.backup import backup_home
from bundler.home.verify import verify_backup
from bundler.rules.retention import Policy, kept_by

START = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)


def dated_copy(source: Path, folder: Path, at: datetime) -> Path:
    """A copy of the backup ``source`` taken at ``at`` (its created_at and default name)."""
    target = folder / f"backup-{at.strftime('%Y%m%d-%H%M%S')}.zip"
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename == "backup.json":
                index = json.loads(data)
                index["created_at"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
                data = json.dumps(index).encode()
            new.writestr(info, data)
    os.chmod(target, 0o600)
    return target


def series(tmp_path: Path) -> tuple[Path, Path, dict[str, str], list[Path]]:
    """A project whose backups/ holds 14 backups over 10 days (two on some days), plus files
    prune must leave alone."""
    project, home = make_project(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    env = clean_env(user)
    first = backup_home(project, to=tmp_path / "seed.zip", environ=env).path
    folder = home / "backups"
    times = [START + timedelta(days=d) for d in range(10)]
    times += [START + timedelta(days=d, hours=5) for d in (2, 5, 8, 9)]
    made = [dated_copy(first, folder, at) for at in sorted(times)]
    (folder / "notes.zip").write_bytes(first.read_bytes())  # not a name a backup makes
    (folder / "backup-20261101-000000.zip").write_bytes(b"not a zip")  # not a backup it reads
    return project, folder, env, made


def test_backups_lists_each_backup_oldest_first_and_warns_of_a_false_one(tmp_path: Path) -> None:
    project, folder, env, made = series(tmp_path)
    done = run_cli("home", "backups", "--project", str(project), "--json", env=env)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    listed = payload["backups"]
    assert [item["backup"] for item in listed] == [str(path) for path in made]
    assert all(item["files"] == 6 and item["encrypted"] is False for item in listed)
    assert all(item["verified"] is None for item in listed)
    assert listed[0]["bytes"] == made[0].stat().st_size
    assert any(
        "backup-20261101-000000.zip is not a backup this tool reads" in w
        for w in payload["warnings"]
    )
    done = run_cli("home", "backups", "--to", str(folder), "--verify", "--json", env=env)
    assert all(item["verified"] is True for item in json.loads(done.stdout)["backups"])


def test_dry_run_lists_exactly_what_the_policy_removes_and_the_run_removes_it(
    tmp_path: Path,
) -> None:
    project, folder, env, made = series(tmp_path)
    policy = Policy(last=2, daily=3, weekly=1)
    times = [datetime.strptime(p.name[7:22], "%Y%m%d-%H%M%S") for p in made]
    keep = kept_by(times, lambda t: t, policy)
    doomed = {str(p) for i, p in enumerate(made) if i not in keep}
    assert doomed and len(doomed) < len(made)
    rules = ["--keep-last", "2", "--keep-daily", "3", "--keep-weekly", "1"]
    args = ["home", "prune", "--project", str(project), *rules, "--json"]
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    done = run_cli(*args, "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    planned = json.loads(done.stdout)
    assert {item["backup"] for item in planned["removed"]} == doomed
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    done = run_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    assert {item["backup"] for item in json.loads(done.stdout)["removed"]} == doomed
    left = {str(p) for p in folder.iterdir()}
    assert left == {str(p) for p in made} - doomed | {
        str(folder / "notes.zip"),
        str(folder / "backup-20261101-000000.zip"),
    }
    assert str(made[-1]) in left  # the newest
    for path in made:
        if str(path) in left:
            assert path.read_bytes() == before[path.name]


def test_prune_that_keeps_nothing_is_a_usage_error(tmp_path: Path) -> None:
    project, folder, env, made = series(tmp_path)
    done = run_cli("home", "prune", "--project", str(project), env=env)
    assert done.returncode == 2 and "--keep-last" in done.stderr
    done = run_cli("home", "prune", "--project", str(project), "--keep-last", "-1", env=env)
    assert done.returncode == 2
    assert sorted(folder.iterdir()) == sorted(
        [*made, folder / "notes.zip", folder / "backup-20261101-000000.zip"]
    )


def test_a_kill_at_each_unlink_of_a_prune_leaves_every_kept_backup_intact(tmp_path: Path) -> None:
    reason = ptrace_unavailable()
    assert reason is None, reason
    project, folder, env, made = series(tmp_path)
    pristine = tmp_path / "pristine"
    shutil.copytree(folder, pristine)
    content = {p.name: p.read_bytes() for p in pristine.iterdir()}
    policy = Policy(last=1, daily=2, monthly=1)
    times = [datetime.strptime(p.name[7:22], "%Y%m%d-%H%M%S") for p in made]
    kept = {made[i].name for i in kept_by(times, lambda t: t, policy)}
    env = {**env, "SOURCE_DATE_EPOCH": "1795965672", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "bundler", "home", "prune", "--project", str(project)]
    cmd += ["--keep-last", "1", "--keep-daily", "2", "--keep-monthly", "1"]

    def reset() -> None:
        shutil.rmtree(folder)
        shutil.copytree(pristine, folder)

    done, calls = trace_calls(cmd, ["unlink", "unlinkat"], env=env, relevant=str(folder))
    assert done.returncode == 0, done.stderr
    assert len(calls) == len(made) - len(kept)
    reset()

    def check(_call: object, _run: object) -> None:
        for name in kept:
            assert (folder / name).read_bytes() == content[name], name
        verify_backup(folder / sorted(kept)[-1])
        left = {p.name for p in folder.iterdir()}
        assert kept <= left <= set(content)

    kill_at_each(cmd, sample(calls, slow_sample_count()), check, reset=reset, env=env)
