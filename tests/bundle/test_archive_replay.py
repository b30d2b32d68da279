"""Unpacking a listed archive by its members (a pull into a folder), on workers.

The replay makes what :func:`read_tar` makes of the same archive, by the same rules, whatever
the number of threads; a failure is that of the earliest member, and no worker outlives the
call, even when it is interrupted.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import tarfile
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash
from support import bundlefactory as bf
from support.faultinject import in_a_process_of_its_own
from support.kit import tree_snapshot

from bundler.bundle.archive import unpack_into
from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.archive_read import ArchiveLimits, Digests, list_tar, read_tar
from bundler.bundle.archive_replay import PARALLEL_FROM, replay_tar
from bundler.bundle.manifest import CHECKSUMS_NAME, checksums_by_path
from bundler.errors import InvalidInput
from bundler.fs.durable import open_dir
from bundler.fs.threads import running


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle the real exporter made of a workspace of many folders, modes and a file larger
    than one read (:func:`bundlefactory.widen_workspace`)."""
    base = tmp_path_factory.mktemp("wide")
    install = bf.write_install(base / "install")
    bf.widen_workspace(install)
    return bf.export_bundle(install, base / "bundle")


def archive_of(bundle: Path, fmt: str, tmp_path: Path) -> bytes:
    """The bundle as ``bundle pack`` writes it, or as GNU tar does in ``fmt``."""
    if fmt == "bundler":
        return bf.pack_bytes(bundle)
    archive = tmp_path / f"{fmt}.tar"
    tops = sorted(p.name for p in bundle.iterdir())
    subprocess.run(
        ["tar", f"--format={fmt}", "-C", str(bundle), "-cf", str(archive), *tops], check=True
    )
    return archive.read_bytes()


@pytest.fixture
def source(tmp_path: Path) -> Iterator[types.SimpleNamespace]:
    """``source.put(data, base)``: a file holding ``data`` after ``base`` bytes of other content,
    opened for reading, as a pulled blob is (closed after the test)."""
    opened: list[int] = []

    def put(data: bytes, base: int = 0) -> int:
        path = tmp_path / f"source-{len(opened)}"
        path.write_bytes(os.urandom(base) + data)
        opened.append(os.open(path, os.O_RDONLY))
        return opened[-1]

    yield types.SimpleNamespace(put=put)
    for fd in opened:
        os.close(fd)


def replay_into(
    source_fd: int,
    members: list[ListedMember],
    dest: Path,
    *,
    base: int = 0,
    digests: Digests | None = None,
    workers: int | None = None,
) -> list[str]:
    dest.mkdir(mode=0o700, exist_ok=True)
    fd = open_dir(dest, follow=False)
    try:
        return replay_tar(
            source_fd, fd, members, base=base, name="b.tar", digests=digests, workers=workers
        )
    finally:
        os.close(fd)


def read_into(data: bytes, dest: Path, digests: Digests) -> None:
    dest.mkdir(mode=0o700)
    fd = open_dir(dest, follow=False)
    try:
        read_tar(io.BytesIO(data), fd, ArchiveLimits(), name="b.tar", digests=digests)
    finally:
        os.close(fd)


def unpack_workers() -> list[str]:
    return [name for name in running() if name == "bundler-unpack"]


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("fmt", ["bundler", "gnu", "pax"])
def test_a_replay_makes_what_read_tar_makes(
    wide: Path, tmp_path: Path, source: types.SimpleNamespace, fmt: str, workers: int
) -> None:
    """Files, folders, modes and digests are those of unpacking the archive outright, whatever
    tar wrote it and however many threads make it."""
    data = archive_of(wide, fmt, tmp_path)
    members = list_tar(io.BytesIO(data), ArchiveLimits())
    assert sum(not m.is_dir for m in members) >= PARALLEL_FROM
    read: Digests = {}
    read_into(data, tmp_path / "read", read)
    replayed: Digests = {}
    names = replay_into(
        source.put(data), members, tmp_path / "replayed", digests=replayed, workers=workers
    )
    assert names == [member.name for member in members]
    assert tree_snapshot(tmp_path / "replayed") == tree_snapshot(tmp_path / "read")
    assert tree_snapshot(tmp_path / "replayed") == tree_snapshot(wide)
    assert replayed == read and read
    assert not unpack_workers()


