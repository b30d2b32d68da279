"""Small promises kept: no ``.config.lock`` left in a folder that is not an
install; ``home skills save`` over an agent skill needs ``--force``; ``home backup --to DIR``
writes a timestamped zip inside an existing folder."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support import bundlefactory as bf
from support.hostile_zips import make_project
from support.kit import run_cli


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env={"HOME": str(home)}, stdin=subprocess.DEVNULL)


def test_refused_operations_leave_no_lock_in_a_folder_that_is_not_an_install(
    tmp_path: Path,
) -> None:
    bundle = bf.build_bundle(tmp_path / "bundle")
    folder = tmp_path / "not-an-install"
    folder.mkdir()
    refused = cli("--install", str(folder), "agents", "import", str(bundle), home=tmp_path)
    assert refused.returncode == 1 and "risk flag" in refused.stderr
    assert list(folder.iterdir()) == []
    refused = cli(
        "--install", str(folder), "config", "set", "agents.a.enabled", "true", home=tmp_path
    )
    assert refused.returncode == 1, refused.stderr
    assert list(folder.iterdir()) == []
    # an install keeps its lock file: other writers may be waiting on it
    done = cli(
        "--install", str(folder), "agents", "import", str(bundle), "--accept-risks", home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert (folder / ".config.lock").exists()


def test_saving_over_an_agent_skill_needs_force(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    first, second = tmp_path / "first.md", tmp_path / "second.md"
    first.write_text("# first\n")
    second.write_text("# second\n")
    save = ["home", "skills", "save", "mine", "--description", "d", "--project", str(project)]
    assert cli(*save, "--file", str(first), home=user).returncode == 0
    skill = home / "skills" / "mine" / "SKILL.md"
    before = skill.read_bytes()
    again = cli(*save, "--file", str(second), home=user)
    assert again.returncode == 1
    assert again.stderr == "error: the agent already has a skill mine; pass --force to replace it\n"
    assert skill.read_bytes() == before
    forced = cli(*save, "--file", str(second), "--force", home=user)
    assert forced.returncode == 0, forced.stderr
    assert skill.read_text().endswith("# second\n")


def test_backup_to_an_existing_folder_writes_a_timestamped_zip_inside(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    folder = tmp_path / "my backups"
    folder.mkdir()
    made = []
    for _ in range(2):
        done = cli(
            "home", "backup", "--project", str(project), "--to", str(folder), "--quiet", home=user
        )
        assert done.returncode == 0, done.stderr
        made.append(Path(done.stdout.strip()))
    assert made[0] != made[1]
    assert sorted(folder.iterdir()) == sorted(made)
    for path in made:
        assert re.fullmatch(r"backup-\d{8}-\d{6}(-\d+)?\.zip", path.name), path
        assert cli("home", "verify-backup", str(path), home=user).returncode == 0
