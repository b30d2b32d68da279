"""Per-registry settings from containers' registries.conf: insecure hosts need no flag, blocked
ones are refused, mirrors serve digest-addressed blobs first and a mirror's wrong bytes fall
through to the registry. Against the real docker-registry and the scripted hostile one."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.hostile_registry import HOSTILE_REGISTRIES_CONFS, FakeRegistry, build
from support.kit import one_error, run_cli, tree_snapshot
from support.registry_server import PASSWORD, USER, Registry


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    install = bf.write_install(tmp_path / "install")
    return bf.export_bundle(install, tmp_path / "bundle")


def conf_env(tmp_path: Path, text: str) -> dict[str, str]:
    conf = tmp_path / "registries.conf"
    conf.write_text(text, encoding="utf-8")
    return {"CONTAINERS_REGISTRIES_CONF": str(conf), "HOME": str(tmp_path)}


def test_an_insecure_host_needs_no_plain_http_flag(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    ref = registry.ref("agents/r:1")
    refused = run_cli(["bundle", "push", str(bundle), ref], env={"HOME": str(tmp_path)})
    assert refused.returncode == 1, refused.stderr
    env = conf_env(tmp_path, f'[[registry]]\nlocation = "{registry.host}"\ninsecure = true\n')
    pushed = run_cli(["bundle", "push", str(bundle), ref], env=env)
    assert pushed.returncode == 0, pushed.stderr
    pulled = run_cli(["bundle", "pull", ref, str(tmp_path / "out")], env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)


def test_an_insecure_tls_host_is_reached_without_its_ca(
    tls_registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = conf_env(tmp_path, f'[[registry]]\nlocation = "{tls_registry.host}"\ninsecure = true\n')
    args = ["bundle", "push", str(bundle), tls_registry.ref("agents/r:1"), "--username", USER,
            "--password-stdin"]  # fmt: skip
    untrusted = run_cli(args, env={"HOME": str(tmp_path)}, input_text=PASSWORD)
    assert untrusted.returncode == 1 and "not trusted" in untrusted.stderr
    done = run_cli(args, env=env, input_text=PASSWORD)
    assert done.returncode == 0, done.stderr


def test_a_blocked_host_is_refused_naming_the_file(
    registry: Registry, bundle: Path, tmp_path: Path
) -> None:
    env = conf_env(tmp_path, f'[[registry]]\nlocation = "{registry.host}"\nblocked = true\n')
    before = registry.mark()
    done = run_cli(["bundle", "pull", registry.ref("agents/r:1"), str(tmp_path / "o")], env=env)
    assert done.returncode == 1 and one_error(done.stderr), done.stderr
    assert "is blocked in" in done.stderr and str(tmp_path / "registries.conf") in done.stderr
    assert registry.mark() == before


@pytest.fixture
def pushed(registry: Registry, bundle: Path) -> Iterator[str]:
    done = run_cli(
        ["bundle", "push", str(bundle), registry.ref("agents/r:1"), "--plain-http", "--json"]
    )
    assert done.returncode == 0, done.stderr
    import json

    yield str(json.loads(done.stdout)["digest"])


def mirror_conf(registry: Registry, mirror: FakeRegistry, extra: str = "") -> str:
    return (
        'unqualified-search-registries = ["docker.io"]\n'
        f'[[registry]]\nlocation = "{registry.host}"\ninsecure = true\n'
        f'[[registry.mirror]]\nlocation = "{mirror.host}"\ninsecure = true\n{extra}'
    )


def blob_gets(registry: Registry) -> int:
    return sum(1 for m, p, _s in registry.requests() if m == "GET" and "/blobs/sha256:" in p)


def test_a_mirror_serves_the_blobs_of_a_pull_by_digest(
    registry: Registry, bundle: Path, pushed: str, tmp_path: Path
) -> None:
    mirror = FakeRegistry(build(bundle))
    try:
        env = conf_env(tmp_path, mirror_conf(registry, mirror))
        ref = registry.ref(f"agents/r@{pushed}")
        before = blob_gets(registry)
        done = run_cli(["bundle", "pull", ref, str(tmp_path / "out")], env=env)
        assert done.returncode == 0, done.stderr
        assert any("/blobs/sha256:" in path for _m, path, _h in mirror.requests)
        assert blob_gets(registry) == before
        assert "unqualified-search-registries" in done.stderr  # the ignored key, warned
        assert tree_snapshot(tmp_path / "out") == tree_snapshot(bundle)
    finally:
        mirror.close()


@pytest.mark.parametrize("dest", ["out", "out.tar"])
def test_a_mirror_serving_other_bytes_falls_through_to_the_registry(
    registry: Registry, bundle: Path, pushed: str, tmp_path: Path, dest: str
) -> None:
    mirror = FakeRegistry(build(bundle))
    mirror.blobs = {d: b[:-1] + bytes([b[-1] ^ 1]) for d, b in mirror.blobs.items()}
    try:
        env = conf_env(tmp_path, mirror_conf(registry, mirror))
        before = blob_gets(registry)
        done = run_cli(
            ["bundle", "pull", registry.ref(f"agents/r@{pushed}"), str(tmp_path / dest)], env=env
        )
        assert done.returncode == 0, done.stderr
        assert "sha256 does not match" in done.stderr and mirror.host in done.stderr
        assert blob_gets(registry) > before
        assert not list(Path("/tmp").glob("bundler-mirror-*"))
        # the layer cache kept the registry's blobs, none of the mirror's bytes
        cache = Path(os.environ["XDG_CACHE_HOME"]) / "bundler" / "blobs" / "sha256"
        kept = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in cache.iterdir()}
        assert kept and all(name == digest for name, digest in kept.items()), kept
    finally:
        mirror.close()


def test_tags_are_resolved_on_the_registry_itself(
    registry: Registry, bundle: Path, pushed: str, tmp_path: Path
) -> None:
    mirror = FakeRegistry(build(bundle))
    try:
        env = conf_env(
            tmp_path, mirror_conf(registry, mirror, 'pull-from-mirror = "digest-only"\n')
        )
        done = run_cli(["bundle", "pull", registry.ref("agents/r:1"), str(tmp_path / "o")], env=env)
        assert done.returncode == 0, done.stderr
        assert mirror.requests == []
    finally:
        mirror.close()


@pytest.mark.parametrize("case", HOSTILE_REGISTRIES_CONFS)
def test_a_malformed_registries_conf_is_one_line(
    registry: Registry, tmp_path: Path, case: str
) -> None:
    env = conf_env(tmp_path, HOSTILE_REGISTRIES_CONFS[case].replace("HOST", registry.host))
    done = run_cli(["bundle", "pull", registry.ref("agents/r:1"), str(tmp_path / "o")], env=env)
    assert done.returncode == 3 and one_error(done.stderr), done.stderr
    assert str(tmp_path / "registries.conf") in done.stderr
    assert "Traceback" not in done.stderr
