"""Unpacking a listed archive from a file: what the listing admitted, made by workers.

:func:`bundler.bundle.archive_read.list_tar` has judged the archive by every rule of the
hostile-archive reader and recorded where each member's data lies. Here the members it admitted
are made in an empty private folder, each file's data read by position from the file that holds
the archive (a pulled layer's blob). Nothing of the listing is judged again: its names, kinds,
modes, sizes and order passed every rule, and each member is made by the rules
:func:`bundler.bundle.archive_read.read_tar` makes it by (:func:`make_folder`,
:func:`create_file`, :func:`create_problem`). The headers between are never read.

Why several threads: making a file is mostly the kernel's work (the inode, the folder entry,
the pages written), done without the GIL, and on a bundle of many small files it is most of a
pull into a folder. The folders are made first, in archive order, on the calling thread. Then
each run of one folder's files (consecutive in archive order: all of them, in an archive whose
folders hold no subfolders) goes to one worker, the next run to whichever worker is free
first, so that two threads rarely add to one folder at once (the kernel would serialise
them). The runs are taken from the members as the workers ask, so a listing kept on disk
(:class:`bundler.bundle.archive_spill.MemberFile`) is read once for the folders and once for
the files, and nothing per member is held. Measured on this project's 2-core machine, a layer
of 20,000 files unpacks in about 0.6 of the time one thread takes; :data:`MAX_WORKERS` bounds
the threads on larger machines, where they were not measured.

Each file's XXH3-128 is taken from the bytes written (``digests``, or the slot of its place in
``slots``), as :func:`read_tar` takes it: should the file no longer hold the bytes listed, the
digests say so, and a verification comparing them with ``checksums.xxh3`` refuses the
folder.

A member that fails stops the making of every member after it in archive order (each worker
at its next member, or its next chunk of a large one), while those before it are still made:
so the error raised is always that of the first member, in archive order, that fails, however
the work fell to the workers. An interrupt stops them all. The call returns or raises only
when no worker is left, so its caller may remove the folder at once.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import xxhash

from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.archive_members import (
    create_file,
    create_problem,
    make_folder,
    member_error,
    process_umask,
)
from bundler.bundle.archive_read import Digests
from bundler.errors import Hostile, Malformed
from bundler.fs.durable import write_all
from bundler.fs.interrupts import joined, signals_deferred, wait_for
from bundler.fs.processors import usable_processors
from bundler.fs.safefs import display_name, open_beneath
from bundler.fs.threads import Thread, start_thread
from bundler.rules.progress import Progress
from bundler.rules.units import human_size

if TYPE_CHECKING:
    from bundler.bundle.archive_spill import DigestSlots

CHUNK = 1 << 20
"""The most of a member's data read and written at once (one buffer per worker)."""

PARALLEL_FROM = 64
"""Files below which the calling thread makes them all: a thread costs more than it saves."""

MAX_WORKERS = 4
"""The most threads making files, the calling one included."""

_UNKNOWN = -1  # the archive place of a failure no member can be blamed for: it stops all


def default_workers() -> int:
    """The threads a replay uses: one per processor this process may run on, at most
    :data:`MAX_WORKERS`."""
    return min(MAX_WORKERS, usable_processors())


