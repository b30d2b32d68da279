"""Export refuses what ``bundle verify`` and ``agents import`` would refuse for its size: one
limit (``bundle.walk.MAX_ENTRIES``), counted one way (every file and folder below the bundle's
root), checked as the copy goes, so a tree too large is refused before it is all copied and
nothing a reader refuses is ever published.

The limit is lowered here the way the verify tests lower it (the module's constant, in this
process, or in the real command line started with it lowered); the million-file run is
``huge``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import clean_env, one_error

from bundler import api
from bundler.bundle import walk
from bundler.bundle.export import export_agent
from bundler.bundle.verify import verify_bundle
from bundler.errors import Refused

# the real command line, with the entry limit lowered to its first argument
LOWERED = (
    "import sys; import bundler.bundle.walk as walk; walk.MAX_ENTRIES = int(sys.argv.pop(1)); "
    "from bundler.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _entries(bundle: Path) -> int:
    """Every file and folder below ``bundle`` (its root aside)."""
    return sum(len(dirs) + len(files) for _root, dirs, files in os.walk(bundle))


def _add_notes(install: Path, count: int) -> None:
    notes = install / "agents" / bf.ROOT_AGENT / "workspace" / "many"
    notes.mkdir()
    for index in range(count):
        (notes / f"n{index:04}.md").write_text(f"note {index}\n")


class _Copied:
    """A progress observer counting the files the export copied."""

    def __init__(self) -> None:
        self.files = 0

    def start(self, label: str, files: int | None, nbytes: int | None) -> None:
        pass

    def __call__(self, files: int, nbytes: int) -> None:
        self.files += files

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("archive", [False, True], ids=["folder", "archive"])
def test_export_refuses_exactly_the_bundles_verify_refuses_for_their_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, archive: bool
) -> None:
    install = bf.write_install(tmp_path / "install")
    _add_notes(install, 30)
    reference = bf.export_bundle(install, tmp_path / "reference")
    size = _entries(reference)
    suffix = ".tar" if archive else ""

    monkeypatch.setattr(walk, "MAX_ENTRIES", size)
    fits = tmp_path / f"fits{suffix}"
    export_agent(install, bf.ROOT_AGENT, fits, archive=archive)
    assert api.verify(fits).ok  # at the limit: published, and accepted

    monkeypatch.setattr(walk, "MAX_ENTRIES", size - 1)
    assert any(
        f"more than {size - 1} entries" in p.message for p in verify_bundle(reference).errors
    )
    refused = tmp_path / f"refused{suffix}"
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(Refused) as caught:
        export_agent(install, bf.ROOT_AGENT, refused, archive=archive)
    message = caught.value.message
    assert f"more than {size - 1} files and folders ({size} counted at " in message
    assert "--exclude" in message
    assert sorted(os.listdir(tmp_path)) == before  # nothing published, nothing left beside


def test_a_tree_past_the_limit_is_refused_before_it_is_all_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install = bf.write_install(tmp_path / "install")
    _add_notes(install, 400)
    monkeypatch.setattr(walk, "MAX_ENTRIES", 50)
    copied = _Copied()
    with pytest.raises(Refused, match="more than 50 files and folders"):
        export_agent(install, bf.ROOT_AGENT, tmp_path / "b", progress=copied)
    assert 0 < copied.files < 50
    assert not (tmp_path / "b").exists()


def test_the_command_line_refuses_it_naming_the_count_and_exclude_makes_it_fit(
    tmp_path: Path,
) -> None:
    install = bf.write_install(tmp_path / "install")
    _add_notes(install, 30)
    size = _entries(bf.export_bundle(install, tmp_path / "reference"))
    limit = str(size - 10)
    env = clean_env({"PYTHONPATH": str(Path(__file__).resolve().parents[2])})

    def bundler(*args: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-c", LOWERED, limit, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        return done.returncode, done.stderr

    out = tmp_path / "b"
    export = ["--install", str(install), "agents", "export", bf.ROOT_AGENT, "--out", str(out)]
    code, stderr = bundler(*export)
    assert code == 1 and one_error(stderr), stderr
    assert f"more than {limit} files and folders ({size - 9} counted at " in stderr
    assert "--exclude" in stderr
    assert not out.exists() and not (tmp_path / "b.tar").exists()
    code, stderr = bundler(*export, "--exclude", "many/n000*")  # ten notes stay behind
    assert code == 0, stderr
    assert _entries(out) == size - 10
    code, stderr = bundler("bundle", "verify", str(out))
    assert code == 0, stderr


@pytest.mark.huge
def test_a_workspace_of_a_million_files_is_refused_early(tmp_path: Path) -> None:
    """The issue's case at full size: a million workspace files made a bundle whose manifest
    said ``files = 1000001``, which verify and import then refused."""
    install = bf.write_install(tmp_path / "install")
    many = install / "agents" / bf.ROOT_AGENT / "workspace" / "many"
    for folder in range(1000):
        (many / f"d{folder:03}").mkdir(parents=True)
        for index in range(1000):
            (many / f"d{folder:03}" / f"f{index:03}").write_bytes(b"")
    copied = _Copied()
    with pytest.raises(Refused, match=f"more than {walk.MAX_ENTRIES} files and folders"):
        export_agent(install, bf.ROOT_AGENT, tmp_path / "b", progress=copied)
    assert copied.files <= walk.MAX_ENTRIES
    assert not (tmp_path / "b").exists()
