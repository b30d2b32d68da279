"""Safe tree reading (02 §7.2): descriptor-relative, no-follow, identity-checked, streaming.

Every entry below a source root is classified with ``fstatat(AT_SYMLINK_NOFOLLOW)`` through its
containing folder's descriptor, then opened through that same descriptor with ``O_NOFOLLOW``;
the opened object must be the classified one (device, inode, type). No path is ever re-opened by
name, so a concurrent rename or symlink swap can only make an entry be skipped (and counted) or
make the walk refuse; it can never redirect a read outside the tree.

The walk is iterative (no recursion limit), holds one descriptor and one sorted name listing per
open level, and yields entries in checksum order (02 §9.2): each folder's names sorted by their
bytes, a folder's contents right after the folder itself, so ``a/c`` comes before ``a-b``.

Consumers: the exporter's copier (:mod:`bundler.fs.copytree`), bundle verification (which turns
every skip into an error through ``on_skip``), the data-home backup, and volume path resolution
(:func:`open_dir_nofollow`, :func:`open_beneath`).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import stat
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from bundler.errors import (
    ChangedMeanwhile,
    Refused,
    UnsuitablePath,
    environment_failure,
    os_failure,
)
from bundler.rules.names import decode_name, escape_display, is_portable_name

MAX_DEPTH = 256
"""Most path components below a root an entry may have (02 §7.2: deeper trees are refused)."""

MAX_LISTED_PATHS = 1000
"""Skipped and non-portable paths kept for ``--json`` (05 §3); totals are always exact."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: an entry classified regular but swapped for a FIFO must not block the open;
# O_NOCTTY: nor may a swapped-in terminal become our controlling terminal.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY

SYMLINK_MESSAGE = "point the config at the real folder and export again"


class SkipKind(enum.Enum):
    """Why an entry was skipped; the value is its key in the ``skipped`` object of 05 §3."""

    SYMLINK = "symlinks"
    SPECIAL = "special"
    HARD_LINK = "hard_links"
    REPLACED = "replaced"
    VANISHED = "vanished"
    OTHER_DEVICE = "other_device"
    BAD_NAME = "bad_names"


@dataclass
class SkipCounts:
    """Totals of skipped entries per kind plus the first :data:`MAX_LISTED_PATHS` paths.

    ``record`` and ``record_non_portable`` have the shapes of :func:`walk`'s ``on_skip`` and
    ``on_non_portable`` callbacks, so one instance can collect a whole export.
    """

    symlinks: int = 0
    special: int = 0
    hard_links: int = 0
    replaced: int = 0
    vanished: int = 0
    other_device: int = 0
    bad_names: int = 0
    paths: list[str] = field(default_factory=list)
    non_portable_count: int = 0
    non_portable_names: list[str] = field(default_factory=list)

    def record(self, kind: SkipKind, path: str) -> None:
        """Count one skipped entry (``path`` is already display-safe)."""
        setattr(self, kind.value, getattr(self, kind.value) + 1)
        if len(self.paths) < MAX_LISTED_PATHS:
            self.paths.append(path)

    def record_non_portable(self, path: str) -> None:
        """List one copied entry whose name is not portable (02 §7.3)."""
        self.non_portable_count += 1
        if len(self.non_portable_names) < MAX_LISTED_PATHS:
            self.non_portable_names.append(path)

    @property
    def total(self) -> int:
        """Number of skipped entries of every kind."""
        return sum(getattr(self, kind.value) for kind in SkipKind)

    def as_json(self) -> dict[str, int]:
        """The ``skipped`` object of 05 §3 (``paths`` go to ``skipped_paths`` separately)."""
        return {kind.value: getattr(self, kind.value) for kind in SkipKind}


OnSkip = Callable[[SkipKind, str], None]
Exclude = Callable[[str, os.stat_result], bool]


class Entry(NamedTuple):
    """One admitted entry of a walk (a named tuple: built once per file, so kept cheap).

    ``fd`` is open on the entry itself (a folder, or a regular file for reading) and stays valid
    only until the consumer asks for the next entry; the walker closes it. ``stat`` is ``fstat``
    of that descriptor. A file the walk's ``unopened`` predicate chose has ``fd`` -1 and
    ``stat`` its ``lstat``. ``rel`` is relative to the walked root, ``relpath`` has the prefix.
    ``depth`` is the number of components of ``rel``; ``parent_fd`` is the containing folder.
    """

    relpath: str
    rel: str
    name: str
    kind: Literal["dir", "file"]
    stat: os.stat_result
    fd: int
    parent_fd: int
    depth: int


