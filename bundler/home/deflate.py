"""How a backup's entries are compressed: the stored-or-deflate decision and deflate itself.

A file is deflated in 1 MiB blocks, each primed with the 32 KiB before it and ending on a byte
boundary, so the blocks can be compressed on worker threads (zlib releases the GIL) and still
join into one deflate stream that is the same whatever thread made each block: the zip is
byte-for-byte the same for the same inputs (and the same engine).

The engine is Intel's ISA-L (``python-isal``, a dependency) for ``fast`` and ``default``: the
standard raw deflate any unzip reads, made many times faster than zlib makes it; zlib where the
module does not import, and always for ``best`` (zlib's level 9 is the smaller). Like zlib it
releases the GIL. ``BUNDLER_DEFLATE_ENGINE=zlib`` forces zlib (the tests run both).
"""

from __future__ import annotations

import os
import zipfile
import zlib
from collections import deque
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import xxhash

from bundler.errors import ChangedMeanwhile
from bundler.fs.digest import read_into
from bundler.fs.interrupts import settled, wait_for
from bundler.fs.processors import usable_processors
from bundler.fs.threads import Pool
from bundler.home.reuse import ZIP64_FROM, end_entry, start_entry
from bundler.home.zipcheck import STORE_ABOVE_RATIO, isal_module
from bundler.rules.names import escape_display

SAMPLE = 4 << 10
LEVELS = {"fast": 1, "default": 6, "best": 9, "none": 0}
"""``--compression``: the zlib deflate level of each name (``none``: every entry stored); with
ISA-L, ``fast`` is its level 1 and ``default`` its level 2 (:data:`_ISAL_LEVELS`), ``best``
stays zlib's 9. Measured on the benchmark's text (notes, code, chat logs; 11 MB, one core):
zlib 1 took 0.23 s for 30.3 % of the bytes, zlib 6 1.56 s for 24.3 %, zlib 9 2.06 s for 24.0 %;
ISA-L 1 0.057 s for 29.5 %, ISA-L 2 0.060 s for 29.2 %. The default is ISA-L's level 2: a
twenty-sixth of zlib 6's time for a fifth more bytes, the same size as zlib 1 in a quarter of
its time; with unchanged entries copied from the base (04 §5.1.1) a file is compressed once
but its bytes are kept by every backup, and ``best`` is there for who counts them."""
_ISAL_LEVELS = {1: 1, 6: 2}
"""The ISA-L level standing for a zlib level (the others stay zlib's)."""
DEFAULT_COMPRESSION = "default"
_BLOCK = 1 << 20
"""Deflate works in blocks of this size, a file read whole as a file streamed."""
_WINDOW = 32 << 10
_BLOCKS_AHEAD = 8
# Below this sample ratio deflate gains too little to pay for itself (random or compressed data)
_INCOMPRESSIBLE = 1.02


def store_as_is(head: bytes) -> bool:
    """Whether an entry starting with ``head`` is stored: a sample that already compresses
    beyond the margin, or hardly at all (random or compressed data), is stored as it is."""
    sample = head[:SAMPLE]
    if not sample:
        return True
    deflate = _compressor(1, b"")
    ratio = len(sample) / max(1, len(deflate.compress(sample) + deflate.flush()))
    return ratio > STORE_ABOVE_RATIO / 2 or ratio < _INCOMPRESSIBLE


@dataclass(frozen=True)
class Packed:
    """A file's data as it goes into the zip, by ``method``, with the CRC-32 of the
    uncompressed bytes."""

    method: int
    crc: int
    payload: bytes


def pack(data: bytes, level: int) -> Packed:
    """What a worker thread does for one file read whole: its bytes stored or deflated at
    ``level`` (0: stored), with their CRC."""
    crc = zlib.crc32(data)
    if level and not store_as_is(data[:SAMPLE]):
        # block by block as a large file is, so that the bytes never depend on the path taken
        blocks = range(0, max(1, len(data)), _BLOCK)
        payload = b"".join(
            _deflate_block(
                data[at : at + _BLOCK],
                data[max(0, at - _WINDOW) : at],
                at + _BLOCK >= len(data),
                level,
            )
            for at in blocks
        )
        if len(data) <= STORE_ABOVE_RATIO * max(1, len(payload)):
            return Packed(zipfile.ZIP_DEFLATED, crc, payload)
    return Packed(zipfile.ZIP_STORED, crc, data)


