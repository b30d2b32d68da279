"""What a member of a bundle archive must be, and how it is made: the rules of its name and of
its place among the others, the gate that refuses a file ``checksums.xxh3`` does not list, and
the making of its folder or file below a private folder. The reader and the replay of a listing
share them."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Iterator, Mapping

from bundler.bundle.manifest import (
    CHECKSUMS_NAME,
    MAX_CHECKSUMS_BYTES,
    NEVER_LISTED,
    checksum_sort_text,
    iter_checksums,
)
from bundler.bundle.sealed import MAX_SEALED_BYTES, SEALED_NAME
from bundler.errors import InvalidInput, Tampered, TooLarge
from bundler.fs.safefs import MAX_DEPTH, display_name
from bundler.rules.names import escape_display, has_control_chars

_DIR_MODE = 0o700


_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


_MAX_COMPONENT_BYTES = 255


_MAX_NAME_BYTES = 4096

# checksums.xxh3 is parsed 64 KiB at a time, as verify reads it: the regex engine's state over
# a block of lines grows with the block (a whole file of 200,000 lines in one: over 100 MB)
_LINES_READ = 1 << 16


class ChecksumGate:
    """The files the archive's own ``checksums.xxh3`` lists, so that a file it does not list
    is refused from its header, before a byte of its data is written: an archive cannot make
    the reader write up to the member size limit of what the bundle does not hold.

    A bundle archive has ``checksums.xxh3`` first (02, "archive form"). Another tar program
    may put files before it: those are judged when it arrives, before the next member is made
    (a file is then read whole, listed, before anything is written; a pipe has written them).
    An archive without one (ZeroClaw may write none) is left to the verification, which warns.
    ``zeroclaw-agent.toml`` and ``checksums.xxh3`` itself are the files it never lists.
    """

    def __init__(self, gated: Callable[[str], bool] | None = None) -> None:
        self.listed: Mapping[str, str] | None = None
        self.before: list[str] = []  # file members met before checksums.xxh3
        self.gated = gated  # the files judged here (all when None); the caller judges the rest

    def problem(self, name: str, size: int) -> tuple[type[InvalidInput], str] | None:
        """Why the file member ``name`` of ``size`` bytes is refused, and the concept of it;
        None when it is not."""
        if name == CHECKSUMS_NAME and size > MAX_CHECKSUMS_BYTES:
            return TooLarge, (
                f"declares {size} bytes, more than a bundle's holds ({MAX_CHECKSUMS_BYTES})"
            )
        if name in NEVER_LISTED:
            return None
        if name == SEALED_NAME:
            # bound by the manifest's [sealed] sha256, not by the checksums (02 §12)
            if size > MAX_SEALED_BYTES:
                return TooLarge, (
                    f"declares {size} bytes, more than a sealed file holds ({MAX_SEALED_BYTES})"
                )
            return None
        if self.gated is not None and not self.gated(name):
            return None
        if self.listed is None:
            self.before.append(name)
            return None
        return None if name in self.listed else (Tampered, f"is not listed in {CHECKSUMS_NAME}")

    def learn(self, data: Iterable[bytes]) -> str | None:
        """Take ``data``, the archive's ``checksums.xxh3`` in pieces, as the list: the first
        file member met before it that it does not list, or None. Raises :class:`InvalidInput`
        (naming the line) when it is no checksums file, which no bundle's verification passes.
        Every line is read; only those of the files judged here are kept."""
        gated = self.gated
        self.listed = {
            path: digest
            for _key, path, digest in iter_checksums(_blocks(data, _LINES_READ))
            if gated is None or gated(path)
        }
        return next((name for name in self.before if name not in self.listed), None)


def _blocks(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """The bytes of ``pieces`` again, in pieces of at most ``size``."""
    for piece in pieces:
        for at in range(0, len(piece), size):
            yield piece[at : at + size]


class MemberPlaces:
    """What the rules of a member's place need of the members before it: whether a name was
    seen, and as a folder or as a file.

    Without ``recall``, every name is held, for an archive in any order. With it, an archive
    whose members come in checksum order (02 §9.2; a layer bundler pushed) is judged from the
    chain of members above the last one only, and nothing per member is held: a member seen
    above a name sorts before it, and every member between them lies under it, so it is still
    on the chain. Should the order break, ``recall`` gives the members seen so far (the caller
    keeps them on disk) and every name is held from then on. The findings are the same.
    """

    def __init__(self, recall: Callable[[], Iterable[tuple[str, bool]]] | None) -> None:
        self.kinds: dict[str, bool] | None = {} if recall is None else None  # name -> folder
        self.recall = recall
        self.chain: list[tuple[str, bool]] = []  # (name, folder) from the top to the last one
        self.last = ""  # the last member's checksum order

    def problem(self, name: str) -> str | None:
        """Why ``name`` (which passed :func:`name_problem`) cannot come here, or None."""
        kinds = self.kinds
        if kinds is None:
            assert self.recall is not None
            if checksum_sort_text(name) > self.last:
                return self._chained(name)
            kinds = self.kinds = dict(self.recall())
            self.chain = []
        if name in kinds:
            return "appears twice (or over a folder of the same name)"
        parent = name.rpartition("/")[0]
        if parent and parent not in kinds:
            nearest = parent
            while nearest and nearest not in kinds:
                nearest = nearest.rpartition("/")[0]
            if nearest and not kinds[nearest]:
                return f"lies under {escape_display(nearest)}, which is a file"
            return f"comes before its folder {escape_display(parent)}"
        if parent and not kinds[parent]:
            return f"lies under {escape_display(parent)}, which is a file"
        return None

    def _chained(self, name: str) -> str | None:
        chain = self.chain
        while chain and not name.startswith(f"{chain[-1][0]}/"):
            chain.pop()
        parent = name.rpartition("/")[0]
        if not parent:
            return None
        if chain and chain[-1][0] == parent:
            return None if chain[-1][1] else f"lies under {escape_display(parent)}, which is a file"
        if chain and not chain[-1][1]:  # the nearest member above it, a file
            return f"lies under {escape_display(chain[-1][0])}, which is a file"
        return f"comes before its folder {escape_display(parent)}"

    def add(self, name: str, is_dir: bool) -> None:
        """``name``, admitted where :meth:`problem` found nothing wrong, is a member now."""
        if self.kinds is not None:
            self.kinds[name] = is_dir
        else:
            self.chain.append((name, is_dir))
            self.last = checksum_sort_text(name)


def member_error(archive: str, member: str, why: str, made: type[InvalidInput]) -> InvalidInput:
    """The refusal of ``member`` of the archive shown as ``archive``, of the concept ``made``:
    ``why`` ends it."""
    shown = display_name(member.encode("utf-8", "surrogateescape"))
    return made(f"{archive}: member {shown} {why}", path=shown)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a member of a bundle archive, or None when it can."""
    if not name:
        return "has an empty name"
    if name.startswith("/"):
        return "has an absolute name"
    if has_control_chars(name):
        return "has a control character in its name"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "has a name that is not UTF-8"
    if len(encoded) > _MAX_NAME_BYTES:
        return f"has a name longer than {_MAX_NAME_BYTES} bytes"
    parts = name.split("/")
    if ".." in parts:
        return "has a name that climbs out with '..'"
    if "" in parts or "." in parts:
        return "has a name with an empty or '.' component"
    if len(parts) > MAX_DEPTH:
        return f"is more than {MAX_DEPTH} levels deep"
    # no component can be longer than the whole name: most names need no look at each
    if len(encoded) > _MAX_COMPONENT_BYTES and any(
        len(part.encode("utf-8")) > _MAX_COMPONENT_BYTES for part in parts
    ):
        return f"has a name component longer than {_MAX_COMPONENT_BYTES} bytes"
    return None


