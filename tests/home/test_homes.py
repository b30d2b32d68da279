"""04 §1: where the data home is (six rules, first match wins, asking creates nothing), the
safe folder name, refused homes, the first start, sizes and writability, and ``home show``."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.hostile_agent_yaml import clean_env, run_cli, snapshot_tree
from support.race_helpers import run_as_nobody

from bundler.errors import InvalidInput, Refused
from bundler.home.homes import (
    README_NAME,
    HomeResolution,
    home_sizes,
    init_home,
    is_writable,
    resolve_home,
    safe_folder_name,
)
from bundler.install.doctor import home_findings as doctor_home


@dataclass
class World:
    """A user home, a project and an environment naming that home, all under ``root``."""

    root: Path
    user: Path
    project: Path
    env: dict[str, str]

    def agent_yaml(self, text: str) -> None:
        (self.project / "Agent.yaml").write_text(text)

    def legacy_db(self) -> Path:
        db = self.project / "data" / "chat.db"
        db.parent.mkdir(exist_ok=True)
        db.write_bytes(b"SQLite format 3\0")
        return db


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """Every test of resolution proves that asking created and changed nothing."""
    user = tmp_path / "user"
    project = tmp_path / "project"
    user.mkdir()
    project.mkdir()
    made = World(tmp_path, user, project, {"HOME": str(user)})
    yield made


def resolve_unchanged(world: World, **env: str) -> HomeResolution:
    before = snapshot_tree(world.root)
    resolution = resolve_home(world.project, environ={**world.env, **env})
    assert snapshot_tree(world.root) == before, "resolving the home created or changed something"
    return resolution


# --- rule 1 -----------------------------------------------------------------------------


def test_rule1_bxagents_home(world: World) -> None:
    world.agent_yaml("name: nano\n")
    target = world.root / "elsewhere"
    resolution = resolve_unchanged(world, BXAGENTS_HOME=str(target))
    assert (resolution.home, resolution.rule) == (target, 1)
    assert "BXAGENTS_HOME" in resolution.source
    assert resolution.database == target / "chat.db"
    assert not target.exists()


def test_rule1_needs_no_agent_yaml(world: World) -> None:
    target = world.root / "elsewhere"
    assert resolve_unchanged(world, BXAGENTS_HOME=str(target)).rule == 1


def test_rule1_beats_rule2_data_home(world: World) -> None:
    world.agent_yaml("name: nano\ndata:\n  home: ./mine\n")
    target = world.root / "env-home"
    resolution = resolve_unchanged(world, BXAGENTS_HOME=str(target))
    assert (resolution.home, resolution.rule) == (target, 1)


# --- rule 2 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("{root}/absolute-home", "{root}/absolute-home"),
        ("~/.nanobox", "{user}/.nanobox"),
        ("state/home", "{project}/state/home"),
        ("../sibling", "{root}/sibling"),
    ],
    ids=["absolute", "tilde", "relative", "relative-dotdot"],
)
def test_rule2_data_home_in_agent_yaml(world: World, written: str, expected: str) -> None:
    values = {"root": world.root, "user": world.user, "project": world.project}
    world.agent_yaml(f"name: nano\ndata:\n  home: {written.format(**values)}\n")
    resolution = resolve_unchanged(world)
    assert resolution.rule == 2
    assert resolution.home == Path(expected.format(**values))
    assert resolution.source == "data.home in Agent.yaml"


def test_rule2_beats_rule3_bxagents_db(world: World) -> None:
    world.agent_yaml("data:\n  home: ./mine\n")
    db = world.root / "db-home" / "chat.db"
    resolution = resolve_unchanged(world, BXAGENTS_DB=str(db))
    assert (resolution.home, resolution.rule) == (world.project / "mine", 2)
    # BXAGENTS_DB still names the database file on its own
    assert resolution.database == db


# --- rule 3 -----------------------------------------------------------------------------


def test_rule3_folder_of_bxagents_db(world: World) -> None:
    world.agent_yaml("name: nano\n")
    db = world.root / "served" / "chat.db"
    resolution = resolve_unchanged(world, BXAGENTS_DB=str(db))
    assert (resolution.home, resolution.rule, resolution.database) == (db.parent, 3, db)


def test_rule3_only_for_a_file_called_chat_db(world: World) -> None:
    world.agent_yaml("name: nano\n")
    db = world.root / "served" / "other.db"
    resolution = resolve_unchanged(world, BXAGENTS_DB=str(db))
    assert resolution.rule == 5
    assert resolution.database == db


def test_rule3_beats_rule4_legacy_data(world: World) -> None:
    world.agent_yaml("name: nano\n")
    world.legacy_db()
    db = world.root / "served" / "chat.db"
    assert resolve_unchanged(world, BXAGENTS_DB=str(db)).rule == 3


# --- rule 4 -----------------------------------------------------------------------------


def test_rule4_legacy_data_holding_chat_db(world: World) -> None:
    world.agent_yaml("name: nano\n")
    world.legacy_db()
    resolution = resolve_unchanged(world)
    assert (resolution.home, resolution.rule) == (world.project / "data", 4)
    assert resolution.database == world.project / "data" / "chat.db"


def test_rule4_beats_rule5_convention(world: World) -> None:
    world.agent_yaml("name: nano\n")
    world.legacy_db()
    (world.user / ".bxagents" / "nano").mkdir(parents=True)
    assert resolve_unchanged(world).rule == 4


# --- rule 5 -----------------------------------------------------------------------------


def test_rule5_convention_by_agent_name(world: World) -> None:
    world.agent_yaml("name: nanobox\n")
    resolution = resolve_unchanged(world)
    assert (resolution.home, resolution.rule) == (world.user / ".bxagents" / "nanobox", 5)
    assert resolution.agent == "nanobox"
    assert not (world.user / ".bxagents").exists()


def test_rule5_beats_rule6_when_data_has_no_chat_db(world: World) -> None:
    world.agent_yaml("name: nano\n")
    (world.project / "data").mkdir()
    (world.project / "data" / "notes.txt").write_text("x")
    assert resolve_unchanged(world).rule == 5


# --- rule 6 -----------------------------------------------------------------------------


def test_rule6_data_for_agent_without_name(world: World) -> None:
    world.agent_yaml("volumes: {}\n")
    resolution = resolve_unchanged(world)
    assert (resolution.home, resolution.rule) == (world.project / "data", 6)
    assert resolution.agent is None


def test_rule6_empty_agent_yaml(world: World) -> None:
    world.agent_yaml("")
    assert resolve_unchanged(world).rule == 6


def test_no_agent_yaml_and_no_environment_is_refused(world: World) -> None:
    with pytest.raises(Refused, match="no Agent.yaml"):
        resolve_unchanged(world)


# --- the safe folder name ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("nanobox", "nanobox"),
        ("Nano_Box-2.0", "Nano_Box-2.0"),
        ("nano box", "nano-box"),
        ("a/b\\c", "a-b-c"),
        ("über", "-ber"),
        ("e\u0301t\u00e9", "e-t-"),  # a combining accent is its own code point
        ("😀x", "-x"),  # one code point outside the BMP, one dash
        ("../../etc", "..-..-etc"),
        ("a\nb\x00c", "a-b-c"),
        ("\u202eevil", "-evil"),
        (".hidden", ".hidden"),
    ],
)
def test_safe_folder_name_per_code_point(name: str, folder: str) -> None:
    assert safe_folder_name(name) == folder


@pytest.mark.parametrize("name", [".", "..", "....."])
def test_name_of_only_dots_is_an_error(world: World, name: str) -> None:
    world.agent_yaml(f"name: '{name}'\n")
    with pytest.raises(InvalidInput, match="only of dots"):
        resolve_unchanged(world)


@pytest.mark.parametrize("value", ["12", "true", "[a]", "{a: 1}", "~", "3.5"])
def test_name_that_is_not_a_string_is_an_error(world: World, value: str) -> None:
    world.agent_yaml(f"name: {value}\n")
    with pytest.raises(InvalidInput, match="name: must be a string"):
        resolve_unchanged(world)


# --- refused homes ---------------------------------------------------------------------------


def test_home_root_refused(world: World) -> None:
    with pytest.raises(InvalidInput, match="cannot be /"):
        resolve_unchanged(world, BXAGENTS_HOME="/")


def test_home_equal_to_user_home_refused(world: World) -> None:
    with pytest.raises(InvalidInput, match="user's home folder"):
        resolve_unchanged(world, BXAGENTS_HOME=str(world.user))


def test_home_containing_user_home_refused(world: World) -> None:
    world.agent_yaml(f"data:\n  home: {world.root}\n")
    with pytest.raises(InvalidInput, match=r"Agent.yaml: data.home: .*user's home folder"):
        resolve_unchanged(world)


def test_home_containing_user_home_through_a_link_refused(world: World) -> None:
    link = world.root / "link"
    link.symlink_to(world.root)
    with pytest.raises(InvalidInput, match="user's home folder"):
        resolve_unchanged(world, BXAGENTS_HOME=str(link))


def test_home_inside_user_home_is_fine(world: World) -> None:
    assert resolve_unchanged(world, BXAGENTS_HOME=str(world.user / "x")).rule == 1


# --- first start -------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_init_creates_home_folders_0700_and_readme(world: World) -> None:
    world.agent_yaml("name: nano\n")
    old = os.umask(0o022)
    try:
        actions = init_home(resolve_home(world.project, environ=world.env))
    finally:
        os.umask(old)
    home = world.user / ".bxagents" / "nano"
    assert _mode(home) == 0o700
    assert _mode(world.user / ".bxagents") == 0o700
    for folder in ("files", "skills", "backups"):
        assert _mode(home / folder) == 0o700
    assert (home / README_NAME).read_text().startswith("# Agent data home")
    assert sorted(os.listdir(home)) == ["README.md", "backups", "files", "skills"]
    assert len(actions) == 6


def test_init_is_idempotent_and_never_overwrites_readme(world: World) -> None:
    home = world.root / "h"
    env = {**world.env, "BXAGENTS_HOME": str(home)}
    init_home(resolve_home(world.project, environ=env))
    (home / README_NAME).write_text("mine\n")
    (home / "files" / "kept.txt").write_text("kept")
    before = snapshot_tree(home)
    assert init_home(resolve_home(world.project, environ=env)) == []
    assert snapshot_tree(home) == before


def test_init_completes_a_partial_home(world: World) -> None:
    home = world.root / "h"
    (home / "files").mkdir(parents=True)
    init_home(resolve_home(world.project, environ={**world.env, "BXAGENTS_HOME": str(home)}))
    assert sorted(os.listdir(home)) == ["README.md", "backups", "files", "skills"]


def test_init_refuses_symlink_in_place_of_a_folder(world: World) -> None:
    home = world.root / "h"
    outside = world.root / "outside"
    outside.mkdir()
    home.mkdir()
    (home / "skills").symlink_to(outside)
    with pytest.raises(Refused, match="skills is a symbolic link"):
        init_home(resolve_home(world.project, environ={**world.env, "BXAGENTS_HOME": str(home)}))
    assert list(outside.iterdir()) == []


def test_init_refuses_symlinked_readme_without_writing_through_it(world: World) -> None:
    home = world.root / "h"
    home.mkdir()
    target = world.root / "victim.txt"
    target.write_text("victim")
    (home / README_NAME).symlink_to(target)
    init_home(resolve_home(world.project, environ={**world.env, "BXAGENTS_HOME": str(home)}))
    assert target.read_text() == "victim"
    assert os.path.islink(home / README_NAME)


# --- sizes and writability -------------------------------------------------------------------


def test_home_sizes_counts_regular_files_never_links(world: World) -> None:
    home = world.root / "h"
    resolution = resolve_home(world.project, environ={**world.env, "BXAGENTS_HOME": str(home)})
    init_home(resolution)
    (home / "chat.db").write_bytes(b"x" * 100)
    (home / "chat.db-wal").write_bytes(b"w" * 7)
    (home / "files" / "a").write_bytes(b"a" * 10)
    (home / "files" / "sub").mkdir()
    (home / "files" / "sub" / "b").write_bytes(b"b" * 5)
    big = world.root / "big"
    big.write_bytes(b"z" * 10_000)
    (home / "files" / "link").symlink_to(big)
    (home / "skills" / "dirlink").symlink_to(world.root)
    before = snapshot_tree(world.root)
    sizes = home_sizes(resolution)
    assert snapshot_tree(world.root) == before
    assert sizes == {"database": 100, "database_wal": 7, "files": 15, "skills": 0, "backups": 0}


def test_home_sizes_of_absent_home_are_zero(world: World) -> None:
    resolution = resolve_home(
        world.project, environ={**world.env, "BXAGENTS_HOME": str(world.root / "nope")}
    )
    assert set(home_sizes(resolution).values()) == {0}
    assert not (world.root / "nope").exists()


def test_writable_absent_home_asks_nearest_existing_ancestor(world: World) -> None:
    before = snapshot_tree(world.root)
    assert is_writable(world.root / "a" / "b" / "c")
    assert snapshot_tree(world.root) == before


def test_not_writable_for_an_unprivileged_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("root ignores permission bits; the test asks as user 65534, which needs root")
    # under /tmp rather than tmp_path: user 65534 must be able to reach the folders
    base = Path(tempfile.mkdtemp(prefix="bundler-h4-"))
    try:
        os.chmod(base, 0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o755)
        open_to_all = base / "open"
        open_to_all.mkdir()
        os.chmod(open_to_all, 0o777)
        answers = run_as_nobody(
            lambda: (is_writable(locked / "home"), is_writable(open_to_all / "home"))
        )
        assert answers == (False, True)
    finally:
        shutil.rmtree(base)


# --- command line ----------------------------------------------------------------------------


def test_cli_home_show_json_shape_and_creates_nothing(world: World) -> None:
    world.agent_yaml("name: nano\n")
    before = snapshot_tree(world.root)
    result = run_cli(
        "home", "show", "--json", "--project", str(world.project), env=clean_env(world.user)
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is True
    assert document["home"] == str(world.user / ".bxagents" / "nano")
    assert document["source_rule"] == 5
    assert document["writable"] is True
    assert set(document["sizes"]) == {"database", "database_wal", "files", "skills", "backups"}
    assert document["volumes"][0]["name"] == "files"
    assert snapshot_tree(world.root) == before


def test_cli_home_init_then_show_text(world: World) -> None:
    world.agent_yaml("name: nano\n")
    env = clean_env(world.user)
    first = run_cli("home", "init", "--project", str(world.project), env=env)
    assert first.returncode == 0, first.stderr
    assert "wrote README.md" in first.stdout
    second = run_cli("home", "init", "--project", str(world.project), env=env)
    assert "nothing to do" in second.stdout
    shown = run_cli("home", "show", "--project", str(world.project), env=env)
    assert "rule 5" in shown.stdout and "writable:  yes" in shown.stdout


def test_cli_missing_project_folder_exit_1(world: World) -> None:
    result = run_cli(
        "home", "show", "--project", str(world.root / "nope"), env=clean_env(world.user)
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: project folder")
    assert "Traceback" not in result.stderr


def test_cli_bad_home_exit_3(world: World) -> None:
    world.agent_yaml("name: nano\n")
    env = clean_env(world.user, BXAGENTS_HOME="/")
    result = run_cli("home", "show", "--project", str(world.project), env=env)
    assert result.returncode == 3
    assert result.stderr.startswith("error: BXAGENTS_HOME: the data home cannot be /")


def test_doctor_home_reports_home_rule_and_writable_creating_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.agent_yaml("name: nano\n")
    monkeypatch.setenv("HOME", str(world.user))
    for key in [k for k in os.environ if k.startswith("BXAGENTS_")]:
        monkeypatch.delenv(key)
    before = snapshot_tree(world.root)
    notes = doctor_home(world.project)
    assert snapshot_tree(world.root) == before
    assert any("rule 5" in note.detail for note in notes)
    assert any("can be written" in note.detail for note in notes)


def test_cli_doctor_reports_the_data_home_and_creates_nothing(world: World) -> None:
    world.agent_yaml("name: nano\n")
    env = clean_env(world.user)
    before = snapshot_tree(world.root)
    result = run_cli("doctor", "--project", str(world.project), "--json", env=env)
    assert snapshot_tree(world.root) == before
    document = json.loads(result.stdout)
    notes = " ".join(note["detail"] for note in document["notes"])
    assert "rule 5" in notes and "can be written" in notes
    assert not any("data home" in problem["detail"] for problem in document["problems"])


def test_cli_doctor_bad_agent_yaml_is_a_problem_exit_3(world: World) -> None:
    world.agent_yaml("volumes:\n  Bad:\n    path: /tmp\n")
    result = run_cli("doctor", "--project", str(world.project), env=clean_env(world.user))
    assert result.returncode == 3
    assert "problem: data home: Agent.yaml: volumes: volume name 'Bad'" in result.stdout
    assert "Traceback" not in result.stderr
