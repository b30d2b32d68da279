"""``bundle pull REF DIR``: an artifact from a registry into a bundle folder, checked twice.

Each blob is streamed into the staging folder (through the layer cache, :mod:`bundler.registry.
cache`, into the cache, or read back from it), never more than its descriptor's size, and read
as it arrives by the hostile-archive reader's listing (:func:`list_arriving`: every rule of
:func:`bundler.bundle.archive_read.read_tar`, nothing written), so that judging a layer of many
members costs no time after its last byte. Its sha256 is checked before a byte of it is
unpacked: only then is each layer unpacked from the blob file by its listing (:func:`bundler.
bundle.archive_replay.replay_tar`, one thread per processor) into a folder of its own and moved
into place with ``RENAME_NOREPLACE``: a layer may hold only its own part (the root files for
``metadata``, its folder for the others), so no layer can write over another's file. Then the
bundle's own checksums and rules are verified (:func:`bundler.bundle.verify.verify_bundle`) and
only then is the folder published by the staging + swap of :mod:`bundler.bundle.publish`.

The blob file (without the cache) is scratch: it is removed once unpacked and never synced
(only the bundle is made durable, once, by the publication). The unpacker records each file's
XXH3-128 from the bytes it writes, and the verification compares those with ``checksums.xxh3``
instead of reading every file of the private staging folder back (``known_digests``); every
other check of the bundle is unchanged. Each layer's listing, from its download to its
unpacking, and those digests, until the verification has read them, are kept on disk
(:mod:`bundler.bundle.archive_spill`: unnamed files in the private blob folder, read back in
the order each step needs), so a pull holds nothing per file and its memory does not grow with
the bundle (06 P4).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from bundler.bundle.archive import SCRATCH_PREFIX
from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.archive_read import ArchiveLimits, Digests, list_tar
from bundler.bundle.archive_replay import replay_members
from bundler.bundle.archive_spill import MemberFile, SpilledDigests
from bundler.bundle.manifest import MANIFEST_NAME
from bundler.bundle.publish import Staging, admit, lstat_at, stage_build_publish
from bundler.bundle.sealed import SEALED_NAME
from bundler.bundle.verify import verify_bundle
from bundler.errors import (
    Hostile,
    InvalidInput,
    NoSpace,
    NotABundle,
    Tampered,
    os_failure,
    withholding,
)
from bundler.fs.durable import RENAME_NOREPLACE, open_dir, renameat2, write_all
from bundler.fs.safefs import rmtree_at
from bundler.fs.scratch import clear_dead_scratch, scratch_folder, temp_root
from bundler.registry import artifact as art
from bundler.registry.cache import BlobCache, CachedBlob, layer_cache, read_through, retried
from bundler.registry.distribution import Session
from bundler.registry.reference import Reference
from bundler.registry.streams import BlobStream
from bundler.registry.transport import CHUNK, Options
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase
from bundler.rules.units import human_size

BLOBS = ".bundler-blobs"
_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class PullReport:
    """What a pull fetched: the artifact's digest and where the bundle now is."""

    reference: str
    digest: str
    bundle: str
    root_agent: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def pinned(self) -> str:
        """The reference pinned to the artifact's digest: what to pull by (a tag can move)."""
        from bundler.registry.reference import parse_reference

        return str(parse_reference(self.reference).with_digest(self.digest))

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` payload."""
        return {
            "reference": self.reference,
            "digest": self.digest,
            "bundle": self.bundle,
            "root_agent": self.root_agent,
            "warnings": self.warnings,
        }


def fetch_manifest(session: Session) -> tuple[art.Artifact, str]:
    """The artifact's manifest, checked, and its digest (which a digest reference must match)."""
    data, media = session.get_manifest(session.ref.target)
    digest = art.manifest_digest(data)
    if session.ref.digest is not None and digest != session.ref.digest:
        raise Tampered(
            f"registry {session.shown} served a manifest whose digest is not "
            f"{session.ref.digest[:19]}…; refused"
        )
    return art.parse_manifest(data, media), digest


def fetch_config(session: Session, artifact: art.Artifact, cache: BlobCache | None = None) -> bytes:
    """The config blob (the bundle's ``zeroclaw-agent.toml``), checked against its digest;
    through the layer ``cache`` when given."""
    config = artifact.config
    if cache is None:
        sink = io.BytesIO()
        session.download_blob(config.digest, config.size, sink)
        return sink.getvalue()

    def whole(blob: CachedBlob) -> bytes:
        return b"".join(iter(lambda: blob.read(CHUNK), b""))

    return read_through(cache, session, config.digest, config.size, None, whole)


def check_space(
    dir_fd: int,
    artifact: art.Artifact,
    *,
    unpacked: bool,
    cache: BlobCache | None = None,
    fetched: list[art.Descriptor] | None = None,
) -> None:
    """Refuse before a byte is fetched when the filesystems written cannot hold what the pull
    writes: at ``dir_fd`` each of ``artifact``'s layers once (an archive's members, or a
    folder's files); for a folder (``unpacked``) pulled without the ``cache``, also the blob
    of the layer being unpacked beside its files, so the largest twice. With the cache, the
    bytes of the ``fetched`` layers (default: the artifact's) that it does not hold yet, on
    its filesystem; one sum when the two are the same filesystem."""
    sizes = [layer.size for layer in artifact.layers]
    here = sum(sizes) + (max(sizes, default=0) if unpacked and cache is None else 0)
    there = 0
    if cache is not None:
        layers = artifact.layers if fetched is None else fetched
        there = sum(layer.size - cache.present(layer.digest, layer.size) for layer in layers)
    st = os.fstatvfs(dir_fd)
    same = cache is not None and os.fstat(cache.fd).st_dev == os.fstat(dir_fd).st_dev
    needed = here + there if same else here
    if needed > st.f_bavail * st.f_frsize:
        raise NoSpace(
            f"the artifact needs about {human_size(needed)} and the destination's filesystem "
            f"has {human_size(st.f_bavail * st.f_frsize)} free; free some space and try again"
            + (" (the layer cache shares it: 'bundler bundle cache --prune' or --no-cache)")
            * (same and there > 0)
        )
    if cache is not None and not same:
        free = os.fstatvfs(cache.fd)
        if there > free.f_bavail * free.f_frsize:
            raise NoSpace(
                f"the layers to download need about {human_size(there)} in the layer cache "
                f"{escape_display(str(cache.path))}, whose filesystem has "
                f"{human_size(free.f_bavail * free.f_frsize)} free; prune it ('bundler bundle "
                "cache --prune --max-size SIZE') or pull with --no-cache",
                path=str(cache.path),
            )


def pull_into(
    session: Session,
    staging_fd: int,
    *,
    progress: Progress | None = None,
    list_only: frozenset[str] = frozenset(),
    listed: list[ListedMember] | None = None,
    digests: SpilledDigests | None = None,
    cache: BlobCache | None = None,
) -> tuple[art.Artifact, str]:
    """Fetch the artifact ``session.ref`` names into the empty folder ``staging_fd``, each
    blob through the layer ``cache`` when given (:mod:`bundler.registry.cache`).

    On return the folder holds the bundle (not yet verified as a bundle); on an exception it
    holds some of it and the caller removes it. ``digests``, when given, receives the size and
    XXH3-128 of every file as it was unpacked (for ``verify_bundle``'s ``known_digests``),
    kept on disk with each layer's listing (:mod:`bundler.bundle.archive_spill`): nothing per
    file of an unpacked layer stays in memory.

    Layers titled in ``list_only`` are downloaded and judged by every rule as they arrive, but
    nothing of them is written: their members go to ``listed`` (given with ``list_only``) and
    their digests to ``digests.listed``, which ``verify_bundle`` judges as if the folder held
    them (its ``listed``), so the verdict is the one a pulled folder gets.
    """
    artifact, digest = fetch_manifest(session)
    kept = dataclasses.replace(
        artifact, layers=[x for x in artifact.layers if x.title not in list_only]
    )
    check_space(staging_fd, kept, unpacked=True, cache=cache, fetched=artifact.layers)
    config = fetch_config(session, artifact, cache)
    os.mkdir(BLOBS, 0o700, dir_fd=staging_fd)
    blobs_fd = os.open(BLOBS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=staging_fd)
    total = sum(layer.size for layer in artifact.layers)
    try:
        with phase(progress, "downloading", len(artifact.layers), total):
            for index, layer in enumerate(artifact.layers):
                if layer.title in list_only:
                    assert listed is not None, "list_only needs a list for the members"
                    known = None if digests is None else digests.listed
                    listed += retried(
                        functools.partial(
                            list_part, session, layer, _discard, progress, known, cache
                        )
                    )
                else:
                    _fetch_layer(
                        session, staging_fd, blobs_fd, index, layer, progress, digests, cache
                    )
    finally:
        os.close(blobs_fd)
    os.rmdir(BLOBS, dir_fd=staging_fd)
    refuse_listed_taken(session, staging_fd, [x for x in artifact.layers if x.title in list_only])
    if read_small(staging_fd, MANIFEST_NAME, len(config) + 1) != config:
        raise NotABundle(
            f"registry {session.shown}: the artifact's config is not the bundle's "
            f"{MANIFEST_NAME}; refused"
        )
    return artifact, digest


def _fetch_layer(
    session: Session,
    staging_fd: int,
    blobs_fd: int,
    index: int,
    layer: art.Descriptor,
    progress: Progress | None,
    digests: SpilledDigests | None,
    cache: BlobCache | None,
) -> None:
    if cache is not None:
        # unpacked from the cached blob once it is checked: nothing of it is copied here

        def use(blob: CachedBlob) -> None:
            # each reading lists into a file of its own, and ``digests`` takes it only once
            # the files are made, after the check: a stale copy's listing goes with its file
            with MemberFile(blobs_fd) as members:
                _list_blob(blob, layer, _discard, members, None)
                unpack_layer(
                    blob.fd, 0, members, staging_fd, blobs_fd, index, layer, session, digests
                )

        read_through(cache, session, layer.digest, layer.size, _chunks(progress), use)
        if progress is not None:
            progress(1, 0)
        return
    blob = f"{index}"
    fd = os.open(blob, _FILE_FLAGS, 0o600, dir_fd=blobs_fd)
    try:
        with MemberFile(blobs_fd) as members:
            write = functools.partial(write_all, fd)
            list_arriving(session, layer, write, members, progress)
            unpack_layer(fd, 0, members, staging_fd, blobs_fd, index, layer, session, digests)
    finally:
        os.close(fd)
    os.unlink(blob, dir_fd=blobs_fd)


def list_arriving(
    session: Session,
    layer: art.Descriptor,
    write: Callable[[bytes], object],
    members: MemberFile | list[ListedMember],
    progress: Progress | None,
    digests: Digests | None = None,
    cache: BlobCache | None = None,
    trust: bool = True,
) -> None:
    """Download the blob of ``layer`` (through the layer ``cache`` when given: ``trust`` as
    :meth:`bundler.registry.cache.BlobCache.blob` takes it, a :class:`bundler.registry.cache.
    StaleCopy` the caller's to retry, :func:`bundler.registry.cache.retried`, with a new
    ``members``), giving each chunk as it arrives to ``write`` (where the blob is kept) and then
    to the hostile-archive reader's listing (:func:`bundler.bundle.archive_read.list_tar`, which
    writes nothing), whose members are appended to ``members`` in archive order (and read again
    from there should the reader need them); on return the whole blob has arrived and its
    sha256 is the manifest's.

    Listing bytes not yet checked is safe because it only reads them; nothing is made of the
    listing before the blob's end is read and checked. A listing that refuses the blob first
    reads it to its end, so that bytes which are not the blob's are reported as that (the
    registry's fault), not as what they made of the tar. ``digests`` receives the listing's.

    A layer holds only its part (:func:`refuse_outside`, which its caller applies), so the
    reader's checksum gate judges only what may follow ``checksums.xxh3`` in its layer
    (:func:`_gated`) and holds only those lines.
    """
    chunks = _chunks(progress)
    if cache is not None:
        with cache.blob(session, layer.digest, layer.size, chunks, trust=trust) as cached:
            _list_blob(cached, layer, write, members, digests)
    else:
        with session.open_blob(layer.digest, layer.size, chunks) as blob:
            _list_blob(blob, layer, write, members, digests)
    if progress is not None:
        progress(1, 0)


def _chunks(progress: Progress | None) -> Callable[[int], None] | None:
    # a layer is one blob: its chunks are bytes done, the whole layer one "file"
    return None if progress is None else (lambda n: progress(0, n))


def _list_blob(
    blob: BlobStream | CachedBlob,
    layer: art.Descriptor,
    write: Callable[[bytes], object],
    members: MemberFile | list[ListedMember],
    digests: Digests | None,
) -> None:
    """:func:`list_arriving`'s listing of the open ``blob`` into ``members``, read to its end
    (which checks it). ``digests`` receives the listing's only once the blob proved to be the
    digest's: a cached copy that was not is read again from the registry, and what its listing
    found is none of the blob's (``members``, which the listing fills as it goes, is the
    caller's to drop: :func:`bundler.registry.cache.retried` starts each try with a new one)."""
    found: Digests | None = None if digests is None else {}
    arriving = _Arriving(blob, write)
    try:
        list_tar(
            cast(BinaryIO, arriving),
            ArchiveLimits(max_total_bytes=max(layer.size, 1)),
            name=f"layer {layer.title}",
            digests=found,
            record=members.append,
            recall=lambda: ((member.name, member.is_dir) for member in members),
            gated=functools.partial(_gated, layer.title),
        )
    except InvalidInput:
        arriving.drain()
        raise
    arriving.finish()
    if digests is not None and found is not None:
        digests.update(found)


def list_part(
    session: Session,
    layer: art.Descriptor,
    write: Callable[[bytes], object],
    progress: Progress | None,
    digests: Digests | None,
    cache: BlobCache | None = None,
    trust: bool = True,
) -> list[ListedMember]:
    """:func:`list_arriving` for a layer that is not unpacked: its members, each refused when
    it lies outside the layer's part (:func:`refuse_outside`), as unpacking would refuse it."""
    members: list[ListedMember] = []
    list_arriving(session, layer, write, members, progress, digests, cache, trust)
    for member in members:
        top = member.name.partition("/")[0]
        refuse_outside(session, layer.title, top, is_file=not member.is_dir and top == member.name)
    return members


def refuse_listed_taken(session: Session, folder_fd: int, layers: list[art.Descriptor]) -> None:
    """Refuse a layer that was listed, not unpacked, whose part's name a file of the metadata
    layer, unpacked into ``folder_fd``, already took: unpacked, the one would be written over
    the other."""
    for layer in layers:
        if lstat_at(folder_fd, layer.title) is not None:
            raise overwrite_refused(session, art.METADATA, layer.title)


def _discard(_data: bytes) -> None:
    """Where a listed layer's bytes go: nowhere, once listed and hashed."""


class _Arriving:
    """A blob as the listing reads it: each chunk, as it arrives, is first given to ``write``,
    then to the reader (which asks for large chunks and takes its pieces from them)."""

    def __init__(self, blob: BlobStream | CachedBlob, write: Callable[[bytes], object]) -> None:
        self._blob = blob
        self._write = write

    def read(self, size: int) -> bytes:
        """The next chunk of at most ``size`` bytes."""
        chunk = self._blob.read(size)
        if chunk:
            self._write(chunk)
        return chunk

    def finish(self) -> None:
        """Read to the blob's end, which checks it, writing what the listing did not read (it
        reads to the end itself, in chunks of its own size; this is for a reader that stopped
        early)."""
        while self.read(CHUNK):
            pass

    def drain(self) -> None:
        """Read the rest of the blob without keeping it: raises the blob's own error when its
        bytes are not the ones declared (:class:`bundler.registry.streams.BlobStream`)."""
        while self._blob.read(CHUNK):
            pass


def unpack_layer(
    blob_fd: int,
    base: int,
    members: MemberFile | list[ListedMember],
    staging_fd: int,
    work_fd: int,
    index: int,
    layer: art.Descriptor,
    session: Session,
    digests: SpilledDigests | None,
) -> None:
    """Unpack the checked blob of ``layer``, at ``base`` in the file ``blob_fd``, whose listing
    is ``members`` (:func:`list_arriving`), into a folder of its own in ``work_fd``, then move
    its part into the bundle folder ``staging_fd`` (:func:`_move_part`). ``digests`` (given
    with a listing kept on disk) receives the digests of the files made, kept beside it."""
    unpack = f".bundler-layer-{index}"
    os.mkdir(unpack, 0o700, dir_fd=work_fd)
    unpack_fd = os.open(unpack, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=work_fd)
    try:
        slots = None
        if digests is not None:
            assert isinstance(members, MemberFile), "digests are kept beside a listing on disk"
            slots = digests.record(members, work_fd)
        name = f"layer {layer.title}"
        replay_members(blob_fd, unpack_fd, members, base=base, name=name, slots=slots)
        _move_part(unpack_fd, staging_fd, layer.title, session)
    finally:
        os.close(unpack_fd)
    rmtree_at(work_fd, unpack)


def _gated(title: str, path: str) -> bool:
    """Whether the reader's checksum gate judges the file ``path`` of the layer ``title``:
    only the ``metadata`` layer may carry ``checksums.xxh3``, and only its own part, root
    files, may follow it there; a member outside its layer's part is refused by
    :func:`refuse_outside`, and every file by the bundle's verification."""
    return title == art.METADATA and "/" not in path


def refuse_outside(session: Session, title: str, top: str, *, is_file: bool) -> None:
    """A layer holds only its own part: regular files at the root for ``metadata`` (but the
    sealed ``secrets.age``), that one file for ``sealed``, for any other the folder it is named
    after. ``top`` is an entry at the root, ``is_file`` whether it is a regular file."""
    if title == art.METADATA:
        own = is_file and top != SEALED_NAME
    elif title == art.SEALED:
        own = is_file and top == SEALED_NAME
    else:
        own = top == title
    if not own:
        raise Hostile(
            f"registry {session.shown}: layer {escape_display(title)} holds "
            f"{escape_display(top)}, which is not its part; refused"
        )


def overwrite_refused(session: Session, title: str, name: str) -> InvalidInput:
    """The refusal of a layer whose part another layer already carries."""
    return Hostile(
        f"registry {session.shown}: layer {escape_display(title)} would overwrite "
        f"{escape_display(name)} of another layer; refused"
    )


def _move_part(unpack_fd: int, staging_fd: int, title: str, session: Session) -> None:
    """Move what a layer unpacked into the bundle, refusing anything outside its part."""
    names = sorted(os.listdir(unpack_fd))
    for name in names:
        st = os.stat(name, dir_fd=unpack_fd, follow_symlinks=False)
        refuse_outside(session, title, name, is_file=stat.S_ISREG(st.st_mode))
        try:
            renameat2(unpack_fd, name, staging_fd, name, RENAME_NOREPLACE)
        except FileExistsError:
            raise overwrite_refused(session, title, name) from None


def read_small(dir_fd: int, name: str, limit: int) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def first_error(report: Any) -> InvalidInput:
    first = report.errors[0]
    return Tampered(
        f"the pulled bundle does not verify: {first}; nothing was written", path=first.path
    )


def pull_bundle(
    ref: Reference,
    dest: Path,
    options: Options,
    *,
    force: bool = False,
    progress: Progress | None = None,
    environ: dict[str, str] | None = None,
    cache: bool = True,
) -> PullReport:
    """Pull ``ref`` into the bundle folder ``dest`` (created, or replaced with ``force``),
    through the layer cache unless ``cache`` is false."""
    session = Session(ref, options, environ=environ)
    report = PullReport(str(ref), "", "")
    digests = SpilledDigests()

    def build(staging: Staging) -> None:
        with layer_cache(session, cache) as blobs:
            _artifact, report.digest = pull_into(
                session, staging.fd, progress=progress, digests=digests, cache=blobs
            )
        folder = Path(staging.admission.parent_path) / staging.name
        # the flush (its disk) and the verification (the processor) overlap
        verified = staging.flush_during(lambda: verify_bundle(folder, known_digests=digests))
        if not verified.ok:
            raise first_error(verified)
        report.root_agent = str((verified.manifest or {}).get("root_agent", ""))

    try:
        with (
            withholding(session.auth.scrub),
            admit(dest, force=force, protected=[], label="") as admission,
        ):
            outcome = stage_build_publish(admission, build)
            report.bundle = admission.dest_path
            report.warnings = [*session.notes, *outcome.warnings]
            return report
    except OSError as err:
        raise os_failure(
            f"pulling {escape_display(str(ref))} failed ({err.strerror or err}); nothing was "
            "published",
            err,
        ) from None
    finally:
        digests.close()
        session.close()


@contextlib.contextmanager
def pulled(
    ref: Reference,
    options: Options,
    *,
    progress: Progress | None = None,
    environ: dict[str, str] | None = None,
    list_only: frozenset[str] = frozenset(),
    digests: SpilledDigests | None = None,
    listed: list[ListedMember] | None = None,
    cache: bool = True,
) -> Iterator[tuple[Path, str, Callable[[str], str]]]:
    """A private copy of the artifact's bundle for the duration of the block: (folder, digest,
    scrub). ``scrub`` withholds the credentials the registry was sent: what it served is its
    text, so whatever the caller shows of the copy goes through it.

    ``digests`` receives what :func:`pull_into` records (for a caller that verifies the copy).
    Every blob goes through the layer cache (the listed ones too) unless ``cache`` is false.

    For ``bundle verify|inspect REF`` and ``agents import REF``, which then read the folder as
    they read any bundle; ``list_only`` names layers judged as they arrive and not written,
    their members in ``listed`` (:func:`pull_into`): inspect keeps no copy of the workspace,
    the bulk of an agent, yet judges the same files a pulled folder's verify does. It lives
    in a locked scratch folder in ``$TMPDIR`` (the archive readers' kind, :mod:`bundler.fs.
    scratch`: removed on exit, and after a kill by the next run, ``recover`` and ``doctor``,
    which know the prefix).
    """
    with contextlib.ExitStack() as stack:
        folder, fd = stack.enter_context(private_bundle_folder("to pull into"))
        session = stack.enter_context(Session(ref, options, environ=environ))
        with withholding(session.auth.scrub):
            try:
                with layer_cache(session, cache) as blobs:
                    _artifact, digest = pull_into(
                        session,
                        fd,
                        progress=progress,
                        list_only=list_only,
                        listed=listed,
                        digests=digests,
                        cache=blobs,
                    )
            except OSError as err:
                raise os_failure(
                    f"pulling {escape_display(str(ref))} failed ({err.strerror or err})", err
                ) from None
        yield folder, digest, session.auth.scrub


@contextlib.contextmanager
def private_bundle_folder(purpose: str) -> Iterator[tuple[Path, int]]:
    """An empty folder ``bundle`` in a locked scratch folder in ``$TMPDIR`` (the archive
    readers' kind, :mod:`bundler.fs.scratch`): its path and descriptor, both gone on exit (and
    after a kill, with the next run, ``recover`` or ``doctor``). ``purpose`` ends the refusal
    when it cannot be made ("to pull into")."""
    where = temp_root()
    with contextlib.ExitStack() as stack:
        try:
            parent_fd = open_dir(where, follow=True)
            stack.callback(os.close, parent_fd)
            clear_dead_scratch(parent_fd, SCRATCH_PREFIX)
            name, scratch_fd = stack.enter_context(
                scratch_folder(parent_fd, SCRATCH_PREFIX, where=where)
            )
            os.mkdir("bundle", 0o700, dir_fd=scratch_fd)
            fd = os.open("bundle", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=scratch_fd)
            stack.callback(os.close, fd)
        except OSError as err:
            raise os_failure(
                f"cannot make a private folder in {escape_display(where)} {purpose} "
                f"({err.strerror or err}); set TMPDIR to a writable folder",
                err,
            ) from None
        yield Path(where) / name / "bundle", fd
