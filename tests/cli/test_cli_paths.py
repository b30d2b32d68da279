"""Every command given a path that is missing, not a folder, or unreadable answers with one
``error:`` line (or its findings) and an exit code of 05 §2, never a traceback
(``bundler doctor --path /tmp/nope`` must not end in FileNotFoundError)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import one_error, run_cli

# {p} is the bad path; {i} a readable install, {b} a sound bundle
COMMANDS = [
    "doctor --path {p}",
    "doctor --project {p}",
    "--install {p} doctor",
    "--install {p} config validate",
    "--install {p} agents list",
    "bundle verify {p}",
    "bundle inspect {p}",
    "recover {p}/x",
    "recover --scan {p}",
    "recover --home {p}",
    "recover --install {p}",
    "home show --project {p}",
    "home backup --project {p}",
    "home verify-backup {p}",
    "home restore {p} --project {p}",
    "--install {i} agents import {p}",
    "--install {i} agents import --undo {p}",
    "--install {i} agents import {b} --secrets-file {p}",
    "--install {i} agents export researcher --out {p}/x",
]


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    """A folder user 65534 can reach, with an install, a bundle and the four bad paths."""
    parent = Path(tempfile.mkdtemp(prefix="bundler-paths-", dir="/tmp"))
    parent.chmod(0o755)
    bf.write_install(parent / "install")
    bf.build_bundle(parent / "bundle")
    (parent / "a-file").write_text("not a folder\n")
    (parent / "locked").mkdir()
    (parent / "locked" / "config.toml").write_text("")
    (parent / "unreadable").write_text("x\n")
    for folder, _dirs, files in os.walk(parent):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    (parent / "locked").chmod(0o000)
    (parent / "unreadable").chmod(0o000)
    yield parent
    (parent / "locked").chmod(0o755)
    shutil.rmtree(parent)


@pytest.mark.parametrize("kind", ["missing", "a-file", "locked", "unreadable"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_path_argument_is_one_error_line_never_a_traceback(
    place: Path, command: str, kind: str
) -> None:
    unprivileged = kind in ("locked", "unreadable")
    if unprivileged and os.geteuid() != 0:
        pytest.skip("needs root to drop privileges to uid 65534 in a child")
    bad = place / ("nope" if kind == "missing" else kind)
    args = command.format(p=bad, i=place / "install", b=place / "bundle").split()
    done = run_cli(args, env={"HOME": str(place / "no-home")}, cwd="/", as_nobody=unprivileged)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1, 3), (done.returncode, done.stderr)
    if done.returncode != 0:
        assert one_error(done.stderr), done.stderr


def test_doctor_path_that_does_not_exist_says_so_and_exits_1(tmp_path: Path) -> None:
    done = run_cli(["doctor", "--path", str(tmp_path / "nope")], env={"HOME": str(tmp_path)})
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"error: --path {tmp_path / 'nope'}: cannot check it (No such file or directory); "
        "name an existing folder where exports go\n"
    )
