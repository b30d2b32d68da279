"""The archive writer (bundle-format-1 "archive form"): one bundle, one byte sequence.

Bundles are made by the real exporter; GNU tar, a program bundler does not control, reads the
result.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import bundlefactory as bf

from bundler.bundle.archive_write import (
    FormMember,
    _header,
    append_range,
    archive_form,
    bundle_members,
    header_bytes,
    write_tar,
)
from bundler.bundle.manifest import checksum_sort_key
from bundler.errors import InvalidInput
from bundler.fs.durable import open_dir


def members_of(bundle: Path) -> list[str]:
    fd = open_dir(bundle, follow=False)
    try:
        return bundle_members(fd)
    finally:
        os.close(fd)


def test_members_are_root_files_first_then_checksum_order_folders_before_contents(
    exported: Path,
) -> None:
    names = members_of(exported)
    root_files = [n for n in names if "/" not in n and (exported / n).is_file()]
    assert names[: len(root_files)] == sorted(root_files, key=os.fsencode)
    assert "zeroclaw-agent.toml" in root_files
    rest = names[len(root_files) :]
    assert rest == sorted(rest, key=checksum_sort_key)
    every = {str(p.relative_to(exported)) for p in exported.rglob("*")}
    assert set(names) == every and len(names) == len(every)


def test_same_bundle_gives_the_same_bytes_twice(exported: Path) -> None:
    assert bf.pack_bytes(exported) == bf.pack_bytes(exported)


def test_same_bytes_after_touching_mtimes_and_owners_of_the_source(
    exported: Path, tmp_path: Path
) -> None:
    before = bf.pack_bytes(exported)
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    for path in [copy, *copy.rglob("*")]:
        os.utime(path, (123456789, 987654321))
        if os.geteuid() == 0:
            os.chown(path, 4242, 4343)
    assert bf.pack_bytes(copy) == before


def test_headers_carry_fixed_owner_and_time_and_modes_as_carried(exported: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(bf.pack_bytes(exported)), mode="r:") as archive:
        infos = archive.getmembers()
    assert [i.name for i in infos] == members_of(exported)
    for info in infos:
        assert (info.uid, info.gid, info.uname, info.gname, info.mtime) == (0, 0, "", "", 0)
        source = (exported / info.name).stat()
        if info.isdir():
            assert info.mode == 0o755
        else:
            assert info.isreg() and info.mode == source.st_mode & 0o777
            assert info.size == source.st_size


def test_plain_ustar_unless_a_name_needs_pax(exported: Path, tmp_path: Path) -> None:
    data = bf.pack_bytes(exported)
    assert b"PaxHeader" not in data and data[257:263] == b"ustar\x00"
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    long = "n" * 120 + ".md"
    (copy / "workspace" / long).write_text("x")
    (copy / "workspace" / "café.md").write_text("y")
    data = bf.pack_bytes(copy)
    assert data.count(b"PaxHeader") == 2
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        names = archive.getnames()
    assert f"workspace/{long}" in names and "workspace/café.md" in names


def test_gnu_tar_lists_it_cleanly(exported: Path, tmp_path: Path) -> None:
    archive = tmp_path / "bundle.tar"
    archive.write_bytes(bf.pack_bytes(exported))
    listed = subprocess.run(
        ["tar", "-tvf", str(archive)], capture_output=True, text=True, check=False
    )
    assert listed.returncode == 0 and listed.stderr == ""
    names = [line.split(maxsplit=5)[5].rstrip("/") for line in listed.stdout.splitlines()]
    assert names == members_of(exported)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(out)], check=True)
    for name in members_of(exported):
        if (exported / name).is_file():
            assert (out / name).read_bytes() == (exported / name).read_bytes()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "hardlink"])
def test_a_bundle_holding_a_link_or_special_file_is_refused(
    exported: Path, tmp_path: Path, kind: str
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    odd = copy / "workspace" / "odd"
    if kind == "symlink":
        odd.symlink_to("/etc/passwd")
    elif kind == "fifo":
        os.mkfifo(odd)
    else:
        os.link(copy / "config.toml", odd)
    with pytest.raises(InvalidInput) as caught:
        bf.pack_bytes(copy)
    assert "workspace/odd" in str(caught.value) or "config.toml" in str(caught.value)


def test_a_member_turned_into_a_symlink_after_listing_is_refused(
    exported: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    fd = open_dir(copy, follow=False)
    try:
        names = bundle_members(fd)
        target = next(n for n in names if n.startswith("workspace/") and "." in n)
        (copy / target).unlink()
        (copy / target).symlink_to("/etc/passwd")
        with pytest.raises(InvalidInput):
            write_tar(fd, names, io.BytesIO())
    finally:
        os.close(fd)


def is_archive_header(block: bytes, name: str, *, is_dir: bool, mode: int, size: int) -> bool:
    """Whether ``block`` is header_bytes' one-block header of such a member, as the archive
    reader tells it (``mode`` as a stat gives it)."""
    mode = 0o755 if is_dir else mode & 0o777
    return archive_form(block) == (name, is_dir, mode, 0 if is_dir else size)


@settings(max_examples=400, deadline=None)
@given(
    name=st.text(alphabet=st.sampled_from("abz09._-/ é\u4e2d"), min_size=1, max_size=130).filter(
        lambda n: "" not in n.split("/")  # as member names are: no empty component
    ),
    is_dir=st.booleans(),
    mode=st.integers(min_value=0, max_value=0o7777),
    size=st.one_of(st.integers(0, 1 << 20), st.integers(8**11 - 2, 8**11 + 2)),
)
def test_header_is_byte_for_byte_what_tarfile_writes(
    name: str, is_dir: bool, mode: int, size: int
) -> None:
    """The direct ustar header of the common member is tarfile's own PAX_FORMAT header, so the
    archive bytes (and every digest pushed from them) do not depend on which path built it."""
    kind = stat.S_IFDIR if is_dir else stat.S_IFREG
    st_ = os.stat_result((kind | mode, 0, 0, 1, 1000, 1000, size, 7, 7, 7))
    expected = _header(name, st_).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    assert header_bytes(name, st_) == expected


@settings(max_examples=400, deadline=None)
@given(
    name=st.text(alphabet=st.sampled_from("abz09._-/ é\u4e2d"), min_size=1, max_size=130).filter(
        lambda n: "" not in n.split("/")
    ),
    is_dir=st.booleans(),
    mode=st.integers(min_value=0, max_value=0o7777),
    size=st.one_of(st.integers(0, 1 << 20), st.integers(8**11 - 2, 8**11 + 2)),
    flip=st.integers(min_value=0, max_value=511),
)
def test_a_header_is_told_in_archive_form_exactly_when_it_is_header_bytes(
    name: str, is_dir: bool, mode: int, size: int, flip: int
) -> None:
    """The reader's cheap check agrees with making the header: true of header_bytes' one-block
    header, false of it with any one byte changed, and never for a member that needs pax."""
    kind = stat.S_IFDIR if is_dir else stat.S_IFREG
    st_ = os.stat_result((kind | mode, 0, 0, 1, 0, 0, 0 if is_dir else size, 0, 0, 0))
    made = header_bytes(name, st_)
    size = 0 if is_dir else size
    assert is_archive_header(made[-512:], name, is_dir=is_dir, mode=mode, size=size) == (
        len(made) == 512
    )
    changed = bytearray(made[-512:])
    changed[flip] ^= 0x01
    assert not is_archive_header(bytes(changed), name, is_dir=is_dir, mode=mode, size=size)
    # read from the block alone: the member made (a member with a pax record has another
    # ustar block after it), or with one byte changed no member at all
    expected = FormMember(name, is_dir, 0o755 if is_dir else mode & 0o777, size)
    assert (archive_form(made[-512:]) == expected) == (len(made) == 512)
    assert archive_form(bytes(changed)) is None


def test_append_range_copies_the_bytes_within_and_across_filesystems(tmp_path: Path) -> None:
    """Inside the kernel where it can; across filesystems (a file here, a memfd on shmem),
    where copy_file_range says EXDEV on recent kernels, through a buffer: the same bytes."""
    data = os.urandom(3 << 20)
    source = tmp_path / "src"
    source.write_bytes(data)
    src = os.open(source, os.O_RDONLY)
    try:
        for dst in (os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT), os.memfd_create("dst")):
            try:
                os.write(dst, b"head")
                append_range(src, 1000, len(data) - 2000, dst)
                assert os.pread(dst, len(data), 0) == b"head" + data[1000:-1000]
            finally:
                os.close(dst)
    finally:
        os.close(src)


def test_the_entries_verify_walked_are_the_members_pack_and_push_archive(exported: Path) -> None:
    """Pack and push archive the entries the verification walked, not a second walk's: the
    same names in the same order as a walk of the folder gives."""
    from bundler.bundle.archive_write import archive_order
    from bundler.bundle.verify import verify_bundle

    report = verify_bundle(exported, per_file=True)
    assert report.ok
    assert archive_order(report.entries) == members_of(exported)


def test_a_folder_header_with_two_trailing_slashes_is_left_to_the_general_parse() -> None:
    """tarfile strips every trailing slash of a folder's name ("a//" reads as "a"), which
    archive_form cannot tell from the block as header_bytes would make it for "a/": so it
    takes no such header, and the reader reads it as tarfile does."""
    folder = os.stat_result((stat.S_IFDIR | 0o755, 0, 0, 1, 0, 0, 0, 0, 0, 0))
    block = header_bytes("a/", folder)
    assert len(block) == 512
    assert archive_form(block) is None
    assert archive_form(header_bytes("a", folder)) == FormMember("a", True, 0o755, 0)
