"""A backup zip cut into parts and put together again (specs/oci-artifact.md, "A data-home
backup as an OCI artifact").

A registry stores a backup as one blob per part (``chat.db``, ``files``, each skill), so that a
part whose content has not changed has the same digest and is never uploaded again. Each part
is itself a small zip holding that part's entries of the backup, their compressed bytes copied
as they are (neither inflated nor deflated), under headers that depend only on the entry: its
name, method, CRC, sizes and mode, and a fixed date. The date the backup zip gives an entry (the
snapshot's time for ``chat.db``) would change the part's bytes on every backup; ``backup.json``
carries each file's exact ``mtime_ns``, which is what a restore applies.

Putting the parts together again gives a backup zip (``backup-format.md``): every part opened
with the backup reader's directory rules (:func:`bundler.home.zipcheck.open_zip`), each entry's
local header checked against its directory record and the entry checked to belong to its part,
then copied raw, and ``backup.json`` written last. The result is an ordinary backup, read by
restore with every one of its checks (digests against ``backup.json``, the database's
``integrity_check``): nothing here vouches for what a registry served.
"""

from __future__ import annotations

import os
import stat
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bundler.errors import Hostile, Malformed, TooLarge
from bundler.home.reuse import end_entry, start_entry
from bundler.home.zipcheck import (
    DATABASE,
    MANIFEST,
    MAX_ENTRIES,
    check_local_header,
    open_zip,
    path_problem,
)
from bundler.rules.names import escape_display

FILES = "files"
SKILLS = "skills"
SKILL_PREFIX = "skills/"
MAX_SKILL_PARTS = 64
"""Skill folders beyond this many all travel in the ``skills`` part: an artifact's layers are
few (:data:`MAX_PARTS`), and a home with hundreds of skills was not made by the agent."""
MAX_PARTS = 3 + MAX_SKILL_PARTS
FIXED_DATE = (1980, 1, 1, 0, 0, 0)
"""Every entry of a part carries this date: a part's bytes depend on its content alone."""
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_CHUNK = 1 << 20


def part_titles(names: list[str]) -> dict[str, str]:
    """Each entry name of a backup (``backup.json`` excepted) mapped to its part's title:
    ``chat.db``, ``files``, ``skills`` (the folder itself and any file directly in it), or
    ``skills/<name>`` for each skill folder, unless there are more than
    :data:`MAX_SKILL_PARTS` of them (then every skill is in ``skills``)."""
    skills = sorted({n[len(SKILL_PREFIX) :].split("/", 1)[0] for n in names if _in_skill_folder(n)})
    separate = len(skills) <= MAX_SKILL_PARTS
    titles: dict[str, str] = {}
    for name in names:
        if name == MANIFEST:
            continue
        if name == DATABASE:
            titles[name] = DATABASE
        elif name.split("/", 1)[0] == FILES:
            titles[name] = FILES
        elif separate and _in_skill_folder(name):
            titles[name] = SKILL_PREFIX + name[len(SKILL_PREFIX) :].split("/", 1)[0]
        else:
            titles[name] = SKILLS
    return titles


def _in_skill_folder(name: str) -> bool:
    """Whether ``name`` lies in (or is) a folder below ``skills/``."""
    rest = name[len(SKILL_PREFIX) :] if name.startswith(SKILL_PREFIX) else ""
    return "/" in rest


def title_problem(title: str) -> str | None:
    """Why ``title`` cannot name a part of a backup, or None."""
    if title in (DATABASE, FILES, SKILLS):
        return None
    if title.startswith(SKILL_PREFIX):
        skill = title[len(SKILL_PREFIX) :]
        if skill and "/" not in skill and path_problem(title, folder=True) is None:
            return None
    return f"{escape_display(title)} is not a part of a data-home backup"


@dataclass(frozen=True)
class Part:
    """One part of a backup, written to ``path``: its title and the entries it holds."""

    title: str
    path: Path
    entries: int