def test_a_replay_reads_the_archive_from_its_place_in_the_file(
    wide: Path, tmp_path: Path, source: types.SimpleNamespace
) -> None:
    """A pull into an archive unpacks a layer from the middle of its staging file."""
    data = bf.pack_bytes(wide)
    members = list_tar(io.BytesIO(data), ArchiveLimits())
    replay_into(source.put(data, base=12345), members, tmp_path / "out", base=12345)
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(wide)


def test_a_replay_records_the_digests_of_the_bytes_it_writes(
    exported: Path, tmp_path: Path, source: types.SimpleNamespace
) -> None:
    """Should the file no longer hold the bytes listed, the digests are of what was written,
    so that the verification against checksums.xxh3 refuses the folder."""
    data = bf.pack_bytes(exported)
    members = list_tar(io.BytesIO(data), ArchiveLimits())
    target = next(m for m in members if not m.is_dir and m.size)
    changed = bytearray(data)
    changed[target.data_at] ^= 0xFF
    digests: Digests = {}
    replay_into(source.put(bytes(changed)), members, tmp_path / "out", digests=digests)
    written = (tmp_path / "out" / target.name).read_bytes()
    assert written[0] == data[target.data_at] ^ 0xFF
    assert digests[target.name] == (target.size, xxhash.xxh3_128_hexdigest(written))
    assert digests[target.name][1] != checksums_by_path(
        (exported / CHECKSUMS_NAME).read_bytes()
    ).get(target.name)


def test_a_replay_of_a_file_cut_short_is_refused(
    exported: Path, tmp_path: Path, source: types.SimpleNamespace
) -> None:
    data = bf.pack_bytes(exported)
    members = list_tar(io.BytesIO(data), ArchiveLimits())
    last = max((m for m in members if not m.is_dir and m.size), key=lambda m: m.data_at)
    for cut in (last.data_at + last.size - 1, last.data_at - 1):
        shortfall = r"is cut short: the archive ends \d+(\.\d)? (bytes?|KiB|MiB) before it does"
        with pytest.raises(InvalidInput, match=shortfall):
            replay_into(source.put(data[:cut]), members, tmp_path / f"out-{cut}")


