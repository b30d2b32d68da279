"""03 §4: an undo never deletes or moves a byte the user (or the running agent) wrote.

A real install is exported by the real exporter and imported through the real CLI; then the
agent "works" in its workspace (edits a file, writes new ones) and the import is undone. The
config entries go, the files still as imported go, the folders then empty go; every other
file stays where it is, listed with a ``mv`` line to paste; the receipt is marked undone.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import tomli_w
from support import bundlefactory as bf
from support.faultinject import ptrace_unavailable
from support.installs import run_cli
from support.kit import clean_env, cli_command, one_error, tree_snapshot

from bundler.rules import tomlcompat

USER_CONFIG = (
    "# mine: keep every byte\n"
    '[agents.lead]\nmodel_provider = "anthropic.prod"\nrisk_profile = "strict"\n\n'
    '[providers.models.anthropic.prod]\napi_key = "sk-local-prod-key-1234567890"\n'
    'model = "claude"\n\n'
    '[risk_profiles.strict]\nlevel = "readonly"\n'
)
WORKSPACE = Path("agents") / bf.ROOT_AGENT / "workspace"
SKILLS = Path("shared") / "skills" / bf.SKILL_BUNDLE


def bundler(install: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["--install", str(install), *args])


def imported(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(install, receipt, bundle): a bundle exported from a real install, imported."""
    bundle = bf.export_bundle(bf.write_install(tmp_path / "source"), tmp_path / "bundle")
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text(USER_CONFIG, encoding="utf-8")
    done = bundler(install, "agents", "import", str(bundle), "--accept-risks", "--json")
    assert done.returncode == 0, done.stderr
    return install, Path(json.loads(done.stdout)["receipt"]), bundle


def agent_works(install: Path) -> Path:
    """What a running agent does at once: edit a file it was given, write new ones."""
    workspace = install / WORKSPACE
    with (workspace / "notes" / "today.md").open("a") as notes:
        notes.write("- wrote the summary\n")
    (workspace / "notes" / "agent-log.md").write_text("started\n")
    (workspace / "scratch").mkdir()
    (workspace / "scratch" / "draft.txt").write_text("a draft\n")
    return workspace


def undo(install: Path, receipt: Path, *extra: str) -> dict[str, object]:
    done = bundler(install, "agents", "import", "--undo", str(receipt), "--json", *extra)
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


def test_undo_removes_the_files_still_as_imported_and_keeps_what_the_agent_wrote(
    tmp_path: Path,
) -> None:
    install, receipt, _ = imported(tmp_path)
    workspace = agent_works(install)
    done = undo(install, receipt)
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG
    assert "agents.researcher" in done["removed"]  # type: ignore[operator]
    # the files the import added and nobody touched are gone, and the folders left empty
    for rel in ("README.md", "data/blob.bin", "notes/memory/kept.txt", "notes/MEMORY_SNAPSHOT.md"):
        assert not (workspace / rel).exists(), rel
    assert not (workspace / "data").exists() and not (workspace / "notes" / "memory").exists()
    assert not (install / SKILLS).exists()  # the skills were not touched: removed whole
    # what the agent wrote is where it wrote it, byte for byte
    assert (workspace / "notes" / "today.md").read_text() == (
        "- read the paper\n- wrote the summary\n"
    )
    assert (workspace / "notes" / "agent-log.md").read_text() == "started\n"
    assert (workspace / "scratch" / "draft.txt").read_text() == "a draft\n"
    kept = {Path(item["path"]): item["why"] for item in done["kept"]}  # type: ignore[attr-defined]
    assert kept == {
        workspace / "notes" / "today.md": "changed since the import",
        workspace / "notes" / "agent-log.md": "new since the import",
        workspace / "scratch" / "draft.txt": "new since the import",
    }
    assert done["removed_files"] == len(bf.WORKSPACE_FILES) - 1 + len(bf.SKILL_FILES)
    assert done["removed_folders"] == [str(install / SKILLS)]
    # the receipt is marked, and the listing says so
    marked = tomlcompat.loads(receipt.read_text(encoding="utf-8"))
    assert marked["undone"]["kept_files"] == 3
    assert marked["undone"]["kept_folders"] == [WORKSPACE.as_posix()]
    listed = bundler(install, "agents", "imports")
    assert "undone, 3 files kept" in listed.stdout, listed.stdout
    rows = json.loads(bundler(install, "agents", "imports", "--json").stdout)["imports"]
    assert rows[0]["state"] == "undone" and rows[0]["kept_files"] == 3
    # the mv line moves the kept folder aside when pasted
    (line,) = done["mv"]  # type: ignore[misc]
    assert shlex.split(line) == ["mv", "-n", "--", str(workspace), f"{workspace}.undone"]
    pasted = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=False)
    assert pasted.returncode == 0, pasted.stderr
    assert (Path(f"{workspace}.undone") / "scratch" / "draft.txt").read_text() == "a draft\n"
    again = bundler(install, "agents", "import", "--undo", str(receipt))
    assert again.returncode == 1 and "already undone" in again.stderr