def display_name(raw: bytes) -> str:
    """A name made printable: invalid UTF-8 as ``\\xNN``, control characters escaped (05 §3)."""
    return escape_display(raw.decode("utf-8", "backslashreplace"))


def refuse_unreadable(relpath: str, exc: OSError) -> Refused:
    """The one-line refusal for a carried entry that cannot be read (02 §7.2): exit 1; an
    :class:`~bundler.errors.EnvironmentFailure` when the system, not the entry, failed."""
    failed = environment_failure("read", relpath, exc)
    if failed is not None:
        return failed
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return os_failure(
        f"cannot read {relpath} ({reason}): make it readable or remove it, then try again",
        exc,
        path=relpath,
    )


def _refuse_changed(relpath: str) -> Refused:
    return ChangedMeanwhile(
        f"{relpath} turned into a symbolic link while it was being read: the source is being "
        "changed; stop the agent and try again",
        path=relpath,
    )


def same_object(a: os.stat_result, b: os.stat_result) -> bool:
    """True when both describe the same object: device, inode and file type."""
    return (
        a.st_dev == b.st_dev
        and a.st_ino == b.st_ino
        and stat.S_IFMT(a.st_mode) == stat.S_IFMT(b.st_mode)
    )


def _sorted_names(fd: int, relpath: str) -> list[str]:
    try:
        names = os.listdir(fd)
    except OSError as exc:
        raise refuse_unreadable(relpath or ".", exc) from exc
    # Names come back surrogate-escaped; their bytes give the order of 02 §9.2.
    names.sort(key=os.fsencode)
    return names


class _Level:
    """One open folder of the walk: its descriptor and the names still to visit."""

    __slots__ = ("fd", "names", "index", "rel", "depth")

    def __init__(self, fd: int, names: list[str], rel: str, depth: int) -> None:
        self.fd = fd
        self.names = names
        self.index = 0
        self.rel = rel
        self.depth = depth


