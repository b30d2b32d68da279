"""The registry killed (SIGKILL) and restarted in the middle of a push and of a pull:
the tag names the previous complete artifact or the new one, never a partial one; a pull
publishes nothing partial; a rerun completes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import clean_env, cli_command, one_error, run_cli, tree_snapshot
from support.registry_server import Registry


def start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*cli_command(), *args],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_when(registry: Registry, seen: str, proc: subprocess.Popen[str]) -> bool:
    """SIGKILL the registry as soon as its log shows a request matching ``seen``; False when
    the command finished first (then the test cannot say anything)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if any(seen in f"{m} {p} {s}" for m, p, s in registry.requests()):
            registry.kill()
            return True
        time.sleep(0.005)
    return False


def pull_tree(registry: Registry, ref: str, dest: Path) -> dict[str, tuple[object, ...]]:
    done = run_cli(["bundle", "pull", ref, str(dest), "--plain-http"])
    assert done.returncode == 0, done.stderr
    return tree_snapshot(dest)


@pytest.mark.slow
def test_registry_killed_mid_push_keeps_the_previous_artifact_and_a_rerun_completes(
    registry: Registry, tmp_path: Path
) -> None:
    old = bf.big_bundle(tmp_path, "old", b"old-")
    new = bf.big_bundle(tmp_path, "new", b"new!")
    ref = registry.ref("agents/researcher:stable")
    assert run_cli(["bundle", "push", str(old), ref, "--plain-http"]).returncode == 0
    proc = start(["bundle", "push", str(new), ref, "--plain-http", "--force"])
    # the config blob goes first; the big workspace layer is still to come
    killed = kill_when(registry, "PUT /v2/agents/researcher/blobs/uploads/", proc)
    _out, err = proc.communicate(timeout=120)
    assert killed, "the push finished before the registry could be killed"
    assert proc.returncode == 1 and one_error(err), err
    registry.start()
    assert pull_tree(registry, ref, tmp_path / "after-kill") == tree_snapshot(old)
    rerun = run_cli(["bundle", "push", str(new), ref, "--plain-http", "--force"])
    assert rerun.returncode == 0, rerun.stderr
    assert pull_tree(registry, ref, tmp_path / "after-rerun") == tree_snapshot(new)


@pytest.mark.slow
def test_registry_killed_mid_streamed_push_into_an_empty_repository_leaves_no_tag(
    registry: Registry, tmp_path: Path
) -> None:
    """Into a repository without tags each layer is sent as it is made (a PATCH); killed then,
    the tag does not exist (no partial artifact), and a rerun completes."""
    bundle = bf.big_bundle(tmp_path, "bundle", b"new!")
    ref = registry.ref("agents/streamed:1")
    proc = start(["bundle", "push", str(bundle), ref, "--plain-http"])
    killed = kill_when(registry, "PATCH /v2/agents/streamed/blobs/uploads/", proc)
    _out, err = proc.communicate(timeout=120)
    assert killed, "the push finished before the registry could be killed"
    assert proc.returncode == 1 and one_error(err), err
    registry.start()
    missing = run_cli(["bundle", "pull", ref, str(tmp_path / "none"), "--plain-http"])
    assert missing.returncode != 0 and one_error(missing.stderr), missing.stderr
    assert not (tmp_path / "none").exists()
    rerun = run_cli(["bundle", "push", str(bundle), ref, "--plain-http"])
    assert rerun.returncode == 0, rerun.stderr
    assert pull_tree(registry, ref, tmp_path / "after-rerun") == tree_snapshot(bundle)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["out", "out.tar"])
def test_registry_killed_mid_pull_publishes_nothing_and_a_rerun_completes(
    registry: Registry, tmp_path: Path, name: str
) -> None:
    bundle = bf.big_bundle(tmp_path, "bundle", b"data")
    ref = registry.ref("agents/researcher:1")
    assert run_cli(["bundle", "push", str(bundle), ref, "--plain-http"]).returncode == 0
    dest = tmp_path / name
    proc = start(["bundle", "pull", ref, str(dest), "--plain-http"])
    killed = kill_when(registry, "GET /v2/agents/researcher/manifests/1", proc)
    _out, err = proc.communicate(timeout=120)
    assert killed, "the pull finished before the registry could be killed"
    assert proc.returncode == 1 and one_error(err), err
    assert not dest.exists()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []
    registry.start()
    if name.endswith(".tar"):
        done = run_cli(["bundle", "pull", ref, str(dest), "--plain-http"])
        assert done.returncode == 0, done.stderr
        assert dest.read_bytes() == bf.pack_bytes(bundle)
    else:
        assert pull_tree(registry, ref, dest) == tree_snapshot(bundle)