def replay_tar(
    source_fd: int,
    dest_fd: int,
    members: list[ListedMember],
    *,
    base: int = 0,
    name: str = "archive",
    digests: Digests | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> list[str]:
    """Make in the empty folder ``dest_fd`` the ``members`` :func:`bundler.bundle.archive_read.
    list_tar` admitted of the archive that starts at ``base`` in the file ``source_fd``; return
    their names.

    ``name`` is the archive as errors name it; ``digests`` receives the size and XXH3-128 of
    every file as written; ``workers`` is the number of threads (:func:`default_workers` when
    None); ``progress`` is called once per file made (from any worker, one at a time).

    Raises :class:`bundler.errors.InvalidInput` when the file ends before a member's data does,
    or a member cannot be made for a reason of its own (it collides with another on this
    filesystem, say); ``OSError`` when the system fails. On any exception part of the archive
    may have been made: the caller removes ``dest_fd``'s folder.
    """
    replay_members(
        source_fd,
        dest_fd,
        members,
        base=base,
        name=name,
        digests=digests,
        workers=workers,
        progress=progress,
    )
    return [member.name for member in members]


def replay_members(
    source_fd: int,
    dest_fd: int,
    members: Iterable[ListedMember],
    *,
    base: int = 0,
    name: str = "archive",
    digests: Digests | None = None,
    slots: DigestSlots | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> None:
    """:func:`replay_tar` of ``members`` that are read twice, in archive order, and never held:
    a list, or a listing kept on disk (:class:`bundler.bundle.archive_spill.MemberFile`).
    ``slots``, when given, receives each file's size and XXH3-128 at its member's place."""
    replay = _Replay(
        source_fd, base, dest_fd, display_name(os.fsencode(name)), digests, slots, progress
    )
    replay.make_folders(member.name for member in members if member.is_dir)
    files = ((index, member) for index, member in enumerate(members) if not member.is_dir)
    count = default_workers() if workers is None else max(1, workers)
    replay.make_files(files, count)


_Group = list[tuple[int, ListedMember]]
"""A run of one folder's files, each with its place in the archive."""


def _runs(files: Iterator[tuple[int, ListedMember]]) -> Iterator[_Group]:
    """``files`` cut into runs of consecutive files of one folder."""
    run: _Group = []
    parent = ""
    for place, member in files:
        folder = member.name.rpartition("/")[0]
        if run and folder != parent:
            yield run
            run = []
        parent = folder
        run.append((place, member))
    if run:
        yield run


class _Replay:
    def __init__(
        self,
        source_fd: int,
        base: int,
        dest_fd: int,
        archive: str,
        digests: Digests | None,
        slots: DigestSlots | None,
        progress: Progress | None,
    ) -> None:
        self.source_fd = source_fd
        self.base = base
        self.dest_fd = dest_fd
        self.archive = archive
        self.digests = digests
        self.slots = slots
        self.hashed = digests is not None or slots is not None
        self.progress = progress
        self.umask = process_umask()
        self._lock = threading.Lock()
        self._groups: Iterator[_Group] = iter(())
        self._limit = sys.maxsize  # the archive place after which no member is made
        self._failures: list[tuple[int, BaseException]] = []

    # --- the folders, on the calling thread -----------------------------------------------

    def make_folders(self, names: Iterable[str]) -> None:
        """Make each folder, in archive order (each after the one it lies in)."""
        for name in names:
            parent, _, leaf = name.rpartition("/")
            try:
                parent_fd = open_beneath(self.dest_fd, parent) if parent else self.dest_fd
                try:
                    make_folder(parent_fd, leaf)
                finally:
                    if parent:
                        os.close(parent_fd)
            except OSError as err:
                raise self._create_error(err, name) from None

    # --- the files, by the workers --------------------------------------------------------

    def make_files(self, files: Iterator[tuple[int, ListedMember]], workers: int) -> None:
        """Make ``files`` (each with its place in the archive, in archive order) on up to
        ``workers`` threads, this one included; raise the earliest member's failure once every
        worker has stopped."""
        self._groups = _runs(files)
        # the first runs tell whether the files are few enough for this thread alone
        first: list[_Group] = []
        count = 0
        while count < PARALLEL_FROM and (group := next(self._groups, None)) is not None:
            first.append(group)
            count += len(group)
        if count < PARALLEL_FROM:
            workers = 1  # a thread costs more than it saves
        self._groups = itertools.chain(first, self._groups)
        threads: list[Thread] = []
        try:
            for _ in range(workers - 1):
                thread = Thread(self._work_beside, name="bundler-unpack")
                threads.append(thread)  # before it starts: an interrupt may come as it does
                try:
                    start_thread(thread)
                except RuntimeError:  # the system gives no more threads: fewer workers
                    threads.pop()
                    break
            self._work()
            for thread in threads:
                wait_for(joined(thread))  # an interrupt is taken between waits
        finally:
            self._limit = _UNKNOWN
            with signals_deferred():  # the folder must not be removed under a worker
                for thread in threads:
                    thread.join()  # at once for one that did not start
        if self._failures:
            raise min(self._failures, key=lambda failure: failure[0])[1]

    def _work_beside(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # raised by the calling thread, in make_files
            self._fail(_UNKNOWN, exc)

    def _work(self) -> None:
        view = memoryview(bytearray(CHUNK))
        while (group := self._next_group()) is not None:
            self._make_group(group, view)

    def _next_group(self) -> _Group | None:
        # the groups come in the archive order of their first member: none after the limit
        with self._lock:
            group = next(self._groups, None)
            return None if group is None or group[0][0] > self._limit else group

    def _fail(self, index: int, exc: BaseException) -> None:
        with self._lock:
            self._failures.append((index, exc))
            self._limit = min(self._limit, index)

    def _make_group(self, group: _Group, view: memoryview) -> None:
        parent = group[0][1].name.rpartition("/")[0]
        blamed = group[0][0]  # the archive place of the member being made
        try:
            parent_fd = open_beneath(self.dest_fd, parent) if parent else self.dest_fd
            try:
                for place, member in group:
                    if place > self._limit:
                        return
                    blamed = place
                    self._make_file(parent_fd, member, view, place)
            finally:
                if parent:
                    os.close(parent_fd)
        except Exception as exc:  # raised by make_files: the earliest member's first
            self._fail(blamed, exc)

    def _make_file(
        self, parent_fd: int, member: ListedMember, view: memoryview, place: int
    ) -> None:
        leaf = member.name.rpartition("/")[2]
        try:
            fd, exact = create_file(parent_fd, leaf, member.mode, self.umask)
        except OSError as err:
            raise self._create_error(err, member.name) from None
        try:
            digest = self._copy(fd, member, view, place)
            if not exact:
                os.fchmod(fd, member.mode)
        finally:
            os.close(fd)
        if self.digests is not None:
            self.digests[member.name] = (member.size, digest)
        if self.slots is not None:
            self.slots.put(place, member.size, digest)
        if self.progress is not None:
            with self._lock:
                self.progress(1, member.size)

    def _copy(self, fd: int, member: ListedMember, view: memoryview, place: int) -> str:
        """Write the data of ``member``, at ``place`` in the archive, to ``fd``: its XXH3-128
        (empty when no digests are kept; cut short when the making stops before it)."""
        at = self.base + member.data_at
        left = member.size
        if left <= CHUNK:
            data = self._read_at(view[:left], at, member)
            write_all(fd, data)
            return str(xxhash.xxh3_128_hexdigest(data)) if self.hashed else ""
        hasher = xxhash.xxh3_128() if self.hashed else None
        while left and place <= self._limit:
            data = self._read_at(view[: min(left, CHUNK)], at, member, left)
            write_all(fd, data)
            if hasher is not None:
                hasher.update(data)
            at += len(data)
            left -= len(data)
        return "" if hasher is None else str(hasher.hexdigest())

    def _read_at(
        self, into: memoryview, at: int, member: ListedMember, left: int | None = None
    ) -> memoryview:
        """Fill ``into`` from ``at``; the archive ending first refuses ``member``, ``left``
        bytes of which were still to come."""
        got = 0
        while got < len(into):
            count = os.preadv(self.source_fd, [into[got:]], at + got)
            if not count:
                missing = (len(into) if left is None else left) - got
                raise member_error(
                    self.archive,
                    member.name,
                    f"is cut short: the archive ends {human_size(missing)} before it does",
                    Malformed,
                )
            got += count
        return into

    def _create_error(self, err: OSError, name: str) -> BaseException:
        why = create_problem(err)
        return err if why is None else member_error(self.archive, name, why, Hostile)
