"""``verify_bundle(known_digests=…)``: a folder bundler itself unpacked is verified from the
digests the unpacker took of the bytes it wrote, instead of reading every file back; every other
check stays, and a member whose bytes differ from ``checksums.xxh3`` is still refused."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from support import bundlefactory as bf
from support.kit import one_error, run_cli
from support.verify_kit import facts

from bundler.bundle.archive_read import ArchiveLimits, Digests, read_tar
from bundler.bundle.manifest import CONFIG_NAME
from bundler.bundle.verify import verify_bundle
from bundler.fs.durable import open_dir


def unpack(data: bytes, dest: Path) -> Digests:
    dest.mkdir(mode=0o700)
    fd = open_dir(dest, follow=False)
    digests: Digests = {}
    try:
        read_tar(io.BytesIO(data), fd, ArchiveLimits(), name="b.tar", digests=digests)
    finally:
        os.close(fd)
    return digests


def tampered(data: bytes) -> tuple[bytes, str]:
    """The archive with one byte of one workspace file's data changed (same size, so the
    header and the layout are intact): (archive, the member's name)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        victim = next(
            m for m in archive.getmembers() if m.isfile() and m.name.startswith("workspace/")
        )
    raw = bytearray(data)
    raw[victim.offset_data] ^= 0x01
    return bytes(raw), victim.name


def test_known_digests_give_the_report_that_reading_gives(exported: Path, tmp_path: Path) -> None:
    digests = unpack(bf.pack_bytes(exported), tmp_path / "out")
    read = verify_bundle(tmp_path / "out", per_file=True)
    known = verify_bundle(tmp_path / "out", known_digests=digests, per_file=True)
    assert read.ok and known.ok
    assert facts(known) == facts(read)


def test_a_member_whose_bytes_differ_from_checksums_is_refused_with_the_unpackers_digests(
    exported: Path, tmp_path: Path
) -> None:
    data, name = tampered(bf.pack_bytes(exported))
    digests = unpack(data, tmp_path / "out")
    report = verify_bundle(tmp_path / "out", known_digests=digests)
    assert [(p.path, p.message) for p in report.errors] == [
        (name, "content does not match its digest in checksums.xxh3")
    ]


def test_bundle_unpack_of_a_member_whose_bytes_differ_is_refused_naming_it(
    exported: Path, tmp_path: Path
) -> None:
    data, name = tampered(bf.pack_bytes(exported))
    (tmp_path / "b.tar").write_bytes(data)
    done = run_cli(["bundle", "unpack", str(tmp_path / "b.tar"), str(tmp_path / "out")])
    assert done.returncode == 3, done.stderr
    assert one_error(done.stderr) and name in done.stderr and "digest" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar"]


def test_a_known_digest_of_another_size_is_not_taken(exported: Path, tmp_path: Path) -> None:
    """A file whose size is not the recorded one is read back and judged by its bytes."""
    digests = unpack(bf.pack_bytes(exported), tmp_path / "out")
    wrong = {rel: (size + 1, "0" * 32) for rel, (size, _digest) in digests.items()}
    assert verify_bundle(tmp_path / "out", known_digests=wrong).ok


def test_config_toml_is_read_even_with_a_known_digest(exported: Path, tmp_path: Path) -> None:
    """Its content is parsed and checked, so it is never taken on a recorded digest."""
    digests = unpack(bf.pack_bytes(exported), tmp_path / "out")
    size, _digest = digests[CONFIG_NAME]
    digests[CONFIG_NAME] = (size, "0" * 32)
    report = verify_bundle(tmp_path / "out", known_digests=digests)
    assert report.ok, report.errors
    assert report.fragment is not None


def test_known_digests_keep_every_structure_rule(exported: Path, tmp_path: Path) -> None:
    """A stray file, a hard link: refused as without known digests, even if listed there."""
    digests = unpack(bf.pack_bytes(exported), tmp_path / "out")
    workspace = tmp_path / "out" / "workspace"
    first = next(p for p in sorted(workspace.rglob("*")) if p.is_file())
    os.link(first, workspace / "hard-link")
    (tmp_path / "out" / "stray.txt").write_bytes(b"x")
    digests["workspace/hard-link"] = digests[first.relative_to(tmp_path / "out").as_posix()]
    digests["stray.txt"] = (1, "0" * 32)
    known = verify_bundle(tmp_path / "out", known_digests=digests)
    read = verify_bundle(tmp_path / "out")
    assert facts(known) == facts(read)
    messages = " | ".join(f"{p.path}: {p.message}" for p in known.errors)
    assert "hard link" in messages and "stray.txt" in messages