def test_the_human_report_lists_each_kept_file_and_the_mv_line(tmp_path: Path) -> None:
    install, receipt, _ = imported(tmp_path)
    workspace = agent_works(install)
    done = bundler(install, "agents", "import", "--undo", "last")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"kept {workspace}/notes/today.md (changed since the import)" in lines
    assert f"kept {workspace}/scratch/draft.txt (new since the import)" in lines
    assert "to move what was kept aside:" in lines
    assert f"  mv -n -- {workspace} {workspace}.undone" in lines


def test_undo_after_the_workspace_was_moved_aside_succeeds(tmp_path: Path) -> None:
    install, receipt, _ = imported(tmp_path)
    workspace = agent_works(install)
    aside = tmp_path / "aside"
    workspace.rename(aside)
    before = tree_snapshot(aside)
    done = undo(install, receipt)
    assert done["already_gone"] == [str(workspace)] and done["kept"] == []
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG
    assert not (install / "agents").exists()  # the folders the import made for it, empty now
    assert tree_snapshot(aside) == before
    rows = json.loads(bundler(install, "agents", "imports", "--json").stdout)["imports"]
    assert rows[0]["state"] == "undone" and rows[0]["kept_files"] == 0


def test_undo_with_a_filled_secret_and_an_edited_entry_saves_the_edit_and_goes_on(
    tmp_path: Path,
) -> None:
    install, receipt, _ = imported(tmp_path)
    text = (install / "config.toml").read_text(encoding="utf-8")
    assert 'model = "gpt-4o"' in text
    (install / "config.toml").write_text(text.replace('model = "gpt-4o"', 'model = "gpt-5"'))
    agent_works(install)
    done = undo(install, receipt)
    assert done["edited"] == ["providers.models.openai.backup"]
    saved = Path(str(done["saved"]))
    assert 'model = "gpt-5"' in saved.read_text(encoding="utf-8")
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG


def test_a_reimport_after_a_partial_undo_meets_the_kept_folder_and_names_it(
    tmp_path: Path,
) -> None:
    install, receipt, bundle = imported(tmp_path)
    workspace = agent_works(install)
    undo(install, receipt)
    before = tree_snapshot(install)
    again = bundler(install, "agents", "import", str(bundle), "--accept-risks")
    assert again.returncode == 1 and one_error(again.stderr), again.stderr
    assert f"{workspace} exists and is not empty" in again.stderr
    assert tree_snapshot(install) == before


def test_undo_dry_run_says_what_would_go_and_stay_and_changes_nothing(tmp_path: Path) -> None:
    install, receipt, _ = imported(tmp_path)
    workspace = agent_works(install)
    before = tree_snapshot(tmp_path)
    dry = undo(install, receipt, "--dry-run")
    assert tree_snapshot(tmp_path) == before
    real = undo(install, receipt)
    for key in ("removed", "removed_files", "removed_folders", "kept", "mv"):
        assert dry[key] == real[key], key
    assert dry["dry_run"] is True and dry["kept"]
    assert not (workspace / "README.md").exists()