def split_backup(backup: Path, folder: Path) -> tuple[bytes, list[Part]]:
    """Cut the backup zip ``backup`` (one this tool wrote and verified) into part zips in
    ``folder``, named ``part-<n>.zip`` in the order of their titles; returns the bytes of
    its ``backup.json`` and the parts. The same entries give the same part bytes."""
    with open_zip(backup) as archive:
        infos = archive.infolist()
        titles = part_titles([info.filename for info in infos])
        manifest = archive.getinfo(MANIFEST)
        with archive.open(manifest) as source:
            index = source.read()
        grouped: dict[str, list[zipfile.ZipInfo]] = {}
        for info in infos:
            if info.filename != MANIFEST:
                grouped.setdefault(titles[info.filename], []).append(info)
        parts: list[Part] = []
        for number, title in enumerate(sorted(grouped)):
            path = folder / f"part-{number}.zip"
            _write_part(path, archive, grouped[title])
            parts.append(Part(title, path, len(grouped[title])))
    return index, parts


def _write_part(path: Path, source: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> None:
    """A zip at ``path`` (0600, new) of ``infos`` copied raw from ``source``."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w+b") as raw, zipfile.ZipFile(raw, "w", allowZip64=True) as part:
        for info in infos:
            _copy_entry(source, info, part)


def _fresh_info(old: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """The header ``old`` gets in a part or a reassembled backup: its name and mode, the
    fixed date."""
    info = zipfile.ZipInfo(old.filename, FIXED_DATE)
    info.create_system = 3
    info.external_attr = old.external_attr
    return info


def _copy_entry(source: zipfile.ZipFile, old: zipfile.ZipInfo, target: zipfile.ZipFile) -> None:
    """Append ``old`` to ``target`` with its compressed bytes as ``source`` holds them."""
    new = _fresh_info(old)
    if old.filename.endswith("/"):
        target.writestr(new, b"")
        return
    fp = source.fp
    if fp is None:
        raise ValueError("the zip is closed")
    check_local_header(source, old)
    fp.seek(old.header_offset)
    _sig, *_fields, name_len, extra_len = _LOCAL.unpack(fp.read(_LOCAL.size))
    fp.seek(old.header_offset + _LOCAL.size + name_len + extra_len)
    sink = start_entry(target, new, old.compress_type, old.CRC, old.file_size, old.compress_size)
    _copy(fp.read, sink, old.compress_size, old.filename)
    end_entry(target, new)


def _copy(read: Callable[[int], bytes], sink: IO[bytes], count: int, name: str) -> None:
    while count:
        chunk = read(min(_CHUNK, count))
        if not chunk:
            raise Malformed(f"backup entry {escape_display(name)}: its data ends early")
        sink.write(chunk)
        count -= len(chunk)


def assemble_backup(
    parts: list[tuple[str, Path]], index: Path, out: Path, *, max_entries: int = MAX_ENTRIES
) -> None:
    """Write the backup zip ``out`` (new, 0600) from part zips (title, path) and the
    ``backup.json`` file ``index``: each part read with the backup reader's directory rules,
    each entry checked to belong to its part and copied raw, ``backup.json`` last. Raises
    :class:`InvalidInput` naming the part at fault; the backup itself is checked by its
    reader afterwards.

    The parts together may hold no more entries than one backup zip may (``max_entries``):
    each part is within the limit on its own, and without a running count many parts would be
    copied, and every name held, before the assembled zip met its reader's limit."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(out, flags, 0o600)
    seen: set[str] = set()
    with os.fdopen(fd, "w+b") as raw, zipfile.ZipFile(raw, "w", allowZip64=True) as backup:
        for title, path in parts:
            with open_zip(path) as part:
                infos = part.infolist()
                if len(seen) + len(infos) > max_entries:
                    raise TooLarge(
                        f"backup part {escape_display(title)} takes the backup past "
                        f"{max_entries} entries, more than a backup may hold"
                    )
                titles = part_titles([info.filename for info in infos])
                for info in infos:
                    name = info.filename
                    if titles.get(name, "") != title and not (
                        title == SKILLS and name.startswith(SKILL_PREFIX)
                    ):
                        raise Hostile(
                            f"backup part {escape_display(title)} holds "
                            f"{escape_display(name)}, which is not of that part"
                        )
                    if name in seen:
                        raise Hostile(f"backup entry {escape_display(name)} is in two parts")
                    seen.add(name)
                    _copy_entry(part, info, backup)
        info = zipfile.ZipInfo(MANIFEST, FIXED_DATE)
        info.create_system = 3
        info.external_attr = (stat.S_IFREG | 0o600) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(index, "rb") as source, backup.open(info, "w", force_zip64=False) as sink:
            while chunk := source.read(_CHUNK):
                sink.write(chunk)
