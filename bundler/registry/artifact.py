"""A bundle as an OCI artifact (specs/oci-artifact.md): which parts become which layers, and
the image manifest, written and read.

Each part of the bundle is one layer, a deterministic tar (:mod:`bundler.bundle.archive_write`)
of its members: ``metadata`` holds the files at the bundle's root, and every folder at the root
(``workspace``, ``skills``, ``memory``) is a layer of its own named after it. A sealed bundle's
``secrets.age`` is a layer of its own too, ``sealed``, with a media type of its own: a registry
(or a policy on it) can tell an artifact that carries encrypted secrets from one that does not.
An unchanged part therefore has an unchanged digest and is never uploaded twice. The config
blob is the bundle's ``zeroclaw-agent.toml``, so ``bundle inspect REF`` needs the manifest and
one small blob.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bundler.bundle.manifest import MAX_MANIFEST_BYTES
from bundler.bundle.sealed import SEALED_NAME
from bundler.errors import InvalidInput, NotABundle
from bundler.registry.distribution import OCI_MANIFEST
from bundler.registry.reference import DIGEST
from bundler.rules.units import human_size

ARTIFACT_TYPE = "application/vnd.zeroclaw.agent.bundle.v1"
CONFIG_TYPE = "application/vnd.zeroclaw.agent.manifest.v1+toml"
LAYER_TYPE = "application/vnd.zeroclaw.agent.bundle.layer.v1.tar"
SEALED_LAYER_TYPE = "application/vnd.zeroclaw.agent.bundle.sealed.v1.tar"
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
ROOT_AGENT = "dev.zeroclaw.agent.root"
FORMAT_VERSION = "dev.zeroclaw.agent.format-version"
METADATA = "metadata"
SEALED = "sealed"

MAX_LAYERS = 16
MAX_ARTIFACT_CONFIG_BYTES = MAX_MANIFEST_BYTES
"""The artifact's config blob, read whole like the image manifest that points at it."""
MAX_BLOB_BYTES = 1 << 40
_PART = re.compile(r"[a-z][a-z0-9_-]{0,63}")


@dataclass(frozen=True)
class Descriptor:
    """A blob as the manifest names it; ``title`` is the part a layer holds."""

    media_type: str
    digest: str
    size: int
    title: str = ""

    def as_json(self) -> dict[str, Any]:
        """The OCI descriptor object."""
        data: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.title:
            data["annotations"] = {TITLE: self.title}
        return data


@dataclass(frozen=True)
class Artifact:
    """What a bundle's image manifest says."""

    config: Descriptor
    layers: list[Descriptor]
    annotations: dict[str, str]


def split_parts(members: list[str], folders: set[str]) -> dict[str, list[str]]:
    """Members grouped by part, each group in the order given; ``folders`` are the root
    folders (the rest of the root members are files and go to ``metadata``)."""
    parts: dict[str, list[str]] = {}
    for member in members:
        top = member.split("/", 1)[0]
        title = top if top in folders else SEALED if member == SEALED_NAME else METADATA
        parts.setdefault(title, []).append(member)
    return parts


def layer_type(title: str) -> str:
    """The media type of the layer carrying the part ``title``."""
    return SEALED_LAYER_TYPE if title == SEALED else LAYER_TYPE


def render_manifest(artifact: Artifact) -> bytes:
    """The manifest's bytes: compact JSON with sorted keys, so one bundle gives one digest."""
    data = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": artifact.config.as_json(),
        "layers": [layer.as_json() for layer in artifact.layers],
        "annotations": dict(artifact.annotations),
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def manifest_digest(data: bytes) -> str:
    """``sha256:…`` of the manifest bytes: what a digest reference pins."""
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _refuse(why: str) -> InvalidInput:
    return NotABundle(f"the registry's manifest is not a bundle artifact: {why}")


def _descriptor(value: Any, what: str, media_type: str | None, limit: int) -> Descriptor:
    if not isinstance(value, Mapping):
        raise _refuse(f"{what} is not a descriptor")
    if media_type is None:  # a layer: its type is its part's (checked below by its title)
        title = (
            value.get("annotations", {}).get(TITLE)
            if isinstance(value.get("annotations"), Mapping)
            else None
        )
        media_type = layer_type(title) if isinstance(title, str) else LAYER_TYPE
    if value.get("mediaType") != media_type:
        raise _refuse(f"{what} has media type other than {media_type}")
    digest, size = value.get("digest"), value.get("size")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise _refuse(f"{what} has no sha256 digest")
    if type(size) is not int or size < 0:
        raise _refuse(f"{what} has no size")
    if size > limit:
        raise _refuse(
            f"{what} declares {human_size(size)}, more than the {human_size(limit)} a bundle allows"
        )
    title = ""
    annotations = value.get("annotations")
    if isinstance(annotations, Mapping) and isinstance(annotations.get(TITLE), str):
        title = annotations[TITLE]
    return Descriptor(media_type, digest, size, title)


def manifest_document(
    data: bytes, media_type: str, artifact_type: str, refuse: Callable[[str], InvalidInput]
) -> dict[str, Any]:
    """The JSON of an OCI image manifest of ``artifact_type`` the registry served as
    ``media_type``; anything else raises ``refuse(why)`` (each artifact names itself)."""
    if media_type != OCI_MANIFEST:
        raise refuse("the registry serves it as something other than an OCI image manifest")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise refuse("it is not JSON") from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise refuse("schemaVersion is not 2")
    if doc.get("mediaType") != OCI_MANIFEST:
        raise refuse("its mediaType is not an OCI image manifest")
    if doc.get("artifactType") != artifact_type:
        raise refuse(f"its artifactType is not {artifact_type}")
    return doc


def parse_manifest(data: bytes, media_type: str) -> Artifact:
    """Read and check an image manifest from a registry; raises :class:`InvalidInput`."""
    doc = manifest_document(data, media_type, ARTIFACT_TYPE, _refuse)
    config = _descriptor(doc.get("config"), "the config", CONFIG_TYPE, MAX_ARTIFACT_CONFIG_BYTES)
    layers_raw = doc.get("layers")
    if not isinstance(layers_raw, list) or not 0 < len(layers_raw) <= MAX_LAYERS:
        raise _refuse(f"it does not list from 1 to {MAX_LAYERS} layers")
    layers = [
        _descriptor(raw, f"layer {index + 1}", None, MAX_BLOB_BYTES)
        for index, raw in enumerate(layers_raw)
    ]
    titles = [layer.title for layer in layers]
    for title in titles:
        if not _PART.fullmatch(title):
            raise _refuse("a layer's title is not a part name")
    if len(set(titles)) != len(titles):
        raise _refuse("two layers carry the same part")
    if METADATA not in titles:
        raise _refuse("no layer carries the bundle's metadata")
    annotations_raw = doc.get("annotations")
    annotations = (
        {str(k): v for k, v in annotations_raw.items() if isinstance(v, str)}
        if isinstance(annotations_raw, Mapping)
        else {}
    )
    return Artifact(config, layers, annotations)