def make_folder(parent_fd: int, leaf: str) -> None:
    """Create a member's folder ``leaf`` in ``parent_fd``: private (0700), as an export stages
    its folders."""
    os.mkdir(leaf, _DIR_MODE, dir_fd=parent_fd)


def create_file(parent_fd: int, leaf: str, mode: int, umask: int) -> tuple[int, bool]:
    """Create a member's file ``leaf`` in ``parent_fd``, new and not through a link, for
    writing: its descriptor, and whether it already has its permission bits ``mode``.

    Created with ``mode`` when ``umask`` keeps all its bits (the folder is private, so nobody
    sees the file being written); otherwise 0600, and the caller ``fchmod``s it once written.
    """
    exact = not mode & umask
    return os.open(leaf, _CREATE_FLAGS, mode if exact else 0o600, dir_fd=parent_fd), exact


def create_problem(err: OSError) -> str | None:
    """What a member that could not be created says of the archive (the end of the error
    naming it); None when the failure is the system's (a full disk, say), not the archive's."""
    if err.errno == errno.EEXIST:
        return "collides with another member on this filesystem"
    if err.errno in (errno.ENOTDIR, errno.ELOOP):
        return "does not lie in a folder of the archive"
    if err.errno == errno.ENAMETOOLONG:
        return "has a name too long for this filesystem"
    return None


def process_umask() -> int:
    """The process's umask, read without changing it where Linux shows it."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # elsewhere: set and restore at once (nothing else of ours creates files meanwhile)
    mask = os.umask(0o077)
    os.umask(mask)
    return mask
