"""A command the system runs short of memory for fails on one line, exit 1, after its clean-up
(05 §3: no traceback for an expected failure).

In a small address space (``ulimit -v 40000``) ``agents export`` died with a traceback ending
in ``RuntimeError: can't start new thread`` (the sweep's thread) and ``home backup`` with a
``MemoryError`` in the digest's buffer. At 41,000 KiB ``agents export`` died in an import the
command makes late: CPython's import machinery raised ``SystemError: error return without
exception set``, or a ``MemoryError`` whose report then failed to import the line folder. All
are now "error: not enough memory ...", and what the command had staged is gone as after any
failure; the limits are stepped by 1 MB, as 2 MB steps passed over that one.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.hostile_zips import make_project
from support.kit import clean_env, cli_command, one_error


def test_a_thread_the_system_refuses_fails_the_export_on_one_line_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = bf.write_install(tmp_path / "install")
    out = tmp_path / "out" / "bundle"
    out.parent.mkdir()
    env = clean_env({"ZEROCLAW_CONFIG_DIR": str(install), "PYTHONDONTWRITEBYTECODE": "1"})
    cmd = [*cli_command(), "agents", "export", bf.ROOT_AGENT, "--out", str(out)]
    done, calls = trace_calls(cmd, ["clone3"], env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    first = next(call for call in calls if "CLONE_THREAD" in call.line)
    os.rename(out, tmp_path / "first")
    run = run_with_fault(cmd, "clone3", first.index, "EAGAIN", env=env, cwd="/")
    assert run.fired
    assert run.returncode == 1, run.stderr
    assert one_error(run.stderr), run.stderr
    assert "not enough memory" in run.stderr
    assert os.listdir(out.parent) == []


def _address_space(kib: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (kib * 1024, kib * 1024))


@pytest.mark.parametrize("command", ["export", "backup"])
def test_a_small_address_space_is_one_line_never_a_traceback(tmp_path: Path, command: str) -> None:
    install = bf.write_install(tmp_path / "install")
    project, _home = make_project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    env = clean_env({"ZEROCLAW_CONFIG_DIR": str(install), "HOME": str(tmp_path)})
    failed = 0
    # limits around the one where the command starts but cannot finish (about 40 MB here)
    for kib in range(36_000, 56_000, 1_000):
        target = out / f"{kib}"
        args = (
            ["agents", "export", bf.ROOT_AGENT, "--out", str(target)]
            if command == "export"
            else ["home", "backup", "--project", str(project), "--to", f"{target}.zip"]
        )
        done = subprocess.run(
            [*cli_command(), *args],
            capture_output=True,
            text=True,
            env=env,
            preexec_fn=lambda kib=kib: _address_space(kib),
            timeout=120,
        )
        if "ImportError" in done.stderr:
            continue  # too small to load the program's modules: interpreter start-up, not ours
        assert "Traceback" not in done.stderr, (kib, done.stderr)
        if done.returncode != 0:
            assert done.returncode == 1 and one_error(done.stderr), (kib, done.stderr)
            assert "not enough memory" in done.stderr, (kib, done.stderr)
            failed += 1
            # no staging (.zeroclaw-export-*, .backup-*) and nothing published
            assert [n for n in os.listdir(out) if n.startswith((".", str(kib)))] == [], kib
    assert failed, "no limit made the command run short of memory"


@pytest.mark.parametrize(
    "escaping",
    ["MemoryError()", "SystemError('error return without exception set')"],
)
def test_memory_running_out_in_the_report_itself_is_still_one_line(escaping: str) -> None:
    """Memory may run out again while the command line reports a failure, and what then
    escapes its handlers is a ``MemoryError`` or CPython's ``SystemError`` of an error lost:
    still one line, the one made before the command ran, and exit 1. Here the command line's
    ``main`` raises it as such a report would."""
    script = (
        "import bundler.cli\n"
        "def main():\n"
        f"    raise {escaping}\n"
        "bundler.cli.main = main\n"
        "from bundler.__main__ import run\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert one_error(done.stderr) and "not enough memory" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_another_system_error_escaping_the_command_line_keeps_its_traceback() -> None:
    script = (
        "import bundler.cli\n"
        "def main():\n"
        "    raise SystemError('a bug of some C code')\n"
        "bundler.cli.main = main\n"
        "from bundler.__main__ import run\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "a bug of some C code" in done.stderr
