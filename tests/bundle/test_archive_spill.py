"""A listed archive kept on disk: members and digests come back as they went in, nothing of
them has a name on disk, and a walk of the folder made from them gets the digests the replay
recorded, in its own order, without holding one per file."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
from support import bundlefactory as bf
from support.kit import tree_snapshot

from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.archive_read import ArchiveLimits, Digests, list_tar
from bundler.bundle.archive_replay import PARALLEL_FROM, replay_members, replay_tar
from bundler.bundle.archive_spill import MAX_RUNS, DigestSlots, MemberFile, SpilledDigests
from bundler.bundle.manifest import checksum_sort_text
from bundler.bundle.verify import verify_bundle
from bundler.fs.durable import open_dir


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle the real exporter made of a workspace of many folders (several workers'
    worth of files)."""
    base = tmp_path_factory.mktemp("wide")
    install = bf.write_install(base / "install")
    bf.widen_workspace(install)
    return bf.export_bundle(install, base / "bundle")


def folder_fd(path: Path) -> int:
    path.mkdir(mode=0o700, exist_ok=True)
    return open_dir(path, follow=False)


def test_a_member_file_gives_back_every_member_in_order_as_often_as_asked(tmp_path: Path) -> None:
    """Across many blocks, with names of any bytes a tar name may hold, and two readings at
    once (the replay reads the folders, then the files; the walk reads it again)."""
    names = ["a", "é/ü", "x" * 4000, "bad\udcff/name", "sp ace/t\tab"]
    members = [
        ListedMember(
            f"{names[i % len(names)]}/{i}",
            i % 7 == 0,
            0o640,
            i * 3,
            i * 512,
            i * 512 + 512,
            i % 2 == 0,
        )
        for i in range(3000)
    ]
    fd = folder_fd(tmp_path / "private")
    try:
        with MemberFile(fd) as spilled:
            for member in members:
                spilled.append(member)
            assert len(spilled) == len(members)
            first, second = iter(spilled), iter(spilled)
            assert next(first) == members[0]
            assert list(second) == members
            assert [members[0], *first] == members
            shared = spilled.share()
        with shared:
            assert list(shared) == members
    finally:
        os.close(fd)


def test_a_spill_has_no_name_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """Nobody can open the files by name while they are written, and the folder they are in
    may be removed at once (a pull removes its blob folder before the verification)."""
    private = tmp_path / "private"
    fd = folder_fd(private)
    try:
        members, slots = MemberFile(fd), DigestSlots(fd)
        members.append(ListedMember("f", False, 0o600, 1, 0, 512, True))
        slots.put(0, 1, "0" * 32)
        assert os.listdir(private) == []
        os.rmdir(private)
        assert list(members) == [ListedMember("f", False, 0o600, 1, 0, 512, True)]
        assert list(slots.read(0, 2)) == [(1, "0" * 32), None]
        members.close()
        slots.close()
    finally:
        os.close(fd)


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("fmt", ["bundler", "gnu"])
def test_a_replay_from_a_member_file_records_what_a_replay_from_a_list_records(
    wide: Path, tmp_path: Path, fmt: str, workers: int
) -> None:
    """The same files, modes and digests, whatever tar wrote the archive and however many
    threads make it; the digests come back by path as a walk asks for them (those of an
    archive in another order, in up to MAX_RUNS runs: a digest given is always the one
    recorded)."""
    if fmt == "bundler":
        data = bf.pack_bytes(wide)
    else:
        tops = sorted(p.name for p in wide.iterdir())
        done = subprocess.run(
            ["tar", f"--format={fmt}", "-C", str(wide), "-c", *tops],
            check=True,
            capture_output=True,
        )
        data = done.stdout
    (tmp_path / "blob").write_bytes(data)
    blob = os.open(tmp_path / "blob", os.O_RDONLY)
    listed = list_tar(io.BytesIO(data), ArchiveLimits())
    assert sum(not m.is_dir for m in listed) >= PARALLEL_FROM
    private, by_list, spilled = (folder_fd(tmp_path / n) for n in ("private", "list", "spill"))
    try:
        expected: Digests = {}
        replay_tar(blob, by_list, listed, digests=expected, workers=workers)
        with MemberFile(private) as members, SpilledDigests() as digests:
            for member in listed:
                members.append(member)
            slots = digests.record(members, private)
            replay_members(blob, spilled, members, slots=slots, workers=workers)
            assert tree_snapshot(tmp_path / "spill") == tree_snapshot(tmp_path / "list")
            in_walk_order = sorted(expected, key=checksum_sort_text)
            answers = {name: digests.get(name) for name in in_walk_order}
            if fmt == "bundler":  # in checksum order but for the root files: every one
                assert answers == expected
            else:  # in the order the folders were read: what is given is right
                assert {n: a for n, a in answers.items() if a is not None}.items() <= (
                    expected.items()
                )
            # a second walk reads them again from the first
            first = in_walk_order[0]
            assert digests.get(first) == expected[first]
            assert digests.get("workspace/no such file") is None
    finally:
        for fd in (blob, private, by_list, spilled):
            os.close(fd)


def test_an_archive_in_another_order_is_read_back_as_runs_in_checksum_order(
    tmp_path: Path,
) -> None:
    """Each run of members in checksum order is read back beside the others, up to
    MAX_RUNS; files out of order in the last run get no recorded digest (the walk reads them
    back): the order is never made in memory."""
    names = [f"w/{n:02}" for n in range(MAX_RUNS + 8, 0, -1)]  # each sorts before the last
    private = folder_fd(tmp_path / "private")
    try:
        with MemberFile(private) as members, SpilledDigests() as digests:
            for place, name in enumerate(names):
                members.append(ListedMember(name, False, 0o600, place, 0, 0, True))
            slots = digests.record(members, private)
            for place in range(len(names)):
                slots.put(place, place, f"{place:032x}")
            answers = {name: digests.get(name) for name in sorted(names)}
        kept = names[:MAX_RUNS]  # the last run starts at the MAX_RUNS-th: only its first kept
        assert answers == {
            name: (names.index(name), f"{names.index(name):032x}") if name in kept else None
            for name in names
        }
    finally:
        os.close(private)


def test_a_folder_made_from_spilled_members_verifies_by_its_recorded_digests(
    wide: Path, tmp_path: Path
) -> None:
    """``verify_bundle`` takes the spilled digests as ``known_digests``: the folder verifies,
    and a recorded digest that is not the checksums' is found (the files are not read back)."""
    data = bf.pack_bytes(wide)
    (tmp_path / "blob").write_bytes(data)
    blob = os.open(tmp_path / "blob", os.O_RDONLY)
    private, out = folder_fd(tmp_path / "private"), folder_fd(tmp_path / "out")
    try:
        with MemberFile(private) as members, SpilledDigests() as digests:
            for member in list_tar(io.BytesIO(data), ArchiveLimits()):
                members.append(member)
            slots = digests.record(members, private)
            replay_members(blob, out, members, slots=slots)
            assert verify_bundle(tmp_path / "out", known_digests=digests).ok
            place, victim = next(
                (place, m)
                for place, m in enumerate(members)
                if not m.is_dir and m.name.startswith("workspace/")
            )
            slots.put(place, victim.size, "f" * 32)
            report = verify_bundle(tmp_path / "out", known_digests=digests)
            assert [e.path for e in report.errors] == [victim.name]
            assert "does not match" in report.errors[0].message
    finally:
        for fd in (blob, private, out):
            os.close(fd)
