"""One pass over a bundle's tree for ``bundle verify``: structure rules, skips, digests.

The tree is read once, through descriptors, never following a link
(:func:`bundler.fs.safefs.walk` with every skip turned into an error); each regular file is
hashed in the same pass, ``config.toml`` is kept for parsing and the format 2 memory store is
copied to a private folder. What the walk finds goes into :class:`BundleTree`; what is wrong
goes into the caller's error and warning lists. Deciding what the contents mean is
:mod:`bundler.bundle.verify`'s job.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from bundler.bundle.fragment import Problem
from bundler.bundle.manifest import (
    CHECKSUMS_NAME,
    CONFIG_NAME,
    MANIFEST_NAME,
    MEMORY_STORE,
    NEVER_LISTED,
    checksum_sort_text,
)
from bundler.bundle.sealed import SEALED_NAME
from bundler.errors import BundlerError, EnvironmentFailure, Hostile, InvalidInput, TooLarge
from bundler.fs import safefs
from bundler.fs.digest import digest_fd
from bundler.rules.layout import MAX_CONFIG_TOML_BYTES
from bundler.rules.names import escape_display, is_portable_name, is_portable_skill_alias
from bundler.rules.progress import Progress
from bundler.rules.units import human_size

if TYPE_CHECKING:
    from bundler.bundle.archive_listing import ListedMember

# A tree of a million FIFOs must not become a million-line report held in memory.
MAX_ENTRIES = 1_000_000
MAX_LISTED_TREE_ERRORS = 10_000
MEMORY_FILES = ("MEMORY_SNAPSHOT.md", "brain.db")
# files whose content verify reads for more than its digest, even when the digest is known
_READ_ALWAYS = frozenset({CONFIG_NAME, MEMORY_STORE})

# A folder holding a bundle and more (notes beside it, say) is refused in one line that names
# the extras, up to a few, and says how to get a bundle out of it.
MAX_NAMED_EXTRAS = 5
_NOT_IN_BUNDLE = (
    "not part of a bundle (a bundle folder holds only zeroclaw-agent.toml, config.toml, "
    "checksums.xxh3, a sealed secrets.age, {folders}); copy just those to a new folder, or "
    "remove the rest"
)
_EXTRA = "not part of a bundle"  # the reason _misplaced gives; gathered, not reported alone
_SKIP_MESSAGES = {
    safefs.SkipKind.SYMLINK: "a symbolic link (a bundle holds none)",
    safefs.SkipKind.SPECIAL: "a socket, FIFO or device (a bundle holds only files and folders)",
    safefs.SkipKind.HARD_LINK: "a hard link (a bundle holds none)",
    safefs.SkipKind.REPLACED: "replaced while it was being verified",
    safefs.SkipKind.VANISHED: "vanished while it was being verified",
    safefs.SkipKind.OTHER_DEVICE: "on another device (a mount point inside the bundle)",
    safefs.SkipKind.BAD_NAME: "a name with control characters or invalid UTF-8",
}

DEFERRED = ""
"""The digest recorded for a file whose contents the caller checks itself (never a real one)."""


class KnownDigests(Protocol):
    """The (size, XXH3-128 hex) of files a caller has just written, by bundle path: a dict, or
    digests kept on disk that answer a walk in its order
    (:class:`bundler.bundle.archive_spill.SpilledDigests`). The walk asks of each regular file
    it meets, in walk order, and may ask of one file twice in a row."""

    def get(self, rel: str, /) -> tuple[int, str] | None:
        """The file's recorded size and digest, or None when none was recorded."""


# --------------------------------------------------------------------------- the tree


@dataclass
class BundleTree:
    """What the walk found, beyond the errors it reported.

    ``files`` and ``bytes`` count every regular file found (``config.toml``, ``workspace/``,
    ``skills/``, ``memory/``); ``totals`` splits them by section (a top-level name, or
    ``skills/<b>`` for one skill bundle) as ``[files, bytes]``. ``found`` holds the paths among
    the walker's ``watched`` ones that were found as regular files. ``digests`` (bundle path ->
    (size, XXH3-128)) and ``entries`` ((name, is a folder), walk order) are kept only for a
    caller that asked for every file (``keep_files``): the rest costs the same memory for a
    bundle of 200 files as for one of 1,000,000 (06 P4).
    """

    digests: dict[str, tuple[int, str]] = field(default_factory=dict)
    config: bytes | None = None
    skill_dirs: dict[tuple[str, str], bool] = field(
        default_factory=dict
    )  # (bundle, skill) -> has SKILL.md
    skill_bundles: set[str] = field(default_factory=set)  # folders found under skills/
    memory_copy: Path | None = None
    stopped: bool = False
    entries: list[tuple[str, bool]] = field(default_factory=list)  # (name, is a folder), walk order
    files: int = 0
    bytes: int = 0
    totals: dict[str, list[int]] = field(default_factory=dict)
    found: set[str] = field(default_factory=set)
    sealed: bool = False  # a regular secrets.age at the root


