"""The collector paused while a backup builds its tables (fs.collector): no pass while the block
runs, and the collector as it was once it ends, however it ends."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.hostile_zips import clean_env, make_project

from bundler.fs.collector import collector_paused
from bundler.home import backup


@pytest.fixture
def collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


@pytest.mark.usefixtures("collector_enabled")
def test_the_collector_is_paused_in_the_block_and_enabled_after_it_however_it_ends() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("a failure in the block")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_enabled")
def test_a_collector_turned_off_before_stays_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


@pytest.mark.usefixtures("collector_enabled")
def test_a_backup_writes_and_checks_its_zip_without_a_pass_of_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, _home = make_project(tmp_path, rows=300)
    user = tmp_path / "user"
    user.mkdir()
    passes: list[int] = []
    seen: list[bool] = []
    writes_and_checks = backup._backup_into

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and len(seen) == 1:  # while the zip is written and checked
            passes.append(info["generation"])

    def watched(*args: Any, **kwargs: Any) -> backup.BackupReport:
        seen.append(gc.isenabled())
        try:
            return writes_and_checks(*args, **kwargs)
        finally:
            seen.append(gc.isenabled())

    monkeypatch.setattr(backup, "_backup_into", watched)
    threshold = gc.get_threshold()
    gc.set_threshold(100, 10, 10)  # a pass every 100 allocations, were the collector on
    gc.callbacks.append(count)
    try:
        report = backup.backup_home(project, environ=clean_env(user))
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)
    assert report.entries > 5
    assert seen[:2] == [False, False]
    assert passes == []
    assert gc.isenabled()
