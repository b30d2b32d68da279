"""``bundle push DIR REF``: a bundle folder to a registry, blobs first, the manifest last.

The registry's own commit rule makes the push crash-safe: a tag names a manifest only once the
manifest is stored, and the registry refuses a manifest whose blobs it does not hold. So an
interrupted push leaves at most unreferenced blobs, and the tag still names the previous
artifact.

Nothing is sent before the bundle is verified (every rule of ``bundle verify``): pull refuses
what does not verify, so the registry must never hold it. The workspace, the bulk of a bundle,
is read once: its files are judged from the bytes archived, as each layer's tar is made, and
before the manifest (:func:`bundler.bundle.verify_report.confirm_read`).

How the layers travel depends on what the repository holds. Into a repository without tags
nothing can spare an upload, so each layer's tar is made once and streamed to the registry as it
is made, hashed on the way (a chunked PATCH, then the PUT naming the digest): the tar's cost and
the registry's overlap, and nothing is spooled. Otherwise the digests must be known before
asking the registry what it lacks (a HEAD per layer): each layer's tar is made once into sha256
only, and a layer the registry lacks is made again as it is sent, the body of a monolithic upload
whose length and digest are already known (the registry checks the digest, and so does the
sender before the body ends: a file changed between the two passes stores nothing). The second
pass reads the files back from the page cache while the registry takes them in, which measured
faster than keeping each tar in a temporary file, and needs no room in ``$TMPDIR``. Memory stays
flat in the bundle size either way.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

import xxhash

from bundler.bundle.archive_write import archive_order, bundle_entries, write_tar
from bundler.bundle.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, parse_manifest
from bundler.bundle.verify import verify_deferring_workspace
from bundler.bundle.verify_report import VerifyReport, confirm_read, unsound
from bundler.errors import (
    ChangedMeanwhile,
    DestinationExists,
    Interrupted,
    NotABundle,
    Refused,
    TooLarge,
    UsageError,
    os_failure,
    withholding,
)
from bundler.fs import safefs
from bundler.fs.durable import open_dir
from bundler.fs.interrupts import commit_reached
from bundler.registry import artifact as art
from bundler.registry.distribution import Session
from bundler.registry.reference import Reference
from bundler.registry.transport import Options
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase


@dataclass
class PushReport:
    """What a push did: the digest the tag now names and which layers were uploaded."""

    reference: str
    digest: str
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unchanged: bool = False

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
            "uploaded": self.uploaded,
            "skipped": self.skipped,
            "unchanged": self.unchanged,
        }


class _Digester:
    """A write-only sink that counts and hashes."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return len(data)


@dataclass(frozen=True)
class _Layer:
    title: str
    names: list[str]
    digest: str
    size: int


