"""A scratch folder whose removal fails (no descriptor left, an injected error) must neither
replace the command's own outcome nor go unmentioned (05 §2, 06 §2 R2).

The removal used to need one descriptor per level of the tree, so a low ``ulimit -n`` made it
fail; its ``OSError`` then replaced the command's result with a traceback: an export had
published ``x.tar``, an import had committed, and both exited 1, the scratch folder left
behind unnamed. Now the removal holds one folder open at a time, and one that fails all the
same is a warning naming what was left, the result standing.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.kit import clean_env, cli_command, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp: Path, install: Path | None = None) -> dict[str, str]:
    extra = {"TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1", "SOURCE_DATE_EPOCH": "1700000000"}
    if install is not None:
        extra["ZEROCLAW_CONFIG_DIR"] = str(install)
    return clean_env(extra)


def _few_descriptors(count: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


REMOVE_DEEP = """
import os, sys
from bundler.fs.safefs import rmtree_at
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
rmtree_at(fd, sys.argv[2])
"""


def test_rmtree_at_holds_one_folder_open_however_deep(tmp_path: Path) -> None:
    depth = 64
    deepest = tmp_path / "tree" / "/".join(f"d{i}" for i in range(depth))
    deepest.mkdir(parents=True)
    (deepest / "leaf").write_bytes(b"x")
    (tmp_path / "tree" / "d0" / "beside").write_bytes(b"y")
    done = subprocess.run(
        [sys.executable, "-c", REMOVE_DEEP, str(tmp_path), "tree"],
        capture_output=True,
        text=True,
        env=clean_env({"PYTHONPATH": str(ROOT)}),
        preexec_fn=lambda: _few_descriptors(16),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path) == []


def test_reading_an_archive_with_few_descriptors_leaves_no_scratch_and_no_traceback(
    packed: Path, tmp_path: Path
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    for limit in (10, 12, 16):
        done = subprocess.run(
            [*cli_command(), "bundle", "verify", str(packed)],
            capture_output=True,
            text=True,
            env=_env(tmp),
            preexec_fn=lambda limit=limit: _few_descriptors(limit),
            timeout=120,
        )
        assert "Traceback" not in done.stderr, (limit, done.stderr)
        assert os.listdir(tmp) == [], (limit, done.stderr)


def _removal_open(cmd: list[str], env: dict[str, str], scratch_marker: str) -> int:
    """The index of the last folder ``cmd`` opens in its scratch folder: one its removal makes."""
    done, calls = trace_calls(cmd, ["openat"], env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    removal = [c for c in calls if scratch_marker in c.line and "O_DIRECTORY" in c.line]
    assert removal, "no folder was opened in the scratch folder"
    return removal[-1].index


def test_a_failed_removal_of_the_bundle_an_archive_export_staged_is_a_warning(
    tmp_path: Path,
) -> None:
    """``agents export --out FILE.tar`` builds its bundle folder beside FILE.tar; a removal of
    it that fails after the archive is written leaves the published archive standing, says so
    in a warning naming ``recover FILE.tar``, and that clears it."""
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = bf.write_install(tmp_path / "install")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "x.tar"
    env = _env(tmp, install)
    cmd = [*cli_command(), "agents", "export", bf.ROOT_AGENT, "--out", str(out)]
    index = _removal_open(cmd, env, ".zeroclaw-export-")
    out.unlink()
    assert os.listdir(out.parent) == []
    run = run_with_fault(cmd, "openat", index, "EMFILE", env=env, cwd="/")
    assert run.fired
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert f"warning: could not remove the bundle folder built for {out}" in run.stderr
    assert f"bundler recover {out}" in run.stderr
    left = [name for name in os.listdir(out.parent) if name != "x.tar"]
    assert left and all(name.startswith(".zeroclaw-export-") for name in left), left
    assert os.listdir(tmp) == []
    assert run_cli(["bundle", "verify", str(out)], exact_env=env).returncode == 0
    assert run_cli(["recover", str(out)], exact_env=env).returncode == 0
    assert os.listdir(out.parent) == ["x.tar"]


def test_a_failed_scratch_removal_after_an_archive_import_is_a_warning_recover_clears(
    packed: Path, tmp_path: Path
) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    traced = tmp_path / "traced"
    traced.mkdir()
    (traced / "config.toml").write_text("")
    install = tmp_path / "install"
    install.mkdir()
    (install / "config.toml").write_text("")
    env = _env(tmp)

    def cmd(where: Path) -> list[str]:
        return [
            *cli_command(), "--install", str(where), "--json", "agents", "import", str(packed),
            "--accept-risks",
        ]  # fmt: skip

    index = _removal_open(cmd(traced), env, ".bundler-unpack-")
    run = run_with_fault(cmd(install), "openat", index, "EMFILE", env=env, cwd="/")
    assert run.fired
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    report = json.loads(run.stdout)
    assert report["ok"] is True and report["agent"] == bf.ROOT_AGENT
    left = [n for n in os.listdir(install) if n.startswith(".bundler-unpack-")]
    assert len(left) == 1
    (warning,) = [w for w in report["warnings"] if "could not remove" in w]
    assert left[0] in warning and "bundler recover --install" in warning
    recovered = run_cli(["recover", "--install", str(install)], exact_env=env)
    assert recovered.returncode == 0, recovered.stderr
    assert [n for n in os.listdir(install) if n.startswith(".bundler-unpack-")] == []
