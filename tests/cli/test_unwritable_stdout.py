"""A stdout that cannot take the result (a full disk, ``>/dev/full``, a file size limit, a reader
gone) is reported like any I/O error: one ``error:`` line on stderr, exit 1; and a command that
has committed its change says that the change stands, exit 0 with a warning (05 §2: a failure
after the commit point). Both used to end in a Python traceback with exit 1, even after an
export or an import had been made.

A reader that went away (EPIPE, ``| head``) wanted no more: the command ends quietly with exit
1, unless its change was committed, which is then no failure."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.hostile_zips import make_project
from support.installs import copy_example
from support.kit import clean_env, cli_command, one_error


def run_to(stdout: int, args: Sequence[str], home: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI with ``stdout`` as its standard output, stderr captured."""
    return subprocess.run(
        [*cli_command(), *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env({"HOME": str(home)}),
        timeout=120,
    )


def to_full_disk(args: Sequence[str], home: Path) -> subprocess.CompletedProcess[str]:
    """Standard output on /dev/full: every write fails with ENOSPC."""
    with open("/dev/full", "wb") as full:
        return run_to(full.fileno(), args, home)


def to_a_gone_reader(args: Sequence[str], home: Path) -> subprocess.CompletedProcess[str]:
    """Standard output on a pipe nobody reads any more: every write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return run_to(write_end, args, home)
    finally:
        os.close(write_end)


@pytest.fixture
def install(tmp_path: Path) -> Path:
    return copy_example(tmp_path)


@pytest.fixture
def bundle(tmp_path: Path, install: Path) -> Path:
    out = tmp_path / "made.bundle"
    done = to_full_disk(
        ["--install", str(install), "agents", "export", "researcher", "--out", str(out)], tmp_path
    )
    assert (out / "zeroclaw-agent.toml").is_file(), done.stderr
    return out


def test_a_stdout_that_cannot_be_written_is_one_error_line(
    tmp_path: Path, install: Path, bundle: Path
) -> None:
    for args in (
        ["--install", str(install), "agents", "list"],
        ["--json", "--install", str(install), "agents", "list"],
        ["bundle", "verify", str(bundle)],
        ["--help"],
    ):
        done = to_full_disk(args, tmp_path)
        assert done.returncode == 1, (args, done.stderr)
        assert one_error(done.stderr), (args, done.stderr)
        assert "standard output (No space left on device)" in done.stderr


def test_a_failure_whose_json_cannot_be_written_is_said_on_stderr(tmp_path: Path) -> None:
    missing = tmp_path / "missing.bundle"
    done = to_full_disk(["--json", "bundle", "verify", str(missing)], tmp_path)
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert str(missing) in done.stderr


def test_a_committed_change_whose_result_cannot_be_written_stands_with_a_warning(
    tmp_path: Path, install: Path, bundle: Path
) -> None:
    target = copy_example(tmp_path / "target")
    project, _ = make_project(tmp_path)
    runs = [
        ["--install", str(install), "agents", "export", "researcher", "--out", str(tmp_path / "b")],
        ["--json", "--install", str(install), "agents", "export", "researcher", "--out",
         str(tmp_path / "c")],
        ["--install", str(target), "agents", "import", str(bundle), "--as", "r2", "--accept-risks"],
        ["bundle", "pack", str(bundle), str(tmp_path / "b.tar")],
        ["home", "backup", "--project", str(project), "--to", str(tmp_path / "home.zip")],
    ]  # fmt: skip
    for args in runs:
        done = to_full_disk(args, tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr and "error:" not in done.stderr
        assert done.stderr.splitlines()[-1] == (
            "warning: the result could not be written to standard output (No space left on "
            "device); the change was made and stands"
        ), (args, done.stderr)
    for made in ("b/zeroclaw-agent.toml", "c/zeroclaw-agent.toml", "b.tar", "home.zip"):
        assert (tmp_path / made).is_file()
    assert "[agents.r2]" in (target / "config.toml").read_text()


def test_a_reader_gone_ends_a_command_quietly_and_a_committed_change_is_no_failure(
    tmp_path: Path, install: Path
) -> None:
    listed = to_a_gone_reader(["--install", str(install), "agents", "list"], tmp_path)
    assert listed.returncode == 1 and listed.stderr == ""
    out = tmp_path / "piped.bundle"
    exported = to_a_gone_reader(
        ["--install", str(install), "agents", "export", "researcher", "--out", str(out)], tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.splitlines()[-1] == (
        "warning: the reader of standard output went away before the result was written; the "
        "change was made and stands"
    )
    assert (out / "zeroclaw-agent.toml").is_file()