@pytest.mark.parametrize("workers", [2, 4])
def test_the_earliest_failing_member_is_the_one_refused(
    wide: Path, tmp_path: Path, source: types.SimpleNamespace, workers: int
) -> None:
    """Every member after the cut fails, on whichever worker makes it first; the error names
    the first of them in archive order, every time, and no worker is left running."""
    data = bf.pack_bytes(wide)
    members = list_tar(io.BytesIO(data), ArchiveLimits())
    files = [m for m in members if not m.is_dir and m.size]
    first_cut = files[len(files) // 3]
    source_fd = source.put(data[: first_cut.data_at])
    for attempt in range(8):
        with pytest.raises(InvalidInput) as refused:
            replay_into(source_fd, members, tmp_path / f"out-{attempt}", workers=workers)
        assert f"member {first_cut.name} is cut short" in str(refused.value)
        assert not unpack_workers()


def test_a_member_that_collides_on_this_filesystem_is_refused_as_the_reader_refuses_it(
    wide: Path, tmp_path: Path, source: types.SimpleNamespace
) -> None:
    """A name already taken in the folder (as on a filesystem that folds case) is the
    archive's fault, named like :func:`read_tar` names it, from any worker."""
    data = bf.pack_bytes(wide)
    members = list_tar(io.BytesIO(data), ArchiveLimits())
    taken = next(m for m in reversed(members) if not m.is_dir and "/notes/" in m.name)
    dest = tmp_path / "out"
    dest.mkdir(mode=0o700)
    for member in members:
        if member.is_dir and taken.name.startswith(member.name + "/"):
            (dest / member.name).mkdir(mode=0o700)
    (dest / taken.name).write_bytes(b"")
    kept = [m for m in members if not (m.is_dir and (dest / m.name).exists())]
    with pytest.raises(InvalidInput, match="collides with another member on this filesystem"):
        replay_into(source.put(data), kept, dest, workers=4)
    assert not unpack_workers()


@pytest.mark.parametrize("delay", [0.0005, 0.002, 0.01, 0.05])
def test_an_interrupt_returns_only_once_every_worker_has_stopped(
    wide: Path, tmp_path: Path, source: types.SimpleNamespace, delay: float
) -> None:
    """Ctrl-C on the calling thread (a real SIGINT, at several moments) leaves no worker writing
    into the folder its caller then removes. Run in a process of its own, as the command line
    is: there every thread but the main one blocks the signals (pytest's own threads do not)."""
    data = bf.pack_bytes(wide)
    members = list_tar(io.BytesIO(data), ArchiveLimits())
    source_fd = source.put(data)
    in_a_process_of_its_own(lambda: interrupted_replay(source_fd, members, tmp_path, delay))


def interrupted_replay(
    source_fd: int, members: list[ListedMember], tmp_path: Path, delay: float
) -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    # the timer may fire after a fast replay returned: disarmed first, then stopped, and the
    # interrupt caught around both, so a late signal can never escape into the test runner
    armed = threading.Event()
    armed.set()

    def interrupt(*_: object) -> None:
        if armed.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    try:
        signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, delay)
        try:
            try:
                replay_into(source_fd, members, tmp_path / "out", workers=4)
            finally:
                armed.clear()
                signal.setitimer(signal.ITIMER_REAL, 0)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
        assert not unpack_workers()
        before = tree_snapshot(tmp_path / "out", sizes=True)
        threading.Event().wait(0.05)
        assert tree_snapshot(tmp_path / "out", sizes=True) == before
    finally:
        signal.signal(signal.SIGINT, previous)


# ------------------------------------------------------------- the archive readers' unpacking


class Recorded:
    """A :class:`bundler.rules.progress.Progress` that keeps what it is told."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, int | None, int | None]] = []
        self.files = 0
        self.nbytes = 0

    def start(self, label: str, files: int | None = None, nbytes: int | None = None) -> None:
        self.phases.append((label, files, nbytes))
        self.files = self.nbytes = 0

    def __call__(self, files: int, nbytes: int) -> None:
        self.files += files
        self.nbytes += nbytes

    def stop(self) -> None:
        pass


def test_an_archive_file_is_judged_whole_before_anything_is_made(
    exported: Path, tmp_path: Path
) -> None:
    """A regular file is listed by every rule first: a link as its last member is refused
    with nothing made, where the streaming reader had made every member before it."""
    archive = tmp_path / "late-link.tar"
    with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tar:
        for top in sorted(p.name for p in exported.iterdir()):
            tar.add(exported / top, arcname=top)
        link = tarfile.TarInfo("workspace/zz-link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    dest = tmp_path / "out"
    dest.mkdir(mode=0o700)
    fd = open_dir(dest, follow=False)
    try:
        with pytest.raises(InvalidInput, match="zz-link is a symbolic link"):
            unpack_into(archive, fd)
    finally:
        os.close(fd)
    assert os.listdir(dest) == []


def test_unpacking_an_archive_file_reports_the_bytes_read_then_each_file_made(
    wide: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "wide.tar"
    archive.write_bytes(bf.pack_bytes(wide))
    files = {p for p, entry in tree_snapshot(wide).items() if entry[0] == "file"}
    recorded = Recorded()
    dest = tmp_path / "out"
    dest.mkdir(mode=0o700)
    fd = open_dir(dest, follow=False)
    try:
        unpack_into(archive, fd, progress=recorded)
    finally:
        os.close(fd)
    total = sum((wide / p).stat().st_size for p in files)
    assert recorded.phases == [
        ("reading", None, archive.stat().st_size),
        ("unpacking", len(files), total),
    ]
    assert (recorded.files, recorded.nbytes) == (len(files), total)
    assert tree_snapshot(dest) == tree_snapshot(wide)
