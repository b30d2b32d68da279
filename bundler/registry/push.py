"""``bundle push DIR REF``: a bundle folder to a registry, blobs first, the manifest last.

The registry's own commit rule makes the push crash-safe: a tag names a manifest only once the
manifest is stored, and the registry refuses a manifest whose blobs it does not hold. So an
interrupted push leaves at most unreferenced blobs, and the tag still names the previous
artifact. Blobs the registry has (a HEAD) are not uploaded again.

Nothing is written on this machine: each layer's tar is made twice, once into sha256 to learn
its digest and size, and again, only when the registry lacks it, straight into the upload's
request body (the writer is deterministic, so both passes give the same bytes; if the bundle
changes between them the registry refuses the digest). Memory stays flat in the bundle size.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from bundler.bundle.archive_write import bundle_members, write_tar
from bundler.bundle.manifest import MANIFEST_NAME, parse_manifest
from bundler.bundle.verify import MAX_MANIFEST_BYTES
from bundler.errors import InvalidInput, Refused, UsageError, withholding
from bundler.fs.durable import open_dir
from bundler.registry import artifact as art
from bundler.registry.http import Options, Session
from bundler.registry.reference import Reference
from bundler.rules.names import escape_display

Progress = Callable[[int], None]


@dataclass
class PushReport:
    """What a push did: the digest the tag now names and which layers were uploaded."""

    reference: str
    digest: str
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    unchanged: bool = False

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
    """A write-only sink that only counts and hashes."""

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
        raise InvalidInput(
            f"{shown} has no {MANIFEST_NAME}: it is not a bundle", path=shown
        ) from None
    try:
        data = os.read(fd, MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_MANIFEST_BYTES:
        raise InvalidInput(f"{shown}: {MANIFEST_NAME} is too large", path=shown)
    return data


def _is_dir(root_fd: int, name: str) -> bool:
    return stat.S_ISDIR(os.stat(name, dir_fd=root_fd, follow_symlinks=False).st_mode)


def plan_layers(root_fd: int) -> list[_Layer]:
    """Every part's layer with its digest and size (the first pass: nothing leaves memory)."""
    members = bundle_members(root_fd)
    folders = {name for name in members if "/" not in name and _is_dir(root_fd, name)}
    layers = []
    for title, names in sorted(art.split_parts(members, folders).items()):
        sink = _Digester()
        write_tar(root_fd, names, cast(BinaryIO, sink))
        layers.append(_Layer(title, names, f"sha256:{sink.hash.hexdigest()}", sink.size))
    return layers


class _TarBody:
    """An iterable request body: the tar of ``names`` written by a thread, handed over in
    chunks through a small queue (at most a few MiB in flight)."""

    def __init__(self, root_fd: int, names: list[str], progress: Progress | None) -> None:
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=4)
        self._stop = threading.Event()
        self._progress = progress
        self._buffer = bytearray()
        self._thread = threading.Thread(target=self._run, args=(root_fd, names), daemon=True)
        self._thread.start()

    def write(self, data: bytes) -> int:
        self._buffer += data
        if len(self._buffer) >= 1 << 20:
            self._put(bytes(self._buffer))
            self._buffer.clear()
        return len(data)

    def _put(self, item: bytes | BaseException | None) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue
        raise _Stopped()

    def _run(self, root_fd: int, names: list[str]) -> None:
        try:
            write_tar(root_fd, names, cast(BinaryIO, self))
            if self._buffer:
                self._put(bytes(self._buffer))
            self._put(None)
        except _Stopped:
            return
        except BaseException as err:  # handed to the consumer, which raises it
            try:
                self._put(err)
            except _Stopped:
                return

    def __iter__(self) -> Iterator[bytes]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            if self._progress is not None:
                self._progress(len(item))
            yield item

    def close(self) -> None:
        """Stop the writer thread (a failed upload leaves it waiting to hand over a chunk)."""
        self._stop.set()
        self._thread.join()


class _Stopped(Exception):
    pass


def push_bundle(
    source: Path,
    ref: Reference,
    options: Options,
    *,
    force: bool = False,
    progress: Progress | None = None,
    environ: dict[str, str] | None = None,
) -> PushReport:
    """Push the bundle folder ``source`` to ``ref`` (a tag); returns the pushed digest.

    An existing tag naming another artifact is refused without ``force``; a tag that already
    names this very artifact is left as it is (``unchanged``).
    """
    if ref.digest is not None:
        raise UsageError(
            "push needs a tag (oci://HOST/REPO:TAG), not a digest: the registry computes the "
            "digest, and push prints it"
        )
    shown = escape_display(str(source))
    try:
        root_fd = open_dir(source, follow=False)
    except OSError as err:
        raise Refused(f"cannot open the bundle folder {shown} ({err.strerror})") from None
    session = Session(ref, options, push=True, environ=environ)
    try:
        with withholding(session.auth.scrub):
            return _push(root_fd, shown, session, force=force, progress=progress)
    finally:
        session.close()
        os.close(root_fd)


def _push(
    root_fd: int, shown: str, session: Session, *, force: bool, progress: Progress | None
) -> PushReport:
    config_bytes = _read_config(root_fd, shown)
    manifest = parse_manifest(config_bytes)
    layers = plan_layers(root_fd)
    config = art.Descriptor(
        art.CONFIG_TYPE,
        f"sha256:{hashlib.sha256(config_bytes).hexdigest()}",
        len(config_bytes),
    )
    document = art.render_manifest(
        art.Artifact(
            config,
            [art.Descriptor(art.LAYER_TYPE, x.digest, x.size, x.title) for x in layers],
            {
                # the export time, not the push time: one bundle, one manifest, one digest
                art.CREATED: manifest.provenance.exported_at,
                art.ROOT_AGENT: manifest.root_agent,
                art.FORMAT_VERSION: str(manifest.format_version),
            },
        )
    )
    digest = art.manifest_digest(document)
    ref = session.ref
    report = PushReport(reference=str(ref), digest=digest)
    existing = session.manifest_digest(ref.target)
    if existing == digest:
        report.unchanged = True
        report.skipped = [layer.title for layer in layers]
        return report
    if existing is not None and not force:
        raise Refused(
            f"{escape_display(str(ref))} already names another artifact ({existing[:19]}…); "
            "pass --force to move the tag, or push to a new tag"
        )
    if not session.blob_exists(config.digest):
        session.upload_blob(config.digest, config.size, io.BytesIO(config_bytes))
    for layer in layers:
        if session.blob_exists(layer.digest):
            report.skipped.append(layer.title)
            continue
        body = _TarBody(root_fd, layer.names, progress)
        try:
            session.upload_blob(layer.digest, layer.size, cast(BinaryIO, body))
        finally:
            body.close()
        report.uploaded.append(layer.title)
    session.put_manifest(ref.target, document)
    return report
