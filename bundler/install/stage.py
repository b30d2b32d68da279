"""Staging a bundle's folders for import: copy, check against the verified checksums, fix modes.

The bundle was verified before; everything read here is checked again against that verification
(the checksums file's digest, each file's digest, the set of files), so a bundle changed in
between is refused instead of half-imported.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import xxhash

from bundler.bundle.manifest import (
    CHECKSUMS_NAME,
    checksum_sort_key,
    checksum_sort_text,
    iter_checksums,
)
from bundler.errors import InvalidInput, Tampered
from bundler.fs import copytree, safefs
from bundler.install import merge
from bundler.install.files import (
    DIR_MODE,
    FORBIDDEN_MODE_BITS,
    READ_FLAGS,
    relative_to_install,
    tree_line,
)
from bundler.install.receipt_files import ListingWriter
from bundler.rules import layout
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress


@dataclass
class Staged:
    """One folder to stage: where it comes from in the bundle and where it goes."""

    label: str  # name inside staging
    sources: list[tuple[str, str]]  # (bundle folder, subfolder inside the staged folder)
    target: str  # install-relative


class ListedChecksums:
    """``checksums.xxh3`` of the verified bundle, read again one folder at a time and never held
    whole (06 P4: 1,000,000 lines must not cost memory by the line).

    Each reading (:meth:`under`) reads the whole file through the one descriptor, hashing every
    byte it parses, and refuses when those bytes are not the verified ones: what staging
    compares with is exactly what verification checked, a line at a time.
    """

    def __init__(self, bundle_fd: int, expected_digest: str) -> None:
        self.expected = expected_digest
        try:
            self.fd = os.open(CHECKSUMS_NAME, READ_FLAGS, dir_fd=bundle_fd)
        except FileNotFoundError:
            raise Tampered(
                "checksums.xxh3 vanished after verification; verify the bundle again",
                path=CHECKSUMS_NAME,
            ) from None

    def close(self) -> None:
        """Close the file (a reading not run to its end has checked nothing)."""
        os.close(self.fd)

    def under(self, prefix: str) -> Iterator[tuple[str, str]]:
        """(path, XXH3-128) of each listed path starting with ``prefix``, in the file's order;
        raises :class:`InvalidInput` at the end when the file changed after verification."""
        hasher = xxhash.xxh3_128()

        def chunks() -> Iterator[bytes]:
            offset = 0
            while chunk := os.pread(self.fd, 1 << 16, offset):
                offset += len(chunk)
                hasher.update(chunk)
                yield chunk

        try:
            for _key, path, digest in iter_checksums(chunks()):
                if path.startswith(prefix):
                    yield path, digest
        except InvalidInput:
            raise _changed() from None
        if hasher.hexdigest() != self.expected:
            raise _changed()

    def digests_under(self, prefix: str) -> dict[str, str]:
        """:meth:`under` as a table, for one skill bundle's few files."""
        return dict(self.under(prefix))


def _changed() -> InvalidInput:
    return Tampered(
        f"{CHECKSUMS_NAME} changed after verification; verify the bundle again",
        path=CHECKSUMS_NAME,
    )


def _vanished(path: str) -> InvalidInput:
    return Tampered(
        f"{escape_display(path)}: vanished from the bundle after verification; verify it again",
        path=path,
    )


def _not_matching(path: str) -> InvalidInput:
    return Tampered(
        f"{escape_display(path)}: content does not match its digest in {CHECKSUMS_NAME}; "
        "nothing was imported",
        path=path,
    )


def _refuse_skip(kind: safefs.SkipKind, path: str) -> None:
    raise Tampered(
        f"{path}: appeared in the bundle after verification ({kind.value}); verify it again",
        path=path,
    )


