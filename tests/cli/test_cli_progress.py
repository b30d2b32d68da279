"""Progress on a terminal (05 §3): every long command draws files and bytes done
of the total, a rate and an ETA on stderr when stderr is a terminal; nothing of it appears with a
pipe, ``--no-progress``, ``--quiet`` or ``--json``; stdout is the same with and without it.

The commands run for real with stderr on a pseudo-terminal and stdout on a pipe, so what goes
where is seen exactly. ``BUNDLER_PROGRESS_INTERVAL=0`` (documented in
``bundler/cli/progress_bar.py``) redraws on every file, so trees of a few files show each figure.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.hostile_zips import clean_env, make_project
from support.kit import cli_command, run_cli

from bundler.cli.progress_bar import DELAY_SECONDS
from bundler.home.backup import backup_home

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
FILES = re.compile(r"files (\d+)/(\d+)")
BYTES = re.compile(r"\d+(\.\d)? (bytes|KiB|MiB)/\d+(\.\d)? (bytes|KiB|MiB)")
RATE = re.compile(r"\d+(\.\d)? (bytes|KiB|MiB|GiB)/s")
ETA = re.compile(r"eta \d+:\d\d:\d\d")
BAR_TRACES = ("━", "eta ", "\x1b[")
# a backup's creation time, an import receipt's name
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|\d{8}T\d{6}Z")


def _env(root: Path, interval: str | None = "0") -> dict[str, str]:
    user = root / "user"
    user.mkdir(parents=True, exist_ok=True)
    env = clean_env(user)
    env.update({"TERM": "xterm", "COLUMNS": "160", "LINES": "24"})
    env.pop("BUNDLER_PROGRESS_INTERVAL", None)
    if interval is not None:
        env["BUNDLER_PROGRESS_INTERVAL"] = interval
    return env


def on_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal, stdout on a pipe; (code, stdout, stderr)."""
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [*cli_command(), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    seen = bytearray()
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    assert child.stdout is not None
    stdout = child.stdout.read().decode("utf-8")
    child.stdout.close()
    return child.wait(timeout=120), stdout, seen.decode("utf-8", "replace")


# --- one small setup per long command: (root) -> its arguments --------------------------------


def _export(root: Path) -> list[str]:
    install = bf.write_install(root / "install")
    return ["--install", str(install), "agents", "export", bf.ROOT_AGENT, "--out", str(root / "b")]


def _verify(root: Path) -> list[str]:
    return ["bundle", "verify", str(bf.build_bundle(root / "b"))]


def _pack(root: Path) -> list[str]:
    return ["bundle", "pack", str(bf.build_bundle(root / "b")), str(root / "b.tar")]


def _unpack(root: Path) -> list[str]:
    archive = root / "b.tar"
    bf.build_bundle(root / "b")
    packed = run_cli(["bundle", "pack", str(root / "b"), str(archive)])
    assert packed.returncode == 0, packed.stderr
    return ["bundle", "unpack", str(archive), str(root / "unpacked")]


def _inspect(root: Path) -> list[str]:
    return ["bundle", "inspect", str(bf.build_bundle(root / "b"))]


def _import(root: Path) -> list[str]:
    bundle = bf.build_bundle(root / "b")
    return ["--install", str(root / "new"), "agents", "import", str(bundle), "--accept-risks"]


def _backup(root: Path) -> list[str]:
    project, _home = make_project(root)
    return ["home", "backup", "--project", str(project), "--to", str(root / "out.zip")]


def _backed_up(root: Path) -> Path:
    project, _home = make_project(root)
    backup_home(project, to=root / "b.zip", environ=_env(root))
    return project


def _restore(root: Path) -> list[str]:
    project = _backed_up(root)
    return ["home", "restore", "--project", str(project), str(root / "b.zip")]


def _verify_backup(root: Path) -> list[str]:
    _backed_up(root)
    return ["home", "verify-backup", str(root / "b.zip")]


COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "export": _export,
    "verify": _verify,
    "inspect": _inspect,
    "pack": _pack,
    "unpack": _unpack,
    "import": _import,
    "backup": _backup,
    "restore": _restore,
    "verify-backup": _verify_backup,
}


