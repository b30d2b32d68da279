"""``home restore --home DIR`` only restores into a data home, never over another folder.

A non-empty folder that has none of a data home's layout (``chat.db``, ``files/`` with
``skills/``, the first-start ``README.md``) is refused unless ``--force``; at most one
before-restore copy is kept, and ``home show`` shows it with its size and how to remove it.
Through the real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.hostile_zips import clean_env, content_state, make_project, run_cli

from bundler.home.backup import backup_home
from bundler.rules.units import human_size


def _setup(tmp_path: Path) -> tuple[dict[str, str], Path, Path, Path]:
    (tmp_path / "user").mkdir()
    env = clean_env(tmp_path / "user")
    project, home = make_project(tmp_path)
    zip_path = backup_home(project, to=tmp_path / "b.zip", environ=env).path
    return env, project, home, zip_path


def test_restore_refuses_a_non_empty_folder_that_is_not_a_data_home(tmp_path: Path) -> None:
    env, project, _home, zip_path = _setup(tmp_path)
    documents = tmp_path / "Documents"
    (documents / "thesis").mkdir(parents=True)
    (documents / "thesis" / "draft.txt").write_text("three years of work\n")
    (documents / "files").mkdir()  # one folder of the layout is not a data home
    before = content_state(documents)
    done = run_cli(
        "home",
        "restore",
        str(zip_path),
        "--home",
        str(documents),
        "--project",
        str(project),
        env=env,
    )
    assert done.returncode == 1, done.stderr
    assert "not a data home" in done.stderr and "--force" in done.stderr
    assert "Traceback" not in done.stderr
    assert content_state(documents) == before
    assert sorted(p.name for p in documents.iterdir()) == ["files", "thesis"]


def test_restore_force_restores_into_a_folder_that_is_not_a_data_home(tmp_path: Path) -> None:
    env, project, _home, zip_path = _setup(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "note.txt").write_text("mine\n")
    done = run_cli(
        "home",
        "restore",
        str(zip_path),
        "--home",
        str(target),
        "--project",
        str(project),
        "--force",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert (target / "chat.db").is_file()
    assert (target / "note.txt").read_text() == "mine\n"


def test_restore_into_an_empty_folder_or_a_data_home_needs_no_force(tmp_path: Path) -> None:
    env, project, home, zip_path = _setup(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (empty, home):
        done = run_cli(
            "home",
            "restore",
            str(zip_path),
            "--home",
            str(target),
            "--project",
            str(project),
            env=env,
        )
        assert done.returncode == 0, done.stderr


def test_home_show_names_the_before_restore_copy_with_its_size_and_removal(
    tmp_path: Path,
) -> None:
    env, project, home, zip_path = _setup(tmp_path)
    shown = run_cli("home", "show", "--project", str(project), "--json", env=env)
    assert json.loads(shown.stdout)["before_restore"] is None
    for _ in range(2):
        done = run_cli("home", "restore", str(zip_path), "--project", str(project), env=env)
        assert done.returncode == 0, done.stderr
    kept = sorted(p.name for p in home.iterdir() if ".before-restore" in p.name)
    # one copy only: the second restore replaced the first's
    assert kept == ["chat.db.before-restore", "files.before-restore", "skills.before-restore"]
    shown = run_cli("home", "show", "--project", str(project), "--json", env=env)
    copy = json.loads(shown.stdout)["before_restore"]
    expected = sum(
        f.stat().st_size
        for name in kept
        for f in ([home / name] if (home / name).is_file() else (home / name).rglob("*"))
        if f.is_file()
    )
    assert copy["bytes"] == expected > 0
    assert sorted(copy["names"]) == kept
    text = run_cli("home", "show", "--project", str(project), env=env).stdout
    line = [row for row in text.splitlines() if "before-restore copy" in row]
    assert line and human_size(expected) in line[0]
    remove = [row for row in text.splitlines() if row.strip().startswith("rm -r")]
    assert len(remove) == 1
    for name in kept:
        assert str(home / name) in remove[0]
