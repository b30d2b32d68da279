"""An import receipt's file listing (03 §3.2 point 5, §4): each imported file's path, size and
XXH3-128, which undo needs to tell a file still as imported from one the agent wrote since.

A bundle holds up to a million files, and import's memory must not grow with them (06 P4), so
the listing never lives in memory or in the receipt's TOML: staging writes it a line at a time
to ``receipt.files`` in the import's private staging folder (made durable with the copies, and
named by the journal), and completing the import publishes it beside the receipt as
``<receipt>.files``, before the receipt itself. The receipt's ``[listing]`` holds the file's
XXH3-128, its size and its number of lines, and each folder of the receipt its number of
lines (``listed``), so that undo refuses a listing that is missing, damaged or another
receipt's.

A line is ``<XXH3-128> <size> <path inside the folder>\\n``: the folders in the receipt's order,
each folder's files in its walk order. A path holds no control character (verify refuses such
names in a bundle, 03 §1, and staging refuses one that appeared since), so a newline always
ends a line and no escaping is needed.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import xxhash

from bundler.errors import ChangedMeanwhile, InvalidInput, Malformed, Tampered, os_failure
from bundler.fs import durable
from bundler.install.files import READ_FLAGS
from bundler.rules.names import escape_display, has_control_chars

STAGED_NAME = "receipt.files"
"""The listing's name inside ``.bundler-import-<token>/`` (never a staged folder's label)."""
SUFFIX = ".files"
"""Appended to the receipt's name to name its listing: ``<stamp>-<alias>.toml.files``."""
_FLUSH_BYTES = 1 << 20
_CHUNK = 1 << 16
_MAX_LINE = 1 << 16
"""Longer than any line import writes (a path of at most 256 levels of 255-byte names)."""
_DIGEST = re.compile(rb"[0-9a-f]{32}")
_SIZE = re.compile(rb"0|[1-9][0-9]{0,19}")

Entry = tuple[str, int, str]
"""(path inside the folder, size, XXH3-128)."""


def listing_name(receipt_name: str) -> str:
    """The name of the listing published beside the receipt ``receipt_name``."""
    return f"{receipt_name}{SUFFIX}"


