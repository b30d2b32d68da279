"""A system that fails to read a sound bundle is not the bundle's fault (05 §2: exit 1, not 3).

Short of descriptors (``ulimit -n 8``), ``bundle verify`` of a sound bundle reported it invalid
(exit 3): "cannot read skills/... (Too many open files): make it readable or remove it", then
mismatches that followed from the entries it never read ("contents.files: says 10 but the
bundle's files give 2"); ``bundle pack`` and ``unpack`` called it "not a sound bundle". An I/O
error reading a file was a finding too. Both now stop the verification with one line naming what
could not be read and what to do, exit 1, and nothing more.

A permission the reader lacks stays a finding (exit 3, ``test_verify.py``): a bundle's modes
are part of it (an archive's members carry them), so hostile inputs still exit 3.
"""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls
from support.kit import clean_env, cli_command, one_error, run_cli


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("env")
    return bf.export_bundle(bf.write_install(base / "install"), base / "bundle")


def _run_with_few_descriptors(args: list[str], limit: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cli_command(), *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)),
        timeout=120,
    )


def test_too_few_descriptors_to_verify_a_sound_bundle_is_exit_1_without_findings(
    bundle: Path,
) -> None:
    assert run_cli(["bundle", "verify", str(bundle)]).returncode == 0
    done = _run_with_few_descriptors(["bundle", "verify", str(bundle)], 8)
    assert done.returncode == 1, done.stderr
    assert one_error(done.stderr), done.stderr
    assert "Too many open files" in done.stderr and "ulimit -n" in done.stderr
    assert str(bundle) in done.stderr
    assert "contents." not in done.stderr and "remove it" not in done.stderr


def test_too_few_descriptors_to_pack_a_sound_bundle_does_not_call_it_unsound(
    bundle: Path, tmp_path: Path
) -> None:
    done = _run_with_few_descriptors(["bundle", "pack", str(bundle), str(tmp_path / "b.tar")], 8)
    assert done.returncode == 1, done.stderr
    assert one_error(done.stderr), done.stderr
    assert "not a sound bundle" not in done.stderr
    assert not (tmp_path / "b.tar").exists()


def test_an_io_error_reading_a_sound_bundle_is_exit_1_without_findings(bundle: Path) -> None:
    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    cmd = [*cli_command(), "bundle", "verify", str(bundle)]
    done, calls = trace_calls(cmd, ["readv"], env=clean_env(), cwd="/", relevant=str(bundle))
    assert done.returncode == 0, done.stderr
    first = next(call for call in calls if "/workspace/" in call.line)
    run = run_with_fault(cmd, "readv", first.index, "EIO", env=clean_env(), cwd="/")
    assert run.fired
    assert run.returncode == 1, run.stderr
    assert one_error(run.stderr), run.stderr
    assert "Input/output error" in run.stderr and "check the disk" in run.stderr
    assert "checksum" not in run.stderr and "contents." not in run.stderr


def test_too_few_descriptors_to_unpack_a_sound_archive_says_to_raise_the_limit(
    bundle: Path, tmp_path: Path
) -> None:
    """A limit that leaves the unpacking too few descriptors is the system's failure (exit 1,
    the hint), not the archive's, and nothing is kept."""
    archive = tmp_path / "b.tar"
    archive.write_bytes(bf.pack_bytes(bundle))
    out = tmp_path / "out"
    done = _run_with_few_descriptors(["bundle", "unpack", str(archive), str(out)], 8)
    assert done.returncode == 1, done.stderr
    assert one_error(done.stderr), done.stderr
    assert f"cannot unpack {archive} (Too many open files)" in done.stderr
    assert "ulimit -n" in done.stderr
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["b.tar"]
