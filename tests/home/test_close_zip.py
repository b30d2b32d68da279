"""A backup's zip is closed by ``reuse.close_zip``: zipfile's own directory and end records,
gathered in memory and written once, so the zip is byte for byte what zipfile's close makes; and
the local header of an entry copied from the base, packed at once, is zipfile's too."""

from __future__ import annotations

import io
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundler.home.reuse import _local_header, close_zip

names = st.text(
    st.characters(min_codepoint=1, max_codepoint=0xD7FF),  # no NUL, no surrogate
    min_size=1,
    max_size=40,
)
entries = st.lists(
    st.tuples(
        names,
        st.binary(max_size=300),
        st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
        st.booleans(),  # force_zip64
        st.binary(max_size=20),  # the entry's comment
    ),
    max_size=12,
    unique_by=lambda entry: entry[0],
)


def written(
    items: list[tuple[str, bytes, int, bool, bytes]], comment: bytes, closing: object
) -> bytes:
    sink = io.BytesIO()
    archive = zipfile.ZipFile(sink, "w", allowZip64=True)
    archive.comment = comment
    for name, data, method, zip64, note in items:
        info = zipfile.ZipInfo(name, (2024, 5, 17, 12, 30, 8))
        info.compress_type = method
        info.comment = note
        info.external_attr = 0o100640 << 16
        with archive.open(info, "w", force_zip64=zip64) as entry:
            entry.write(data)
    folder = zipfile.ZipInfo("folder/", (2024, 5, 17, 12, 30, 8))
    folder.external_attr = (0o40750 << 16) | 0x10
    archive.writestr(folder, b"")
    if closing is close_zip:
        close_zip(archive)
        assert archive.fp is None
    archive.close()
    return sink.getvalue()


@settings(max_examples=150, deadline=None)
@given(items=entries, comment=st.binary(max_size=30).filter(lambda c: b"PK" not in c))
def test_close_zip_writes_what_zipfile_closing_writes(
    items: list[tuple[str, bytes, int, bool, bytes]], comment: bytes
) -> None:
    ours = written(items, comment, close_zip)
    assert ours == written(items, comment, None)
    with zipfile.ZipFile(io.BytesIO(ours)) as archive:
        assert archive.testzip() is None
        assert [info.filename for info in archive.infolist()] == [
            *(item[0] for item in items),
            "folder/",
        ]


def test_close_zip_writes_the_directory_in_one_call() -> None:
    """Thousands of entries: the directory reaches the file as one piece, not four an entry."""
    calls: list[int] = []

    class Counting(io.BytesIO):
        def write(self, data: object) -> int:
            calls.append(len(data))  # type: ignore[arg-type]
            return super().write(data)  # type: ignore[arg-type]

    sink = Counting()
    archive = zipfile.ZipFile(sink, "w")
    for number in range(2000):
        archive.writestr(f"files/{number:05}", b"x")
    calls.clear()
    close_zip(archive)
    assert len(calls) == 1
    assert zipfile.ZipFile(io.BytesIO(sink.getvalue())).namelist()[-1] == "files/01999"


def test_a_zip_whose_close_fails_keeps_its_file_as_it_was() -> None:
    """What zipfile refuses while closing is raised, and nothing of the directory is written."""
    sink = io.BytesIO()
    archive = zipfile.ZipFile(sink, "w", allowZip64=False)
    archive.writestr("a", b"data")
    before = sink.getvalue()
    archive.filelist.extend([archive.filelist[0]] * 0xFFFF)  # past what a zip without ZIP64 holds
    with pytest.raises(zipfile.LargeZipFile):
        close_zip(archive)
    assert sink.getvalue() == before


@settings(max_examples=300, deadline=None)
@given(
    name=names,
    when=st.tuples(
        st.integers(1980, 2107),
        st.integers(1, 12),
        st.integers(1, 28),
        st.integers(0, 23),
        st.integers(0, 59),
        st.integers(0, 59),
    ),
    method=st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
    crc=st.integers(0, 0xFFFFFFFF),
    sizes=st.tuples(st.integers(0, 0xFFFFFFFF // 2), st.integers(0, 0xFFFFFFFF // 2)),
)
def test_a_copied_entrys_local_header_is_zipfiles_byte_for_byte(
    name: str,
    when: tuple[int, int, int, int, int, int],
    method: int,
    crc: int,
    sizes: tuple[int, int],
) -> None:
    """The local header written for an entry copied from the base, packed at once, is the one
    zipfile's FileHeader makes for it, and leaves the entry's versions as FileHeader does."""
    size, packed = sizes
    archive = zipfile.ZipFile(io.BytesIO(), "w")
    ours = zipfile.ZipInfo(name, when)
    ours.flag_bits |= 0x800  # as a backup's entries are made
    header = _local_header(archive, ours, method, crc, size, packed, False)
    theirs = zipfile.ZipInfo(name, when)
    theirs.compress_type, theirs.CRC, theirs.file_size, theirs.compress_size = (
        method,
        crc,
        size,
        packed,
    )
    assert header == theirs.FileHeader(False)
    assert (ours.extract_version, ours.create_version, ours.flag_bits) == (
        theirs.extract_version,
        theirs.create_version,
        0,
    )