def test_a_symlink_planted_in_the_workspace_is_kept_and_never_followed(tmp_path: Path) -> None:
    """An imported file replaced by a link to a file outside holding the very same bytes, and a
    link to an outside folder: were either followed, the outside file would match the receipt
    and be removed."""
    install, receipt, _ = imported(tmp_path)
    workspace = install / WORKSPACE
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "README.md").write_bytes(bf.WORKSPACE_FILES["README.md"])
    (outside / "data").mkdir()
    (outside / "data" / "blob.bin").write_bytes(bf.WORKSPACE_FILES["data/blob.bin"])
    (workspace / "README.md").unlink()
    (workspace / "README.md").symlink_to(outside / "README.md")
    (workspace / "linked").symlink_to(outside / "data")
    before = tree_snapshot(outside)
    done = undo(install, receipt)
    assert tree_snapshot(outside) == before
    assert os.readlink(workspace / "README.md") == str(outside / "README.md")
    assert os.readlink(workspace / "linked") == str(outside / "data")
    kept = {Path(item["path"]): item["why"] for item in done["kept"]}  # type: ignore[attr-defined]
    assert kept == {
        workspace / "README.md": "a symbolic link",
        workspace / "linked": "a symbolic link",
    }
    assert not (workspace / "data").exists()


