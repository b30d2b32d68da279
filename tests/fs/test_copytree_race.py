"""06 §2 R3: a separate process attacks the tree while it is copied.

It swaps files for symbolic links (escaping, and into ``memory/``), renames other files over
admitted ones, swaps folders for links, and moves ``memory/`` around. Whatever happens, no byte
from outside the tree or from ``memory/`` may reach the copy, and every run either completes
(the raced entries skipped and counted) or fails with :class:`Refused`.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest
from support.race_helpers import (
    MARKER_MEMORY,
    MARKER_OUTSIDE,
    build_race_tree,
    racer,
    tree_contains,
)

from bundler.errors import Refused
from bundler.fs.copytree import CopyOptions, copy_tree
from bundler.fs.safefs import SkipCounts, WorkspaceExclude, open_source_root, rmtree_at


def sample(full: int) -> int:
    """``full`` iterations, or fewer when CI asks for a sample through BUNDLER_SLOW_SAMPLE."""
    wanted = os.environ.get("BUNDLER_SLOW_SAMPLE", "")
    return min(full, int(wanted)) if wanted.isdigit() and int(wanted) > 0 else full


def race_copies(tmp_path: Path, iterations: int, seed: int) -> collections.Counter[str]:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    build_race_tree(root, outside)
    copies = tmp_path / "copies"
    copies.mkdir()
    root_fd = open_source_root(root, install_root=None)
    assert root_fd is not None
    copies_fd = os.open(copies, os.O_RDONLY | os.O_DIRECTORY)
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        exclude = WorkspaceExclude(root_fd)  # identities recorded before the attack starts
        with racer(root, outside, seed):
            for index in range(iterations):
                name = f"c{index}"
                os.mkdir(name, 0o700, dir_fd=copies_fd)
                dst_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=copies_fd)
                counts = SkipCounts()
                try:
                    files = sum(
                        1
                        for _ in copy_tree(
                            root_fd,
                            dst_fd,
                            CopyOptions(
                                prefix="workspace/", exclude=exclude, on_skip=counts.record
                            ),
                        )
                    )
                    outcomes["completed"] += 1
                    outcomes["files"] += files
                    outcomes["skipped"] += counts.total
                except Refused as refused:
                    assert "turned into a symbolic link" in refused.message, refused.message
                    outcomes["refused"] += 1
                finally:
                    os.close(dst_fd)
                leaked = tree_contains(copies / name, MARKER_OUTSIDE)
                leaked += tree_contains(copies / name, MARKER_MEMORY)
                assert leaked == [], f"run {index} copied forbidden bytes: {leaked}"
                rmtree_at(copies_fd, name)
    finally:
        os.close(root_fd)
        os.close(copies_fd)
    return outcomes


def test_racing_swaps_never_copy_outside_or_memory_bytes(tmp_path: Path) -> None:
    outcomes = race_copies(tmp_path, 20, seed=1)
    assert outcomes["completed"] + outcomes["refused"] == 20
    assert outcomes["skipped"] + outcomes["refused"] > 0, "the racer never got in the way"


@pytest.mark.slow
def test_racing_swaps_200_runs_never_copy_outside_or_memory_bytes(tmp_path: Path) -> None:
    runs = sample(200)
    outcomes = race_copies(tmp_path, runs, seed=2)
    assert outcomes["completed"] + outcomes["refused"] == runs
    assert outcomes["skipped"] + outcomes["refused"] > 0
