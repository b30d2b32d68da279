"""The layer cache: blobs pulled from a registry, kept by digest so the next pull fetches only
what is missing.

Where: ``<cache>/blobs/sha256/``, ``<cache>`` being the user's cache folder for bundler
(``platformdirs.user_cache_dir``: ``$XDG_CACHE_HOME/bundler``, by default ``~/.cache/bundler``;
on macOS ``~/Library/Caches/bundler``), created 0700 with its missing parents and never below a
folder of another user (:func:`bundler.fs.privatedir.make_private`). Its files are 0600:

* ``<hex>``: a whole blob, whose sha256 was ``<hex>`` when it was given that name;
* ``<hex>.partial``: a blob being downloaded, or what a dropped download left of it: the bytes
  received, in order. The pull writing it holds an ``flock`` on it, so two pulls that need the
  same blob download it once: the second waits for the lock, then finds the whole blob named.
  The next pull that needs it hashes the bytes there and asks the registry for the rest (a
  ``Range`` request; a registry that ignores it sends the whole blob, which replaces them).
  A pull into ``FILE.tar`` writes the blobs it downloads into the archive alone and puts here
  only what a lost connection left it (:meth:`BlobCache.keep`; :mod:`bundler.registry.
  pull_archive` says why).

Verified before use: a blob read from the cache is hashed as it is read, exactly as a download
is, and nothing is made of its bytes before its end matched the digest (the hostile-archive
listing only reads; the unpacking waits for the check). A whole blob or a resumed download that
fails is removed (:class:`StaleCopy`) and the blob is downloaded again, whole; a download that
fails its digest leaves nothing. So nothing here is fsynced: a crash that tears a file costs a
download, never a wrong byte; and the cache's contents are never the only copy of anything.

Bounded: after each pull the least recently used files (by modification time, which every use
of a blob sets) are removed until the cache holds at most :func:`max_size` bytes: 2 GiB, or
``$BUNDLER_CACHE_MAX_SIZE``. ``bundler bundle cache --prune`` does the same on demand
(:func:`prune`). A partial file another pull holds is never removed.

The cache holds what was pulled, the agents' workspaces and memory included, in clear (a sealed
bundle's secrets stay sealed): it is the user's, like the pulled folder, and stays until pruned.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bundler.bundle.archive_write import append_range
from bundler.errors import InvalidInput, UsageError, os_failure
from bundler.fs.durable import locked_by_another, open_dir, write_all_at
from bundler.fs.privatedir import make_private, user_cache_folder
from bundler.registry.distribution import Session
from bundler.registry.hashing import Sha256
from bundler.registry.streams import BlobStream
from bundler.registry.transport import CHUNK
from bundler.rules.names import escape_display
from bundler.rules.units import human_size, parse_size

DEFAULT_MAX_BYTES = 2 << 30
MAX_SIZE_VARIABLE = "BUNDLER_CACHE_MAX_SIZE"
PARTIAL = ".partial"
_HEX = re.compile(r"[0-9a-f]{64}")
_PARTIAL_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
# a FIFO put where a blob belongs must not hold the pull waiting for a writer
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_R = TypeVar("_R")


def cache_folder() -> Path:
    """The folder of cached blobs (not created)."""
    return user_cache_folder() / "blobs" / "sha256"


def max_size(environ: Mapping[str, str]) -> int:
    """The bound of the cache in bytes: ``$BUNDLER_CACHE_MAX_SIZE`` (bytes, or with an IEC
    unit: ``500MiB``), else :data:`DEFAULT_MAX_BYTES`."""
    raw = environ.get(MAX_SIZE_VARIABLE, "")
    if not raw:
        return DEFAULT_MAX_BYTES
    size = parse_size(raw)
    if size is None:
        raise UsageError(
            f"${MAX_SIZE_VARIABLE} is {escape_display(raw)!r}, which is no size; give bytes or "
            "a size with a unit, such as 2GiB"
        )
    return size


class StaleCopy(Exception):
    """A cached blob, or a resumed download, whose bytes were not the digest's: removed, and
    to be downloaded again whole."""


@dataclass
class Removed:
    """A file :meth:`BlobCache.trim` removed: the blob's digest, its bytes, and whether it was
    a partial download."""

    digest: str
    size: int
    partial: bool

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {"digest": self.digest, "bytes": self.size, "partial": self.partial}


@dataclass
class CachePruneReport:
    """What ``bundle cache --prune`` removed, and what the cache holds after it."""

    folder: str
    max_bytes: int
    dry_run: bool = False
    removed: list[Removed] = field(default_factory=list)
    kept_files: int = 0
    kept_bytes: int = 0

    @property
    def removed_bytes(self) -> int:
        """The bytes removed, in all."""
        return sum(item.size for item in self.removed)

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` payload."""
        return {
            "folder": self.folder,
            "max_bytes": self.max_bytes,
            "dry_run": self.dry_run,
            "removed": [item.as_json() for item in self.removed],
            "removed_bytes": self.removed_bytes,
            "kept_files": self.kept_files,
            "kept_bytes": self.kept_bytes,
        }

    def summary(self) -> str:
        """One line for a person."""
        done = "would remove" if self.dry_run else "removed"
        return (
            f"{done} {len(self.removed)} cached blobs ({human_size(self.removed_bytes)}); "
            f"{self.kept_files} kept ({human_size(self.kept_bytes)}, at most "
            f"{human_size(self.max_bytes)}) in {escape_display(self.folder)}"
        )