def stage_folder(
    bundle_fd: int,
    staging_fd: int,
    staged: Staged,
    listed: ListedChecksums | None,
    progress: Progress | None = None,
    listing: ListingWriter | None = None,
) -> str:
    """Copy one staged folder's sources, check every digest, fix modes; returns its tree digest.

    Every file copied is compared with its line of ``checksums.xxh3`` (``listed``) as it is
    copied, both in checksum order, and a listed file not copied is refused: nothing per file is
    held, except for the sources before the last, whose files (``memory/``'s two at most: the
    caller puts the large source last) are kept to be hashed in the staged folder's walk order
    with the last one's. ``progress`` is told of each file copied (the caller starts and stops
    its phase); ``listing``, when given, is written each file's ``(path inside the folder, size,
    XXH3-128)`` in the staged folder's walk order, a line at a time: the receipt's listing keeps
    them so that an undo can tell each added file unchanged from one the agent has since edited
    (03 §4).
    """
    os.mkdir(staged.label, 0o700, dir_fd=staging_fd)
    root_fd = safefs.open_dir_nofollow(staging_fd, staged.label)
    tree = xxhash.xxh3_128()
    earlier: list[tuple[str, int, str]] = []  # files of the sources before the last
    try:
        for index, (source, sub) in enumerate(staged.sources):
            last = index == len(staged.sources) - 1
            if last:  # popped from the end, first in order first
                earlier.sort(key=lambda item: checksum_sort_key(item[0]), reverse=True)
            try:
                src_fd = safefs.open_beneath(bundle_fd, source)
            except OSError:
                raise Tampered(
                    f"{escape_display(source)}: missing or not a folder in the bundle; verify "
                    "it again",
                    path=source,
                ) from None
            try:
                if sub:
                    os.mkdir(sub, 0o700, dir_fd=root_fd)
                dst_fd = safefs.open_beneath(root_fd, sub) if sub else os.dup(root_fd)
                modes: list[tuple[str, int]] = []

                def note(
                    rel: str, st: os.stat_result, modes: list[tuple[str, int]] = modes
                ) -> bool:
                    # only what _fix_modes changes: folders, and files group or others may write
                    if stat.S_ISDIR(st.st_mode) or st.st_mode & FORBIDDEN_MODE_BITS:
                        modes.append((rel, st.st_mode))
                    return False

                lines = listed.under(f"{source}/") if listed is not None else None
                pending = next(lines, None) if lines is not None else None
                try:
                    options = copytree.CopyOptions(
                        prefix=f"{source}/", exclude=note, on_skip=_refuse_skip
                    )
                    for item in copytree.copy_tree(src_fd, dst_fd, options):
                        if lines is not None:
                            if (
                                pending is not None
                                and pending[0] != item.relpath
                                and checksum_sort_text(pending[0])
                                < checksum_sort_text(item.relpath)
                            ):
                                # listed before the file copied, and not copied itself
                                raise _after_reading(lines, _vanished(pending[0]))
                            if (
                                pending is None
                                or pending[0] != item.relpath
                                or pending[1] != item.xxh3_128
                            ):
                                raise _after_reading(lines, _not_matching(item.relpath))
                            pending = next(lines, None)
                        if progress is not None:
                            progress(1, item.size)
                        inner = item.relpath[len(source) + 1 :]
                        entry = (f"{sub}/{inner}" if sub else inner, item.size, item.xxh3_128)
                        if last:
                            _hash_in_order(tree, earlier, entry, listing)
                        else:
                            earlier.append(entry)
                    if lines is not None and pending is not None:
                        raise _after_reading(lines, _vanished(pending[0]))
                    _fix_modes(dst_fd, modes)
                    os.fchmod(dst_fd, DIR_MODE)  # a sub-folder made here (memory/)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)
        while earlier:
            _hashed(tree, earlier.pop(), listing)
        os.fchmod(root_fd, DIR_MODE)
    finally:
        os.close(root_fd)
    return str(tree.hexdigest())


def _after_reading(lines: Iterator[tuple[str, str]], refusal: InvalidInput) -> InvalidInput:
    """``refusal``, once the rest of the checksums is read: a file that changed after
    verification explains everything, and is refused as that instead."""
    for _line in lines:
        pass
    return refusal


def _hashed(
    tree: xxhash.xxh3_128,
    entry: tuple[str, int, str],
    listing: ListingWriter | None,
) -> None:
    tree_line(tree, entry)
    if listing is not None:
        listing.add(entry)


def _hash_in_order(
    tree: xxhash.xxh3_128,
    earlier: list[tuple[str, int, str]],
    entry: tuple[str, int, str],
    listing: ListingWriter | None,
) -> None:
    """Hash ``entry`` of the last source after the earlier sources' files that precede it in
    the staged folder's walk order (checksum order, 02 §9.2); ``earlier`` is sorted last first.
    Each file hashed is written to ``listing`` in the same order."""
    if earlier:
        key = checksum_sort_key(entry[0])
        while earlier and checksum_sort_key(earlier[-1][0]) < key:
            _hashed(tree, earlier.pop(), listing)
    _hashed(tree, entry, listing)


def _fix_modes(root_fd: int, modes: Iterable[tuple[str, int]]) -> None:
    """Folders 0755; files without group/other write (03 §3.1 point 9; copy kept the rest)."""
    for rel, mode in modes:
        head, _, name = rel.rpartition("/")
        is_dir = stat.S_ISDIR(mode)
        if not is_dir and not mode & FORBIDDEN_MODE_BITS:
            continue
        parent = safefs.open_beneath(root_fd, head) if head else os.dup(root_fd)
        try:
            flags = (os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW) if is_dir else READ_FLAGS
            fd = os.open(name, flags | os.O_CLOEXEC, dir_fd=parent)
            try:
                os.fchmod(fd, DIR_MODE if is_dir else stat.S_IMODE(mode) & 0o755)
            finally:
                os.close(fd)
        finally:
            os.close(parent)


def differing_skills(
    bundle_fd: int,
    install_fd: int,
    install_root: Path,
    plan: merge.MergePlan,
    listed: ListedChecksums | None,
    carried: Sequence[str],
) -> list[str]:
    """Reused skill bundles whose carried skills differ from the local folder's."""
    differ: list[str] = []
    for placement in plan.skills:
        if placement.action != "reused" or placement.source_alias not in carried:
            continue
        local = layout.skill_bundle_dir(plan.merged, placement.target_alias, install_root)
        prefix = f"skills/{placement.source_alias}/"
        digests = listed.digests_under(prefix) if listed is not None else {}
        bundle_files = sorted(
            ((path[len(prefix) :], digests[path]) for path in digests if path.startswith(prefix)),
            key=lambda item: os.fsencode(item[0]),
        )
        local_files: list[tuple[str, str]] = []
        rel = relative_to_install(local, install_root)
        try:
            fd = safefs.open_beneath(install_fd, rel) if not rel.startswith("..") else -1
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                for entry in safefs.walk(fd):
                    if entry.kind == "file" and entry.rel.split("/")[0] in {
                        p.split("/")[0] for p, _ in bundle_files
                    }:
                        local_files.append(
                            (entry.rel, copytree.digest_fd(entry.fd, relpath=entry.rel)[1])
                        )
            finally:
                os.close(fd)
        if bundle_files != local_files:
            differ.append(f"skill_bundles.{placement.target_alias}")
    return differ
