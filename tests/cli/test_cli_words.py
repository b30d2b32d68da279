"""What the command line says is true and reads alike everywhere (05 §3).

* A skill bundle whose alias is no portable folder name: ``config validate`` said "import
  refuses it", but import takes it (without its skills), and it warned about ``research.tools``,
  an alias that travels with its skills.
* ``doctor --path DIR`` listed an export leftover twice when ``DIR`` held a destination the
  install had recorded.
* ``config validate`` printed its warnings bare and ended without a verdict.
* A byte count reached a person raw (``needs about 671559680 bytes``): sizes go through
  ``rules/units.human_size``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.hostile_zips import clean_env as user_env
from support.hostile_zips import make_project
from support.installs import copy_example, run_cli
from support.race_helpers import can_mount_tmpfs, unmount
from support.zeroclaw_golden import golden_copy

RAW_BYTES = re.compile(r"\b\d{4,} bytes\b")


def test_a_skill_alias_warning_says_what_export_and_import_do(tmp_path: Path) -> None:
    install = tmp_path / "install"
    imported = run_cli(
        [
            "--install",
            str(install),
            "agents",
            "import",
            str(golden_copy("g-skill-aliases", tmp_path)),
            "--accept-risks",
        ]
    )
    # import takes a bundle naming skill aliases that are no portable folder names
    assert imported.returncode == 0, imported.stderr
    checked = run_cli(["--install", str(install), "config", "validate"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = [line for line in checked.stdout.splitlines() if "non_portable_alias" in line]
    assert [line.split()[2] for line in lines] == ["skill_bundles.con:", 'skill_bundles."notes.":']
    for line in lines:
        assert "import refuses" not in line
        assert "an import adds the entry without them" in line
    assert "research.tools" not in checked.stdout  # it travelled, skills and all
    assert (install / "shared" / "skills" / "research.tools").is_dir()


def test_a_non_portable_agent_alias_warning_still_says_import_refuses(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    text = (install / "config.toml").read_text()
    (install / "config.toml").write_text(text.replace("[agents.writer]", "[agents.con]", 1))
    checked = run_cli(["--install", str(install), "config", "validate"])
    line = next(x for x in checked.stdout.splitlines() if "agents.con:" in x)
    assert "bundle verify and import refuse its bundle" in line
    exported = run_cli(
        ["--install", str(install), "agents", "export", "con", "--out", str(tmp_path / "b")]
    )
    target = copy_example(tmp_path / "target")
    refused = run_cli(
        ["--install", str(target), "agents", "import", str(tmp_path / "b"), "--accept-risks"]
    )
    assert exported.returncode == 0 and refused.returncode != 0, exported.stderr


def test_config_validate_marks_each_warning_and_ends_with_a_verdict(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    checked = run_cli(["--install", str(install), "config", "validate"])
    assert checked.returncode == 0, checked.stderr
    *findings, verdict = checked.stdout.splitlines()
    assert findings and all(line.startswith("warning: fallback_cycle ") for line in findings)
    assert verdict == f"config valid ({len(findings)} warnings): {install / 'config.toml'}"
    quiet = run_cli(["--install", str(install), "--quiet", "config", "validate"])
    assert (quiet.returncode, quiet.stdout) == (0, "")
    text = (install / "config.toml").read_text()
    (install / "config.toml").write_text(
        text.replace('risk_profile = "careful"', 'risk_profile = "nope"', 1)
    )
    broken = run_cli(["--install", str(install), "config", "validate"])
    assert broken.returncode == 3
    assert all(
        line.startswith(("warning: ", "dangling_reference ")) for line in broken.stdout.splitlines()
    ), broken.stdout
    assert broken.stderr == f"error: 1 error(s) in {install / 'config.toml'}\n"


def test_doctor_path_names_a_leftover_once(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    folder = tmp_path / "exports"
    folder.mkdir()
    done = run_cli(
        ["--install", str(install), "agents", "export", "researcher", "--out", str(folder / "b")]
    )
    assert done.returncode == 0, done.stderr
    # what a killed export to the recorded destination leaves: its record and staging folder
    (folder / ".zeroclaw-export-abcdefghijkl.target").write_text("b\n")
    (folder / ".zeroclaw-export-abcdefghijkl").mkdir()
    doctor = run_cli(["--install", str(install), "doctor", "--path", str(folder)])
    assert doctor.returncode == 3
    problems = [line for line in doctor.stdout.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 1, doctor.stdout
    assert ".zeroclaw-export-abcdefghijkl" in problems[0]
    assert doctor.stderr == "error: doctor found 1 problem(s)\n"


def test_an_oversized_agent_yaml_is_refused_with_its_limit_in_units(tmp_path: Path) -> None:
    project, _home = make_project(tmp_path)
    (project / "Agent.yaml").write_text("name: demo\n" + "#" * (1 << 20) + "\n")
    user = tmp_path / "user"
    user.mkdir()
    shown = run_cli(["home", "show", "--project", str(project)], exact_env=user_env(user))
    assert shown.returncode == 3, shown.stderr
    assert "larger than 1.0 MiB" in shown.stderr and not RAW_BYTES.search(shown.stderr)


def test_a_restore_that_cannot_fit_gives_both_sizes_in_units(tmp_path: Path) -> None:
    project, home = make_project(tmp_path)
    (home / "files" / "big.bin").write_bytes(bytes(3 << 20))
    user = tmp_path / "user"
    user.mkdir()
    backup = tmp_path / "b.zip"
    made = run_cli(
        ["home", "backup", "--to", str(backup), "--project", str(project)], exact_env=user_env(user)
    )
    assert made.returncode == 0, made.stderr
    small = tmp_path / "small"
    if not can_mount_tmpfs(small):
        pytest.skip("this host forbids mounting a tmpfs (needed for a full filesystem)")
    try:
        args = ["home", "restore", str(backup), "--home", str(small / "home")]
        done = run_cli(args, exact_env=user_env(user))
    finally:
        unmount(small)
    assert done.returncode == 1, done.stderr
    assert re.search(r"the backup needs 3\.\d MiB but \S+ has \d+\.\d [KM]iB free", done.stderr), (
        done.stderr
    )
    assert not RAW_BYTES.search(done.stderr)
