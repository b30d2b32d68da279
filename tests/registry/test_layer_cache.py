"""The layer cache, against a real distribution registry behind a counting relay
(``registry_server.Relay``): a pull fetches only the blobs (and the bytes) the cache lacks, a
dropped download resumes with a ``Range`` request, nothing that failed its digest is ever used
or kept, two pulls at once fetch each blob once, ``--no-cache`` writes nothing there, and the
cache stays within its bound, least recently used first."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import clean_env, cli_command, run_cli, tree_snapshot
from support.registry_server import Registry, Relay

LARGE = 3 << 20
"""A workspace file of random bytes that makes the workspace layer most of the artifact."""


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    bundle = bf.export_bundle(install, tmp_path / "bundle")
    (bundle / "workspace" / "large.bin").write_bytes(os.urandom(LARGE))
    bf.reseal(bundle)
    return bundle


@pytest.fixture
def relay(registry: Registry) -> Iterator[Relay]:
    server = Relay(registry)
    try:
        yield server
    finally:
        server.close()


def cache_dir() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "bundler" / "blobs" / "sha256"


def cached() -> dict[str, int]:
    """The cache's files and their sizes."""
    folder = cache_dir()
    return {p.name: p.stat().st_size for p in folder.iterdir()} if folder.exists() else {}