def _undo_slowed(install: Path, receipt: Path, log: Path) -> subprocess.Popen[str]:
    """The undo under strace, each renameat2 (every file it takes) held 0.4 s on entry."""
    return subprocess.Popen(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            str(log),
            "-e",
            "trace=renameat2",
            "-e",
            "inject=renameat2:delay_enter=400000",
            *cli_command(),
            "--install",
            str(install),
            "agents",
            "import",
            "--undo",
            str(receipt),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


def test_a_file_swapped_or_written_after_the_check_is_kept_never_followed(tmp_path: Path) -> None:
    """Between the undo's first reading and the rename that takes a file, the agent swaps one
    imported file for a link to an outside copy of it and appends to another: the link is
    moved, never followed, and put back; the written file is put back with its new bytes."""
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install, receipt, _ = imported(tmp_path)
    workspace = install / WORKSPACE
    outside = tmp_path / "outside.md"
    outside.write_bytes(bf.WORKSPACE_FILES["README.md"])
    before = outside.read_bytes()
    log = tmp_path / "strace.log"
    undoing = _undo_slowed(install, receipt, log)
    deadline = time.monotonic() + 60
    while not list(install.glob(".bundler-import-*/journal.toml")):
        assert undoing.poll() is None and time.monotonic() < deadline, undoing.communicate()
        time.sleep(0.005)
    # the files to take are listed and durable: the check is done, the renames are held
    planted = workspace / ".planted"
    planted.symlink_to(outside)
    planted.rename(workspace / "README.md")
    with (workspace / "notes" / "today.md").open("a") as notes:
        notes.write("- written during the undo\n")
    out, err = undoing.communicate(timeout=120)
    assert undoing.returncode == 0, err
    assert outside.read_bytes() == before and not outside.is_symlink()
    assert os.readlink(workspace / "README.md") == str(outside)
    assert (workspace / "notes" / "today.md").read_text() == (
        "- read the paper\n- written during the undo\n"
    )
    kept = {Path(item["path"]) for item in json.loads(out)["kept"]}
    assert kept == {workspace / "README.md", workspace / "notes" / "today.md"}
    assert not (workspace / "data").exists()
    assert not list(install.glob(".bundler-import-*"))
    # each was taken into the staging folder after the change, and put back from it
    renames = [line for line in log.read_text().splitlines() if "renameat2(" in line]
    for name in ("README.md", "today.md"):
        taken = [
            i for i, line in enumerate(renames) if re.search(rf'\(\d+, "{name}", \d+, "\d+"', line)
        ]
        back = [
            i for i, line in enumerate(renames) if re.search(rf'\(\d+, "\d+", \d+, "{name}"', line)
        ]
        assert len(taken) == 1 and len(back) == 1 and taken[0] < back[0], renames


def test_an_empty_workspace_the_import_filled_is_made_again_and_nothing_is_kept(
    tmp_path: Path,
) -> None:
    bundle = bf.export_bundle(bf.write_install(tmp_path / "source"), tmp_path / "bundle")
    install = tmp_path / "install"
    (install / WORKSPACE).mkdir(parents=True)
    (install / "config.toml").write_text(USER_CONFIG, encoding="utf-8")
    done = bundler(install, "agents", "import", str(bundle), "--accept-risks", "--json")
    assert done.returncode == 0, done.stderr
    undone = undo(install, Path(json.loads(done.stdout)["receipt"]))
    assert undone["kept"] == [] and undone["mv"] == []
    assert (install / WORKSPACE).is_dir() and not list((install / WORKSPACE).iterdir())
    rows = json.loads(bundler(install, "agents", "imports", "--json").stdout)["imports"]
    assert rows[0]["state"] == "undone" and rows[0]["kept_files"] == 0


def test_the_mv_line_pastes_as_one_word_per_path_whatever_the_install_is_named(
    tmp_path: Path,
) -> None:
    """The install's folder name is the user's: quotes, spaces and a command substitution in
    it must paste as part of the path, never run."""
    home = tmp_path / "in $(touch PWNED) `touch PWNED2` 'q' \"d\""
    home.mkdir()
    install, receipt, _ = imported(home)
    workspace = agent_works(install)
    done = undo(install, receipt)
    (line,) = done["mv"]  # type: ignore[misc]
    pasted = subprocess.run(["sh", "-c", line], cwd=tmp_path, capture_output=True, text=True)
    assert pasted.returncode == 0, pasted.stderr
    assert not workspace.exists() and Path(f"{workspace}.undone").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [home.name]


def test_a_kept_file_with_a_hostile_name_is_listed_escaped_on_one_line(tmp_path: Path) -> None:
    install, receipt, _ = imported(tmp_path)
    hostile = "log\x1b]0;PWNED\x07\nerror: fake"
    (install / WORKSPACE / hostile).write_text("written by the agent\n")
    done = bundler(install, "agents", "import", "--undo", str(receipt))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert not any(line.startswith("error:") for line in done.stdout.splitlines())
    assert (install / WORKSPACE / hostile).read_text() == "written by the agent\n"


def as_written_before(receipt: Path, *, with_files: bool) -> None:
    """Turn a receipt into the form earlier versions wrote: each folder's files inside the TOML
    (``with_files``), or no file lists at all; the listing beside it is removed."""
    data = tomlcompat.loads(receipt.read_text(encoding="utf-8"))
    sidecar = Path(f"{receipt}.files")
    lines = sidecar.read_text(encoding="utf-8").splitlines()
    del data["listing"]
    for folder in data["folders"]:
        mine, lines = lines[: folder["listed"]], lines[folder["listed"] :]
        del folder["listed"]
        if with_files:
            folder["files"] = [
                [path, int(size), digest]
                for digest, size, path in (line.split(" ", 2) for line in mine)
            ]
    receipt.write_text(tomli_w.dumps(data), encoding="utf-8")
    sidecar.unlink()


def test_a_receipt_holding_its_files_in_its_toml_is_undone_file_by_file(tmp_path: Path) -> None:
    """A receipt whose folders carry their ``files`` inside the TOML (written before the listing
    moved beside it) is read as before: the files still as imported go, the agent's stay."""
    install, receipt, _ = imported(tmp_path)
    as_written_before(receipt, with_files=True)
    workspace = agent_works(install)
    done = undo(install, receipt)
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG
    assert not (workspace / "README.md").exists()
    assert (workspace / "notes" / "agent-log.md").read_text() == "started\n"
    kept = {Path(item["path"]).name for item in done["kept"]}  # type: ignore[attr-defined]
    assert kept == {"today.md", "agent-log.md", "draft.txt"}


@pytest.mark.parametrize("worked", [False, True], ids=["untouched", "agent_worked"])
def test_a_receipt_without_file_digests_removes_a_folder_only_when_all_of_it_is_unchanged(
    tmp_path: Path, worked: bool
) -> None:
    """A receipt an earlier version wrote has each folder's tree digest only: which file
    changed cannot be told, so a folder changed at all is kept whole."""
    install, receipt, _ = imported(tmp_path)
    as_written_before(receipt, with_files=False)
    workspace = install / WORKSPACE
    if worked:
        (workspace / "new.txt").write_text("the agent worked\n")
    done = undo(install, receipt)
    assert not (install / SKILLS).exists()
    assert (workspace / "README.md").exists() is worked
    kept = {item["path"] for item in done["kept"]}  # type: ignore[attr-defined]
    assert len(kept) == (len(bf.WORKSPACE_FILES) + 1 if worked else 0)
    assert (install / "config.toml").read_text(encoding="utf-8") == USER_CONFIG