class ListingWriter:
    """Writes ``receipt.files`` in the staging folder as staging copies, holding at most
    :data:`_FLUSH_BYTES` of it; :attr:`lines` counts what was written, so the caller knows
    each folder's share."""

    def __init__(self, staging_fd: int) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = os.open(STAGED_NAME, flags, 0o600, dir_fd=staging_fd)
        self.hasher = xxhash.xxh3_128()
        self.buffer = bytearray()
        self.size = 0
        self.lines = 0

    def add(self, entry: Entry) -> None:
        """Append one file's line; a path with a control character (one that appeared in the
        bundle after verification) is refused, as it could end a line early."""
        path, size, digest = entry
        if has_control_chars(path):
            raise Tampered(
                f"{escape_display(path)}: appeared in the bundle after verification with a "
                "control character in its name; verify it again",
                path=path,
            )
        line = f"{digest} {size} {path}\n".encode()
        self.hasher.update(line)
        self.buffer += line
        self.size += len(line)
        self.lines += 1
        if len(self.buffer) >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        durable.write_all(self.fd, self.buffer)
        self.buffer.clear()

    def finish(self) -> tuple[str, int]:
        """Write the rest and fsync the file; returns its XXH3-128 and size. (Its folder entry
        becomes durable with the staging folder's, ``copytree.make_durable``.)"""
        self._flush()
        os.fsync(self.fd)
        return str(self.hasher.hexdigest()), self.size

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _digest_of(dir_fd: int, name: str) -> tuple[str, int] | None:
    """XXH3-128 and size of the regular file ``name`` (never through a link), None if absent."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        hasher = xxhash.xxh3_128()
        size = 0
        while chunk := os.read(fd, _CHUNK):
            hasher.update(chunk)
            size += len(chunk)
        return str(hasher.hexdigest()), size
    finally:
        os.close(fd)


def publish(staging_fd: int, dir_fd: int, receipt_name: str, digest: str, size: int) -> None:
    """Put the staged listing beside the receipt ``receipt_name`` (in ``dir_fd``), durably,
    unless a file with its digest is there already (a crash came after it was published).

    Copied a chunk at a time to ``.<name>.partial``, checked against ``digest`` and ``size`` (a
    staged listing that changed is refused rather than published), fsynced, renamed into place
    and the folder fsynced: the listing is whole and durable before the receipt that names it
    is linked. Replacing a file of that name is safe: the receipt does not exist yet (receipts
    are never replaced), so one there is a listing a crash left before its receipt.
    """
    name = listing_name(receipt_name)
    if _digest_of(dir_fd, name) == (digest, size):
        return
    # ours alone (no receipt has the name yet), so one a crash left is reused, not litter
    tmp = f".{name}.partial"
    source = os.open(STAGED_NAME, READ_FLAGS, dir_fd=staging_fd)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        try:
            hasher = xxhash.xxh3_128()
            copied = 0
            while chunk := os.read(source, _CHUNK):
                hasher.update(chunk)
                copied += len(chunk)
                durable.write_all(out, chunk)
            if (hasher.hexdigest(), copied) != (digest, size):
                raise ChangedMeanwhile(
                    f"the staged file listing of the receipt {escape_display(receipt_name)} "
                    "changed since the import wrote it; the import itself is complete, but undo "
                    "will only be able to take its files while their folders are unchanged",
                    path=receipt_name,
                )
            os.fsync(out)
        finally:
            os.close(out)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    finally:
        os.close(source)
    durable.fsync_dir(dir_fd)


def read_listing(receipt: Path, digest: str, size: int, counts: Sequence[int]) -> list[list[Entry]]:
    """The listing published beside ``receipt``, one list per folder (``counts`` lines each);
    :class:`Refused` when it is missing or unreadable, :class:`InvalidInput` when its bytes
    are not the ones the receipt names (``digest``, ``size``) or a line is not one import
    writes. Undo acts on it only once it was read whole and matched, so nothing is done for
    a listing that does not."""
    path = Path(f"{receipt}{SUFFIX}")
    shown = escape_display(str(path))
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        why = "is missing" if isinstance(exc, FileNotFoundError) else "cannot be read"
        raise os_failure(
            f"{shown} {why}: undo needs the receipt's file listing beside it to tell the files "
            "still as imported from those written since; nothing was done (put it back beside "
            "the receipt)",
            exc,
            path=str(path),
        ) from None

    def damaged(problem: str, made: type[InvalidInput] = Malformed) -> InvalidInput:
        return made(
            f"{shown} is damaged ({problem}): it is not the file listing of "
            f"{escape_display(str(receipt))}; nothing was done",
            path=str(path),
        )

    folders: list[list[Entry]] = [[] for _ in counts]
    hasher = xxhash.xxh3_128()
    total = 0
    index = 0
    rest = b""
    try:
        while True:
            chunk = os.read(fd, _CHUNK)
            hasher.update(chunk)
            total += len(chunk)
            if total > size:
                raise damaged("it is longer than the receipt says")
            data = rest + chunk
            lines = data.split(b"\n")
            rest = lines.pop()
            if len(rest) > _MAX_LINE:
                raise damaged("a line is longer than any path")
            for line in lines:
                while index < len(counts) and len(folders[index]) >= counts[index]:
                    index += 1
                if index == len(counts):
                    raise damaged("it lists more files than the receipt's folders")
                folders[index].append(_parse(line, damaged))
            if not chunk:
                break
    except OSError as exc:
        raise os_failure(
            f"cannot read {shown} ({os.strerror(exc.errno or 0)}); nothing was done",
            exc,
            path=str(path),
        ) from None
    finally:
        os.close(fd)
    if rest:
        raise damaged("its last line is not complete")
    if hasher.hexdigest() != digest or total != size:
        raise damaged("its digest is not the one the receipt names", Tampered)
    if any(len(files) != count for files, count in zip(folders, counts, strict=True)):
        raise damaged("it lists fewer files than the receipt's folders")
    return folders


def _parse(line: bytes, damaged: Callable[[str], InvalidInput]) -> Entry:
    """One line of the listing as (path, size, digest); ``damaged`` makes the refusal."""
    digest, _, tail = line.partition(b" ")
    size, _, path = tail.partition(b" ")
    try:
        text = path.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if not (_DIGEST.fullmatch(digest) and _SIZE.fullmatch(size) and text):
        raise damaged("a line is not <digest> <size> <path>")
    return text, int(size), digest.decode("ascii")
