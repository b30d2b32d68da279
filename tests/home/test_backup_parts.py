"""A backup cut into parts and put together again (04 §5.5): the parts together are held to
the entry limit of one backup zip, before their entries are copied."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from support.hostile_zips import clean_env, make_project

from bundler.errors import InvalidInput
from bundler.home.backup import backup_home
from bundler.home.backup_parts import assemble_backup, split_backup


def parts_of(tmp_path: Path) -> tuple[Path, list[tuple[str, Path]], int]:
    project, _home = make_project(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    made = backup_home(project, to=tmp_path / "b.zip", environ=clean_env(user), full=True)
    scratch = tmp_path / "parts"
    scratch.mkdir()
    index, parts = split_backup(made.path, scratch)
    (scratch / "backup.json").write_bytes(index)
    total = sum(part.entries for part in parts)
    return scratch / "backup.json", [(part.title, part.path) for part in parts], total


def test_parts_within_the_limit_together_are_put_together(tmp_path: Path) -> None:
    index, parts, total = parts_of(tmp_path)
    assemble_backup(parts, index, tmp_path / "whole.zip", max_entries=total)
    assert (tmp_path / "whole.zip").stat().st_size > 0


def test_parts_each_within_the_limit_but_past_it_together_are_refused(tmp_path: Path) -> None:
    index, parts, total = parts_of(tmp_path)
    largest = max(entries for entries in _counts(parts))
    assert len(parts) > 1 and largest < total
    with pytest.raises(InvalidInput, match="past"):
        assemble_backup(parts, index, tmp_path / "whole.zip", max_entries=total - 1)


def _counts(parts: list[tuple[str, Path]]) -> list[int]:
    counts = []
    for _title, path in parts:
        with zipfile.ZipFile(path) as part:
            counts.append(len(part.infolist()))
    return counts
