"""Every file a user names is read to a bound; a file of bundler's state never waits.

``/dev/zero`` named as an input read until memory ran out; a FIFO in place of a state file (the
Docker config, a restore journal) blocked ``open`` forever; a JSON record nested thousands deep
ended in a RecursionError. Each now ends in one line naming the file. A pipe the user names
('<(…)') is still read as it streams. Found by a fuzzer of command lines.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.installs import copy_example
from support.kit import clean_env, cli_command, one_error, run_cli

from bundler.bundle.leftovers import encode_record
from bundler.errors import Refused
from bundler.registry.auth import Auth


def fifo(tmp_path: Path, name: str = "fifo") -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def refused_at_once(args: list[str], *, cwd: Path | None = None) -> str:
    # a hang is run_cli's TimeoutExpired, which fails the test
    done = run_cli(args, timeout=30, cwd=cwd)
    assert done.returncode in (1, 2, 3) and one_error(done.stderr), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


def test_an_archive_given_as_a_pipe_is_read_as_it_streams(tmp_path: Path) -> None:
    """'bundle verify <(curl …)': a pipe is a fine archive (the reader bounds what it takes)."""
    install = copy_example(tmp_path)
    packed = tmp_path / "agent.tar"
    exported = run_cli(
        ["--install", str(install), "agents", "export", "researcher", "--out", str(packed)]
    )
    assert exported.returncode == 0, exported.stderr
    done = subprocess.run(
        ["bash", "-c", f'"$@" <(cat {shlex.quote(str(packed))})', "_", *cli_command()]
        + ["bundle", "verify"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("kind", ["pipe", "dev_zero", "folder"])
def test_an_exclude_from_file_is_read_from_a_pipe_and_to_a_bound(tmp_path: Path, kind: str) -> None:
    """'--exclude-from <(git ls-files …)' is a pipe and is read; /dev/zero read until memory
    ran out, and is now refused at the bound."""
    install = copy_example(tmp_path)
    args = ["--install", str(install), "agents", "export", "researcher", "--out", "o"]
    if kind == "pipe":
        done = subprocess.run(
            ["bash", "-c", '"$@" --exclude-from <(printf "notes/\\n")', "_", *cli_command()] + args,
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=tmp_path,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert not (tmp_path / "o" / "workspace" / "notes").exists()
        return
    path = Path("/dev/zero") if kind == "dev_zero" else tmp_path
    said = refused_at_once([*args, "--exclude-from", str(path)], cwd=tmp_path)
    assert "--exclude-from" in said
    assert not (tmp_path / "o").exists()


def test_a_ca_file_without_end_is_refused_before_any_connection() -> None:
    said = refused_at_once(
        ["bundle", "inspect", "oci://127.0.0.1:9/a/b:c", "--ca-file", "/dev/zero"]
    )
    assert "--ca-file" in said


def test_a_skill_file_without_end_is_refused(tmp_path: Path) -> None:
    project = copy_example(tmp_path, "project")
    said = refused_at_once(
        ["home", "skills", "save", "noted", "--project", str(project)]
        + ["--description", "d", "--file", "/dev/zero"]
    )
    assert "--file" in said and "larger than" in said


def test_a_docker_config_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "docker"
    folder.mkdir()
    fifo(folder, "config.json")

    def hung(_signum: int, _frame: object) -> None:
        raise TimeoutError("reading the Docker config blocked")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(Refused, match="not a regular file"):
            Auth("127.0.0.1:5000", {"DOCKER_CONFIG": str(folder)}).credentials()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_restore_journal_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    staging = home / ".restore-AAAAAAAAAAAA"
    staging.mkdir(parents=True)
    fifo(staging, "journal.toml")
    said = refused_at_once(["recover", "--home", str(home)])
    assert "journal.toml" in said and "not a regular file" in said


def test_an_export_record_nested_past_the_parser_is_read_as_empty(tmp_path: Path) -> None:
    """The record of recent export destinations is advisory: unreadable, it is empty."""
    install = copy_example(tmp_path)
    state = install / "data" / "state"
    state.mkdir(parents=True, exist_ok=True)
    (state / "export-destinations.json").write_text("[" * 100_000 + "]" * 100_000)
    checked = run_cli(["--install", str(install), "doctor"], timeout=60)
    assert "Traceback" not in checked.stderr, checked.stderr
    exported = run_cli(
        ["--install", str(install), "agents", "export", "researcher", "--out", str(tmp_path / "b")]
    )
    assert exported.returncode == 0, exported.stderr


# ------------------------------------------------------------------- names the system refuses


def test_an_option_given_double_dash_as_its_value_is_a_usage_error(tmp_path: Path) -> None:
    """argparse takes ``--out=--`` for the end of the options and hands on an empty list: a
    TypeError traceback in every command that takes a path."""
    install = copy_example(tmp_path)
    for args in (
        ["home", "backup", "--project=--"],
        ["agents", "export", "researcher", "--out=--"],
        ["agents", "export", "researcher", "--out", "o", "--exclude-from=--"],
    ):
        done = run_cli(["--install", str(install), *args], cwd=tmp_path)
        assert done.returncode == 2 and one_error(done.stderr), done.stderr
        assert "'--' ends the options" in done.stderr


def test_names_too_long_for_the_filesystem_are_one_line(tmp_path: Path) -> None:
    install = copy_example(tmp_path)
    long = "x" * 300
    for args in (
        ["home", "show", "--project", long],
        ["home", "backup", "--project", long],
        ["agents", "export", "researcher", "--out", f"{long}.tar"],
        ["agents", "export", "researcher", "--out", long],
    ):
        said = refused_at_once(["--install", str(install), *args], cwd=tmp_path)
        assert "File name too long" in said


def test_a_file_that_stats_regular_and_cannot_be_read_is_one_line() -> None:
    for command in ("verify", "inspect", "secrets-template"):
        said = refused_at_once(["bundle", command, "/proc/self/mem"])
        assert "Input/output error" in said


def test_recovering_an_export_that_cannot_remove_its_leftovers_is_one_line(
    tmp_path: Path,
) -> None:
    """A staging tree whose removal failed (deeper than the descriptors allowed, when the
    removal held one per level; an immutable file; an I/O error, injected here) made rmtree
    raise out of 'recover DEST'."""
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    token = "AAAAAAAAAAAA"
    staging = tmp_path / f".zeroclaw-export-{token}"

    def reset() -> None:
        (tmp_path / f".zeroclaw-export-{token}.target").write_bytes(encode_record("out"))
        (staging / "d" / "d").mkdir(parents=True, exist_ok=True)
        (staging / "d" / "d" / "f").write_bytes(b"x")

    reset()
    cmd = [*cli_command(), "recover", str(tmp_path / "out")]
    done, calls = trace_calls(cmd, ["unlinkat"], env=clean_env(), cwd="/", relevant=str(staging))
    assert done.returncode == 0, done.stderr
    reset()
    run = run_with_fault(cmd, "unlinkat", calls[0].index, "EIO", env=clean_env(), cwd="/")
    assert run.fired
    assert run.returncode == 1 and one_error(run.stderr), run.stderr
    assert "recover again" in run.stderr


@pytest.mark.parametrize("recorded", ["/", "/tmp/..", "/tmp/."])
def test_an_export_record_naming_no_destination_is_skipped_by_doctor(
    tmp_path: Path, recorded: str
) -> None:
    """doctor stopped with a usage error about '--out /' that the user never typed."""
    install = copy_example(tmp_path)
    state = install / "data" / "state"
    state.mkdir(parents=True, exist_ok=True)
    (state / "export-destinations.json").write_text(f'{{"destinations": ["{recorded}"]}}')
    checked = run_cli(["--install", str(install), "doctor"], timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_export_record_that_is_a_fifo_is_read_as_empty(tmp_path: Path) -> None:
    """The record is bundler's own state file: a FIFO there made ``doctor`` and every export
    wait for a writer that never comes."""
    install = copy_example(tmp_path)
    state = install / "data" / "state"
    state.mkdir(parents=True, exist_ok=True)
    (state / "export-destinations.json").unlink(missing_ok=True)
    os.mkfifo(state / "export-destinations.json")
    checked = run_cli(["--install", str(install), "doctor"], timeout=30)
    assert "Traceback" not in checked.stderr, checked.stderr
    out = tmp_path / "b"
    exported = run_cli(
        ["--install", str(install), "agents", "export", "researcher", "--out", str(out)],
        timeout=30,
    )
    assert out.is_dir() and "Traceback" not in exported.stderr, exported.stderr