def section_of(rel: str) -> str:
    """The section a bundle path belongs to: its top-level name, or ``skills/<b>``."""
    top, _, rest = rel.partition("/")
    if top == "skills" and rest:
        return f"skills/{rest.partition('/')[0]}"
    return top


def past_entry_limit(entries: int) -> bool:
    """Whether a bundle of ``entries`` entries is more than a reader accepts: every file and
    folder below its root counts, whatever it is (the walk here counts what it skips or
    refuses too; an export counts each one it makes, and refuses before publishing)."""
    return entries > MAX_ENTRIES


class TooManyEntries(Exception):
    """Raised from a walk callback to stop at :data:`MAX_ENTRIES` (the walk closes its fds)."""


class BundleWalker:
    """One pass over the bundle: structure rules, skips as errors, digests of regular files."""

    def __init__(
        self,
        root_fd: int,
        format_version: int,
        errors: list[Problem],
        warnings: list[Problem],
        private_dir: Callable[[], Path],
        progress: Progress | None,
        known_digests: KnownDigests | None = None,
        defer_under: str = "",
        listed: Sequence[ListedMember] = (),
        *,
        keep_files: bool = True,
        on_file: Callable[[str, str], None] | None = None,
        on_config: Callable[[bytes], Iterable[str]] | None = None,
    ) -> None:
        self.root_fd = root_fd
        self.keep_files = keep_files
        self.on_file = on_file  # (bundle path, digest) of each regular file, in walk order
        self.on_config = on_config  # config.toml's bytes -> more paths to watch
        self.watched = {CONFIG_NAME, MEMORY_STORE}
        self.listed_members = listed
        self.known = known_digests
        self.defer_under = defer_under
        self.progress = progress
        self.format_version = format_version
        self.errors = errors
        self.warnings = warnings
        self.private_dir = private_dir
        self.tree = BundleTree()
        self.buffer = bytearray(1 << 20)
        self.entries = 0
        self.listed = 0
        self.extras: list[str] = []  # root entries no bundle holds, the first few by name
        self.extra_count = 0
        self.extras_at = 0  # where in the errors their one line goes: the first one's place

    def error(self, path: str, message: str, concept: type[InvalidInput] = InvalidInput) -> None:
        # walk paths exclude control characters but may hold bidi controls: escape here, once
        if self.listed < MAX_LISTED_TREE_ERRORS:
            self.errors.append(Problem(escape_display(path), escape_display(message), concept))
        self.listed += 1

    def count(self, path: str) -> None:
        """Count one entry (admitted, skipped or misplaced); stop the walk past the limit."""
        self.entries += 1
        if past_entry_limit(self.entries):
            self.errors.append(
                Problem(
                    escape_display(path),
                    f"the bundle has more than {MAX_ENTRIES} entries; stopped here",
                    TooLarge,
                )
            )
            raise TooManyEntries

    def on_skip(self, kind: safefs.SkipKind, path: str) -> None:
        self.error(path, _SKIP_MESSAGES[kind], Hostile)
        self.count(path)

    def exclude(self, rel: str, st: os.stat_result) -> bool:
        """Structure rules (02 §1, 03 §1): report a misplaced entry and do not descend into it."""
        parts = rel.split("/")
        reason = self._misplaced(parts, stat.S_ISDIR(st.st_mode))
        if reason is None:
            self._warn_non_portable(rel, parts)
            return False
        if reason == _EXTRA:
            self._extra(rel, stat.S_ISDIR(st.st_mode))
        else:
            self.error(escape_display(rel), reason)
        self.count(escape_display(rel))
        return True

    def _misplaced(self, parts: list[str], is_dir: bool) -> str | None:
        top = parts[0]
        if len(parts) == 1:
            if top in (MANIFEST_NAME, CONFIG_NAME, CHECKSUMS_NAME, SEALED_NAME):
                return None if not is_dir else "must be a regular file"
            if top in ("workspace", "skills") or (top == "memory" and self.format_version == 2):
                return None if is_dir else "must be a folder"
            if top == "memory":
                return "memory travels only in a format 2 bundle"
            return _EXTRA
        if top == "workspace":
            if len(parts) == 2 and parts[1] in safefs.WORKSPACE_PRIVATE:
                return (
                    "workspace memory never travels inside workspace/ (only as format 2's memory/)"
                )
            return None
        if top == "memory":
            if len(parts) == 2 and parts[1] in MEMORY_FILES and not is_dir:
                return None
            return "memory/ holds only brain.db and MEMORY_SNAPSHOT.md"
        # skills/<bundle>/<skill>/...
        if len(parts) == 2:
            if not is_dir:
                return "skills/ holds only skill bundle folders"
            if not is_portable_skill_alias(parts[1]):
                return "skill bundle folder name is not a portable alias (it becomes a folder name)"
            self.tree.skill_bundles.add(parts[1])
            return None
        if len(parts) == 3:
            if not is_dir:
                return "a skill bundle folder holds only skills (folders with SKILL.md)"
            reason = None if is_portable_name(parts[2]) else "skill folder name is not portable"
            if reason is None:
                self.tree.skill_dirs.setdefault((parts[1], parts[2]), False)
            return reason
        return None

    def _extra(self, rel: str, is_dir: bool) -> None:
        if self.extra_count == 0:
            self.extras_at = len(self.errors)
        self.extra_count += 1
        if len(self.extras) < MAX_NAMED_EXTRAS:
            self.extras.append(escape_display(rel) + ("/" if is_dir else ""))

    def _report_extras(self) -> None:
        """The root entries no bundle holds, as one error where the first of them was found."""
        if not self.extra_count:
            return
        names = ", ".join(self.extras)
        if self.extra_count > len(self.extras):
            names += f" and {self.extra_count - len(self.extras)} more"
        folders = "workspace/, skills/ and memory/"
        if self.format_version != 2:
            folders = "workspace/ and skills/"
        problem = Problem(names, _NOT_IN_BUNDLE.format(folders=folders))
        self.errors.insert(min(self.extras_at, len(self.errors)), problem)

    def _warn_non_portable(self, rel: str, parts: list[str]) -> None:
        """A workspace or skill file whose name is not portable travels, with a warning (7.3)."""
        in_files = parts[0] == "workspace" or (parts[0] == "skills" and len(parts) > 3)
        if in_files and not is_portable_name(parts[-1]):
            self.warnings.append(
                Problem(
                    escape_display(rel),
                    "name is not portable (it may not exist on other systems)",
                )
            )

    def run(self) -> BundleTree:
        """Walk the whole bundle (or up to a limit); errors go straight into the report."""
        wanted = self.known is not None or bool(self.defer_under)
        walked = safefs.walk(
            self.root_fd,
            exclude=self.exclude,
            on_skip=self.on_skip,
            unopened=self._unread if wanted else None,
        )
        entries = _merged(walked, self._listed_parts()) if self.listed_members else walked
        try:
            for entry in entries:
                self.count(entry.relpath)
                if self.keep_files:
                    self.tree.entries.append((entry.rel, entry.kind == "dir"))
                if entry.kind == "file":
                    self._file(entry)
        except TooManyEntries:
            self.tree.stopped = True
        except EnvironmentFailure:
            raise  # the system's failure says nothing of the bundle: no finding, no follow-ons
        except BundlerError as exc:  # deeper than 256 levels, unreadable entry, link swapped in
            self.error(escape_display(exc.path or "."), exc.message)
            self.tree.stopped = True
        finally:
            entries.close()
        self._report_extras()
        if self.listed > MAX_LISTED_TREE_ERRORS:
            unlisted = self.listed - MAX_LISTED_TREE_ERRORS
            self.errors.append(Problem(".", f"{unlisted} more entries at fault, not listed"))
        return self.tree

    def _listed_parts(self) -> list[tuple[bytes, Iterator[safefs.Entry]]]:
        """The listed members by top folder, in checksum order: (the top's name as bytes, its
        entries as :meth:`_listed_entries` yields them)."""
        # a listed name was read strictly: no control character, valid UTF-8
        ordered = sorted(self.listed_members, key=lambda m: checksum_sort_text(m.name))
        parts: list[tuple[bytes, Iterator[safefs.Entry]]] = []
        start = 0
        for index in range(1, len(ordered) + 1):
            top = ordered[start].name.partition("/")[0]
            if index == len(ordered) or not ordered[index].name.startswith(f"{top}/"):
                part = ordered[start:index]
                parts.append((os.fsencode(top), self._listed_entries(part)))
                start = index
        return parts

    def _listed_entries(self, members: list[ListedMember]) -> Iterator[safefs.Entry]:
        """Listed members, in checksum order, as a walk of them would yield them: each asked
        of :meth:`exclude` (an excluded folder's contents are never yielded), files unopened."""
        from bundler.bundle.archive_write import listed_stat

        dropped = "\0"  # the folder excluded last, with its slash: its contents follow it
        for member in members:
            name = member.name
            if name.startswith(dropped):
                continue
            st = listed_stat(member)
            if self.exclude(name, st):
                dropped = f"{name}/" if member.is_dir else dropped
                continue
            kind: Literal["dir", "file"] = "dir" if member.is_dir else "file"
            depth = name.count("/") + 1
            leaf = name.rpartition("/")[2]
            yield safefs.Entry(name, name, leaf, kind, st, -1, -1, depth)

    def _unread(self, rel: str, st: os.stat_result) -> bool:
        """A file whose content need not be read here: one whose digest the caller gave, of the
        size it gave, or one under ``defer_under``, which the caller checks as it copies it.

        ``config.toml`` and the memory store are read all the same (their content is checked).
        """
        if rel in _READ_ALWAYS:
            return False
        known = self.known.get(rel) if self.known is not None else None
        if known is not None:
            return known[0] == st.st_size
        return bool(self.defer_under) and rel.startswith(self.defer_under)

    def _file(self, entry: safefs.Entry) -> None:
        rel = entry.rel
        if rel in NEVER_LISTED or rel == SEALED_NAME:
            # read and judged on their own (the sealed file against the manifest's sha256)
            if rel == SEALED_NAME:
                self.tree.sealed = True
            return
        parts = rel.split("/")
        if len(parts) == 4 and parts[0] == "skills" and parts[3] == "SKILL.md":
            self.tree.skill_dirs[(parts[1], parts[2])] = True
        if entry.fd < 0:
            # left unopened (see _unread): the digest recorded as it was written, or none yet
            known = self.known.get(rel) if self.known is not None else None
            size, digest = known if known is not None else (entry.stat.st_size, DEFERRED)
            self._found(rel, size, digest)
            return
        if rel == CONFIG_NAME:
            self._config(entry)
            return
        sink = self._memory_sink() if rel == MEMORY_STORE else None
        try:
            observer = None if sink is None else (lambda _rel, chunk: sink.write(chunk))
            size, digest = digest_fd(
                entry.fd,
                relpath=entry.relpath,
                observer=observer,
                buffer=self.buffer,
                expected=entry.stat.st_size,
            )
        except EnvironmentFailure:
            raise
        except BundlerError as exc:
            self.error(escape_display(entry.relpath), exc.message)
            return
        finally:
            if sink is not None:
                sink.close()
        self._found(rel, size, digest)

    def _found(self, rel: str, size: int, digest: str) -> None:
        tree = self.tree
        if self.keep_files:
            tree.digests[rel] = (size, digest)
        if rel in self.watched:
            tree.found.add(rel)
        tree.files += 1
        tree.bytes += size
        totals = tree.totals.setdefault(section_of(rel), [0, 0])
        totals[0] += 1
        totals[1] += size
        if self.on_file is not None:
            self.on_file(rel, digest)
        if self.progress is not None:
            self.progress(1, size)

    def _memory_sink(self) -> Any:
        # A private copy: SQLite never opens the bundle's own file, so nothing appears beside it.
        target = self.private_dir() / "brain.db"
        self.tree.memory_copy = target
        return open(target, "wb")  # noqa: SIM115 - closed by the caller after the stream

    def _config(self, entry: safefs.Entry) -> None:
        limit = MAX_CONFIG_TOML_BYTES
        kept: list[bytes] = []
        held = 0

        def keep(_rel: str, chunk: memoryview) -> None:
            # hash everything, hold at most the limit (the file may grow while it is read)
            nonlocal held
            if held + len(chunk) <= limit:
                kept.append(bytes(chunk))
            held += len(chunk)

        try:
            size, digest = digest_fd(
                entry.fd, relpath=CONFIG_NAME, observer=keep, buffer=self.buffer
            )
        except EnvironmentFailure:
            raise
        except BundlerError as exc:
            self.error(CONFIG_NAME, exc.message)
            return
        if size > limit:
            self.error(CONFIG_NAME, f"larger than {human_size(limit)}", TooLarge)
        else:
            self.tree.config = b"".join(kept)
            if self.on_config is not None:
                # config.toml is walked before workspace/, whose paths it may name (02 §9.2)
                self.watched.update(self.on_config(self.tree.config))
        self._found(CONFIG_NAME, size, digest)


def _merged(
    walked: Generator[safefs.Entry, None, None],
    listed: list[tuple[bytes, Iterator[safefs.Entry]]],
) -> Generator[safefs.Entry, None, None]:
    """The walk of a folder and the listed members of top folders it does not hold (by top,
    in order), in the order one walk of both would give: by name at the top, each folder before
    its contents."""
    parts = iter(listed)
    pending = next(parts, None)
    try:
        for entry in walked:
            if entry.depth == 1:
                name = os.fsencode(entry.rel)
                while pending is not None and pending[0] < name:
                    yield from pending[1]
                    pending = next(parts, None)
            yield entry
        while pending is not None:
            yield from pending[1]
            pending = next(parts, None)
    finally:
        walked.close()


# --------------------------------------------------------------------------- recomputed facts
