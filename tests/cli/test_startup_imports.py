"""06 §1 start-up: a command imports only what it needs (goal: <= 120 ms for ``--help`` and for
``bundle verify`` of a tiny bundle).

Checked on the names of the modules the real CLI process imports, which are stable, rather than
on wall-clock time, which on a shared machine is not. ``python -X importtime`` lists every module
a process imports, on stderr.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

from support.bundlefactory import build_bundle
from support.hostile_zips import make_project
from support.kit import clean_env

# heavy libraries no start-up of these commands needs: the schema checker is compiled, progress
# bars are drawn only on a terminal, TOML is edited (tomlkit) and YAML read only by other commands
HEAVY = ("jsonschema", "rich", "tomlkit", "yaml")

# what reading a bundle folder never needs: the archive reader and writer and the publisher
# (export, pack, unpack, recover), the copier, the install's config reader, the registry client,
# the completion and man page generators, ctypes (renames and flushes only), difflib ("did you
# mean", on a mistyped name only), tempfile (a format 2 store's private copy), the TOML writer
# and the secret sweep's matcher (built only when the bundle holds a secret value, to withhold it)
NOT_FOR_A_FOLDER = (
    "bundler.bundle.archive",
    "bundler.bundle.archive_read",
    "bundler.bundle.archive_write",
    "bundler.bundle.publish",
    "bundler.bundle.recover",
    "bundler.fs.scratch",
    "bundler.cli.completion",
    "bundler.cli.manpage",
    "bundler.cli.parsertree",
    "bundler.fs.copytree",
    "bundler.config.file",
    "bundler.rules.sweeper",
    "ctypes",
    "difflib",
    "tempfile",
    "tomli_w",
)


def _imported(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bundler", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return _names(done.stderr)


def _names(stderr: str) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_help_imports_no_command_module_and_no_heavy_library() -> None:
    modules = _imported("--help")
    assert _heavy(modules) == []
    assert not [m for m in modules if m.startswith(("bundler.bundle", "bundler.install"))]
    assert not [m for m in modules if m.endswith("_cmds")]
    assert not [m for m in modules if m.startswith("bundler.registry")]
    assert sorted(modules.intersection(NOT_FOR_A_FOLDER)) == []


def test_verify_of_a_tiny_bundle_imports_no_heavy_library(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path / "b.bundle")
    modules = _imported("bundle", "verify", str(bundle))
    assert "bundler.bundle.verify" in modules  # the command did run
    assert _heavy(modules) == []
    # inspect is another command of the same group; the installer is another group
    assert "bundler.bundle.inspect" not in modules
    assert not [m for m in modules if m.startswith("bundler.install")]


def test_verify_of_a_bundle_folder_loads_no_archive_publish_or_registry_code(
    tmp_path: Path,
) -> None:
    bundle = build_bundle(tmp_path / "b.bundle")
    modules = _imported("--quiet", "bundle", "verify", str(bundle))
    assert "bundler.bundle.verify" in modules  # the command did run
    assert sorted(modules.intersection(NOT_FOR_A_FOLDER)) == []
    assert not [m for m in modules if m.startswith("bundler.registry")]
    # --quiet and a sound bundle: nothing is printed, so nothing is folded for a terminal
    assert sorted(modules.intersection({"bundler.cli.wrap", "textwrap"})) == []


def test_a_backup_of_a_home_with_a_sound_agent_yaml_imports_no_jsonschema(
    tmp_path: Path,
) -> None:
    project, _home = make_project(tmp_path)
    (tmp_path / "out").mkdir()
    modules = _imported("home", "backup", "--project", str(project), "--to", str(tmp_path / "out"))
    assert "bundler.home.agentyaml" in modules  # Agent.yaml was read and checked
    assert not [m for m in modules if m.split(".")[0] == "jsonschema"]


def test_only_the_named_group_gets_its_command_parsers() -> None:
    from bundler.cli import _group_word, build_parser, main

    assert _group_word(["--install", "bundle", "--json", "agents", "list"]) == "agents"
    assert _group_word(["--json"]) is None
    # a parser built for no group still lists every group, and knows no command of any
    assert build_parser(groups_wanted=()).format_help() == build_parser().format_help()
    assert main(["--install", "/nonexistent", "bundle"]) != 0  # needs a command: still refused


def test_verify_on_a_terminal_draws_no_bar_for_a_short_run(tmp_path: Path) -> None:
    """Progress goes to a terminal, but a run shorter than the delay never imports rich."""
    bundle = build_bundle(tmp_path / "b.bundle")
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "bundler", "bundle", "verify", str(bundle)],
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=clean_env({"TERM": "xterm"}),
    )
    os.close(slave)
    chunks: list[bytes] = []
    while select.select([master], [], [], 60)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert process.wait(timeout=60) == 0
    modules = _names(b"".join(chunks).decode("utf-8", "replace").replace("\r", ""))
    assert "bundler.bundle.verify" in modules
    assert _heavy(modules) == []


def test_main_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """Start-up runs with the collector off; ``main`` turns it back on, after a refusal too, and
    freezes nothing when called inside a longer-lived process (only its own run is frozen)."""
    import gc

    from bundler.cli import main

    bundle = build_bundle(tmp_path / "b.bundle")
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
    assert gc.isenabled()
    assert main(["--quiet", "bundle", "verify", str(bundle)]) == 0
    assert gc.isenabled()
    assert main(["--install", "/nonexistent", "bundle"]) != 0  # refused during start-up
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
    assert gc.get_threshold() == threshold
    gc.disable()
    try:
        main(["--quiet", "bundle", "verify", str(bundle)])
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


_THRESHOLD_AFTER_A_RUN = """
import gc, sys
from bundler.cli import main
before = gc.get_threshold()
sys.argv = ["bundler", "--quiet", "bundle", "verify", sys.argv[1]]
code = main()
print(code, before == gc.get_threshold(), gc.get_threshold()[0])
"""


def test_the_command_lines_own_run_collects_garbage_less_often(tmp_path: Path) -> None:
    """In its own process the command line spaces the collector's passes (a backup's tables
    live until it ends); its young generation still holds a bounded number of objects."""
    from bundler.cli import _YOUNG_OBJECTS

    bundle = build_bundle(tmp_path / "b.bundle")
    done = subprocess.run(
        [sys.executable, "-c", _THRESHOLD_AFTER_A_RUN, str(bundle)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert done.stdout.split() == ["0", "False", str(_YOUNG_OBJECTS)], done.stderr
