"""``checksums.xxh3`` built while an export copies, without holding a line per file in memory."""

from __future__ import annotations

import os
import tempfile
from typing import IO

import xxhash

from bundler.bundle.manifest import checksum_line, checksum_sort_key
from bundler.fs import durable
from bundler.fs.copytree import CopiedFile
from bundler.fs.scratch import temp_root

# every file an export generates (config.toml, the manifest, checksums.xxh3): new, never followed
GENERATED_MODE = 0o644
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ChecksumSpool:
    """The lines of ``checksums.xxh3``, spooled to unnamed temporary files, one per section.

    A section is a top-level entry (``config.toml``, ``memory``, ``workspace``) or one skill
    bundle (``skills/<b>``). Every tree is walked in checksum order already (02 §9.2), so only
    the sections are ordered at the end: nothing per file stays in memory (P4: peak memory must
    not grow with the number of files).
    """

    def __init__(self) -> None:
        self._sections: dict[str, IO[bytes]] = {}
        self.files = 0
        self.bytes = 0

    def __enter__(self) -> ChecksumSpool:
        return self

    def __exit__(self, *_exc: object) -> None:
        for spool in self._sections.values():
            spool.close()
        self._sections.clear()

    def add(self, section: str, copied: CopiedFile) -> None:
        """Append the line of one carried file to its section."""
        spool = self._sections.get(section)
        if spool is None:
            # closed by __exit__: the spools live as long as the build
            spool = self._sections[section] = tempfile.TemporaryFile(dir=temp_root())  # noqa: SIM115
        # one line, already in order within its section: no sort per file
        spool.write(checksum_line(copied.xxh3_128, copied.relpath))
        self.files += 1
        self.bytes += copied.size

    def write(self, dir_fd: int, name: str) -> str:
        """Create ``name`` in ``dir_fd`` from the sections in order; returns its XXH3-128."""
        hasher = xxhash.xxh3_128()
        fd = os.open(name, CREATE_FLAGS, GENERATED_MODE, dir_fd=dir_fd)
        try:
            for section in sorted(self._sections, key=checksum_sort_key):
                spool = self._sections[section]
                spool.seek(0)
                while chunk := spool.read(1 << 20):
                    hasher.update(chunk)
                    durable.write_all(fd, chunk)
            os.fchmod(fd, GENERATED_MODE)
        finally:
            os.close(fd)
        return str(hasher.hexdigest())