def test_sigint_once_the_tag_is_stored_is_a_warning_and_the_digest_is_printed(
    registry: Registry, tmp_path: Path
) -> None:
    """The stored manifest is a push's commit point. A signal after it (here as the connection
    to the registry is closed) said 'interrupted; cleaned up', exit 130, and the digest was
    never printed, though the tag named the new artifact. It is noted now: exit 0, the
    digest, a warning. One during the manifest's upload says what it cannot know."""
    from support.faultinject import ptrace_unavailable, run_with_fault, trace_calls

    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = bf.write_install(tmp_path / "install")
    bundle = bf.export_bundle(install, tmp_path / "bundle")
    cmd = [*cli_command(), "bundle", "push", str(bundle), registry.ref("sig/one:1"), "--plain-http"]
    done, calls = trace_calls(cmd, ["close", "sendto"], env=clean_env())
    assert done.returncode == 0, done.stderr
    digest = done.stdout.split("@")[-1].split()[0]
    closed = [call for call in calls if call.syscall == "close" and "socket:" in call.line]
    sent = [call for call in calls if call.syscall == "sendto"]
    assert closed and sent, "the push made no connection"

    ref = registry.ref("sig/two:1")
    cmd[-2] = ref
    run = run_with_fault(cmd, "close", closed[-1].index, "SIGINT", env=clean_env())
    assert run.fired and "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 0, run.stderr
    assert digest in run.stdout, run.stdout
    assert "warning: interrupted by SIGINT" in run.stderr and "cleaned up" not in run.stderr
    assert pull_tree(registry, ref, tmp_path / "pulled") == tree_snapshot(bundle)

    cmd[-2] = registry.ref("sig/three:1")
    run = run_with_fault(cmd, "sendto", sent[-1].index, "SIGINT", env=clean_env())
    assert run.fired and run.returncode == 130 and one_error(run.stderr), run.stderr
    assert "as the registry stored the manifest" in run.stderr and digest in run.stderr


@pytest.mark.parametrize("fault", ["EIO", "ENOSPC", "SIGKILL"])
def test_a_fault_in_the_unpacking_workers_publishes_nothing_and_a_rerun_completes(
    registry: Registry, tmp_path: Path, fault: str
) -> None:
    """A pull into a folder makes a layer's files on several threads, each reading its
    members from the blob with preadv (the preadv2 system call): a failure there (every
    thread's third read) is one error line, exit 1, nothing published and no worker left
    behind; after a kill, ``recover`` clears the staging; either way a rerun completes."""
    from support.faultinject import ptrace_unavailable, run_with_fault

    reason = ptrace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    install = bf.write_install(tmp_path / "install")
    bf.widen_workspace(install)
    bundle = bf.export_bundle(install, tmp_path / "bundle")
    ref = registry.ref("agents/wide:1")
    assert run_cli(["bundle", "push", str(bundle), ref, "--plain-http"]).returncode == 0
    dest = tmp_path / "pulled"
    cmd = [*cli_command(), "bundle", "pull", ref, str(dest), "--plain-http"]
    run = run_with_fault(cmd, "preadv2", 3, fault, env=clean_env())  # type: ignore[arg-type]
    assert run.fired, run.log[-2000:]
    assert "Traceback" not in run.stderr, run.stderr
    assert not dest.exists()
    if fault == "SIGKILL":
        assert run.killed
        done = run_cli(["recover", str(dest)])
        assert done.returncode == 0, done.stderr
    else:
        assert run.returncode == 1 and one_error(run.stderr), run.stderr
        assert "the destination is unchanged" in run.stderr, run.stderr
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []
    assert pull_tree(registry, ref, dest) == tree_snapshot(bundle)
