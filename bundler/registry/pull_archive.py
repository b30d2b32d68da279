"""``bundle pull REF FILE.tar``: the artifact's layers written straight into the bundle archive.

A layer bundler pushed is already a run of the archive's members (:mod:`bundler.bundle.
archive_write`'s headers and padding, in archive order), and the layers follow one another in
the archive as its parts do: the ``metadata`` layer's root files first, then each part by name.
So each blob is streamed into the staging file where its members go and, chunk by chunk as it
arrives, read by the hostile-archive reader in its listing mode (:func:`bundler.bundle.
archive_read.list_tar`: every rule, no file written, each member's place and XXH3-128 recorded),
while its sha256 is taken beside it (:class:`bundler.registry.streams.BlobStream`). Listing bytes
not yet checked is safe because it only reads them; the blob's end is read, and its digest
checked, before anything is made of the listing, and a listing that refuses the blob first
reads it to its end, so that bytes which are not the blob's are reported as that. When its
members are exactly the archive's, the layer's end-of-archive blocks are cut and the next
layer follows; otherwise (a layer another tool wrote, or members out of order) the layer is
moved aside into an unnamed file and its members are written anew from there
(:func:`bundler.bundle.archive_write.write_listed`). The bytes are the ones ``bundle pack``
gives of the same bundle either way.

Only the parts whose files verify reads for their content are unpacked, into a private scratch
folder: the metadata (manifest, checksums, ``config.toml``) and the format 2 memory store. The
workspace and the skills are judged by the same walk as a folder's, from their listing
(:func:`bundler.bundle.verify.verify_bundle`'s ``listed``). Nothing is published unless the
whole bundle verifies; then the staging file is flushed and swapped in like any export
(:mod:`bundler.bundle.publish`).

The layer cache (:mod:`bundler.registry.cache`) is read, and written only to resume: a layer
it holds whole is read from it, one it holds a dropped download of is resumed through it (the
rest appended there), and one it holds nothing of is written into the archive alone. The
archive holds the layers, and a second copy of a workspace on the user's disk is not free:
writing each blob into the cache as well doubled what the disk took during the pull (with the
cache on the same disk, 1.95 s against 1.73 s; on tmpfs, 1.74 s). Only when the connection is
lost is what arrived straight into the archive kept there, before the staging file is removed:
the first bytes of the blob being received as its partial download, and each blob received
before it whole (:meth:`_Puller._keep`), so the rerun asks only for the rest. The config blob,
a few KiB, goes through the cache as in every pull.

Durability: a long layer is written past the page cache (``O_DIRECT``, :mod:`bundler.fs.
direct`), on a thread of its own, so the disk takes its bytes as they arrive and the processor
copies none of them into cache pages; a short one is written through the page cache, with its
writeback started as it is written (``sync_file_range``). Either way the one ``fsync`` before
the swap is still what makes the archive durable, and nothing else is claimed of it. What a
dropped pull keeps in the cache is not synced either, as nothing there is (every use hashes
it again).
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, cast

from bundler.bundle.archive import looks_like_archive
from bundler.bundle.archive_listing import ListedMember
from bundler.bundle.archive_read import Digests
from bundler.bundle.archive_write import append_range, archive_form_end, write_end, write_listed
from bundler.bundle.manifest import MANIFEST_NAME, checksum_sort_text
from bundler.bundle.publish import Staging, admit, stage_build_publish
from bundler.bundle.recover import clear_abandoned_or_warn
from bundler.bundle.verify import verify_bundle
from bundler.errors import BundlerError, NotABundle, RegistryUnreachable, os_failure, withholding
from bundler.fs.direct import WORTHWHILE, SequentialWriter
from bundler.fs.durable import start_writeback, write_all
from bundler.fs.scratch import temp_root
from bundler.registry import artifact as art
from bundler.registry.cache import BlobCache, layer_cache, retried
from bundler.registry.distribution import Session
from bundler.registry.pull import (
    PullReport,
    check_space,
    fetch_config,
    fetch_manifest,
    first_error,
    list_part,
    private_bundle_folder,
    read_small,
    refuse_listed_taken,
    unpack_layer,
)
from bundler.registry.reference import Reference
from bundler.registry.transport import Options
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase

UNPACKED = frozenset({art.METADATA, art.SEALED, "memory"})
"""The parts unpacked for verify, which reads their files for their content."""

WRITEBACK_STEP = 32 << 20
"""Bytes written between two writeback starts: large enough to be few calls, small enough that
the disk starts early."""


def pull_archive(
    ref: Reference,
    dest: Path,
    options: Options,
    *,
    force: bool = False,
    progress: Progress | None = None,
    environ: dict[str, str] | None = None,
    cache: bool = True,
) -> PullReport:
    """Pull ``ref`` into the bundle archive ``dest`` (created, or an archive replaced with
    ``force``), verified before it is published; each blob read from the layer cache when it
    holds it, unless ``cache`` is false, and written there only as the module's text says."""
    cleared = clear_abandoned_or_warn(dest)
    admission = admit(dest, force=force, protected=[], archive_check=looks_like_archive, label="")
    report = PullReport(str(ref), "", "")
    with Session(ref, options, environ=environ) as session, withholding(session.auth.scrub):

        def build(staging: Staging) -> None:
            with (
                private_bundle_folder("to pull into") as (folder, folder_fd),
                layer_cache(session, cache) as blobs,
            ):
                _Puller(session, staging.fd, folder, folder_fd, progress, report, blobs).run()

        try:
            with admission:
                outcome = stage_build_publish(admission, build)
        except OSError as err:
            raise os_failure(
                f"pulling {escape_display(str(ref))} failed ({err.strerror or err}); nothing "
                "was published",
                err,
            ) from None
    report.bundle = admission.dest_path
    report.warnings = [*cleared, *session.notes, *outcome.warnings]
    return report


