"""Unreadable carried entries fail the export; the root alias rule is reported (02 §7.2, 01 §3).

Every entry an export carries is either copied, skipped and counted for a reason 02 §7.2 lists,
or it refuses the export. An entry that cannot be read (permission denied, an I/O error) is in
none of the skip categories: the export fails with exit 1, publishes nothing (the destination
and its parent are as they were, no staging left) and names the path in one error line. A skill
folder is such an entry too: it must never turn into a ``dropped`` row.

"Permission denied" is real: the CLI drops to uid 65534 before it runs. "I/O error" is real as
well: strace fails the one system call that reads the entry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.export_kit import (
    cli_env,
    export_cmd,
    hidden_leftovers,
    make_install,
    run,
    snapshot,
    workspace,
)
from support.faultinject import FaultRun, ptrace_unavailable, run_with_fault, trace_calls
from support.kit import cli_command

NOBODY = 65534

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to drop privileges to uid 65534 in the child"
)


def _as_nobody(cmd: list[str]) -> list[str]:
    assert cmd[1:3] == ["-m", "bundler"]
    return [*cli_command(as_nobody=True), *cmd[3:]]


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder another user can traverse (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="bundler-unreadable-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        for root, dirs, _files in os.walk(folder):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
        shutil.rmtree(folder)


def _open_to_nobody(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def _nobody_setup(shared_tmp: Path) -> tuple[Path, Path, Path]:
    """An install user 65534 can read, and an output folder it owns holding a first bundle."""
    install = make_install(shared_tmp / "install")
    _open_to_nobody(shared_tmp / "install")
    _open_to_nobody(shared_tmp / "install-writer")
    outdir = shared_tmp / "outdir"
    outdir.mkdir()
    os.chown(outdir, NOBODY, NOBODY)
    out = outdir / "bundle"
    first = run(_as_nobody(export_cmd(install, out)), cwd="/")
    assert first.returncode == 0, first.stderr
    return install, outdir, out


def _assert_failed_cleanly(
    done: subprocess.CompletedProcess[str] | FaultRun,
    outdir: Path,
    out: Path,
    before: dict[str, tuple[int, bytes | None]],
    named: str,
) -> None:
    """Exit 1, one error line naming the path, the old bundle as it was, no staging left."""
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") and named in done.stderr, done.stderr
    assert snapshot(out) == before
    assert hidden_leftovers(outdir) == []


# --- permission denied -----------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize(
    "mode", [0o000, 0o444, 0o111], ids=["no-access", "listable-not-searchable", "search-only"]
)
def test_unreadable_skill_folder_fails_the_export_and_publishes_nothing(
    shared_tmp: Path, mode: int
) -> None:
    install, outdir, out = _nobody_setup(shared_tmp)
    before = snapshot(out)
    os.chmod(install / "shared" / "skills" / "research_tools" / "search", mode)
    done = run(_as_nobody(export_cmd(install, out, "--force", "--json")), cwd="/")
    assert done.returncode == 1, done.stdout
    payload = json.loads(done.stdout)
    assert payload["ok"] is False
    assert "skills/research_tools/search" in payload["error"]["path"]
    assert "not a skill" not in done.stdout
    done = run(_as_nobody(export_cmd(install, out, "--force")), cwd="/")
    _assert_failed_cleanly(done, outdir, out, before, "skills/research_tools/search")


@needs_root
def test_unreadable_skill_md_fails_the_export(shared_tmp: Path) -> None:
    """A readable skill folder whose ``SKILL.md`` cannot be read is not "not a skill"."""
    install, outdir, out = _nobody_setup(shared_tmp)
    before = snapshot(out)
    os.chmod(install / "shared" / "skills" / "research_tools" / "search" / "SKILL.md", 0o000)
    done = run(_as_nobody(export_cmd(install, out, "--force")), cwd="/")
    _assert_failed_cleanly(done, outdir, out, before, "skills/research_tools/search/SKILL.md")


@needs_root
def test_unreadable_skill_bundle_folder_fails_the_export(shared_tmp: Path) -> None:
    install, outdir, out = _nobody_setup(shared_tmp)
    before = snapshot(out)
    os.chmod(install / "shared" / "skills" / "research_tools", 0o000)
    done = run(_as_nobody(export_cmd(install, out, "--force")), cwd="/")
    _assert_failed_cleanly(done, outdir, out, before, "research_tools")


@needs_root
def test_unreadable_shared_skills_root_fails_the_export(shared_tmp: Path) -> None:
    install, outdir, out = _nobody_setup(shared_tmp)
    before = snapshot(out)
    os.chmod(install / "shared" / "skills", 0o000)
    done = run(_as_nobody(export_cmd(install, out, "--force")), cwd="/")
    _assert_failed_cleanly(done, outdir, out, before, "shared/skills")


@needs_root
@pytest.mark.parametrize("mode", [0o000, 0o444], ids=["no-access", "listable-not-searchable"])
def test_unreadable_workspace_subfolder_fails_the_export(shared_tmp: Path, mode: int) -> None:
    install, outdir, out = _nobody_setup(shared_tmp)
    before = snapshot(out)
    os.chmod(workspace(install) / "notes" / "d2", mode)
    done = run(_as_nobody(export_cmd(install, out, "--force")), cwd="/")
    _assert_failed_cleanly(done, outdir, out, before, "workspace/notes/d2")


@needs_root
def test_unsearchable_workspace_root_fails_the_export_naming_it(shared_tmp: Path) -> None:
    """Listable but not searchable: even the private ``memory`` entry cannot be classified."""
    install, outdir, out = _nobody_setup(shared_tmp)
    before = snapshot(out)
    os.chmod(workspace(install), 0o444)
    done = run(_as_nobody(export_cmd(install, out, "--force")), cwd="/")
    _assert_failed_cleanly(done, outdir, out, before, "workspace")
    assert "could not write the bundle" not in done.stderr


@needs_root
def test_unreadable_memory_folder_refuses_include_memory_naming_it(shared_tmp: Path) -> None:
    """``--include-memory`` with a memory folder it cannot enter: not "there is no brain.db"."""
    install, outdir, out = _nobody_setup(shared_tmp)
    before = snapshot(out)
    os.chmod(workspace(install) / "memory", 0o000)
    done = run(_as_nobody(export_cmd(install, out, "--force", "--include-memory")), cwd="/")
    _assert_failed_cleanly(done, outdir, out, before, "workspace/memory")
    assert "there is no" not in done.stderr and "symbolic link" not in done.stderr


# --- I/O errors ------------------------------------------------------------------------------


def _skill_io_error(
    tmp_path: Path,
    syscall: str,
    fragment: str,
    named: str,
    nth: int = 0,
    extra: dict[str, bytes] | None = None,
) -> None:
    """EIO on the ``nth`` call of ``syscall`` whose strace line holds ``fragment``.

    ``extra`` adds workspace files (relative path -> bytes) before anything runs.
    """
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = make_install(tmp_path / "install")
    for rel, data in (extra or {}).items():
        (workspace(install) / rel).write_bytes(data)
    parent = tmp_path / "dest"
    parent.mkdir()
    out = parent / "bundle"
    assert run(export_cmd(install, out)).returncode == 0
    before = snapshot(out)
    cmd = export_cmd(install, out, "--force")
    # the export is deterministic: a clean run leaves the bundle byte for byte as it was
    done, calls = trace_calls(cmd, [syscall], env=cli_env(), cwd="/")
    assert done.returncode == 0, done.stderr
    assert snapshot(out) == before and hidden_leftovers(parent) == []
    wanted = [call for call in calls if fragment in call.line]
    assert wanted, f"the export made no {syscall} call on {fragment}"
    result = run_with_fault(cmd, syscall, wanted[nth].index, "EIO", env=cli_env(), cwd="/")
    assert result.fired, "the fault did not fire"
    _assert_failed_cleanly(result, parent, out, before, named)


def test_io_error_opening_a_skill_folder_fails_the_export(tmp_path: Path) -> None:
    _skill_io_error(tmp_path, "openat", 'research_tools>, "search"', "skills/research_tools/search")


def test_io_error_reading_skill_md_fails_the_export(tmp_path: Path) -> None:
    _skill_io_error(
        tmp_path, "newfstatat", '/search>, "SKILL.md"', "skills/research_tools/search/SKILL.md"
    )


def test_io_error_reopening_a_selected_skill_folder_for_the_copy_fails_the_export(
    tmp_path: Path,
) -> None:
    """The second open (for the copy) failing with EIO is an unreadable entry, not a race."""
    _skill_io_error(
        tmp_path,
        "openat",
        'research_tools>, "search"',
        "cannot read skills/research_tools/search",
        1,
    )


def test_io_error_looking_for_a_sqlite_sidecar_fails_the_export(tmp_path: Path) -> None:
    """Whether ``cache.db`` is a live store depends on its ``-wal``: an I/O error looking for
    it must not be taken for "no sidecar, a quiet store, copy it"."""
    _skill_io_error(
        tmp_path,
        "newfstatat",
        '"cache.db-wal"',
        "workspace/notes/cache.db-wal",
        extra={"notes/cache.db": b"SQLite format 3\x00" + b"\x00" * 200},
    )