def _deflate_block(block: bytes, window: bytes, last: bool, level: int) -> bytes:
    """One block of a large entry deflated alone, primed with the 32 KiB before it (which an
    inflater has just produced, so a raw stream needs no dictionary marker) and ending on a
    byte boundary (a sync flush), the last block ending the stream: the blocks, joined, are
    one deflate stream, and the same one whatever thread made each."""
    deflate = _compressor(level, window)
    made: bytes = deflate.compress(block) + deflate.flush(
        zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH
    )
    return made


def deflate_engine() -> str:
    """The engine ``fast`` and ``default`` deflate with: ``isal`` or ``zlib``."""
    return "zlib" if isal_module() is None else "isal"


def _compressor(level: int, window: bytes) -> Any:
    """A raw deflate compressor at ``level`` (a zlib level), primed with ``window``."""
    isal = isal_module()
    if isal is not None and level in _ISAL_LEVELS:
        module, level = isal, _ISAL_LEVELS[level]
    else:
        module = zlib
    if window:
        return module.compressobj(level, zlib.DEFLATED, -15, zdict=window)
    return module.compressobj(level, zlib.DEFLATED, -15)


def deflate_large(
    archive: zipfile.ZipFile, relpath: str, fd: int, st: os.stat_result, info: zipfile.ZipInfo,
    pool: Pool | None, level: int,
) -> tuple[int, str, str]:  # fmt: skip
    """Deflate a file too large to read whole in :data:`_BLOCK` blocks, on the workers when
    there are some, writing them in order; (size, digest, XXH3-128 of the deflated bytes).
    The local header is written again once the CRC and sizes are known, as zipfile does for a
    seekable zip."""
    zip64 = st.st_size >= ZIP64_FROM
    sink = start_entry(archive, info, zipfile.ZIP_DEFLATED, 0, 0, 0, zip64=zip64)
    hasher = xxhash.xxh3_128()
    raw = xxhash.xxh3_128()
    crc = size = packed = 0
    pending: deque[futures.Future[bytes] | bytes] = deque()
    buffer = bytearray(_BLOCK)

    def read_block() -> bytes:
        filled = bytearray()
        while len(filled) < _BLOCK:
            count = read_into(fd, buffer, relpath)
            if not count:
                break
            filled += buffer[:count]
        return bytes(filled)

    def write_oldest() -> None:
        nonlocal packed
        done = pending.popleft()
        if not isinstance(done, bytes):
            job = done
            wait_for(settled(job))
            done = job.result()
        sink.write(done)
        raw.update(done)
        packed += len(done)

    window = b""
    block = read_block()
    while True:
        following = read_block() if len(block) == _BLOCK else b""
        last = not following
        hasher.update(block)
        crc = zlib.crc32(block, crc)
        size += len(block)
        if pool is None:
            pending.append(_deflate_block(block, window, last, level))
        else:
            pending.append(pool.submit(_deflate_block, block, window, last, level))
        window = block[-_WINDOW:]
        while len(pending) > _BLOCKS_AHEAD:
            write_oldest()
        if last:
            break
        block = following
    while pending:
        write_oldest()
    if not zip64 and max(size, packed) > zipfile.ZIP64_LIMIT:
        shown = escape_display(relpath)
        raise ChangedMeanwhile(f"{shown} grew past 4 GiB while it was read: try again", path=shown)
    end = sink.tell()
    info.CRC, info.file_size, info.compress_size = crc, size, packed
    sink.seek(info.header_offset)
    sink.write(info.FileHeader(zip64))
    sink.seek(end)
    end_entry(archive, info)
    return size, hasher.hexdigest(), raw.hexdigest()


def workers() -> int:
    """Threads compressing or checking a backup's entries: one per core this process may use
    (none on a single core)."""
    cores = usable_processors()
    return cores if cores > 1 else 0


READ_BATCH_ENTRIES = 64
READ_BATCH_BYTES = 4 << 20
"""A worker reading a backup (its check, a restore) is handed entries in batches of up to
:data:`READ_BATCH_ENTRIES` entries or this many compressed bytes: one hand-over and one wait
for many small entries."""


def batch_full(entries: int, packed: int) -> bool:
    """Whether a reading batch of ``entries`` entries, ``packed`` compressed bytes, is full."""
    return entries >= READ_BATCH_ENTRIES or packed >= READ_BATCH_BYTES
