"""A data-home backup as an OCI artifact (specs/oci-artifact.md, "A data-home backup as an
OCI artifact"): its media types, its tags, and its image manifest, written and read.

The config blob is the backup's ``backup.json``; each part of the backup
(:mod:`bundler.home.backup_parts`) is one layer, a zip of that part's entries, titled with the
part. The manifest's annotations carry what ``home backups`` lists (the time, the bytes, the
files), so a listing reads one small document per backup and no blob.

An encrypted backup is the ``NAME.zip.age`` of ``home backup --encrypt-to`` as one layer of its
own media type, under the OCI empty config: its manifest says the time and the encrypted size,
as a local ``.zip.age``'s name and length do, and nothing of what it holds (no ``backup.json``,
no part titles or digests, no counts, no agent).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from bundler.errors import InvalidInput, NotABundle
from bundler.home.backup_parts import MAX_PARTS, title_problem
from bundler.home.zipcheck import MAX_MANIFEST_BYTES
from bundler.registry.artifact import CREATED, TITLE, Descriptor, manifest_document
from bundler.registry.distribution import OCI_MANIFEST
from bundler.registry.reference import DIGEST

ARTIFACT_TYPE = "application/vnd.zeroclaw.agent.backup.v1"
INDEX_TYPE = "application/vnd.zeroclaw.agent.backup.index.v1+json"
PART_TYPE = "application/vnd.zeroclaw.agent.backup.part.v1.zip"
ENCRYPTED_TYPE = "application/vnd.zeroclaw.agent.backup.encrypted.v1.zip.age"
"""The one layer of an encrypted backup: the age file whose plain text is the backup zip."""
ENCRYPTED_TITLE = "backup.zip.age"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
"""The OCI empty descriptor's blob: an encrypted backup's config, which carries nothing."""
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
BYTES = "dev.zeroclaw.backup.bytes"
FILES = "dev.zeroclaw.backup.files"
AGENT = "dev.zeroclaw.backup.agent"
MAX_PART_BYTES = 1 << 40
_TAG = re.compile(r"backup-(\d{8})-(\d{6})(?:-([1-9][0-9]{0,2}))?")
_CREATED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_MAX_COUNT = 1 << 63


def backup_tag(created_at: str, attempt: int = 1) -> str:
    """The tag of a backup taken at ``created_at`` (``backup.json``'s UTC time):
    ``backup-YYYYMMDD-HHMMSS``, then ``-2``, ``-3``... for another backup of the same second.
    Tags sort as times do, and are valid OCI tags."""
    stamp = datetime.strptime(created_at, "%Y-%m-%dT%H:%M:%SZ").strftime("%Y%m%d-%H%M%S")
    return f"backup-{stamp}" if attempt == 1 else f"backup-{stamp}-{attempt}"


def tag_order(tag: str) -> tuple[str, str, int] | None:
    """The sort key of a backup's tag, or None for a tag a backup does not make."""
    match = _TAG.fullmatch(tag)
    return None if match is None else (match[1], match[2], int(match[3] or 1))


@dataclass(frozen=True)
class BackupArtifact:
    """What a backup's image manifest says: the index blob, the parts, and the listing's
    facts. An encrypted backup's ``index`` is the empty config, its one part the age file, and
    its ``bytes``, ``files`` and ``agent`` unknown (None): the manifest does not carry them."""

    index: Descriptor
    parts: list[Descriptor]
    created_at: str
    bytes: int | None
    files: int | None
    agent: str | None

    @property
    def encrypted(self) -> bool:
        """Whether the backup is one age file (``home backup --encrypt-to``)."""
        return [part.media_type for part in self.parts] == [ENCRYPTED_TYPE]

    def taken(self) -> datetime:
        """``created_at`` as a UTC time."""
        return datetime.strptime(self.created_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def empty_config() -> Descriptor:
    """The OCI empty descriptor: the config of an encrypted backup."""
    return Descriptor(EMPTY_TYPE, EMPTY_DIGEST, len(EMPTY_CONFIG))


def encrypted_artifact(sealed: Descriptor, created_at: str) -> BackupArtifact:
    """The artifact of the encrypted backup whose age file is the blob ``sealed``."""
    layer = Descriptor(ENCRYPTED_TYPE, sealed.digest, sealed.size, ENCRYPTED_TITLE)
    return BackupArtifact(empty_config(), [layer], created_at, None, None, None)


def render_manifest(artifact: BackupArtifact) -> bytes:
    """The manifest's bytes: compact JSON with sorted keys. An encrypted backup's annotations
    hold its time only."""
    annotations = {CREATED: artifact.created_at}
    if artifact.bytes is not None:
        annotations[BYTES] = str(artifact.bytes)
    if artifact.files is not None:
        annotations[FILES] = str(artifact.files)
    if artifact.agent is not None:
        annotations[AGENT] = artifact.agent
    data = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": artifact.index.as_json(),
        "layers": [part.as_json() for part in artifact.parts],
        "annotations": annotations,
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _refuse(why: str) -> InvalidInput:
    return NotABundle(f"the registry's manifest is not a data-home backup: {why}")


def _descriptor(value: Any, what: str, media_type: str, limit: int) -> Descriptor:
    if not isinstance(value, Mapping):
        raise _refuse(f"{what} is not a descriptor")
    if value.get("mediaType") != media_type:
        raise _refuse(f"{what} has a media type other than {media_type}")
    digest, size = value.get("digest"), value.get("size")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise _refuse(f"{what} has no sha256 digest")
    if type(size) is not int or not 0 <= size <= limit:
        raise _refuse(f"{what} has no size, or one beyond what a backup holds")
    annotations = value.get("annotations")
    title = annotations.get(TITLE) if isinstance(annotations, Mapping) else None
    return Descriptor(media_type, digest, size, title if isinstance(title, str) else "")


def _count(annotations: Mapping[str, Any], key: str) -> int:
    raw = annotations.get(key)
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        raise _refuse(f"the annotation {key} is not a count")
    value = int(raw)
    if value >= _MAX_COUNT:
        raise _refuse(f"the annotation {key} is not a count")
    return value


def _is_encrypted(raw_parts: Any) -> bool:
    return isinstance(raw_parts, list) and any(
        isinstance(raw, Mapping) and raw.get("mediaType") == ENCRYPTED_TYPE for raw in raw_parts
    )


def parse_manifest(data: bytes, media_type: str) -> BackupArtifact:
    """Read and check a backup's image manifest from a registry; raises :class:`InvalidInput`."""
    doc = manifest_document(data, media_type, ARTIFACT_TYPE, _refuse)
    raw_parts = doc.get("layers")
    if _is_encrypted(raw_parts):
        return _parse_encrypted(doc)
    index = _descriptor(doc.get("config"), "the config", INDEX_TYPE, MAX_MANIFEST_BYTES)
    if not isinstance(raw_parts, list) or not 0 < len(raw_parts) <= MAX_PARTS:
        raise _refuse(f"it does not list from 1 to {MAX_PARTS} layers")
    parts = [
        _descriptor(raw, f"layer {n + 1}", PART_TYPE, MAX_PART_BYTES)
        for n, raw in enumerate(raw_parts)
    ]
    titles = [part.title for part in parts]
    for title in titles:
        problem = title_problem(title)
        if problem is not None:
            raise _refuse(f"a layer's title: {problem}")
    if len(set(titles)) != len(titles):
        raise _refuse("two layers carry the same part")
    annotations = _annotations(doc)
    created = _created(annotations)
    agent = annotations.get(AGENT)
    return BackupArtifact(
        index,
        parts,
        created,
        _count(annotations, BYTES),
        _count(annotations, FILES),
        agent if isinstance(agent, str) else None,
    )


def _annotations(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = doc.get("annotations")
    if not isinstance(annotations, Mapping):
        raise _refuse("it has no annotations")
    return annotations


def _created(annotations: Mapping[str, Any]) -> str:
    created = annotations.get(CREATED)
    if not isinstance(created, str) or not _CREATED.fullmatch(created):
        raise _refuse(f"the annotation {CREATED} is not a UTC time")
    try:
        datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise _refuse(f"the annotation {CREATED} is not a UTC time") from None
    return created


def _parse_encrypted(doc: Mapping[str, Any]) -> BackupArtifact:
    """An encrypted backup's manifest: the empty config, one age layer titled
    ``backup.zip.age``, and its time. One that also names a part, a config blob or the facts
    of a plain backup is not what ``--encrypt-to`` pushes, and is refused."""
    raw_parts = doc.get("layers")
    if not isinstance(raw_parts, list) or len(raw_parts) != 1:
        raise _refuse("an encrypted backup's manifest lists more than its one layer")
    config = _descriptor(doc.get("config"), "the config", EMPTY_TYPE, len(EMPTY_CONFIG))
    if config.digest != EMPTY_DIGEST or config.size != len(EMPTY_CONFIG):
        raise _refuse("an encrypted backup's config is not the empty one")
    sealed = _descriptor(raw_parts[0], "layer 1", ENCRYPTED_TYPE, MAX_PART_BYTES)
    if sealed.title != ENCRYPTED_TITLE:
        raise _refuse(f"an encrypted backup's layer is not titled {ENCRYPTED_TITLE}")
    annotations = _annotations(doc)
    told = sorted(key for key in (BYTES, FILES, AGENT) if key in annotations)
    if told:
        raise _refuse(f"an encrypted backup's manifest tells {', '.join(told)}")
    return encrypted_artifact(sealed, _created(annotations))
