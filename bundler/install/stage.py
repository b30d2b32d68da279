"""Staging a bundle's folders for import: copy, check against the verified checksums, fix modes.

The bundle was verified before; everything read here is checked again against that verification
(the checksums file's digest, each file's digest, the set of files), so a bundle changed in
between is refused instead of half-imported.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bundler.bundle.manifest import CHECKSUMS_NAME, checksums_by_path
from bundler.errors import InvalidInput
from bundler.fs import copytree, safefs
from bundler.install import merge
from bundler.install.files import (
    DIR_MODE,
    FORBIDDEN_MODE_BITS,
    READ_FLAGS,
    relative_to_install,
    tree_digest,
    xxh,
)
from bundler.rules import layout
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress


@dataclass
class Staged:
    """One folder to stage: where it comes from in the bundle and where it goes."""

    label: str  # name inside staging
    sources: list[tuple[str, str]]  # (bundle folder, subfolder inside the staged folder)
    target: str  # install-relative


def read_checksums(bundle_fd: int, expected_digest: str) -> dict[str, str] | None:
    """The verified checksums again; a file changed since verification is refused."""
    try:
        fd = os.open(CHECKSUMS_NAME, READ_FLAGS, dir_fd=bundle_fd)
    except FileNotFoundError:
        if expected_digest:
            raise InvalidInput(
                "checksums.xxh3 vanished after verification; verify the bundle again",
                path=CHECKSUMS_NAME,
            ) from None
        return None
    try:
        raw = b""
        while chunk := os.read(fd, 1 << 20):
            raw += chunk
    finally:
        os.close(fd)
    if xxh(raw) != expected_digest:
        raise InvalidInput(
            f"{CHECKSUMS_NAME} changed after verification; verify the bundle again",
            path=CHECKSUMS_NAME,
        )
    return checksums_by_path(raw)


def _refuse_skip(kind: safefs.SkipKind, path: str) -> None:
    raise InvalidInput(
        f"{path}: appeared in the bundle after verification ({kind.value}); verify it again",
        path=path,
    )


def stage_folder(
    bundle_fd: int,
    staging_fd: int,
    staged: Staged,
    listed: dict[str, str] | None,
    copied: set[str],
    progress: Progress | None = None,
    listing: list[tuple[str, int, str]] | None = None,
) -> str:
    """Copy one staged folder's sources, check every digest, fix modes; returns its tree digest.

    ``progress`` is told of each file copied (the caller starts and stops its phase);
    ``listing``, when given, receives each file's ``(path inside the folder, size, XXH3-128)``
    in walk order: the receipt keeps them so that an undo can tell each added file unchanged
    from one the agent has since edited (03 §4).
    """
    os.mkdir(staged.label, 0o700, dir_fd=staging_fd)
    root_fd = safefs.open_dir_nofollow(staging_fd, staged.label)
    files: list[tuple[str, int, str]] = []
    try:
        for source, sub in staged.sources:
            try:
                src_fd = safefs.open_beneath(bundle_fd, source)
            except OSError:
                raise InvalidInput(
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
                    modes.append((rel, st.st_mode))
                    return False

                try:
                    options = copytree.CopyOptions(
                        prefix=f"{source}/", exclude=note, on_skip=_refuse_skip
                    )
                    for item in copytree.copy_tree(src_fd, dst_fd, options):
                        if listed is not None and listed.get(item.relpath) != item.xxh3_128:
                            raise InvalidInput(
                                f"{escape_display(item.relpath)}: content does not match its "
                                f"digest in {CHECKSUMS_NAME}; nothing was imported",
                                path=item.relpath,
                            )
                        copied.add(item.relpath)
                        if progress is not None:
                            progress(1, item.size)
                        inner = item.relpath[len(source) + 1 :]
                        files.append((f"{sub}/{inner}" if sub else inner, item.size, item.xxh3_128))
                    _fix_modes(dst_fd, modes)
                    os.fchmod(dst_fd, DIR_MODE)  # a sub-folder made here (memory/)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)
        os.fchmod(root_fd, DIR_MODE)
    finally:
        os.close(root_fd)
    files.sort(key=lambda item: os.fsencode(item[0]))
    if listing is not None:
        listing.extend(files)
    return tree_digest(files)


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


def listed_under(listed: dict[str, str] | None, prefixes: Sequence[str]) -> set[str]:
    """The checksummed paths under any of ``prefixes`` (what staging must have copied)."""
    if listed is None:
        return set()
    return {path for path in listed if any(path.startswith(prefix) for prefix in prefixes)}


def differing_skills(
    bundle_fd: int,
    install_fd: int,
    install_root: Path,
    plan: merge.MergePlan,
    listed: dict[str, str] | None,
    carried: Sequence[str],
) -> list[str]:
    """Reused skill bundles whose carried skills differ from the local folder's."""
    differ: list[str] = []
    for placement in plan.skills:
        if placement.action != "reused" or placement.source_alias not in carried:
            continue
        local = layout.skill_bundle_dir(plan.merged, placement.target_alias, install_root)
        prefix = f"skills/{placement.source_alias}/"
        digests = listed or {}
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
