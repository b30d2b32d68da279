"""``verify_bundle(listed=…)``: top folders held in an archive bundler has just read (``bundle
pull REF FILE.tar`` keeps the workspace and skills in their layers) are judged exactly as if the
folder held them: the same report, error for error, for the valid bundle and for every hostile
one those parts can carry."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

from support import bundlefactory as bf
from support import hostile_bundles
from support.verify_kit import facts

from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.archive_read import ArchiveLimits, Digests, list_tar
from bundler.bundle.archive_write import bundle_members, write_listed, write_tar
from bundler.bundle.verify import verify_bundle
from bundler.errors import BundlerError
from bundler.fs.durable import open_dir

PARTS = ("skills", "workspace")


def part_tars(bundle: Path) -> dict[str, bytes]:
    """Each part's layer as ``bundle push`` writes it (raises InvalidInput for a link or a
    device, which no archive can carry)."""
    fd = open_dir(bundle, follow=False)
    try:
        members = bundle_members(fd)
        tars = {}
        for part in PARTS:
            names = [m for m in members if m == part or m.startswith(f"{part}/")]
            if names:
                out = io.BytesIO()
                write_tar(fd, names, out)
                tars[part] = out.getvalue()
        return tars
    finally:
        os.close(fd)


def split(bundle: Path) -> tuple[list[ListedMember], Digests]:
    """Take the parts out of ``bundle`` and list their layers instead."""
    digests: Digests = {}
    listed: list[ListedMember] = []
    for part, data in part_tars(bundle).items():
        listed += list_tar(io.BytesIO(data), ArchiveLimits(), name=part, digests=digests)
        shutil.rmtree(bundle / part)
    return listed, digests


def test_listed_parts_give_the_report_the_folder_gives(exported: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(exported, bundle)
    whole = verify_bundle(bundle)
    listed, digests = split(bundle)
    assert listed and not (bundle / "workspace").exists()
    judged = verify_bundle(bundle, known_digests=digests, listed=listed)
    assert whole.ok and judged.ok
    assert facts(judged) == facts(whole)


def test_every_hostile_bundle_an_archive_can_carry_gets_the_same_report_listed(
    exported: Path, tmp_path: Path
) -> None:
    compared = []
    for name, make in sorted(hostile_bundles.CASES.items()):
        bundle = tmp_path / name
        shutil.copytree(exported, bundle, symlinks=True)
        make(bundle)
        whole = verify_bundle(bundle)
        try:
            listed, digests = split(bundle)
        except (BundlerError, OSError):
            continue  # a link, a device, an unreadable file: refused by the reader instead
        judged = verify_bundle(bundle, known_digests=digests, listed=listed)
        assert facts(judged) == facts(whole), name
        compared.append(name)
    assert len(compared) >= 30, compared


def test_a_listed_file_whose_bytes_differ_from_the_checksums_is_refused(
    exported: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(exported, bundle)
    victim = next(p for p in sorted((bundle / "workspace").rglob("*")) if p.is_file())
    victim.write_bytes(victim.read_bytes()[::-1] + b"!")
    listed, digests = split(bundle)
    report = verify_bundle(bundle, known_digests=digests, listed=listed)
    rel = victim.relative_to(bundle).as_posix()
    assert any(p.path == rel and "does not match" in p.message for p in report.errors)


def test_a_bundle_archives_members_are_listed_in_archive_form(exported: Path) -> None:
    data = bf.pack_bytes(exported)
    listed = list_tar(io.BytesIO(data), ArchiveLimits(), digests={})
    assert listed and all(member.archive_form for member in listed)
    assert _written(_fd_of(data), listed) + bytes(len(data) - _size(listed)) == data


def test_members_not_in_archive_form_are_written_anew(exported: Path, tmp_path: Path) -> None:
    """An owner, a time: the data is copied, the header made as pack makes
    it, so the bytes are the bundle archive's."""
    import tarfile

    data = bf.pack_bytes(exported)
    other = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data)) as source,
        tarfile.open(fileobj=other, mode="w", format=tarfile.GNU_FORMAT) as archive,
    ):
        for member in source.getmembers():
            member.mtime, member.uname = 1_700_000_000, "someone"
            archive.addfile(member, source.extractfile(member) if member.isfile() else None)
    listed = list_tar(io.BytesIO(other.getvalue()), ArchiveLimits(), digests={})
    assert not any(member.archive_form for member in listed)
    assert _written(_fd_of(other.getvalue()), listed) + bytes(len(data) - _size(listed)) == data


def _written(blob_fd: int, listed: list[ListedMember]) -> bytes:
    """What :func:`write_listed` writes (to a real file: it copies inside the kernel)."""
    with os.fdopen(os.memfd_create("out"), "w+b") as out:
        written = write_listed(blob_fd, listed, out)
        out.flush()
        assert out.tell() == written
        out.seek(0)
        return out.read()


def _size(listed: list[ListedMember]) -> int:
    return sum(512 + m.size + -m.size % 512 for m in listed)


def _fd_of(data: bytes) -> int:
    """An unnamed file holding ``data`` (closed at exit of the test process)."""
    fd = os.memfd_create("layer")
    os.write(fd, data)
    return fd
