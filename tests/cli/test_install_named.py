"""An install that is missing, empty or in the way is named, with the way to name another.

A new user who forgot ``--install`` read ``install folder … does not exist`` or ``no config.toml
in …`` with no next step, and ``agent alias researcher is taken in this install`` named no
install at all. Each of these says the folder bundler looked at and that ``--install DIR`` or
``ZEROCLAW_CONFIG_DIR`` points at another (one wording, ``hints.looked_at``). And the README's
first command installs into ``.venv``, so it says that plain ``bundler`` is not on ``PATH``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.bundlefactory import export_bundle, write_install
from support.installs import copy_example, one_error, run_cli

REPO = Path(__file__).resolve().parents[2]
WAY = "to use another install, give --install DIR or set ZEROCLAW_CONFIG_DIR"


def _names(stderr: str, folder: Path) -> None:
    assert one_error(stderr), stderr
    assert f"{folder} (the install bundler looked at); {WAY}" in stderr, stderr


@pytest.mark.parametrize(
    "args",
    [
        ["agents", "list"],
        ["agents", "export", "researcher", "--out", "OUT"],
        ["config", "validate"],
        ["config", "get", "agents"],
        ["config", "set", "agents.researcher.enabled", "false"],
    ],
    ids=lambda args: "-".join(args[:2]),
)
def test_forgetting_install_names_the_default_folder_and_the_way_to_another(
    tmp_path: Path, args: list[str]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    args = [str(tmp_path / "out") if arg == "OUT" else arg for arg in args]
    done = run_cli(args, env={"HOME": str(home)})
    assert done.returncode == 1
    _names(done.stderr, home / ".zeroclaw")
    assert list(home.iterdir()) == []  # asking created nothing


@pytest.mark.parametrize(
    "args",
    [["agents", "import", "BUNDLE", "--dry-run", "--accept-risks"], ["recover", "--install", "ME"]],
    ids=["import-dry-run", "recover"],
)
def test_a_missing_install_folder_is_named_with_the_way_to_another(
    tmp_path: Path, args: list[str]
) -> None:
    bundle = export_bundle(write_install(tmp_path / "source"), tmp_path / "bundle")
    missing = tmp_path / "nowhere"
    args = [str(bundle) if a == "BUNDLE" else str(missing) if a == "ME" else a for a in args]
    done = run_cli(args, env={"ZEROCLAW_CONFIG_DIR": str(missing)})
    assert done.returncode == 1
    assert "the install folder does not exist" in done.stderr
    _names(done.stderr, missing)
    assert not missing.exists()


def test_a_taken_alias_names_the_install_it_is_taken_in(tmp_path: Path) -> None:
    bundle = export_bundle(write_install(tmp_path / "source"), tmp_path / "bundle")
    target = copy_example(tmp_path)  # holds its own researcher
    before = (target / "config.toml").read_bytes()
    done = run_cli(
        ["agents", "import", str(bundle), "--accept-risks"],
        env={"ZEROCLAW_CONFIG_DIR": str(target)},
    )
    assert done.returncode == 1
    assert "agent alias researcher is taken (choose another with --as NEW) in" in done.stderr
    _names(done.stderr, target)
    assert (target / "config.toml").read_bytes() == before


def test_doctor_names_the_folder_it_found_no_install_in(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run_cli(["doctor"], env={"HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert f"no install (no config.toml) at {home / '.zeroclaw'} (the install bundler" in (
        done.stdout
    )
    assert WAY in done.stdout


def test_the_readme_says_bundler_is_in_the_venv_not_on_path() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    first = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block, after = first.split("```sh\n", 1)[1].split("```\n", 1)
    # the first command runs the program it installed, wherever PATH points
    assert re.findall(r"(?<![\w/.])bundler\b", block) == []
    assert block.count(".venv/bin/bundler ") >= 3
    said = after.split("```sh", 1)[0]
    for needed in (
        "PATH",
        ".venv/bin/bundler",
        "pipx install .",
        "--install DIR",
        "ZEROCLAW_CONFIG_DIR",
    ):
        assert needed in said, needed