def push(registry: Registry, bundle: Path, tag: str) -> dict[str, object]:
    done = run_cli(
        ["bundle", "push", str(bundle), registry.ref(f"agents/c:{tag}"), "--plain-http", "--json"]
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def pull(relay: Relay, tag: str, dest: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["bundle", "pull", relay.ref(f"agents/c:{tag}"), str(dest), "--plain-http",
                    *extra])  # fmt: skip


def layers(registry: Registry, tag: str) -> dict[str, tuple[str, int]]:
    """The artifact's blobs: title (``config`` for the config) -> (digest, size)."""
    import urllib.request

    request = urllib.request.Request(
        f"http://{registry.host}/v2/agents/c/manifests/{tag}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - the test's registry
        manifest = json.loads(answer.read())
    found = {"config": (manifest["config"]["digest"], manifest["config"]["size"])}
    for layer in manifest["layers"]:
        title = layer["annotations"]["org.opencontainers.image.title"]
        found[title] = (layer["digest"], layer["size"])
    return found


def blob_path(digest: str) -> str:
    return f"/v2/agents/c/blobs/{digest}"


def rerun_fetches_only_the_rest(relay: Relay, out: Path, digest: str, have: int, size: int) -> None:
    """The pull into ``out`` again succeeds, asking for blob ``digest`` (``size`` bytes) from
    byte ``have`` on, in one ``Range`` GET, and for no other blob."""
    mark = relay.mark()
    again = pull(relay, "1", out)
    assert again.returncode == 0, again.stderr
    fetched = relay.blob_gets(mark)
    assert [(r.path, r.range, r.status) for r in fetched] == [
        (blob_path(digest), f"bytes={have}-", 206)
    ]
    assert sum(r.sent for r in fetched) == size - have


def test_a_rerun_after_a_drop_mid_layer_fetches_only_the_missing_bytes(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    """A registry that dies mid-layer leaves the bytes received in the cache; the rerun asks
    for the rest of that blob alone, with a Range request, and fetches no other blob again."""
    push(registry, bundle, "1")
    digest, size = layers(registry, "1")["workspace"]
    relay.cut[blob_path(digest)] = 1 << 20
    first = pull(relay, "1", tmp_path / "out")
    assert first.returncode == 1 and "closed" in first.stderr, first.stderr
    assert cached()[f"{digest[7:]}.partial"] == 1 << 20
    rerun_fetches_only_the_rest(relay, tmp_path / "out", digest, 1 << 20, size)
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)
    assert f"{digest[7:]}.partial" not in cached()
    whole = cache_dir() / digest[7:]
    assert f"sha256:{hashlib.sha256(whole.read_bytes()).hexdigest()}" == digest


def test_v2_after_v1_with_one_file_changed_downloads_at_most_three_blobs(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    """Pulling ``v2`` after ``v1`` fetches only the blobs ``v1`` did not have: the config, the
    metadata layer (its checksums changed) and the layer that holds the changed file."""
    push(registry, bundle, "v1")
    assert pull(relay, "v1", tmp_path / "v1").returncode == 0
    (bundle / "workspace" / "notes.md").write_text("changed for v2\n", encoding="utf-8")
    bf.reseal(bundle)
    push(registry, bundle, "v2")
    old = {digest for digest, _size in layers(registry, "v1").values()}
    new = {digest for digest, _size in layers(registry, "v2").values()}
    mark = relay.mark()
    done = pull(relay, "v2", tmp_path / "v2")
    assert done.returncode == 0, done.stderr
    fetched = [r.path.rsplit("/", 1)[1] for r in relay.blob_gets(mark)]
    assert sorted(fetched) == sorted(new - old) and len(fetched) <= 3, fetched
    assert tree_snapshot(tmp_path / "v2") == tree_snapshot(bundle)


def test_a_pull_into_an_archive_keeps_its_layers_in_the_archive_only(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    """A pull into FILE.tar writes the layers it downloads into the archive alone (the archive
    holds them; a second copy on the user's disk is not free): the cache keeps only the config
    blob. It still reads the cache: after a pull into a folder filled it, a pull into an
    archive fetches no blob."""
    push(registry, bundle, "1")
    blobs = layers(registry, "1")
    done = pull(relay, "1", tmp_path / "first.tar")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "first.tar").read_bytes() == bf.pack_bytes(bundle)
    assert set(cached()) == {blobs["config"][0][7:]}
    assert pull(relay, "1", tmp_path / "folder").returncode == 0
    mark = relay.mark()
    again = pull(relay, "1", tmp_path / "second.tar")
    assert again.returncode == 0, again.stderr
    assert relay.blob_gets(mark) == []
    assert (tmp_path / "second.tar").read_bytes() == bf.pack_bytes(bundle)


@pytest.mark.parametrize("length", ["short", pytest.param("long", marks=pytest.mark.slow)])
def test_a_pull_into_an_archive_dropped_mid_layer_resumes_with_only_the_missing_bytes(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path, length: str
) -> None:
    """A pull into FILE.tar that loses its connection mid-layer keeps, before its staging file
    goes, what it received straight into the archive: the layer's bytes received as its
    partial download, every layer before it whole. The rerun asks for the rest of that blob
    alone, with a Range request. ``long``: a layer written past the page cache (16 MiB or
    more, :mod:`bundler.fs.direct`), cut where its buffers are not yet full."""
    if length == "long":
        (bundle / "workspace" / "large.bin").write_bytes(os.urandom(17 << 20))
        bf.reseal(bundle)
    push(registry, bundle, "1")
    blobs = layers(registry, "1")
    digest, size = blobs["workspace"]
    cut = (1 << 20) + 4097 if length == "long" else 1 << 20
    relay.cut[blob_path(digest)] = cut
    first = pull(relay, "1", tmp_path / "out.tar")
    assert first.returncode == 1 and "closed" in first.stderr, first.stderr
    assert not (tmp_path / "out.tar").exists()
    held = cached()
    assert held.pop(f"{digest[7:]}.partial") == cut
    # the workspace comes last in the archive: every other blob arrived whole before it
    assert held == {d[7:]: n for title, (d, n) in blobs.items() if title != "workspace"}
    rerun_fetches_only_the_rest(relay, tmp_path / "out.tar", digest, cut, size)
    assert (tmp_path / "out.tar").read_bytes() == bf.pack_bytes(bundle)


@pytest.mark.parametrize(
    "damage", ["a_byte_flipped", "cut_short", "replaced_by_a_link", "replaced_by_a_fifo"]
)
def test_a_cached_blob_that_is_not_its_digest_is_never_used(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path, damage: str
) -> None:
    """A cache file whose bytes are not the blob's (damaged on disk, by hand or by a crash) is
    found out before anything is made of it, removed, and the blob downloaded whole again."""
    push(registry, bundle, "1")
    digest, size = layers(registry, "1")["workspace"]
    assert pull(relay, "1", tmp_path / "first").returncode == 0
    entry = cache_dir() / digest[7:]
    data = bytearray(entry.read_bytes())
    if damage == "a_byte_flipped":
        data[size // 2] ^= 1
        entry.write_bytes(bytes(data))
    elif damage == "cut_short":
        entry.write_bytes(bytes(data[:-1]))
    elif damage == "replaced_by_a_link":
        (tmp_path / "elsewhere").write_bytes(bytes(data))
        entry.unlink()
        entry.symlink_to(tmp_path / "elsewhere")
    else:
        entry.unlink()
        os.mkfifo(entry)
    mark = relay.mark()
    done = pull(relay, "1", tmp_path / "second")
    assert done.returncode == 0, done.stderr
    assert [(r.path, r.range) for r in relay.blob_gets(mark)] == [(blob_path(digest), None)]
    assert tree_snapshot(tmp_path / "second") == tree_snapshot(bundle)
    assert entry.is_file() and not entry.is_symlink()
    assert f"sha256:{hashlib.sha256(entry.read_bytes()).hexdigest()}" == digest


def test_a_damaged_partial_download_is_fetched_again_whole(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    """The bytes a dropped download left are checked with the rest, as one blob: when the whole
    is not the digest's, none of it is kept and the blob is fetched again from its start."""
    push(registry, bundle, "1")
    digest, _size = layers(registry, "1")["workspace"]
    relay.cut[blob_path(digest)] = 1 << 20
    assert pull(relay, "1", tmp_path / "out").returncode == 1
    partial = cache_dir() / f"{digest[7:]}.partial"
    data = bytearray(partial.read_bytes())
    data[100] ^= 1
    partial.write_bytes(bytes(data))
    mark = relay.mark()
    done = pull(relay, "1", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert [r.range for r in relay.blob_gets(mark)] == [f"bytes={1 << 20}-", None]
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)
    assert sorted(cached()) == sorted(d[7:] for d, _s in layers(registry, "1").values())


def test_two_pulls_at_once_fetch_each_blob_once(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    """The second pull waits on the lock of the blob the first is downloading, then uses it."""
    push(registry, bundle, "1")
    digest, _size = layers(registry, "1")["workspace"]
    relay.slow[blob_path(digest)] = 0.05
    base = [*cli_command(), "bundle", "pull", relay.ref("agents/c:1"), "--plain-http"]
    first = subprocess.Popen([*base, str(tmp_path / "a")], env=clean_env(), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while blob_path(digest) not in relay.begun and time.monotonic() < deadline:
        time.sleep(0.02)
    second = subprocess.Popen([*base, str(tmp_path / "b")], env=clean_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    for proc in (first, second):
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    fetched = [r.path for r in relay.blob_gets()]
    assert sorted(fetched) == sorted(set(fetched)), fetched
    assert blob_path(digest) in fetched
    assert tree_snapshot(tmp_path / "a") == tree_snapshot(tmp_path / "b") == tree_snapshot(bundle)


def test_no_cache_neither_reads_nor_writes_the_cache(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    push(registry, bundle, "1")
    done = pull(relay, "1", tmp_path / "a", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "bundler").exists()
    inspected = run_cli(["bundle", "inspect", relay.ref("agents/c:1"), "--plain-http",
                         "--no-cache", "--json"])  # fmt: skip
    assert inspected.returncode == 0, inspected.stderr
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "bundler").exists()
    assert pull(relay, "1", tmp_path / "b").returncode == 0
    mark = relay.mark()
    again = pull(relay, "1", tmp_path / "c", "--no-cache")
    assert again.returncode == 0, again.stderr
    assert len(relay.blob_gets(mark)) == len(layers(registry, "1"))


def test_inspect_of_a_reference_fills_the_cache_and_a_pull_after_it_fetches_nothing(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    """inspect keeps no copy of the workspace in its private folder, but the blob it judged
    stays in the cache: the pull (or import) that follows downloads no blob."""
    push(registry, bundle, "1")
    inspected = run_cli(["bundle", "inspect", relay.ref("agents/c:1"), "--plain-http", "--json"])
    assert inspected.returncode == 0, inspected.stderr
    mark = relay.mark()
    done = pull(relay, "1", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert relay.blob_gets(mark) == []
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)


def test_prune_removes_the_least_recently_used_first_and_says_what(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    push(registry, bundle, "v1")
    assert pull(relay, "v1", tmp_path / "v1").returncode == 0
    (bundle / "workspace" / "notes.md").write_text("changed for v2\n", encoding="utf-8")
    bf.reseal(bundle)
    push(registry, bundle, "v2")
    time.sleep(0.05)  # v2's use of the shared blobs is later than v1's pull
    assert pull(relay, "v2", tmp_path / "v2").returncode == 0
    v1 = {d: s for d, s in layers(registry, "v1").values()}
    v2 = {d: s for d, s in layers(registry, "v2").values()}
    shown = run_cli(["bundle", "cache", "--json"])
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert (report["dry_run"], report["kept_files"]) == (True, len(v1 | v2))
    assert report["kept_bytes"] == sum((v1 | v2).values()) and report["removed"] == []
    bound = sum(v2.values())
    done = run_cli(["bundle", "cache", "--prune", "--max-size", str(bound), "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert sorted(r["digest"] for r in report["removed"]) == sorted(set(v1) - set(v2))
    assert report["kept_bytes"] == bound and report["removed_bytes"] == sum(
        v1[d] for d in set(v1) - set(v2)
    )
    assert sorted(cached()) == sorted(d[7:] for d in v2)
    human = run_cli(["bundle", "cache", "--prune", "--max-size", "0"])
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith(f"removed {len(v2)} cached blobs"), human.stdout
    assert cached() == {}


def test_the_cache_is_bounded_after_every_pull(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    """``$BUNDLER_CACHE_MAX_SIZE`` bounds what a pull leaves; the files are the user's alone."""
    push(registry, bundle, "1")
    sizes = layers(registry, "1")
    bound = sizes["workspace"][1] + 1
    done = run_cli(["bundle", "pull", relay.ref("agents/c:1"), str(tmp_path / "out"),
                    "--plain-http"], env={"BUNDLER_CACHE_MAX_SIZE": str(bound)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert 0 < sum(cached().values()) <= bound
    assert sizes["workspace"][0][7:] in cached()  # the newest use is kept
    folder = cache_dir()
    for path in (folder, folder.parent, folder.parent.parent):
        assert path.stat().st_mode & 0o777 == 0o700, path
    for path in folder.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600, path
    bad = run_cli(["bundle", "pull", relay.ref("agents/c:1"), str(tmp_path / "other"),
                   "--plain-http"], env={"BUNDLER_CACHE_MAX_SIZE": "lots"})  # fmt: skip
    assert bad.returncode == 2 and "BUNDLER_CACHE_MAX_SIZE" in bad.stderr, bad.stderr


def test_a_cache_folder_that_cannot_be_made_is_passed_over_with_a_warning(
    registry: Registry, relay: Relay, bundle: Path, tmp_path: Path
) -> None:
    """The cache is never the reason a pull fails: one that cannot be used is named in a
    warning, and every blob is downloaded."""
    push(registry, bundle, "1")
    blocked = tmp_path / "cache-home"
    blocked.mkdir()
    (blocked / "bundler").write_text("not a folder\n", encoding="utf-8")
    done = run_cli(["bundle", "pull", relay.ref("agents/c:1"), str(tmp_path / "out"),
                    "--plain-http", "--json"], env={"XDG_CACHE_HOME": str(blocked)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    warnings = json.loads(done.stdout)["warnings"]
    assert any("the layer cache" in w and "cannot be used" in w for w in warnings), warnings
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)
    assert len(relay.blob_gets()) == len(layers(registry, "1"))


def test_cache_options_are_refused_where_they_mean_nothing(bundle: Path) -> None:
    folder = run_cli(["bundle", "verify", str(bundle), "--no-cache"])
    assert folder.returncode == 2 and "--no-cache" in folder.stderr, folder.stderr
    size = run_cli(["bundle", "cache", "--prune", "--max-size", "lots"])
    assert size.returncode == 2 and "--max-size" in size.stderr, size.stderr
