"""Shared fixtures. Builders live in ``tests/support/installs.py``; keep this file small."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from support.installs import MINIMAL_CONFIG, make_install  # noqa: E402
from support.registry_server import Registry, require_registry  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_INSTALL = REPO_ROOT / "examples" / "install"
EXAMPLE_PROJECT = REPO_ROOT / "examples" / "project"


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """A real CNCF distribution registry over plain HTTP without auth on a free loopback port,
    its storage in ``tmp_path``; killed when the test ends."""
    require_registry()
    reg = Registry(tmp_path / "registry").start()
    try:
        yield reg
    finally:
        reg.kill()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A format 1 bundle made once per module by the real exporter from a small install."""
    from support import bundlefactory as bf

    base = tmp_path_factory.mktemp("exported")
    install = bf.write_install(base / "install")
    return bf.export_bundle(install, base / "bundle")


@pytest.fixture(scope="module")
def two_bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(old, new): two different bundles of one agent, made by the real exporter."""
    from support import bundlefactory as bf

    base = tmp_path_factory.mktemp("bundles")
    install = bf.write_install(base / "install")
    old = bf.export_bundle(install, base / "old")
    (install / "agents" / bf.ROOT_AGENT / "workspace" / "added.md").write_text("new\n")
    new = bf.export_bundle(install, base / "new")
    return old, new


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sound bundle archive (``bundle pack`` of a bundle the real exporter made)."""
    from support import bundlefactory as bf
    from support.kit import run_cli

    base = tmp_path_factory.mktemp("packed")
    bundle = bf.export_bundle(bf.write_install(base / "install"), base / "bundle")
    out = base / "bundle.tar"
    done = run_cli(["bundle", "pack", str(bundle), str(out)])
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def install(tmp_path: Path) -> Path:
    """A minimal valid install (one agent, one provider, one risk profile) in tmp_path."""
    return make_install(tmp_path, MINIMAL_CONFIG)


@pytest.fixture(autouse=True)
def _no_ambient_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own ZEROCLAW_* variables must not leak into any test."""
    for name in list(os.environ):
        if name.startswith("ZEROCLAW_"):
            monkeypatch.delenv(name, raising=False)


SYSTEM_TEMP = tempfile.gettempdir()


@pytest.fixture(autouse=True)
def _private_temporary_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Each test its own ``$TMPDIR`` (in this process and every CLI it starts): a scratch
    folder a killed command leaves there is every later ``recover``'s to clear, and must not
    reach another test's output. It is made beside the system's (not under pytest's own
    folders, which only their owner may enter) and open to all as /tmp is, sticky: tests run
    bundler as another user too."""
    # pytest places its own base folder where $TMPDIR says when first asked: ask it now, so
    # that it is never inside a folder removed after this test
    tmp_path_factory.getbasetemp()
    folder = tempfile.mkdtemp(prefix="bundler-test-tmpdir-", dir=SYSTEM_TEMP)
    os.chmod(folder, 0o1777)
    monkeypatch.setenv("TMPDIR", folder)
    monkeypatch.setattr(tempfile, "tempdir", None)
    yield
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def _session_state_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The user state and cache folders of what runs before any test's own (module fixtures
    exporting or pulling a bundle): never the home folder of whoever runs the suite."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("session-state")))
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("session-cache")))
        yield


@pytest.fixture(autouse=True)
def _private_state_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test its own user state folder (``$XDG_STATE_HOME``, in this process and every CLI
    it starts), where an export records its destination for ``doctor``: a test must never
    write into the home folder of whoever runs it, nor read another test's record. So with the
    user cache folder (``$XDG_CACHE_HOME``), where a pull keeps the layers it fetched: no test
    finds a layer another test pulled."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(params=["isal", "zlib"])
def each_deflate_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once per backup deflate engine: ``BUNDLER_DEFLATE_ENGINE`` is set in this
    process (whose engine, kept once chosen, is chosen again) and so in every CLI it starts.
    ISA-L's run is skipped where its wheel is not installed."""
    import importlib.util

    from bundler.home.zipcheck import isal_module

    engine = str(request.param)
    if engine == "isal" and importlib.util.find_spec("isal") is None:
        pytest.skip("isal is not installed (pip install isal)")
    monkeypatch.setenv("BUNDLER_DEFLATE_ENGINE", engine)
    isal_module.cache_clear()
    request.addfinalizer(isal_module.cache_clear)  # the next test chooses afresh
    return engine


@pytest.fixture(params=["hyperscan", "python"])
def each_sweep_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once per secret-sweep engine: ``BUNDLER_SWEEP_ENGINE`` is set in
    this process and so in every CLI it starts. Hyperscan's run is skipped where no wheel is."""
    from bundler.rules import sweep_hyperscan

    engine = str(request.param)
    if engine == "hyperscan" and not sweep_hyperscan.available():
        pytest.skip("hyperscan is not installed on this platform")
    monkeypatch.setenv("BUNDLER_SWEEP_ENGINE", engine)
    return engine
