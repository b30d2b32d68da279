"""The private index of what each backed-up file was when its entry was made (04 §5.1.1).

restic's rule: a file whose size, modification and change times, inode and device all equal
what they were when its entry was made has not changed, and is not read again. A change of
content moves the change time (``ctime``, which no program can set back), so the rule misses
only what a clock set back and a file rewritten within one tick would hide, as restic does.

The database is held to more: its five numbers are recorded only when it was read quiet (no
sidecar before or after, the same numbers both times, :func:`bundler.fs.snapshot.quiet_store`)
and had settled before the read (:func:`settled_before`), and it is unchanged only while it is
still quiet. A live agent writes its store continually; a change in the tick the store was read
in would otherwise hide behind equal times, and a new snapshot costs far more than a file read.

The index is the user's, not the home's (a backup only reads the home, 04 §5.1): one file per
home in the user's cache folder, ``backup-index/<XXH3-128 of the home's real path>.json``
(0600, replaced atomically after each backup is published). It names the home, and per file
of ``files/`` and ``skills/`` (and ``chat.db``, the store) those five numbers and the entry that
was made for the file's bytes (for the store, its snapshot's): its digest, CRC, method,
compressed size and the XXH3-128 of its compressed bytes. A base entry is copied for an
unchanged file only when all of them match it, and its bytes are
hashed as they are copied: equal to the bytes a backup's read-back inflated and checked, so they
are not inflated again (see :mod:`bundler.home.zipwrite`). The backup's format does not change:
a backup never needs the index, and one that is missing, damaged, of another home or from
another version is simply ignored, as is a cache folder that cannot be written.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import xxhash

from bundler.fs import durable
from bundler.fs.privatedir import make_private, user_cache_folder
from bundler.fs.smallfile import NotSmallFile, read_small_file

_FORMAT = 1
_LIMIT = 1 << 30

StatKey = tuple[int, int, int, int, int]


def stat_key(st: os.stat_result) -> StatKey:
    """What restic's rule compares: size, mtime and ctime (ns), inode, device."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


SETTLED_NS = 2_000_000_000
"""How long before a read the database must have last changed for its stat to be recorded:
the coarsest file-system clock (FAT's two seconds) plus the lag of the kernel's coarse clock."""


def settled_before(st: os.stat_result, read_at_ns: int) -> bool:
    """Whether a store last changed at least :data:`SETTLED_NS` before ``read_at_ns`` (the
    wall clock when its read began). A store written during the tick its stat was taken in
    could be written again in that tick with no time moving; one that settled before the read
    cannot be, so any later write moves its times past the recorded ones (racy git's rule)."""
    return max(st.st_mtime_ns, st.st_ctime_ns) + SETTLED_NS <= read_at_ns


class Known(NamedTuple):
    """A file as its entry was made: its stat key, and the entry (digest of the file's bytes,
    CRC-32, zip method, compressed size, XXH3-128 of the compressed bytes)."""

    stat: StatKey
    digest: str
    crc: int
    method: int
    packed: int
    raw: str


def _known(row: Any) -> tuple[str, Known] | None:
    if type(row) is not list or len(row) != 11:
        return None
    path, size, mtime, ctime, inode, device, digest, crc, method, packed, raw = row
    for number in (size, mtime, ctime, inode, device, crc, method, packed):
        if type(number) is not int or number < 0:  # json gives int, never a subclass but bool
            return None
    if type(path) is not str or type(digest) is not str or type(raw) is not str:
        return None
    if len(digest) != 32 or len(raw) != 32:
        return None
    return path, Known((size, mtime, ctime, inode, device), digest, crc, method, packed, raw)


def index_path(home: Path) -> Path:
    """Where the index of ``home`` lives (not created)."""
    key = xxhash.xxh3_128_hexdigest(os.fsencode(os.path.realpath(home)))
    return user_cache_folder() / "backup-index" / f"{key}.json"


def load_index(home: Path) -> dict[str, Known]:
    """The index of ``home``; empty when it is missing or not one this version wrote whole for
    this home (never an error: without it every file is read, as before)."""
    path = index_path(home)
    try:
        data = read_small_file(path, _LIMIT, follow=False)
        document = json.loads(data)
    except (OSError, NotSmallFile, ValueError, RecursionError):
        return {}
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        return {}
    rows = document.get("files")
    if document.get("home") != os.path.realpath(home) or not isinstance(rows, list):
        return {}
    index: dict[str, Known] = {}
    for row in rows:
        parsed = _known(row)
        if parsed is None:
            return {}
        index[parsed[0]] = parsed[1]
    return index


def save_index(home: Path, index: dict[str, Known]) -> None:
    """Replace the index of ``home`` with ``index`` (0600, atomically: a crash leaves the old
    one or the new one; its folders made 0700, never below another user's). Quiet: without it
    the next backup reads every file, as before."""
    rows = [
        [path, *known.stat, known.digest, known.crc, known.method, known.packed, known.raw]
        for path, known in sorted(index.items())
    ]
    document = {"format": _FORMAT, "home": os.path.realpath(home), "files": rows}
    data = json.dumps(document, separators=(",", ":")).encode()
    path = index_path(home)
    with contextlib.suppress(OSError):
        make_private(path.parent)
        folder = durable.open_dir(path.parent, follow=False)
        try:
            if os.fstat(folder).st_uid == os.geteuid():
                durable.atomic_write(folder, path.name, data)
        finally:
            os.close(folder)
