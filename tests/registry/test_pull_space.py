"""The room a pull takes, measured on small tmpfs mounts against a real distribution registry:
the free space ``bundle pull`` asks of its destination's filesystem is what it writes there
(each layer once; for a folder pulled with ``--no-cache`` the largest twice: a blob beside its
unpacked copy for a moment; through the layer cache the blobs go to the cache's filesystem),
and ``bundle inspect REF`` keeps no copy of the workspace it judges."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import one_error, run_cli
from support.race_helpers import can_mount_tmpfs, unmount
from support.registry_server import Registry

LARGE = 6 << 20
"""The workspace file that makes the workspace layer most of the artifact."""


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A bundle whose workspace layer is most of it (a 6 MiB file of random bytes)."""
    install = bf.write_install(tmp_path / "install")
    bundle = bf.export_bundle(install, tmp_path / "bundle")
    (bundle / "workspace" / "large.bin").write_bytes(os.urandom(LARGE))
    bf.reseal(bundle)
    return bundle


@pytest.fixture
def small_disk(tmp_path: Path, bundle: Path) -> Iterator[Path]:
    """A tmpfs that holds the bundle's archive once with 1 MiB to spare, not its largest layer
    twice; unmounted after the test."""
    room = len(bf.pack_bytes(bundle)) + (1 << 20)
    assert room < 2 * LARGE  # the old demand (every layer, and the largest again) cannot fit
    mount = tmp_path / "small"
    if not can_mount_tmpfs(mount, str(room)):
        pytest.skip("mounting a tmpfs is not allowed here (needs root or CAP_SYS_ADMIN)")
    try:
        yield mount
    finally:
        unmount(mount)


@pytest.fixture
def small_tmpdir(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 2 MiB, far smaller than the bundle's workspace; unmounted after the test."""
    mount = tmp_path / "tmp"
    if not can_mount_tmpfs(mount, "2m"):
        pytest.skip("mounting a tmpfs is not allowed here (needs root or CAP_SYS_ADMIN)")
    try:
        yield mount
    finally:
        unmount(mount)


def pushed(registry: Registry, bundle: Path) -> str:
    ref = registry.ref("agents/space:1")
    done = run_cli(["bundle", "push", str(bundle), ref, "--plain-http", "--json"])
    assert done.returncode == 0, done.stderr
    return f"{registry.ref('agents/space')}@{json.loads(done.stdout)['digest']}"


def test_pull_into_an_archive_asks_for_room_for_each_layer_once(
    registry: Registry, bundle: Path, small_disk: Path
) -> None:
    """It wrote each layer once and asked for the largest twice ("needs about …"), so a pull
    that ``bundle pack`` of the same bundle shows to fit was refused."""
    ref = pushed(registry, bundle)
    packed = run_cli(["bundle", "pack", str(bundle), str(small_disk / "packed.tar")])
    assert packed.returncode == 0, packed.stderr
    (small_disk / "packed.tar").unlink()
    done = run_cli(["bundle", "pull", ref, str(small_disk / "pulled.tar"), "--plain-http"])
    assert done.returncode == 0, done.stderr
    assert (small_disk / "pulled.tar").read_bytes() == bf.pack_bytes(bundle)
    assert sorted(os.listdir(small_disk)) == ["pulled.tar"]


def test_pull_into_a_folder_without_the_cache_still_asks_for_the_blob_beside_its_copy(
    registry: Registry, bundle: Path, small_disk: Path
) -> None:
    """Without the cache a folder holds a layer's blob and its unpacked files at once: refused
    before a byte is fetched, naming what it needs, nothing left behind."""
    ref = pushed(registry, bundle)
    done = run_cli(
        ["bundle", "pull", ref, str(small_disk / "folder"), "--plain-http", "--no-cache"]
    )
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "needs about" in done.stderr and "free some space" in done.stderr
    assert os.listdir(small_disk) == []


def test_pull_into_a_folder_through_the_cache_asks_only_for_the_files(
    registry: Registry, bundle: Path, small_disk: Path
) -> None:
    """Through the layer cache (another filesystem here) the blobs are written there and the
    folder's files are unpacked from them: the destination needs room for the files alone."""
    ref = pushed(registry, bundle)
    done = run_cli(["bundle", "pull", ref, str(small_disk / "folder"), "--plain-http"])
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(small_disk)) == ["folder"]


def test_a_cache_on_the_destination_s_filesystem_is_counted_with_it(
    registry: Registry, bundle: Path, small_disk: Path
) -> None:
    """The cache on the destination's filesystem: the blobs it lacks and the files are written
    there both, and the check counts both, naming the cache's part and what frees it."""
    ref = pushed(registry, bundle)
    done = run_cli(
        ["bundle", "pull", ref, str(small_disk / "folder"), "--plain-http"],
        env={"XDG_CACHE_HOME": str(small_disk / "cache")},
    )
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "the layer cache shares it" in done.stderr and "--no-cache" in done.stderr
    assert sorted(os.listdir(small_disk)) == ["cache"]


def test_inspect_of_a_reference_judges_the_workspace_without_keeping_it(
    registry: Registry, bundle: Path, small_tmpdir: Path
) -> None:
    """The workspace layer is judged as it arrives (its files counted, digests compared) and
    never written: a private folder with no room for it is enough, and the report is the
    folder's."""
    ref = pushed(registry, bundle)
    folder = json.loads(run_cli(["bundle", "inspect", str(bundle), "--json"]).stdout)
    done = run_cli(
        ["bundle", "inspect", ref, "--plain-http", "--json"], env={"TMPDIR": str(small_tmpdir)}
    )
    assert done.returncode == 0, done.stderr
    remote = json.loads(done.stdout)
    assert (remote["files"], remote["bytes"], remote["errors"]) == (
        folder["files"],
        folder["bytes"],
        [],
    )
    assert os.listdir(small_tmpdir) == []
