"""The archive reader (issue 16): hostile input, refused before anything of it is written.

The corpus is ``tests/hostile_archives.py``; the CLI side (one error line, exit 3, nothing
left behind) is in ``tests/cli/test_archive_cli.py``.
"""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import bundlefactory as bf
import hostile_archives
import pytest
from kit import tree_snapshot

from bundler.bundle.archive_read import ArchiveLimits, read_tar
from bundler.errors import InvalidInput
from bundler.fs.durable import open_dir


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("exported")
    install = bf.write_install(base / "install")
    return bf.export_bundle(install, base / "bundle")


def unpack(data: bytes, dest: Path, limits: ArchiveLimits | None = None) -> list[str]:
    dest.mkdir(mode=0o700)
    fd = open_dir(dest, follow=False)
    try:
        return read_tar(io.BytesIO(data), fd, limits or ArchiveLimits(), name="b.tar")
    finally:
        os.close(fd)


def test_folder_to_tar_to_folder_is_byte_for_byte(exported: Path, tmp_path: Path) -> None:
    names = unpack(bf.pack_bytes(exported), tmp_path / "out")
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(exported)
    assert sorted(names) == sorted(tree_snapshot(exported))


def test_the_unpacked_folder_packs_to_the_same_bytes(exported: Path, tmp_path: Path) -> None:
    data = bf.pack_bytes(exported)
    unpack(data, tmp_path / "out")
    assert bf.pack_bytes(tmp_path / "out") == data


@pytest.mark.parametrize("fmt", ["gnu", "pax", "ustar"])
def test_an_archive_gnu_tar_made_of_the_bundle_is_read(
    exported: Path, tmp_path: Path, fmt: str
) -> None:
    archive = tmp_path / "gnu.tar"
    tops = sorted(p.name for p in exported.iterdir())
    subprocess.run(
        ["tar", f"--format={fmt}", "-C", str(exported), "-cf", str(archive), *tops], check=True
    )
    unpack(archive.read_bytes(), tmp_path / "out")
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(exported)


def test_long_and_non_ascii_names_round_trip(exported: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    deep = copy / "workspace" / ("d" * 90) / ("e" * 90)
    deep.mkdir(parents=True)
    deep.chmod(0o700)
    deep.parent.chmod(0o700)  # a bundle's folders are 0700 (02 §1)
    (deep / ("f" * 200)).write_bytes(b"long")
    (copy / "workspace" / "日本語.md").write_bytes(b"jp")
    unpack(bf.pack_bytes(copy), tmp_path / "out")
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(copy)


def _corpus() -> list[str]:
    return list(hostile_archives.CASE_NAMES)


def test_the_corpus_has_every_named_case(exported: Path) -> None:
    assert sorted(c.name for c in hostile_archives.cases(exported)) == sorted(_corpus())


@pytest.mark.parametrize("case_name", _corpus())
def test_hostile_archive_is_refused_with_one_line_naming_it(
    exported: Path, tmp_path: Path, case_name: str
) -> None:
    case = next(c for c in hostile_archives.cases(exported) if c.name == case_name)
    with pytest.raises(InvalidInput) as caught:
        unpack(case.data, tmp_path / "out", case.limits)
    message = str(caught.value)
    assert message.startswith("b.tar ") or message.startswith("b.tar: member ")
    assert "\n" not in message
    assert case.fragment in message
    assert caught.value.code == 3


def test_limits_are_checked_before_the_member_is_written(exported: Path, tmp_path: Path) -> None:
    case = next(c for c in hostile_archives.cases(exported) if c.name == "huge_declared_size")
    with pytest.raises(InvalidInput):
        unpack(case.data, tmp_path / "out")
    assert not (tmp_path / "out" / "workspace" / "huge").exists()
    members = hostile_archives.bundle_member_list(exported)
    with pytest.raises(InvalidInput):
        unpack(bf.pack_bytes(exported), tmp_path / "out2", ArchiveLimits(max_members=2))
    written = [p for p in (tmp_path / "out2").rglob("*")]
    assert len(written) == 2 and len(members) > 2


def test_a_member_unpacked_over_a_planted_symlink_never_follows_it(
    exported: Path, tmp_path: Path
) -> None:
    # the staging folder is ours and empty, but if something planted a link in it mid-way the
    # O_EXCL|O_NOFOLLOW creation refuses rather than writing through it
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "workspace").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    fd = open_dir(dest, follow=False)
    try:
        with pytest.raises(InvalidInput):
            read_tar(io.BytesIO(bf.pack_bytes(exported)), fd, ArchiveLimits(), name="b.tar")
    finally:
        os.close(fd)
    assert list((tmp_path / "elsewhere").iterdir()) == []