class BlobCache:
    """The open cache folder (:func:`cache_folder`); :meth:`close` it when done."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls) -> BlobCache:
        """The cache folder, made if missing; ``OSError`` when it cannot be made or is not
        this user's."""
        path = cache_folder()
        make_private(path)
        fd = open_dir(path, follow=True)
        if os.fstat(fd).st_uid != os.geteuid():
            os.close(fd)
            raise PermissionError(f"{path} belongs to another user")
        return cls(path, fd)

    def close(self) -> None:
        """Close the folder."""
        os.close(self.fd)

    def __enter__(self) -> BlobCache:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ entries

    def entry(self, digest: str, size: int) -> int | None:
        """The whole blob ``digest`` opened for reading, marked used; None when the cache has
        none of ``size`` bytes (a file of another size is removed). Not yet checked: read it
        through :class:`CachedBlob`."""
        name = _hex(digest)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError:
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            os.close(fd)
            self.remove(name)
            return None
        _touch(fd)
        return fd

    def present(self, digest: str, size: int) -> int:
        """How many bytes of blob ``digest`` the cache holds: ``size`` for a whole blob, what a
        partial download received, else 0 (for the free-space check: no lock, no check)."""
        for name, whole in ((_hex(digest), True), (_hex(digest) + PARTIAL, False)):
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and (st.st_size == size if whole else st.st_size < size):
                return st.st_size
        return 0

    def claim(self, digest: str) -> int:
        """The partial download of ``digest``, opened and locked (waiting while another pull
        holds it), created when missing: the caller is then its only writer."""
        name = _hex(digest) + PARTIAL
        while True:
            try:
                fd = os.open(name, _PARTIAL_FLAGS, 0o600, dir_fd=self.fd)
            except OSError as err:
                raise os_failure(
                    f"the layer cache holds {escape_display(str(self.path / name))}, which "
                    f"bundler cannot use ({err.strerror or err}); remove it, or pull with "
                    "--no-cache",
                    err,
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    self.remove(name)
                elif _same_file(st, self._stat(name)):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            # the name was renamed (whole) or removed (failed) while we waited: look again
            os.close(fd)

    def commit(self, digest: str, fd: int) -> None:
        """Name the checked partial download of ``digest`` (open as ``fd``) as the whole blob.
        Not fsynced: every read checks the digest (see the module's text)."""
        name = _hex(digest)
        os.rename(name + PARTIAL, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        _touch(fd)

    def keep(
        self, digest: str, size: int, src_fd: int, offset: int, length: int, *, padded: bool = False
    ) -> None:
        """Keep the first ``length`` bytes of blob ``digest`` (``size`` bytes), which a dropped
        pull wrote at ``offset`` of ``src_fd`` rather than here, as its partial download, for the
        next pull to resume; nothing when the cache already holds as much. ``padded``: the
        blob's bytes after ``length`` are zeros (a layer whose end-of-archive blocks the archive
        cut); when they prove to be, by the blob's digest, the blob is kept whole, else the
        bytes given stay a partial download. Nothing here is trusted more than a download:
        every use hashes the bytes again (the module's text)."""
        if length <= 0 or self.present(digest, size) >= length:
            return
        fd = self.claim(digest)
        try:
            if os.fstat(fd).st_size >= length:
                return  # another pull kept as much meanwhile
            os.ftruncate(fd, 0)
            append_range(src_fd, offset, length, fd)
            if padded and length < size:
                os.ftruncate(fd, size)
            if os.fstat(fd).st_size < size:
                return
            if f"sha256:{_hash_of(fd, size).hexdigest()}" == digest:
                self.commit(digest, fd)
            elif length < size:
                os.ftruncate(fd, length)  # the tail was not zeros: the bytes given stay
            else:
                self.remove(_hex(digest) + PARTIAL)  # not the blob: nothing of it is kept
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        """Remove the file ``name`` of the cache, if there."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def _stat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    # ------------------------------------------------------------------ the bound

    def trim(self, max_bytes: int, *, dry_run: bool = False) -> CachePruneReport:
        """Remove the least recently used files until the cache holds at most ``max_bytes``
        (``dry_run``: only say which); a partial download another pull holds is left. Names
        bundler does not write are never touched."""
        report = CachePruneReport(str(self.path), max_bytes, dry_run=dry_run)
        files: list[tuple[float, str, int]] = []
        for name in os.listdir(self.fd):
            if not _HEX.fullmatch(name.removesuffix(PARTIAL)):
                continue
            st = self._stat(name)
            if st is not None and stat.S_ISREG(st.st_mode):
                files.append((st.st_mtime, name, st.st_size))
        files.sort()
        total = sum(size for _when, _name, size in files)
        for _when, name, size in files:
            if total <= max_bytes:
                break
            if name.endswith(PARTIAL) and self._held(name):
                continue
            if not dry_run:
                self.remove(name)
            total -= size
            hex_ = name.removesuffix(PARTIAL)
            report.removed.append(Removed(f"sha256:{hex_}", size, name.endswith(PARTIAL)))
        report.kept_files = len(files) - len(report.removed)
        report.kept_bytes = total
        return report

    def _held(self, name: str) -> bool:
        """Whether a pull holds the partial download ``name`` (it is writing it)."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError:
            return False
        try:
            return locked_by_another(fd)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ reading

    @contextlib.contextmanager
    def blob(
        self,
        session: Session,
        digest: str,
        size: int,
        progress: Callable[[int], None] | None,
        *,
        trust: bool = True,
    ) -> Iterator[CachedBlob]:
        """Blob ``digest`` of ``size`` bytes through the cache, for the block: the whole blob
        the cache holds, else what a partial download holds followed by the rest from the
        registry (each chunk appended as it arrives). Read it to its end, which checks it.
        ``trust=False`` uses nothing the cache holds (the second try after a
        :class:`StaleCopy`)."""
        fd = self.entry(digest, size) if trust else None
        if fd is not None:
            try:
                with contextlib.closing(CachedBlob(self, digest, size, fd, progress)) as blob:
                    yield blob
            finally:
                os.close(fd)
            return
        fd = self.claim(digest)
        try:
            again = self.entry(digest, size) if trust else None
            if again is not None:
                # another pull finished it while we waited for its lock
                os.close(fd)
                fd = again
                with contextlib.closing(CachedBlob(self, digest, size, fd, progress)) as blob:
                    yield blob
                return
            with self._download(session, digest, size, fd, progress, trust) as blob:
                yield blob
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _download(
        self,
        session: Session,
        digest: str,
        size: int,
        fd: int,
        progress: Callable[[int], None] | None,
        trust: bool,
    ) -> Iterator[CachedBlob]:
        """The partial download ``fd`` (locked), completed from the registry. Bytes that
        prove not to be the blob's, or a blob the registry refuses, leave nothing here; bytes
        received before the connection failed stay, for the next pull to resume."""
        held = os.fstat(fd).st_size
        if not trust or held >= size:
            os.ftruncate(fd, 0)
            held = 0
        resume = (held, _hash_of(fd, held)) if held else None
        blob: CachedBlob | None = None
        try:
            with session.open_blob(digest, size, progress, resume=resume) as remote:
                if remote.start != held:
                    # a mirror's whole blob, or a registry that ignores Range: from the start
                    os.ftruncate(fd, 0)
                    held = 0
                blob = CachedBlob(self, digest, size, fd, progress, held=held, remote=remote)
                yield blob
        except (InvalidInput, StaleCopy):
            if blob is not None and blob.checked:
                raise  # the blob is the digest's: what refused it is its content
            # bytes that are not the blob's: none of them may be used again
            self.remove(_hex(digest) + PARTIAL)
            if held and blob is not None:
                raise StaleCopy from None
            raise
        except BaseException:
            if (blob is None or not blob.checked) and os.fstat(fd).st_size == 0:
                self.remove(_hex(digest) + PARTIAL)  # nothing arrived: nothing to resume
            raise


class CachedBlob:
    """A blob read through the cache, as a :class:`BlobStream` is read: the bytes the cache
    holds (a whole blob, hashed here; or a partial download, hashed before its rest was asked
    for), then the rest from the registry, each chunk appended to the partial download as it
    arrives. The read that finds the end checks the sha256: a cached blob that fails is
    removed and :class:`StaleCopy` raised; a download that passes is named as the whole blob.
    ``fd`` is the file holding the blob, to read back once it is checked."""

    def __init__(
        self,
        cache: BlobCache,
        digest: str,
        size: int,
        fd: int,
        progress: Callable[[int], None] | None,
        *,
        held: int | None = None,
        remote: BlobStream | None = None,
    ) -> None:
        self.cache = cache
        self.digest = digest
        self.size = size
        self.fd = fd
        self._progress = progress
        self._remote = remote
        self._local = size if held is None else held
        self._hash = Sha256(size) if remote is None else None
        self._at = 0
        self.checked = False

    def read(self, limit: int) -> bytes:
        """Up to ``limit`` bytes (``limit`` > 0), or ``b""`` at the end once it is checked."""
        if self._at < self._local:
            chunk = os.pread(self.fd, min(limit, self._local - self._at), self._at)
            if not chunk:
                # the file shrank since it was checked: not the bytes that were there
                raise self._stale()
            if self._hash is not None:
                self._hash.update(chunk)
            self._at += len(chunk)
            if self._progress is not None:
                self._progress(len(chunk))
            return chunk
        if self._remote is None:
            self._check()
            return b""
        chunk = self._remote.read(limit)
        if not chunk:
            if not self.checked:
                self.cache.commit(self.digest, self.fd)
                self.checked = True
            return b""
        write_all_at(self.fd, chunk, self._at)
        self._at += len(chunk)
        return chunk

    def _check(self) -> None:
        if self.checked:
            return
        assert self._hash is not None
        if f"sha256:{self._hash.hexdigest()}" != self.digest:
            raise self._stale()
        self.checked = True

    def _stale(self) -> StaleCopy:
        self.cache.remove(_hex(self.digest))
        return StaleCopy()

    def close(self) -> None:
        """Stop the hashing thread, if any."""
        if self._hash is not None:
            self._hash.close()


def retried(attempt: Callable[[bool], _R]) -> _R:
    """``attempt(True)``, trusting what the cache holds; when that proves not to be the blob's
    (:class:`StaleCopy`), ``attempt(False)``, which downloads the blob whole. Each attempt
    starts afresh: what one made of the bytes it read is the caller's to undo first."""
    try:
        return attempt(True)
    except StaleCopy:
        return attempt(False)


def read_through(
    cache: BlobCache,
    session: Session,
    digest: str,
    size: int,
    progress: Callable[[int], None] | None,
    use: Callable[[CachedBlob], _R],
) -> _R:
    """``use(blob)`` for blob ``digest`` read through the cache (:meth:`BlobCache.blob`),
    :func:`retried`. ``use`` must read the blob to its end before it makes anything of its
    bytes."""

    def attempt(trust: bool) -> _R:
        with cache.blob(session, digest, size, progress, trust=trust) as blob:
            return use(blob)

    return retried(attempt)


def prune(
    environ: Mapping[str, str], max_bytes: int | None = None, *, dry_run: bool = False
) -> CachePruneReport:
    """``bundle cache --prune``: remove the least recently used cached blobs until the cache
    holds at most ``max_bytes`` (default :func:`max_size`); what was removed, and what is kept.
    ``dry_run`` (``bundle cache``) removes nothing. A cache that does not exist yet is empty."""
    bound = max_size(environ) if max_bytes is None else max_bytes
    path = cache_folder()
    try:
        fd = open_dir(path, follow=True)
    except FileNotFoundError:
        return CachePruneReport(str(path), bound, dry_run=dry_run)
    except OSError as err:
        raise os_failure(
            f"cannot open the layer cache {escape_display(str(path))} ({err.strerror or err})",
            err,
            path=str(path),
        ) from None
    with BlobCache(path, fd) as cache:
        return cache.trim(bound, dry_run=dry_run)


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def _touch(fd: int) -> None:
    """Mark a file used now (its modification time: the cache's order of use)."""
    with contextlib.suppress(OSError):
        os.utime(fd)


def _same_file(st: os.stat_result, other: os.stat_result | None) -> bool:
    return other is not None and (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)


def _hash_of(fd: int, length: int) -> Any:
    """The sha256 object of the first ``length`` bytes of ``fd`` (to resume the blob)."""
    digest = hashlib.sha256()
    at = 0
    while at < length:
        chunk = os.pread(fd, min(CHUNK, length - at), at)
        if not chunk:
            break
        digest.update(chunk)
        at += len(chunk)
    return digest


@contextlib.contextmanager
def layer_cache(session: Session, use: bool) -> Iterator[BlobCache | None]:
    """The layer cache for a pull through ``session``, trimmed to its bound (:func:`max_size`)
    when the block ends, however it ends. None when ``use`` is false (``--no-cache``), or when
    the cache folder cannot be made or opened: then the pull goes on without it, and a note
    in ``session.notes`` says so."""
    if not use:
        yield None
        return
    bound = max_size(session.auth.environ)
    try:
        cache = BlobCache.open()
    except OSError as err:
        session.notes.append(
            f"the layer cache {escape_display(str(cache_folder()))} cannot be used "
            f"({escape_display(err.strerror or str(err))}); every layer was downloaded"
        )
        yield None
        return
    try:
        yield cache
    finally:
        with contextlib.suppress(OSError):
            cache.trim(bound)
        cache.close()