def open_dir_nofollow(parent_fd: int, name: str, expected: os.stat_result | None = None) -> int:
    """Open the folder ``name`` of ``parent_fd`` without following a link.

    Raises ``OSError`` (``ELOOP`` for a symbolic link, whatever the kernel said, ``ENOTDIR``
    for another non-folder, ``ESTALE`` when the opened folder is not ``expected``).
    """
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            # Linux answers ENOTDIR, not ELOOP, for O_DIRECTORY|O_NOFOLLOW on a link.
            try:
                st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            except OSError:
                raise exc from None
            if stat.S_ISLNK(st.st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise
    if expected is not None and not same_object(os.fstat(fd), expected):
        os.close(fd)
        raise OSError(errno.ESTALE, "replaced while being opened", name)
    return fd


def walk(
    root_fd: int,
    *,
    prefix: str = "",
    exclude: Exclude | None = None,
    on_skip: OnSkip | None = None,
    on_non_portable: Callable[[str], None] | None = None,
    unopened: Exclude | None = None,
) -> Generator[Entry, None, None]:
    """Yield every admitted entry below the open folder ``root_fd``, in checksum order.

    ``exclude(rel, lstat)`` is asked for every classified folder and regular file, with ``rel``
    relative to the root; a true answer drops it (and a folder's whole subtree) silently.
    Skipped entries go to ``on_skip(kind, prefix + rel)``; admitted entries whose name is valid
    but not portable go to ``on_non_portable``. A folder is yielded before its contents.
    ``unopened(rel, lstat)`` is asked for every admitted regular file; a true answer yields it
    without opening it (``fd`` -1, ``stat`` the ``lstat``, a hard link still skipped): for a
    caller that wrote the file itself into a private folder and knows its content already.

    Raises :class:`Refused` for an unreadable entry, an entry that became a symbolic link
    between classification and open, or a path deeper than :data:`MAX_DEPTH`. ``root_fd`` is
    not closed; every descriptor the walk opened is closed when it ends or is closed early.
    """
    skip: OnSkip = on_skip or (lambda _kind, _path: None)
    root_dev = os.fstat(root_fd).st_dev
    stack = [_Level(root_fd, _sorted_names(root_fd, prefix.rstrip("/")), "", 0)]
    try:
        while stack:
            level = stack[-1]
            if level.index >= len(level.names):
                stack.pop()
                if level.fd != root_fd:
                    os.close(level.fd)
                continue
            name = level.names[level.index]
            level.index += 1
            # most names are printable ASCII (0x20-0x7e), and then the text is the name itself
            if name.isascii() and name.isprintable():
                text = name
            else:
                raw = os.fsencode(name)
                decoded = decode_name(raw)
                if decoded is None:
                    skip(SkipKind.BAD_NAME, prefix + level.rel + display_name(raw))
                    continue
                text = decoded
            rel = level.rel + text
            relpath = prefix + rel
            depth = level.depth + 1
            try:
                lst = os.stat(name, dir_fd=level.fd, follow_symlinks=False)
            except FileNotFoundError:
                skip(SkipKind.VANISHED, relpath)
                continue
            except OSError as exc:
                raise refuse_unreadable(relpath, exc) from exc
            mode = lst.st_mode
            if stat.S_ISLNK(mode):
                skip(SkipKind.SYMLINK, relpath)
                continue
            is_dir = stat.S_ISDIR(mode)
            if not is_dir and not stat.S_ISREG(mode):
                skip(SkipKind.SPECIAL, relpath)
                continue
            if lst.st_dev != root_dev:
                skip(SkipKind.OTHER_DEVICE, relpath)
                continue
            if exclude is not None and exclude(rel, lst):
                continue
            if depth > MAX_DEPTH:
                raise UnsuitablePath(
                    f"{relpath} is more than {MAX_DEPTH} levels deep: "
                    "flatten the tree and try again",
                    path=relpath,
                )
            if not is_dir and unopened is not None and unopened(rel, lst):
                if lst.st_nlink > 1:
                    skip(SkipKind.HARD_LINK, relpath)
                    continue
                if on_non_portable is not None and not is_portable_name(text):
                    on_non_portable(relpath)
                yield Entry(relpath, rel, text, "file", lst, -1, level.fd, depth)
                continue
            fd = _open_classified(level.fd, name, relpath, is_dir, skip)
            if fd is None:
                continue
            try:
                fst = os.fstat(fd)
                # same_object(fst, lst), inline: this runs once per entry
                if (
                    fst.st_ino != lst.st_ino
                    or fst.st_dev != lst.st_dev
                    or stat.S_IFMT(fst.st_mode) != stat.S_IFMT(mode)
                ):
                    # A mount point also lands here when it is crossed: the mounted root differs.
                    kind = SkipKind.OTHER_DEVICE if fst.st_dev != root_dev else SkipKind.REPLACED
                    skip(kind, relpath)
                    continue
                if not is_dir and fst.st_nlink > 1:
                    skip(SkipKind.HARD_LINK, relpath)
                    continue
                if on_non_portable is not None and not is_portable_name(text):
                    on_non_portable(relpath)
                if is_dir:
                    names = _sorted_names(fd, relpath)
                    entry = Entry(relpath, rel, text, "dir", fst, fd, level.fd, depth)
                    stack.append(_Level(fd, names, rel + "/", depth))
                    fd = -1  # the level owns it now
                    yield entry
                else:
                    yield Entry(relpath, rel, text, "file", fst, fd, level.fd, depth)
            finally:
                if fd >= 0:
                    os.close(fd)
    finally:
        for level in stack:
            if level.fd != root_fd:
                os.close(level.fd)


def _open_classified(
    parent_fd: int, name: str, relpath: str, is_dir: bool, skip: OnSkip
) -> int | None:
    """Open an entry classified as folder or regular file; None when it was skipped."""
    try:
        if is_dir:
            return open_dir_nofollow(parent_fd, name)
        return os.open(name, _FILE_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        skip(SkipKind.VANISHED, relpath)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse_changed(relpath) from exc
        if exc.errno in (errno.ENOTDIR, errno.ENXIO, errno.EISDIR, errno.ENODEV):
            # A folder became a file, or a file became a socket/folder/device node.
            skip(SkipKind.REPLACED, relpath)
        else:
            raise refuse_unreadable(relpath, exc) from exc
    return None


# --- roots -----------------------------------------------------------------------------------


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def open_source_root(path: Path, *, install_root: Path | None) -> int | None:
    """Open a source folder for reading, refusing symbolic links where 02 §7.2 says so.

    Inside ``install_root`` every component from the install root down is opened through the
    previous component's descriptor with no-follow, so a link anywhere there is refused, even
    one pointing back into the install. Links above the install root are followed (they are the
    operator's). Elsewhere only the last component must not be a link. Returns None when the
    folder does not exist (callers treat that as empty); raises :class:`Refused` for a link or
    a non-folder. The caller closes the descriptor.
    """
    target = Path(os.path.abspath(path))
    if install_root is not None:
        base = Path(os.path.abspath(install_root))
        if target != base and _is_within(target, base):
            return _open_chain(base, target.relative_to(base).parts, target)
    parent, name = target.parent, target.name
    if not name:  # "/" itself: nothing above it can be a link
        return os.open(str(target), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        parent_fd = os.open(str(parent), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise refuse_unreadable(str(parent), exc) from exc
    try:
        return _open_component(parent_fd, name, str(target), target)
    finally:
        os.close(parent_fd)


def _open_chain(base: Path, parts: tuple[str, ...], target: Path) -> int | None:
    try:
        fd = os.open(str(base), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise refuse_unreadable(str(base), exc) from exc
    current = base
    try:
        for part in parts:
            current = current / part
            child = _open_component(fd, part, str(current), target)
            fd, parent = -1, fd
            os.close(parent)
            if child is None:
                return None
            fd = child
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)


def _open_component(parent_fd: int, name: str, shown: str, target: Path) -> int | None:
    try:
        return open_dir_nofollow(parent_fd, name)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            where = "" if shown == str(target) else f"(above {target}) "
            what = f"{where}is a symbolic link"
            raise UnsuitablePath(f"{shown} {what}: {SYMLINK_MESSAGE}", path=shown) from exc
        if exc.errno == errno.ENOTDIR:
            raise UnsuitablePath(
                f"{shown} is not a folder: point the config at a folder and try again", path=shown
            ) from exc
        raise refuse_unreadable(shown, exc) from exc


def open_beneath(root_fd: int, rel: str) -> int:
    """Open the folder ``rel`` (``/``-separated) below ``root_fd``, no-follow at every step.

    Raises ``OSError``: ``ELOOP`` when a component is a symbolic link, ``ENOENT``, ``ENOTDIR``;
    ``EINVAL`` for an absolute path or a ``..`` component. The caller closes the result.
    """
    if rel.startswith("/"):
        raise OSError(errno.EINVAL, "absolute path", rel)
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EINVAL, "path climbs with ..", rel)
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = open_dir_nofollow(fd, part)
            fd, parent = child, fd
            os.close(parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


# --- filters ---------------------------------------------------------------------------------

WORKSPACE_PRIVATE = ("memory", "MEMORY_SNAPSHOT.md")
"""Root-level workspace entries that never travel in format 1 (02 §7.1)."""


class WorkspaceExclude:
    """``exclude`` for a workspace walk: root ``memory/`` and ``MEMORY_SNAPSHOT.md`` (02 §7.1).

    Matches them by name at the root, and by the (device, inode) they had when the filter was
    made, at any depth and under any name, so moving them during the copy does not carry them.
    ``present`` tells which of the two existed (for the ``dropped`` rows). Raises
    :class:`Refused` naming ``prefix + name`` when one of them cannot be examined.
    """

    def __init__(self, root_fd: int, *, prefix: str = "") -> None:
        self.identities: set[tuple[int, int]] = set()
        self.present: list[str] = []
        for name in WORKSPACE_PRIVATE:
            try:
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                # unknown identities could let them travel under another name: refuse
                raise refuse_unreadable(prefix + name, exc) from exc
            self.present.append(name)
            self.identities.add((st.st_dev, st.st_ino))

    def __call__(self, rel: str, st: os.stat_result) -> bool:
        """True for the private entries (see the class)."""
        return rel in WORKSPACE_PRIVATE or (st.st_dev, st.st_ino) in self.identities


@dataclass
class SkillSelection:
    """The root of a skill bundle folder sorted out (02 §7.4).

    ``admitted``: (name, lstat) of each skill to copy, in name-byte order. ``not_copied``: the
    display names of every other root entry, for ``skills/<b>/<name>`` dropped rows. Entries the
    include/exclude filter rejects appear in neither.
    """

    admitted: list[tuple[str, os.stat_result]] = field(default_factory=list)
    not_copied: list[str] = field(default_factory=list)


def select_skills(
    bundle_fd: int,
    *,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    prefix: str = "",
) -> SkillSelection:
    """Sort the root entries of an open skill bundle folder into skills and the rest.

    A skill is a child folder holding a regular ``SKILL.md``; it is admitted when its name passes
    the filter (empty ``include`` admits all; ``exclude`` wins) and is portable. Classification
    is no-follow through ``bundle_fd``; copy each admitted skill with :func:`open_dir_nofollow`
    passing its recorded lstat, so a swap after selection is caught.

    Raises :class:`Refused` naming ``prefix + name`` for an entry that cannot be read
    (permissions, I/O error) or that turned into a symbolic link or another object while it was
    classified: like every unreadable carried entry (02 §7.2), it fails the export instead of
    becoming a "not a skill" row.
    """
    included, excluded = set(include), set(exclude)
    selection = SkillSelection()
    for name in _sorted_names(bundle_fd, prefix.rstrip("/")):
        text = decode_name(os.fsencode(name))
        if text is not None and (text in excluded or (included and text not in included)):
            continue
        shown = text if text is not None else display_name(os.fsencode(name))
        if text is None or not is_portable_name(text):
            selection.not_copied.append(shown)
            continue
        relpath = prefix + text
        try:
            lst = os.stat(name, dir_fd=bundle_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise refuse_unreadable(relpath, exc) from exc
        if stat.S_ISDIR(lst.st_mode) and _holds_regular_skill_md(bundle_fd, name, lst, relpath):
            selection.admitted.append((name, lst))
        else:
            selection.not_copied.append(shown)
    return selection


def _holds_regular_skill_md(bundle_fd: int, name: str, lst: os.stat_result, relpath: str) -> bool:
    """True when the folder holds a regular ``SKILL.md``; False only when it plainly does not.

    A folder that vanished or became a file is simply not a skill (it is reported as a root
    entry that is not one); every other failure refuses, because an unreadable folder may well
    be a skill, and dropping it would lose it silently.
    """
    try:
        fd = open_dir_nofollow(bundle_fd, name, lst)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return False
        if exc.errno == errno.ELOOP:
            raise _refuse_changed(relpath) from exc
        if exc.errno == errno.ESTALE:
            raise ChangedMeanwhile(
                f"{relpath} was replaced while it was being read: the source is being changed; "
                "stop the agent and try again",
                path=relpath,
            ) from exc
        raise refuse_unreadable(relpath, exc) from exc
    try:
        st = os.stat("SKILL.md", dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise refuse_unreadable(f"{relpath}/SKILL.md", exc) from exc
    finally:
        os.close(fd)
    return stat.S_ISREG(st.st_mode)


# --- removal ---------------------------------------------------------------------------------


def rmtree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` in the folder ``dir_fd`` and everything below it, never following a link.

    Iterative and descriptor-relative, like CPython's ``_rmtree_safe_fd``, but with one folder
    open at a time however deep the tree: that one keeps a descriptor per level, and a clean-up
    that runs short of descriptors (a low ``ulimit -n``) is the one that leaves the tree behind.
    Going back up opens ``..`` and checks it is the folder it came down from (device, inode), so
    a folder moved elsewhere meanwhile makes the removal fail (``ESTALE``), never wander off. A
    symbolic link is unlinked, never entered. A missing ``name`` is not an error; other failures
    raise ``OSError``.
    """
    try:
        lst = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(lst.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    # Each frame: (name in its parent, its lstat, names left); only ``fd``, the last frame's
    # folder, is open.
    fd = open_dir_nofollow(dir_fd, name, lst)
    try:
        frames: list[tuple[str, os.stat_result, list[str]]] = [(name, lst, os.listdir(fd))]
        while frames:
            own_name, _own, names = frames[-1]
            descended = False
            while names:
                child = names.pop()
                try:
                    cst = os.stat(child, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(cst.st_mode):
                    child_fd = open_dir_nofollow(fd, child, cst)
                    fd, parent = child_fd, fd
                    os.close(parent)
                    frames.append((child, cst, os.listdir(fd)))
                    descended = True
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(child, dir_fd=fd)
            if descended:
                continue
            frames.pop()
            if not frames:
                fd, done = -1, fd  # forgotten before it is closed: never closed twice
                os.close(done)
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(own_name, dir_fd=dir_fd)
                return
            parent = open_dir_nofollow(fd, "..", frames[-1][1])
            fd, done = parent, fd
            os.close(done)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(own_name, dir_fd=fd)
    finally:
        if fd >= 0:
            os.close(fd)
