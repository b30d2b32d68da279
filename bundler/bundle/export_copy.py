"""The export's copy of the workspace, the memory store and the skills into staging (02 §8.2):
read without following a link, swept in the same pass, each entry counted against the limit
every reader applies, and what was dropped on the way recorded for the report."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from bundler.bundle import walk as bundle_walk
from bundler.bundle.checksum_spool import ChecksumSpool
from bundler.bundle.closure import ExportPlan
from bundler.bundle.exclude import PatternExclude, workspace_patterns
from bundler.bundle.export_report import ExportReport
from bundler.bundle.manifest import (
    CHECKSUMS_NAME,
    CONFIG_NAME,
    MANIFEST_NAME,
    MEMORY_STORE,
    Dropped,
)
from bundler.bundle.sweep import ExportSweep
from bundler.bundle.walk import past_entry_limit
from bundler.errors import ChangedMeanwhile, NotFound, PolicyRefused, Refused, UnsuitablePath
from bundler.fs.copytree import CopiedFile, CopyOptions, copy_tree, digest_fd
from bundler.fs.safefs import (
    Exclude,
    WorkspaceExclude,
    open_dir_nofollow,
    open_source_root,
    refuse_unreadable,
    select_skills,
)
from bundler.fs.snapshot import snapshot_database
from bundler.rules.exclusions import IGNORE_FILE, Exclusions, Pattern
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress

MEMORY_STORE_SOURCE = "workspace/memory/brain.db"


_MKDIR_MODE = 0o700


class TreeCopy:
    """Copies the workspace and the skills into staging, collecting what the report needs."""

    def __init__(
        self,
        root: int,
        install_root: Path,
        sweep: ExportSweep,
        report: ExportReport,
        dropped: list[Dropped],
        progress: Progress | None,
        checksums: ChecksumSpool,
        sealed: bool = False,
    ) -> None:
        self.root = root
        self.install_root = install_root
        self.sweep = sweep
        self.report = report
        self.dropped = dropped
        self.progress = progress
        self.checksums = checksums
        # the root files written after the copy (config.toml, checksums.xxh3, the manifest)
        # are part of the bundle from the start: a limit they would pass stops the copy
        self.entries = len(_ROOT_FILES) + (1 if sealed else 0)

    def made(self, relpath: str) -> None:
        """Count one entry made in the bundle, ``relpath``; refuse as soon as the bundle would
        hold more entries than ``bundle verify`` and ``agents import`` accept, counted the
        way they count (:func:`bundler.bundle.walk.past_entry_limit`), so that nothing a
        reader refuses is ever published, and a huge tree is refused without being copied."""
        self.entries += 1
        if past_entry_limit(self.entries):
            raise PolicyRefused(
                f"the bundle would hold more than {bundle_walk.MAX_ENTRIES} files and folders "
                f"({self.entries} counted at {escape_display(relpath)}), which no bundler "
                "accepts; keep some workspace paths behind with --exclude PATTERN (or a "
                ".bundlerignore in the workspace) and export again",
                path=relpath,
            )

    def _folder(self, relpath: str) -> None:
        self.made(relpath)
        self.sweep.folder(relpath)

    def _tree(
        self,
        src_fd: int,
        dst_fd: int,
        prefix: str,
        *,
        section: str,
        counted: bool = True,
        exclude: Exclude | None = None,
        on_live_store: Callable[[str], None] | None = None,
    ) -> None:
        """Copy the tree below ``src_fd`` into ``dst_fd`` as ``prefix``; ``counted`` says whether
        its skips go into the report (a second walk of a tree already counted says no)."""
        skipped = self.report.skipped
        options = CopyOptions(
            prefix=prefix,
            exclude=exclude,
            on_skip=skipped.record if counted else None,
            on_non_portable=skipped.record_non_portable if counted else None,
            on_live_store=on_live_store,
            on_folder=self._folder,
            observer=self.sweep.observer,
        )
        for copied in copy_tree(src_fd, dst_fd, options):
            self.made(copied.relpath)
            self.sweep.file_done(copied.relpath)
            self.checksums.add(section, copied)
            if self.progress is not None:
                self.progress(1, copied.size)

    def workspace(self, plan: ExportPlan, patterns: Sequence[Pattern] = ()) -> None:
        """``workspace/``: the tree minus root memory, live stores reported as dropped (02 §7.1).

        ``patterns`` (the command line's) follow the workspace's own ``.bundlerignore``; what
        they exclude is reported as dropped, never copied, never swept.
        """
        self.made("workspace")
        dst = _mkdir_open(self.root, "workspace")
        try:
            src = open_source_root(plan.workspace, install_root=self.install_root)
            if src is None:
                return  # a missing workspace is an empty one
            try:
                # root memory/ and MEMORY_SNAPSHOT.md: finish_plan reports them (always, format 1)
                shown = f"{escape_display(str(plan.workspace))}/{IGNORE_FILE}"
                exclusions = Exclusions([*workspace_patterns(src, shown), *patterns])
                private = WorkspaceExclude(src, prefix="workspace/")
                exclude = (
                    PatternExclude(
                        private,
                        exclusions,
                        prefix="workspace/",
                        rows=self.dropped,
                        redact=self.sweep.redact,
                        withhold=self.sweep.withhold,
                    )
                    if exclusions
                    else private
                )
                live: list[str] = []
                self._tree(
                    src,
                    dst,
                    "workspace/",
                    section="workspace",
                    exclude=exclude,
                    on_live_store=live.append,
                )
                self.dropped += [
                    Dropped(path, "not_yet_portable", _LIVE_STORE_DETAIL) for path in live
                ]
            finally:
                os.close(src)
        finally:
            os.close(dst)

    def memory(self, plan: ExportPlan) -> None:
        """Format 2 (02 §10): a consistent snapshot of ``memory/brain.db`` and the root snapshot.

        The workspace and its ``memory`` folder are opened no-follow and then addressed through
        ``/proc/self/fd``, so SQLite reads exactly the folders that were checked, and writes into
        exactly our staging folder, whatever is renamed meanwhile.
        """
        src = open_source_root(plan.workspace, install_root=self.install_root)
        if src is None:
            raise _no_brain(plan)
        try:
            try:
                memory_fd = open_dir_nofollow(src, "memory")
            except OSError as err:
                if err.errno == errno.ENOENT:
                    raise _no_brain(plan) from None
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise refuse_unreadable("workspace/memory", err) from err
                raise UnsuitablePath(
                    f"{escape_display(str(plan.workspace))}/memory is not a folder or is a "
                    f"symbolic link ({err.strerror}): point the config at the real workspace",
                    path="workspace/memory",
                ) from err
            self.made("memory")
            dst = _mkdir_open(self.root, "memory")
            try:
                source = Path(f"/proc/self/fd/{memory_fd}/brain.db")
                # not os.path.lexists: it answers False for a store it cannot examine
                try:
                    os.stat("brain.db", dir_fd=memory_fd, follow_symlinks=False)
                except FileNotFoundError:
                    raise _no_brain(plan) from None
                except OSError as err:
                    raise refuse_unreadable(MEMORY_STORE_SOURCE, err) from err
                # the root MEMORY_SNAPSHOT.md alone, under 7.2's rules (its skips were counted
                # by the workspace walk already); first, as "M" sorts before "b" (02 §9.2)
                self._tree(
                    src,
                    dst,
                    "memory/",
                    section="memory",
                    exclude=_only_memory_snapshot,
                    counted=False,
                )
                snapshot_database(
                    source,
                    Path(f"/proc/self/fd/{dst}/brain.db"),
                    method="backup",
                    shown=escape_display(str(plan.workspace / "memory" / "brain.db")),
                )
                fd = os.open("brain.db", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst)
                try:
                    size, digest = digest_fd(fd, relpath=MEMORY_STORE, observer=self.sweep.observer)
                finally:
                    os.close(fd)
                self.made(MEMORY_STORE)
                self.sweep.file_done(MEMORY_STORE)
                self.checksums.add("memory", CopiedFile(MEMORY_STORE, size, digest))
                if self.progress is not None:
                    self.progress(1, size)
            finally:
                os.close(dst)
                os.close(memory_fd)
        finally:
            os.close(src)

    def skills(self, plan: ExportPlan) -> list[str]:
        """``skills/<b>/<skill>/`` per skill bundle that yields a skill; returns the aliases."""
        carried: list[str] = []
        skills_fd = -1
        try:
            for source in plan.skill_sources:
                src = open_source_root(source.directory, install_root=self.install_root)
                if src is None:
                    self.dropped.append(
                        Dropped(
                            f"skills/{source.alias}",
                            "source_missing",
                            "the bundle folder does not exist",
                        )
                    )
                    continue
                try:
                    selection = select_skills(
                        src,
                        include=source.include,
                        exclude=source.exclude,
                        prefix=f"skills/{source.alias}/",
                    )
                    self.dropped += [
                        Dropped(f"skills/{source.alias}/{name}", "not_yet_portable", _NOT_A_SKILL)
                        for name in selection.not_copied
                    ]
                    if not selection.admitted:
                        self.dropped.append(
                            Dropped(
                                f"skills/{source.alias}",
                                "source_missing",
                                "no skill in the bundle folder was carried",
                            )
                        )
                        continue
                    if skills_fd < 0:
                        self.made("skills")
                        skills_fd = _mkdir_open(self.root, "skills")
                    self._folder(f"skills/{source.alias}")
                    bundle_fd = _mkdir_open(skills_fd, source.alias)
                    try:
                        for name, lst in selection.admitted:
                            prefix = f"skills/{source.alias}/{name}/"
                            self._skill(src, bundle_fd, name, lst, prefix)
                    finally:
                        os.close(bundle_fd)
                    carried.append(source.alias)
                finally:
                    os.close(src)
        finally:
            if skills_fd >= 0:
                os.close(skills_fd)
        return carried

    def _skill(
        self, bundle_src: int, bundle_dst: int, name: str, lst: os.stat_result, prefix: str
    ) -> None:
        try:
            src = open_dir_nofollow(bundle_src, name, lst)
        except OSError as err:
            if err.errno not in _CHANGED_ERRNOS:
                raise refuse_unreadable(prefix.rstrip("/"), err) from err
            raise ChangedMeanwhile(
                f"{escape_display(prefix)} changed while it was being exported ({err.strerror}); "
                "stop the agent and try again",
                path=prefix,
            ) from err
        try:
            self._folder(prefix.rstrip("/"))
            dst = _mkdir_open(bundle_dst, name)
            try:
                # one section per bundle: its skills come in name order already
                self._tree(src, dst, prefix, section="/".join(prefix.split("/")[:2]))
            finally:
                os.close(dst)
        finally:
            os.close(src)


# what a skill folder swapped after selection answers: a link, a file, gone, another folder
_CHANGED_ERRNOS = frozenset({errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.ESTALE})


_ROOT_FILES = (CONFIG_NAME, CHECKSUMS_NAME, MANIFEST_NAME)


_LIVE_STORE_DETAIL = (
    "a SQLite database with a -wal or -journal beside it is a live store: copying it file by "
    "file can tear it"
)


_NOT_A_SKILL = "not a skill folder holding SKILL.md, or a skill whose name is not portable"


def _only_memory_snapshot(rel: str, _st: os.stat_result) -> bool:
    return rel != "MEMORY_SNAPSHOT.md"


def _no_brain(plan: ExportPlan) -> Refused:
    where = escape_display(str(plan.workspace))
    return NotFound(
        f"--include-memory: there is no {where}/memory/brain.db to carry; export without it",
        path="workspace/memory/brain.db",
    )


def _mkdir_open(parent_fd: int, name: str) -> int:
    os.mkdir(name, _MKDIR_MODE, dir_fd=parent_fd)
    return open_dir_nofollow(parent_fd, name)