def _same_run(stdout: str, root: Path) -> str:
    """stdout with the run's own folder and its times (a backup's, a receipt's) taken out."""
    return STAMP.sub("STAMP", stdout.replace(str(root), "ROOT"))


def _no_bar(text: str) -> bool:
    return not FILES.search(text) and not any(trace in text for trace in BAR_TRACES)


def _figures(stderr: str) -> list[str]:
    """Every frame of the bar, without the terminal's control sequences."""
    return [frame for frame in re.split(r"[\r\n]", ANSI.sub("", stderr)) if FILES.search(frame)]


@pytest.mark.parametrize("command", COMMANDS)
def test_progress_on_a_terminal_shows_files_bytes_rate_and_eta_and_leaves_stdout_alone(
    tmp_path: Path, command: str
) -> None:
    shown, plain = tmp_path / "shown", tmp_path / "plain"
    shown.mkdir()
    plain.mkdir()
    code, stdout, stderr = on_terminal(COMMANDS[command](shown), _env(shown))
    assert code == 0, stderr
    frames = _figures(stderr)
    assert frames, stderr
    last = FILES.search(frames[-1])
    assert last is not None and int(last.group(1)) > 0
    assert any(BYTES.search(frame) for frame in frames), frames
    assert any(RATE.search(frame) for frame in frames), frames
    assert any(ETA.search(frame) for frame in frames), frames
    assert _no_bar(stdout)
    # transient: the last thing the bar does is erase its line
    assert stderr.rstrip("\r\n").endswith("\x1b[2K") or "\x1b[2K" in stderr.split("files ")[-1]

    code, plain_stdout, plain_stderr = on_terminal(
        ["--no-progress", *COMMANDS[command](plain)], _env(plain)
    )
    assert code == 0, plain_stderr
    assert _same_run(plain_stdout, plain) == _same_run(stdout, shown)


@pytest.mark.parametrize(
    "command", ["export", "verify", "import", "backup", "restore", "pack", "unpack"]
)
def test_no_bar_with_a_pipe(tmp_path: Path, command: str) -> None:
    done = run_cli(COMMANDS[command](tmp_path), exact_env=_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert _no_bar(done.stderr), done.stderr


@pytest.mark.parametrize("option", ["--no-progress", "--quiet", "--json"])
@pytest.mark.parametrize("command", ["export", "restore"])
def test_no_bar_on_a_terminal_with_no_progress_quiet_or_json(
    tmp_path: Path, command: str, option: str
) -> None:
    code, _stdout, stderr = on_terminal([option, *COMMANDS[command](tmp_path)], _env(tmp_path))
    assert code == 0, stderr
    assert _no_bar(stderr), stderr


def test_the_bar_is_redrawn_at_most_about_ten_times_a_second(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "b")
    # long enough to outlast the bar's delay: a shorter run draws nothing at all
    for index in range(3000):
        (bundle / "workspace" / f"extra-{index:04}.txt").write_text("x")
    started = time.monotonic()
    code, _stdout, stderr = on_terminal(
        ["bundle", "verify", str(bundle)], _env(tmp_path, interval=None)
    )
    elapsed = time.monotonic() - started
    assert code != 0  # the extra files are not in checksums.xxh3: verified all the same
    frames = _figures(stderr)
    # nothing during the delay, then the first and last frames plus one per tenth of a second
    # at most (rich redraws once more when it starts and when it stops)
    drawing = max(0.0, elapsed - DELAY_SECONDS)
    assert len(frames) <= drawing / 0.1 + 4, (len(frames), elapsed)
    if drawing > 0.3:
        assert frames, elapsed


def test_rich_is_not_loaded_when_no_bar_is_shown(tmp_path: Path) -> None:
    bundle = bf.build_bundle(tmp_path / "b")
    probe = (
        "import sys\n"
        "from bundler.cli import main\n"
        f"code = main(['bundle', 'verify', {str(bundle)!r}])\n"
        "assert code == 0, code\n"
        "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
