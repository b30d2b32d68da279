"""04 §3: the three skill levels and their precedence, listing, and every limit of a save."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.hostile_agent_yaml import clean_env, run_cli, snapshot_tree

from bundler.errors import InvalidInput, Refused
from bundler.home.homes import init_home, resolve_home
from bundler.home.skills import MAX_AGENT_SKILLS, front_matter_description, list_skills, save_skill


@dataclass
class Project:
    root: Path
    user: Path
    project: Path
    home: Path
    env: dict[str, str]

    def skill(self, level: str, name: str, description: str = "") -> Path:
        base = {
            "installed": self.project / ".agents" / "skills",
            "project": self.project / "skills",
            "agent": self.home / "skills",
        }[level]
        folder = base / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {description}\n---\nbody\n"
        )
        return folder

    def listing(self) -> list[tuple[str, str, str, bool]]:
        return [
            (s.name, s.description, s.origin, s.shadowed)
            for s in list_skills(self.project, environ=self.env)
        ]

    def save(self, name: str, description: str = "d", content: str = "c") -> None:
        save_skill(self.project, name, description, content, environ=self.env)


@pytest.fixture
def proj(tmp_path: Path) -> Project:
    user, project, home = tmp_path / "user", tmp_path / "project", tmp_path / "home"
    user.mkdir()
    project.mkdir()
    (project / "Agent.yaml").write_text(f"name: nano\ndata:\n  home: {home}\n")
    made = Project(tmp_path, user, project, home, {"HOME": str(user)})
    init_home(resolve_home(project, environ=made.env))
    return made


# --- levels and precedence -------------------------------------------------------------------


def test_three_levels_listed_with_their_origin(proj: Project) -> None:
    proj.skill("installed", "pdf", "read PDFs")
    proj.skill("project", "deploy", "ship it")
    proj.skill("agent", "notes", "my notes")
    assert proj.listing() == [
        ("deploy", "ship it", "project", False),
        ("notes", "my notes", "agent", False),
        ("pdf", "read PDFs", "installed", False),
    ]


def test_project_skill_wins_over_installed_skill(proj: Project) -> None:
    proj.skill("installed", "pdf", "installed one")
    proj.skill("project", "pdf", "project one")
    assert proj.listing() == [("pdf", "project one", "project", False)]


def test_agent_skill_sharing_a_name_is_shadowed(proj: Project) -> None:
    proj.skill("installed", "pdf", "installed one")
    proj.skill("agent", "pdf", "agent one")
    proj.skill("project", "deploy", "project one")
    proj.skill("agent", "deploy", "agent deploy")
    assert proj.listing() == [
        ("deploy", "project one", "project", False),
        ("deploy", "agent deploy", "agent", True),
        ("pdf", "installed one", "installed", False),
        ("pdf", "agent one", "agent", True),
    ]


def test_listing_creates_nothing(proj: Project) -> None:
    proj.skill("agent", "notes")
    before = snapshot_tree(proj.root)
    proj.listing()
    assert snapshot_tree(proj.root) == before


def test_a_skill_needs_a_real_folder_and_a_regular_skill_md(proj: Project) -> None:
    outside = proj.root / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("---\ndescription: stolen\n---\n")
    (proj.home / "skills" / "linked").symlink_to(outside)
    (proj.home / "skills" / "empty").mkdir()
    md_link = proj.home / "skills" / "mdlink"
    md_link.mkdir()
    (md_link / "SKILL.md").symlink_to(outside / "SKILL.md")
    (proj.home / "skills" / "fifo").mkdir()
    os.mkfifo(proj.home / "skills" / "fifo" / "SKILL.md")
    (proj.home / "skills" / ".hidden").mkdir()
    proj.skill("agent", "real", "the real one")
    assert proj.listing() == [("real", "the real one", "agent", False)]


@pytest.mark.parametrize(
    ("text", "description"),
    [
        ("---\ndescription: plain\n---\nbody", "plain"),
        ("---\r\ndescription: crlf\r\n---\r\nbody", "crlf"),
        ('---\ndescription: "quoted: yes # no"\n---\n', "quoted: yes # no"),
        ("no front matter", ""),
        ("---\ndescription: [unclosed\n---\n", ""),
        ("---\ndescription: 12\n---\n", ""),
        ("---\ndescription: never closed\n", ""),
        ("---\n- a list\n---\n", ""),
    ],
)
def test_description_from_skill_md_front_matter(text: str, description: str) -> None:
    assert front_matter_description(text) == description


def test_cli_home_skills_json_is_the_get_skills_answer(proj: Project) -> None:
    proj.skill("installed", "pdf", "read PDFs")
    proj.skill("agent", "pdf", "mine")
    env = clean_env(proj.user)
    result = run_cli("home", "skills", "--json", "--project", str(proj.project), env=env)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["skills"] == [
        {"name": "pdf", "description": "read PDFs", "origin": "installed"}
    ]
    assert document["shadowed"] == [{"name": "pdf", "description": "mine", "origin": "agent"}]
    assert str(proj.root) not in result.stdout


# --- saving ---------------------------------------------------------------------------------------


def test_save_writes_front_matter_then_content_atomically(proj: Project) -> None:
    proj.save("summarise", "Summarise a long thread", "# Steps\n1. read\n")
    folder = proj.home / "skills" / "summarise"
    assert (folder / "SKILL.md").read_text() == (
        "---\nname: summarise\ndescription: Summarise a long thread\n---\n# Steps\n1. read\n"
    )
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "SKILL.md").stat().st_mode) == 0o600
    assert os.listdir(folder) == ["SKILL.md"]  # no temporary file left
    assert ("summarise", "Summarise a long thread", "agent", False) in proj.listing()


@pytest.mark.parametrize(
    "description",
    [
        "a: b",
        "# not a comment",
        "[list]",
        "{map}",
        "'quoted'",
        "&anchor",
        "*alias",
        "yes",
        "null",
        "- item",
        "ends with :",
    ],
)
def test_save_description_that_yaml_would_misread_round_trips(
    proj: Project, description: str
) -> None:
    proj.save("tricky", description)
    text = (proj.home / "skills" / "tricky" / "SKILL.md").read_text()
    assert front_matter_description(text) == description
    assert text.count("\n") == 4  # the front matter is still exactly name and description


def test_save_description_cannot_inject_front_matter_keys(proj: Project) -> None:
    with pytest.raises(InvalidInput, match="one line without control characters"):
        proj.save("inject", "fine\nname: other")
    assert not (proj.home / "skills" / "inject").exists()


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "..", "é", "a b", "a" * 129, "x\n"])
def test_save_name_must_match_the_grammar(proj: Project, name: str) -> None:
    before = snapshot_tree(proj.root)
    with pytest.raises(InvalidInput, match="must match"):
        proj.save(name)
    assert snapshot_tree(proj.root) == before


@pytest.mark.parametrize("name", ["a", "A.b-c_d", "_x", "-x", "9" * 128, "x.."])
def test_save_name_grammar_accepts(proj: Project, name: str) -> None:
    proj.save(name)
    assert (proj.home / "skills" / name / "SKILL.md").is_file()


def test_save_description_at_most_500_characters(proj: Project) -> None:
    proj.save("ok", "d" * 500)
    with pytest.raises(InvalidInput, match="description is 501 characters; at most 500"):
        proj.save("long", "d" * 501)


def test_save_content_at_most_20000_characters(proj: Project) -> None:
    proj.save("ok", content="é" * 20_000)  # characters, not bytes
    with pytest.raises(InvalidInput, match="content is 20001 characters; at most 20000"):
        proj.save("long", content="c" * 20_001)


@pytest.mark.parametrize("level", ["installed", "project"])
def test_save_cannot_take_an_installed_or_project_name(proj: Project, level: str) -> None:
    proj.skill(level, "pdf", "theirs")
    with pytest.raises(Refused, match="an installed or project skill has this name"):
        proj.save("pdf")
    assert not (proj.home / "skills" / "pdf").exists()


def test_save_may_replace_its_own_skill(proj: Project) -> None:
    proj.save("notes", "v1", "first")
    proj.save("notes", "v2", "second")
    text = (proj.home / "skills" / "notes" / "SKILL.md").read_text()
    assert text.endswith("second") and "description: v2" in text


def test_save_at_most_50_agent_skills_but_replacing_is_allowed(proj: Project) -> None:
    for index in range(MAX_AGENT_SKILLS):
        proj.save(f"s{index}")
    with pytest.raises(Refused, match="already keeps 50 skills"):
        proj.save("one-more")
    proj.save("s7", "replaced")
    assert len(os.listdir(proj.home / "skills")) == 50


def test_save_refused_when_agent_can_save_is_false(proj: Project) -> None:
    (proj.project / "Agent.yaml").write_text(
        f"name: nano\ndata:\n  home: {proj.home}\nskills:\n  agentCanSave: false\n"
    )
    with pytest.raises(Refused, match="skills.agentCanSave is false"):
        proj.save("notes")
    assert os.listdir(proj.home / "skills") == []


def test_save_never_writes_through_a_symlinked_skill_folder(proj: Project) -> None:
    outside = proj.root / "outside"
    outside.mkdir()
    (proj.home / "skills" / "evil").symlink_to(outside)
    with pytest.raises(Refused, match="skills/evil is a symbolic link"):
        proj.save("evil")
    assert os.listdir(outside) == []


def test_save_replaces_a_planted_skill_md_link_not_its_target(proj: Project) -> None:
    victim = proj.root / "victim.txt"
    victim.write_text("victim")
    folder = proj.home / "skills" / "planted"
    folder.mkdir()
    (folder / "SKILL.md").symlink_to(victim)
    proj.save("planted", "d", "new")
    assert victim.read_text() == "victim"
    assert not (folder / "SKILL.md").is_symlink()


def test_save_needs_an_initialised_home(tmp_path: Path) -> None:
    user, project = tmp_path / "user", tmp_path / "project"
    user.mkdir()
    project.mkdir()
    (project / "Agent.yaml").write_text(f"data:\n  home: {tmp_path / 'absent'}\n")
    with pytest.raises(Refused, match="run 'bundler home init' first"):
        save_skill(project, "notes", "d", "c", environ={"HOME": str(user)})
    assert not (tmp_path / "absent").exists()


def test_cli_home_skills_save(proj: Project) -> None:
    body = proj.root / "body.md"
    body.write_text("Do the thing.\n")
    env = clean_env(proj.user)
    args = ("home", "skills", "save", "thing", "--description", "does it", "--file", str(body))
    result = run_cli(*args, "--project", str(proj.project), env=env)
    assert result.returncode == 0, result.stderr
    text = (proj.home / "skills" / "thing" / "SKILL.md").read_text()
    assert text == "---\nname: thing\ndescription: does it\n---\nDo the thing.\n"


def test_cli_home_skills_save_limits_exit_codes(proj: Project) -> None:
    body = proj.root / "body.md"
    body.write_text("x" * 20_001)
    env = clean_env(proj.user)
    project = ("--project", str(proj.project))
    too_long = run_cli(
        "home",
        "skills",
        "save",
        "big",
        "--description",
        "d",
        "--file",
        str(body),
        *project,
        env=env,
    )
    assert too_long.returncode == 3 and too_long.stderr.startswith("error: skill big: content")
    proj.skill("project", "taken")
    body.write_text("x")
    taken = run_cli(
        "home",
        "skills",
        "save",
        "taken",
        "--description",
        "d",
        "--file",
        str(body),
        *project,
        env=env,
    )
    assert taken.returncode == 1 and "Traceback" not in taken.stderr
    missing = run_cli("home", "skills", "save", "x", *project, env=env)
    assert missing.returncode == 2


def test_skill_folders_with_undecodable_or_control_names_are_not_listed(proj: Project) -> None:
    skills = os.fsencode(proj.home / "skills")
    for raw in (b"bad\xff", b"ctl\x1b[31m"):
        os.mkdir(skills + b"/" + raw)
        with open(skills + b"/" + raw + b"/SKILL.md", "wb") as handle:
            handle.write(b"---\ndescription: hidden\n---\n")
    proj.skill("agent", "good", "shown")
    assert proj.listing() == [("good", "shown", "agent", False)]