def _read_config(root_fd: int, shown: str) -> bytes:
    try:
        fd = os.open(MANIFEST_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except FileNotFoundError:
        raise NotABundle(
            f"{shown} has no {MANIFEST_NAME}: it is not a bundle", path=shown
        ) from None
    try:
        data = os.read(fd, MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_MANIFEST_BYTES:
        raise TooLarge(f"{shown}: {MANIFEST_NAME} is too large", path=shown)
    return data


def plan_layers(root_fd: int) -> list[_Layer]:
    """Every part's layer with its digest and size, the tars written into sha256 only."""
    parts = _parts(bundle_entries(root_fd))
    return [_hash_layer(root_fd, title, names) for title, names in parts]


def _parts(entries: list[tuple[str, bool]]) -> list[tuple[str, list[str]]]:
    """The layers' members, by title, from the bundle's (name, is a folder) entries."""
    folders = {name for name, is_dir in entries if is_dir and "/" not in name}
    return sorted(art.split_parts(archive_order(entries), folders).items())


def _hash_layer(
    root_fd: int,
    title: str,
    names: list[str],
    digests: dict[str, str] | None = None,
    progress: Progress | None = None,
) -> _Layer:
    """The layer of one part, its tar written into sha256 only (``digests`` as
    :func:`write_tar`'s)."""
    sink = _Digester()
    write_tar(root_fd, names, cast(BinaryIO, sink), progress, digests)
    return _Layer(title, names, f"sha256:{sink.hash.hexdigest()}", sink.size)


def push_bundle(
    source: Path,
    ref: Reference,
    options: Options,
    *,
    force: bool = False,
    progress: Progress | None = None,
    environ: dict[str, str] | None = None,
    named: str | None = None,
) -> PushReport:
    """Push the bundle folder ``source`` to ``ref`` (a tag); returns the pushed digest.

    An existing tag naming another artifact is refused without ``force``; a tag that already
    names this very artifact is left as it is (``unchanged``). ``named`` is the bundle as the
    user gave it, for messages, when ``source`` is an archive's private unpacked copy.
    """
    if ref.digest is not None:
        raise UsageError(
            "push needs a tag (oci://HOST/REPO:TAG), not a digest: the registry computes the "
            "digest, and push prints it"
        )
    named = named or str(source)
    shown = escape_display(named)
    try:
        root_fd = open_dir(source, follow=False)
    except OSError as err:
        raise os_failure(f"cannot open the bundle folder {shown} ({err.strerror})", err) from None
    try:
        report = _verify(source, named, root_fd, progress)
        session = Session(ref, options, push=True, environ=environ)
        try:
            with withholding(session.auth.scrub):
                return _push(root_fd, shown, session, report, force=force, progress=progress)
        finally:
            session.close()
    finally:
        os.close(root_fd)


def _verify(source: Path, named: str, root_fd: int, progress: Progress | None) -> VerifyReport:
    """Every rule of ``bundle verify`` but the workspace's contents, before anything is sent:
    a registry is no place for a bundle that pull would refuse. The workspace is judged as it
    is archived (:func:`_confirm`), so it is read once."""
    report = verify_deferring_workspace(source, progress=progress, per_file=True)
    if not report.ok:
        raise unsound(report, named)
    if not safefs.same_object(os.fstat(root_fd), os.stat(source, follow_symlinks=False)):
        raise ChangedMeanwhile(
            f"{escape_display(named)} was replaced while it was verified; push it again"
        )
    report.path = Path(named)  # what later refusals name
    return report


def _confirm(report: VerifyReport, digests: dict[str, str]) -> None:
    """The files as archived against what was verified (the workspace against its checksums):
    before the manifest, so a file that does not match never becomes a tagged artifact."""
    confirm_read(report, digests)
    if not report.ok:
        raise unsound(report, str(report.path))


def _push(
    root_fd: int,
    shown: str,
    session: Session,
    verified: VerifyReport,
    *,
    force: bool,
    progress: Progress | None,
) -> PushReport:
    config_bytes = _read_config(root_fd, shown)
    if xxhash.xxh3_128(config_bytes).hexdigest() != verified.manifest_digest:
        # the config blob is the manifest: the one verified, not one written since
        raise ChangedMeanwhile(f"{shown}: {MANIFEST_NAME} changed while it was read; push it again")
    manifest = parse_manifest(config_bytes)
    # the entries verified, not a second walk: what is pushed is what was judged
    parts = _parts(verified.entries)
    if session.repository_is_empty():
        return _push_streamed(
            root_fd, session, manifest, config_bytes, parts, verified, force=force,
            progress=progress,
        )  # fmt: skip
    # the repository may hold some layers already: asking needs each layer's digest first
    digests: dict[str, str] = {}
    files = sum(len(names) for _title, names in parts)
    with phase(progress, "hashing", files, sum(verified.sizes.values())):
        layers = [_hash_layer(root_fd, title, names, digests, progress) for title, names in parts]
    _confirm(verified, digests)
    return _push_hashed(
        root_fd, session, manifest, config_bytes, layers, verified.sizes, force=force,
        progress=progress,
    )  # fmt: skip


def _config_descriptor(config_bytes: bytes) -> art.Descriptor:
    digest = f"sha256:{hashlib.sha256(config_bytes).hexdigest()}"
    return art.Descriptor(art.CONFIG_TYPE, digest, len(config_bytes))


def _document(manifest: Manifest, config: art.Descriptor, layers: list[_Layer]) -> bytes:
    """The artifact's manifest: the config blob, one layer per part, the annotations."""
    return art.render_manifest(
        art.Artifact(
            config,
            [art.Descriptor(art.layer_type(x.title), x.digest, x.size, x.title) for x in layers],
            {
                # the export time, not the push time: one bundle, one manifest, one digest
                art.CREATED: manifest.provenance.exported_at,
                art.ROOT_AGENT: manifest.root_agent,
                art.FORMAT_VERSION: str(manifest.format_version),
            },
        )
    )


def _refuse_existing_tag(session: Session, existing: str) -> Refused:
    return DestinationExists(
        f"{escape_display(str(session.ref))} already names another artifact ({existing[:19]}…); "
        "pass --force to move the tag, or push to a new tag"
    )


def _push_streamed(
    root_fd: int,
    session: Session,
    manifest: Manifest,
    config_bytes: bytes,
    parts: list[tuple[str, list[str]]],
    verified: VerifyReport,
    *,
    force: bool,
    progress: Progress | None,
) -> PushReport:
    """Into a repository with no tag: nothing there can spare an upload, so every layer's tar
    is made once, hashed and sent as it is made (the registry checks the digest named at the
    end), the work of both sides overlapping; no second pass over the bundle. A
    workspace file found not to match its checksum stops the push before the manifest: the
    layers already sent are unreferenced blobs, as after an interrupted push."""
    digests: dict[str, str] = {}
    config = _config_descriptor(config_bytes)
    session.upload_blob(config.digest, config.size, io.BytesIO(config_bytes))
    layers: list[_Layer] = []
    # the verified files' bytes: the bar's total, short only by the manifest and checksums
    total = sum(verified.sizes.values())
    with phase(progress, "uploading", sum(len(names) for _title, names in parts), total):
        for title, names in parts:

            def produce(out: BinaryIO, names: list[str] = names) -> None:
                write_tar(root_fd, names, out, progress, digests)

            digest, size = session.upload_streamed(produce)
            layers.append(_Layer(title, names, digest, size))
    _confirm(verified, digests)
    document = _document(manifest, config, layers)
    report = PushReport(reference=str(session.ref), digest=art.manifest_digest(document))
    report.uploaded = [layer.title for layer in layers]
    # the repository was empty when the push began; someone may have tagged it since
    existing = session.manifest_digest(session.ref.target)
    if existing is not None and existing != report.digest and not force:
        raise _refuse_existing_tag(session, existing)
    _store_manifest(session, document, report.digest)
    return report


def _store_manifest(session: Session, document: bytes, digest: str) -> None:
    """Store the manifest under the reference's tag: the push's commit point. An interrupt
    while the registry answers cannot tell whether it stored it, and says so."""
    try:
        session.put_manifest(session.ref.target, document)
        commit_reached()
    except Interrupted as err:
        ref = escape_display(str(session.ref))
        raise Interrupted(
            f"interrupted by {err.signal_name or 'a signal'} as the registry stored the "
            f"manifest: {ref} names what it named before, or {digest}; push again to be sure",
            signal_name=err.signal_name,
        ) from None


def _push_hashed(
    root_fd: int,
    session: Session,
    manifest: Manifest,
    config_bytes: bytes,
    layers: list[_Layer],
    sizes: dict[str, int],
    *,
    force: bool,
    progress: Progress | None,
) -> PushReport:
    config = _config_descriptor(config_bytes)
    document = _document(manifest, config, layers)
    digest = art.manifest_digest(document)
    ref = session.ref
    report = PushReport(reference=str(ref), digest=digest)
    existing = session.manifest_digest(ref.target)
    if existing == digest:
        report.unchanged = True
        report.skipped = [layer.title for layer in layers]
        return report
    if existing is not None and not force:
        raise _refuse_existing_tag(session, existing)
    if not session.blob_exists(config.digest):
        session.upload_blob(config.digest, config.size, io.BytesIO(config_bytes))
    missing = [layer for layer in layers if not session.blob_exists(layer.digest)]
    report.skipped = [layer.title for layer in layers if layer not in missing]
    files = sum(len(layer.names) for layer in missing)
    # the bar counts the files' bytes, as write_tar tells them, not the tars'
    data = sum(sizes.get(name, 0) for layer in missing for name in layer.names)
    with phase(progress, "uploading", files, data):
        for layer in missing:

            def produce(out: BinaryIO, names: list[str] = layer.names) -> None:
                write_tar(root_fd, names, out, progress)

            # the tar made again as it is sent: the registry checks it is the one hashed
            session.upload_produced(layer.digest, layer.size, produce)
            report.uploaded.append(layer.title)
    _store_manifest(session, document, digest)
    return report