class _Puller:
    """One pull into the staging file ``out_fd``: the layers, the verification, the end."""

    def __init__(
        self,
        session: Session,
        out_fd: int,
        folder: Path,
        folder_fd: int,
        progress: Progress | None,
        report: PullReport,
        cache: BlobCache | None,
    ) -> None:
        self.session = session
        self.cache = cache
        self.out_fd = out_fd
        self.folder = folder
        self.folder_fd = folder_fd
        self.progress = progress
        self.report = report
        self.digests: Digests = {}
        self.listed: list[ListedMember] = []
        self.end = 0  # where the members written so far end in the staging file
        self.position = 0  # where the download writes next
        self.receiving: tuple[art.Descriptor, int] | None = None  # (layer, start) of _fetch
        self.received = 0  # bytes of the blob being received written so far
        self.kicked = 0  # how far writeback has been started
        # the layers downloaded straight into the archive that it still holds as they came:
        # (layer, where it starts, how many of its first bytes are there), kept in the layer
        # cache should the pull be dropped (:meth:`_keep`)
        self.arrived: list[tuple[art.Descriptor, int, int]] = []

    def run(self) -> None:
        session = self.session
        artifact, self.report.digest = fetch_manifest(session)
        # the layers go into the archive one after the other; the parts unpacked for verify
        # and a layer written anew go to the temporary folder, not here
        # the cache is written only to finish a partial download it holds (see _layer)
        resumed = [layer for layer in artifact.layers if self._cached(layer)]
        check_space(self.out_fd, artifact, unpacked=False, cache=self.cache, fetched=resumed)
        config = fetch_config(session, artifact, self.cache)
        layers = sorted(artifact.layers, key=_archive_order)
        total = sum(layer.size for layer in layers)
        with phase(self.progress, "downloading", len(layers), total):
            try:
                for index, layer in enumerate(layers):
                    self._layer(index, layer)
            except RegistryUnreachable:
                self._keep()  # before the staging file goes, with the error
                raise
        refuse_listed_taken(session, self.folder_fd, [x for x in layers if x.title not in UNPACKED])
        if read_small(self.folder_fd, MANIFEST_NAME, len(config) + 1) != config:
            raise NotABundle(
                f"registry {session.shown}: the artifact's config is not the bundle's "
                f"{MANIFEST_NAME}; refused"
            )
        os.lseek(self.out_fd, self.end, os.SEEK_SET)
        with os.fdopen(os.dup(self.out_fd), "wb") as out:
            write_end(cast(BinaryIO, out), self.end)
        verified = verify_bundle(
            self.folder, progress=self.progress, known_digests=self.digests, listed=self.listed
        )
        if not verified.ok:
            raise first_error(verified)
        self.report.root_agent = str((verified.manifest or {}).get("root_agent", ""))

    def _layer(self, index: int, layer: art.Descriptor) -> None:
        """Download ``layer`` where its members go, listing it as it arrives, and leave the
        staging file ending with its members in archive form."""
        start = self.end
        straight = self.cache is not None and not self._cached(layer)
        if straight:
            members = self._fetch(start, layer)
        else:
            members = retried(functools.partial(self._receive, start, layer, self.cache))
        if layer.title in UNPACKED:
            unpack_layer(
                self.out_fd,
                start,
                members,
                self.folder_fd,
                self.folder_fd,
                index,
                layer,
                self.session,
                None,
            )
        else:
            self.listed += members
        ordered = sorted(members, key=lambda member: checksum_sort_text(member.name))
        end = archive_form_end(ordered)
        if end is None:
            end = self._rewrite(start, layer.size, ordered)
        elif straight:
            self.arrived.append((layer, start, end))
        self.end = start + end
        os.ftruncate(self.out_fd, self.end)

    def _cached(self, layer: art.Descriptor) -> bool:
        """Whether the layer cache holds any of ``layer``'s blob: a whole blob to read, or a
        dropped download's bytes to resume."""
        return self.cache is not None and self.cache.present(layer.digest, layer.size) > 0

    def _receive(
        self, start: int, layer: art.Descriptor, cache: BlobCache | None, trust: bool
    ) -> list[ListedMember]:
        """Write the blob of ``layer`` at ``start`` as it arrives (through the layer ``cache``
        when given, ``trust`` as :func:`bundler.registry.cache.retried` gives it: a second try
        writes from ``start`` again), listing it: its members."""
        if layer.size >= WORTHWHILE:
            with SequentialWriter(self.out_fd, start) as sink:
                try:
                    members = list_part(
                        self.session, layer, sink.write, self.progress, self.digests, cache, trust
                    )
                except RegistryUnreachable:
                    # what arrived is written out, to be kept (_fetch); if it cannot be, none
                    with contextlib.suppress(OSError):
                        sink.finish()
                        self.received = sink.offset - start
                    raise
                sink.finish()
            return members
        os.lseek(self.out_fd, start, os.SEEK_SET)
        self.position = start
        self.kicked = min(self.kicked, start)
        try:
            return list_part(
                self.session, layer, self.write, self.progress, self.digests, cache, trust
            )
        except RegistryUnreachable:
            self.received = self.position - start
            raise

    def _fetch(self, start: int, layer: art.Descriptor) -> list[ListedMember]:
        """:meth:`_receive` of a blob the layer cache holds none of, from the registry into
        the archive alone (a second copy of a workspace on the user's disk is not free: it
        doubled what the disk writes during the pull). What arrived is kept in the cache only
        when the connection is lost (:meth:`_keep`)."""
        self.receiving, self.received = (layer, start), 0
        members = self._receive(start, layer, None, True)
        self.receiving = None
        return members

    def _keep(self) -> None:
        """Keep in the layer cache what a pull that lost its connection received straight
        into the archive, so that the next pull asks only for the rest: the first bytes of the
        blob being received, as its partial download, and each blob received before it, whole.
        Not needed for this pull, so a failure to keep them (a full disk, a cache that cannot
        be written) is passed over: the pull's own error is the one told."""
        if self.cache is None:
            return
        kept = [(layer, at, length, True) for layer, at, length in self.arrived]
        if self.receiving is not None:
            kept.append((*self.receiving, self.received, False))
        for layer, at, length, padded in kept:
            with contextlib.suppress(OSError, BundlerError):
                self.cache.keep(layer.digest, layer.size, self.out_fd, at, length, padded=padded)

    def _rewrite(self, start: int, size: int, members: list[ListedMember]) -> int:
        """Move the layer at ``start`` aside and write its ``members`` anew in its place: the
        bytes written."""
        with tempfile.TemporaryFile(prefix="bundler-pull-", dir=temp_root()) as aside:
            append_range(self.out_fd, start, size, aside.fileno())
            os.ftruncate(self.out_fd, start)
            os.lseek(self.out_fd, start, os.SEEK_SET)
            with os.fdopen(os.dup(self.out_fd), "wb", buffering=1 << 20) as out:
                return write_listed(aside.fileno(), members, out)

    def write(self, data: bytes) -> int:
        """The download's sink: append at the staging file's position, starting writeback of
        every :data:`WRITEBACK_STEP` bytes."""
        write_all(self.out_fd, data)
        self.position += len(data)
        if self.position - self.kicked >= WRITEBACK_STEP:
            start_writeback(self.out_fd, self.kicked, self.position - self.kicked)
            self.kicked = self.position
        return len(data)


def _archive_order(layer: art.Descriptor) -> tuple[bool, bool, bytes]:
    # the root files first, the sealed file after them, then each part's folder by the bytes
    # of its name (bundler.bundle.archive_write.archive_order)
    return layer.title != art.METADATA, layer.title != art.SEALED, layer.title.encode()
