"""Data-home backups on a registry: ``home backup --to oci://…``, ``home backups --to oci://…``,
``home restore oci://…`` and ``home prune --to oci://…`` (04 §5.5; specs/oci-artifact.md, "A
data-home backup as an OCI artifact").

A backup pushed is the backup zip ``home backup`` makes (every check of 04 §5.1 included), made
in a private scratch folder, cut into its parts (:mod:`bundler.home.backup_parts`) and pushed
blobs first, manifest last, under a tag named by its time: a part the repository already holds
(same bytes, same digest) is not sent again. A restore pulls the parts by digest into a private
scratch folder (each blob's sha256 checked as it arrives), puts the backup zip together again
and restores it as any backup zip is restored, with every check of 04 §5.3. Prune applies the
retention rules of 04 §5.4 to the repository's backup tags and deletes the manifests no rule
keeps, by digest, never one a kept tag names.

An encrypted backup (``--encrypt-to``, 04 §5.6.1) is pushed and pulled as one age file, the
plain zip never leaving the home: built in the home's private scratch folder, decrypted only into
the restore's staging.

Every request goes through :class:`bundler.registry.distribution.Session`: credentials, retries,
proxies, mirrors and ``registries.conf`` are the registry layer's, as for bundles.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bundler.errors import (
    DestinationExists,
    Interrupted,
    InvalidInput,
    NoSpace,
    NotFound,
    Refused,
    Tampered,
    UsageError,
    os_failure,
    withholding,
)
from bundler.fs.age import AskPassphrase
from bundler.fs.interrupts import commit_reached
from bundler.fs.safefs import SkipCounts
from bundler.home.backup import BackupReport, backup_home
from bundler.home.backup_parts import assemble_backup, split_backup
from bundler.home.restore import RestoreReport, restore_home
from bundler.home.zipindex import parse_index
from bundler.registry import backup_artifact as bart
from bundler.registry.artifact import Descriptor, manifest_digest
from bundler.registry.distribution import Session
from bundler.registry.pull import private_bundle_folder
from bundler.registry.reference import Reference, is_tag
from bundler.registry.transport import Options
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase
from bundler.rules.retention import Policy, kept_by
from bundler.rules.units import human_size

_CHUNK = 1 << 20
_MAX_ATTEMPTS = 999
_ZIP = "backup.zip"
_INDEX = "backup.json"
_EMPTY = "empty.json"


def _repository_only(ref: Reference, what: str) -> None:
    if ref.tag is not None or ref.digest is not None:
        raise UsageError(
            f"{escape_display(str(ref))}: {what} takes a repository, oci://HOST/REPO, without "
            "a tag or digest (a backup's tag is its time)"
        )


# --- backup -----------------------------------------------------------------------------------


@dataclass
class RegistryBackupReport:
    """A backup pushed: its tag, the digest the tag names, its files and bytes, and which
    parts were sent (``uploaded``) or already there (``skipped``); an ``encrypted`` one's only
    layer is ``backup.zip.age``."""

    reference: str
    digest: str
    entries: int
    bytes: int
    left_out: SkipCounts = field(default_factory=SkipCounts)
    """What the walk did not carry (links, special files...), as ``home backup`` counts it."""
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    encrypted: bool = False

    @property
    def pinned(self) -> str:
        """The backup's reference pinned to its digest: what ``home restore`` takes."""
        return f"{self.reference.rsplit(':', 1)[0]}@{self.digest}"

    def as_json(self) -> dict[str, Any]:
        """The ``home backup --to oci://… --json`` payload (without ``ok``)."""
        return {
            "backup": self.reference,
            "digest": self.digest,
            "pinned": self.pinned,
            "entries": self.entries,
            "bytes": self.bytes,
            "uploaded": self.uploaded,
            "skipped": self.skipped,
            "encrypted": self.encrypted,
            "left_out": self.left_out.as_json(),
            "left_out_paths": self.left_out.paths,
        }


def _sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return f"sha256:{digest.hexdigest()}", size


@contextlib.contextmanager
def _scratch(purpose: str) -> Iterator[Path]:
    """A private, locked folder in ``$TMPDIR``, removed on exit (after a kill, by the next
    run, ``recover`` or ``doctor``: :func:`bundler.registry.pull.private_bundle_folder`)."""
    with private_bundle_folder(purpose) as (folder, _fd):
        yield folder


def backup_to_registry(
    project: Path,
    ref: Reference,
    options: Options,
    *,
    compression: str = "default",
    encrypt_to: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> RegistryBackupReport:
    """Back up the data home of ``project`` to the repository ``ref`` (04 §5.5).

    The backup zip is made and verified as ``home backup`` makes it (every entry copied afresh:
    the registry, not a base zip, spares what did not change), cut into parts, and pushed under
    the tag :func:`~bundler.registry.backup_artifact.backup_tag` gives its time; a part whose
    blob the repository holds is not sent. The manifest is stored last: an interrupted push
    leaves only unreferenced blobs.

    With ``encrypt_to`` (age or SSH public keys, or ``@FILE`` of them) the backup is the
    ``NAME.zip.age`` of ``home backup --encrypt-to`` (04 §5.6), its plain zip built only inside
    the home, pushed whole as one layer: age encrypts each file under a key of its own, so
    equal parts would give different blobs, and parts kept apart would tell which parts are
    equal; nothing is spared and nothing is told.
    """
    _repository_only(ref, "home backup --to")
    with _scratch("to make the backup in") as folder:
        if encrypt_to:
            made, artifact, blobs = _made_encrypted(
                project, folder, compression, encrypt_to, environ, progress
            )
        else:
            made, artifact, blobs = _made_in_parts(project, folder, compression, environ, progress)
        document = bart.render_manifest(artifact)
        digest = manifest_digest(document)
        session = Session(ref, options, push=True, environ=environ)
        try:
            with withholding(session.auth.scrub):
                uploaded: list[str] = []
                skipped: list[str] = []
                config, config_path = blobs[0]
                if not session.blob_exists(config.digest):
                    _upload(session, config, config_path)
                sizes = sum(layer.size for layer, _path in blobs[1:])
                with phase(progress, "uploading", len(blobs) - 1, sizes):
                    for layer, path in blobs[1:]:
                        if session.blob_exists(layer.digest):
                            skipped.append(layer.title)
                        else:
                            _upload(session, layer, path)
                            uploaded.append(layer.title)
                        if progress is not None:
                            progress(1, layer.size)
                # the tag is chosen only now, just before the manifest is stored: chosen before
                # the uploads, another backup of the same second (another machine's, at the
                # same minute of a schedule) could take it meanwhile and lose it to this one
                tag = _free_tag(session, artifact.created_at)
                report = RegistryBackupReport(
                    str(dataclasses.replace(ref, tag=tag)),
                    digest,
                    made.entries,
                    made.bytes,
                    made.skipped,
                    uploaded,
                    skipped,
                    warnings=[*made.warnings, *session.notes],
                    encrypted=artifact.encrypted,
                )
                _store_manifest(session, tag, document, report)
                return report
        finally:
            session.close()


_Made = tuple[BackupReport, bart.BackupArtifact, list[tuple[Descriptor, Path]]]
"""A backup made for a push: its report, its artifact, and each blob's file (config first)."""


def _made_in_parts(
    project: Path,
    folder: Path,
    compression: str,
    environ: Mapping[str, str] | None,
    progress: Progress | None,
) -> _Made:
    """The backup zip made in ``folder``, cut into its parts there, the zip removed."""
    made = backup_home(
        project,
        to=folder / _ZIP,
        environ=environ,
        progress=progress,
        full=True,
        compression=compression,
    )
    try:
        index_bytes, parts = split_backup(made.path, folder)
        os.unlink(made.path)  # the parts hold it now: half the room in $TMPDIR
        layers = []
        for part in parts:
            digest, size = _sha256(part.path)
            layers.append(Descriptor(bart.PART_TYPE, digest, size, part.title))
        with open(folder / _INDEX, "wb") as sink:
            sink.write(index_bytes)
    except OSError as err:
        raise _no_room(folder, err) from None
    index = parse_index(index_bytes)
    config = Descriptor(
        bart.INDEX_TYPE, f"sha256:{hashlib.sha256(index_bytes).hexdigest()}", len(index_bytes)
    )
    artifact = bart.BackupArtifact(
        config, layers, index.created_at, made.bytes, made.entries, index.agent
    )
    blobs = [(config, folder / _INDEX)]
    blobs += [(layer, part.path) for layer, part in zip(layers, parts, strict=True)]
    return made, artifact, blobs


def _made_encrypted(
    project: Path,
    folder: Path,
    compression: str,
    encrypt_to: Sequence[str],
    environ: Mapping[str, str] | None,
    progress: Progress | None,
) -> _Made:
    """The encrypted backup made as ``home backup --encrypt-to`` makes it: the plain zip built
    and checked in the home's ``backups/`` only, its age file written into ``folder`` (04
    §5.6), with the empty config beside it. Its time is the moment the age file was finished,
    as a local ``.zip.age``'s name carries its publishing time: the time in ``backup.json`` is
    inside the encryption."""
    made = backup_home(
        project,
        to=folder / bart.ENCRYPTED_TITLE,
        environ=environ,
        progress=progress,
        full=True,
        compression=compression,
        encrypt_to=encrypt_to,
    )
    created_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        digest, size = _sha256(made.path)
        with open(folder / _EMPTY, "wb") as sink:
            sink.write(bart.EMPTY_CONFIG)
    except OSError as err:
        raise _no_room(folder, err) from None
    artifact = bart.encrypted_artifact(Descriptor(bart.ENCRYPTED_TYPE, digest, size), created_at)
    return made, artifact, [(artifact.index, folder / _EMPTY), (artifact.parts[0], made.path)]


def _no_room(folder: Path, err: OSError) -> Refused:
    return os_failure(
        f"preparing the backup's blobs in {escape_display(str(folder.parent))} failed "
        f"({err.strerror or err}); free some space there or set TMPDIR; nothing was sent",
        err,
    )


def _store_manifest(
    session: Session, tag: str, document: bytes, report: RegistryBackupReport
) -> None:
    """The commit point: the registry refuses a manifest whose blobs it lacks. An interrupt
    while the registry answers cannot tell whether it stored it, and says so."""
    try:
        session.put_manifest(tag, document)
        commit_reached()
    except Interrupted as err:
        raise Interrupted(
            f"interrupted by {err.signal_name or 'a signal'} as the registry stored the "
            f"manifest: {escape_display(report.pinned)} may or may not exist; 'home backups "
            "--to' lists what the repository holds",
            signal_name=err.signal_name,
        ) from None


def _free_tag(session: Session, created_at: str) -> str:
    """The backup's tag: its time, with ``-2``, ``-3``... when a backup of the same second
    holds the name (another backup's tag is never moved)."""
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        tag = bart.backup_tag(created_at, attempt)
        if session.manifest_digest(tag) is None:
            return tag
    raise DestinationExists("too many backups with the same timestamp in the repository: try again")


def _upload(session: Session, blob: Descriptor, path: Path) -> None:
    with open(path, "rb") as source:
        session.upload_blob(blob.digest, blob.size, source)


# --- list -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegistryListed:
    """One backup of a repository: its tag, manifest digest, and what the manifest says. An
    ``encrypted`` one's manifest says its time and its blob's ``size`` only: its files' bytes,
    their count and the agent are unknown (None) without its key."""

    tag: str
    digest: str
    created_at: str
    bytes: int | None
    files: int | None
    agent: str | None
    encrypted: bool = False
    size: int = 0
    """The bytes of its blobs in the registry (config and layers)."""

    def taken(self) -> datetime:
        """``created_at`` as a UTC time."""
        return datetime.strptime(self.created_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)

    def as_json(self) -> dict[str, Any]:
        """One backup of ``home backups --to oci://… --json``."""
        return {
            "tag": self.tag,
            "digest": self.digest,
            "created_at": self.created_at,
            "bytes": self.bytes,
            "files": self.files,
            "agent": self.agent,
            "encrypted": self.encrypted,
            "size": self.size,
        }


@dataclass(frozen=True)
class RegistryBackupListing:
    """The backups of a repository, oldest first, and what was left out."""

    reference: str
    backups: list[RegistryListed]
    warnings: list[str]

    def as_json(self) -> dict[str, Any]:
        """The ``home backups --to oci://… --json`` payload (without ``ok``)."""
        return {
            "reference": self.reference,
            "backups": [item.as_json() for item in self.backups],
        }


def _listed_backups(session: Session) -> tuple[RegistryBackupListing, list[str]]:
    """The repository's backups, and every tag it has (a backup's or not)."""
    ref = session.ref
    tags = session.list_tags()
    if tags is None:
        raise NotFound(
            f"registry {session.shown} has no repository {escape_display(ref.repository)}; "
            "check its name"
        )
    found: list[RegistryListed] = []
    warnings: list[str] = []
    for tag in sorted(tags, key=lambda t: bart.tag_order(t) or ("", "", 0)):
        if bart.tag_order(tag) is None:
            continue
        try:
            data, media = session.get_manifest(tag)
            artifact = bart.parse_manifest(data, media)
        except Refused:
            if session.manifest_digest(tag) is None:
                continue  # deleted since the tag list named it (a prune elsewhere)
            raise
        except InvalidInput as exc:
            # one tag nobody reads (too large, not a backup's) hides no other backup
            warnings.append(
                f"{escape_display(tag)} is not a backup this tool reads ({exc.message})"
            )
            continue
        found.append(
            RegistryListed(
                tag,
                manifest_digest(data),
                artifact.created_at,
                artifact.bytes,
                artifact.files,
                artifact.agent,
                artifact.encrypted,
                artifact.index.size + sum(part.size for part in artifact.parts),
            )
        )
    found.sort(key=lambda item: (item.created_at, bart.tag_order(item.tag)))
    return RegistryBackupListing(str(ref).rsplit(":", 1)[0], found, warnings), tags


def list_registry_backups(
    ref: Reference, options: Options, *, environ: Mapping[str, str] | None = None
) -> RegistryBackupListing:
    """The backups in the repository ``ref``, oldest first: every tag a backup makes whose
    manifest is a backup's (04 §5.5); any other tag is left out, a backup-named one with a
    warning."""
    _repository_only(ref, "home backups --to")
    with Session(ref, options, environ=environ) as session, withholding(session.auth.scrub):
        listing, _tags = _listed_backups(session)
        listing.warnings.extend(session.notes)
        return listing


# --- prune ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegistryPruneReport:
    """What ``home prune --to oci://…`` kept (with the rules keeping each) and removed, or
    would remove."""

    reference: str
    kept: list[tuple[RegistryListed, list[str]]]
    removed: list[RegistryListed]
    dry_run: bool
    warnings: list[str]

    def as_json(self) -> dict[str, Any]:
        """The ``home prune --to oci://… --json`` payload (without ``ok``)."""
        return {
            "reference": self.reference,
            "dry_run": self.dry_run,
            "kept": [{**item.as_json(), "kept_by": why} for item, why in self.kept],
            "removed": [item.as_json() for item in self.removed],
        }


def prune_registry_backups(
    ref: Reference,
    options: Options,
    policy: Policy,
    *,
    dry_run: bool,
    environ: Mapping[str, str] | None = None,
) -> RegistryPruneReport:
    """Remove the backups of the repository ``ref`` that ``policy`` does not keep (04 §5.4's
    rules, :mod:`bundler.rules.retention`); never the newest, never a tag a backup did not
    make. The rules count backups, that is manifests: tags naming one manifest are kept, or
    removed, together. ``dry_run``: change nothing, report what would go.

    A removal is a ``DELETE`` of the backup's manifest by digest (which removes its tags),
    after checking each of its tags still names that digest. A registry that does not allow
    deletion is refused at the first one, nothing removed (exit 1).
    """
    if policy.empty():
        raise UsageError(
            "name what to keep: --keep-last, --keep-daily, --keep-weekly or --keep-monthly"
        )
    _repository_only(ref, "home prune --to")
    with (
        Session(ref, options, push=True, environ=environ) as session,
        withholding(session.auth.scrub),
    ):
        listing, tags = _listed_backups(session)
        # a backup is a manifest: tags naming the same one are kept or removed together (the
        # registry deletes a manifest with every tag that names it)
        backups: dict[str, list[RegistryListed]] = {}
        for item in listing.backups:
            backups.setdefault(item.digest, []).append(item)
        groups = list(backups.values())
        keep = kept_by(groups, lambda tags: tags[0].taken(), policy)
        kept = [(item, keep[i]) for i, group in enumerate(groups) if i in keep for item in group]
        doomed = [group for i, group in enumerate(groups) if i not in keep]
        warnings = [*listing.warnings, *session.notes]
        if doomed:
            doomed = _not_tagged_otherwise(session, doomed, tags, listing, warnings)
        if dry_run:
            removed = [item for group in doomed for item in group]
            return RegistryPruneReport(listing.reference, kept, removed, dry_run, warnings)
        removed = []
        for group in doomed:
            # a tag moved since it was listed names another backup, maybe one kept
            moved = [item for item in group if session.manifest_digest(item.tag) != item.digest]
            if moved:
                shown = ", ".join(escape_display(item.tag) for item in moved)
                warnings.append(f"{shown} moved meanwhile: that backup is left alone")
                continue
            _delete(session, group[0], removed)
            removed.extend(group)
        return RegistryPruneReport(listing.reference, kept, removed, dry_run, warnings)


def _not_tagged_otherwise(
    session: Session,
    doomed: list[list[RegistryListed]],
    tags: list[str],
    listing: RegistryBackupListing,
    warnings: list[str],
) -> list[list[RegistryListed]]:
    """``doomed`` without the backups a tag no backup made also names (one tagged by hand,
    ``latest``...): deleting the manifest would delete that tag with it, so such a backup is
    left alone, with a warning naming the tag."""
    listed = {item.tag for item in listing.backups}
    named: dict[str, list[str]] = {}
    for tag in tags:
        if tag not in listed and is_tag(tag):
            digest = session.manifest_digest(tag)
            if digest == "unknown":  # a registry that does not say: the bytes do
                digest = manifest_digest(session.get_manifest(tag)[0])
            if digest is not None:
                named.setdefault(digest, []).append(tag)
    left = []
    for group in doomed:
        others = named.get(group[0].digest)
        if others:
            shown = ", ".join(escape_display(tag) for tag in sorted(others))
            warnings.append(
                f"{escape_display(group[0].tag)} is also tagged {shown}, which no backup made: "
                "that backup is left alone (deleting it would delete that tag)"
            )
        else:
            left.append(group)
    return left


def _delete(session: Session, item: RegistryListed, removed: list[RegistryListed]) -> None:
    """Delete the backup's manifest; a refusal says how many were removed before it."""
    try:
        session.delete_manifest(item.digest)
    except Refused as err:
        done = (
            "nothing was removed"
            if not removed
            else f"{len(removed)} backups were removed before it, each whole; every kept "
            "backup is intact"
        )
        raise err.restated(f"{err.message}; {done}") from None


# --- restore ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegistryRestoreReport:
    """A backup restored from a registry: the restore's report, the reference pinned to the
    digest read, and warnings (a reference by tag names the digest to pin)."""

    restore: RestoreReport
    reference: str
    warnings: list[str]

    def as_json(self) -> dict[str, Any]:
        """The ``home restore oci://… --json`` payload (without ``ok``)."""
        return {**self.restore.as_json(), "reference": self.reference}


def _check_space(folder: Path, artifact: bart.BackupArtifact) -> None:
    """The blobs and the backup zip put together from them, side by side for a moment (an
    encrypted backup's one blob only: it is decrypted into the restore's staging, whose room
    the restore checks)."""
    blobs = sum(part.size for part in artifact.parts)
    needed = blobs if artifact.encrypted else 2 * (artifact.index.size + blobs)
    st = os.statvfs(folder)
    if needed > st.f_bavail * st.f_frsize:
        raise NoSpace(
            f"the backup needs about {human_size(needed)} in the temporary folder, which has "
            f"{human_size(st.f_bavail * st.f_frsize)} free; free some space or set TMPDIR"
        )


def restore_from_registry(
    project: Path,
    ref: Reference,
    options: Options,
    *,
    home: Path | None = None,
    force: bool = False,
    age_identities: Sequence[Path] = (),
    age_passphrase: AskPassphrase | None = None,
    environ: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> RegistryRestoreReport:
    """Restore the backup ``ref`` names (a digest, or a tag) into the data home of ``project``
    (or ``home``) (04 §5.5): pulled into a private folder (every blob's sha256 checked), put
    together as a backup zip, then restored with every check of 04 §5.3 before anything
    changes. Raises :class:`InvalidInput` (exit 3) for what the registry served that is not a
    sound backup, nothing restored.

    An encrypted backup needs ``age_identities`` (``age_passphrase`` asks for a protected SSH
    key's), as a local ``.zip.age`` does (04 §5.6): its age file is pulled (ciphertext only in
    the private folder) and restored as :func:`bundler.home.restore.restore_home` restores a
    local one, decrypted only into the restore's own staging in the home. Without them, or
    with them for a plain backup, :class:`UsageError` (exit 2) once the manifest is read,
    before any blob is."""
    if ref.tag is None and ref.digest is None:
        raise UsageError(
            f"{escape_display(str(ref))}: name the backup, oci://HOST/REPO@sha256:… or "
            ":TAG ('home backups --to oci://HOST/REPO' lists them)"
        )
    shown = escape_display(str(ref))
    with _scratch("to pull the backup into") as folder:
        session = Session(ref, options, environ=environ)
        try:
            with withholding(session.auth.scrub):
                digest, artifact = _read_manifest(session)
                _keys_fit(artifact, shown, bool(age_identities))
                _check_space(folder, artifact)
                pulled = _pull(session, folder, artifact, progress)
                notes = list(session.notes)
        finally:
            session.close()
        pinned = ref.with_digest(digest)
        try:
            report = restore_home(
                project,
                pulled,
                home=home,
                force=force,
                environ=environ,
                progress=progress,
                age_identities=age_identities,
                age_passphrase=age_passphrase,
            )
        except InvalidInput as exc:
            # the scratch copy's path means nothing to the user: the reference does
            raise exc.restated(exc.message.replace(str(pulled), shown), path=str(pinned)) from None
    warning = ref.unpinned_warning(digest)
    warnings = [*([] if warning is None else [warning]), *notes, *report.warnings]
    return RegistryRestoreReport(report, str(pinned), warnings)


def _keys_fit(artifact: bart.BackupArtifact, shown: str, keyed: bool) -> None:
    """Refuse, as a local restore does (04 §5.6), an encrypted backup without
    ``--age-identity`` and a plain one with it: before any blob is pulled."""
    if artifact.encrypted and not keyed:
        raise UsageError(
            f"{shown} is an encrypted backup: give --age-identity FILE (an age identity or SSH "
            "private key of one of its recipients)",
            path=shown,
        )
    if keyed and not artifact.encrypted:
        raise UsageError(
            f"{shown} is not an encrypted backup: give it without --age-identity", path=shown
        )


def _read_manifest(session: Session) -> tuple[str, bart.BackupArtifact]:
    """The manifest the reference names, checked: its digest and what it says."""
    ref = session.ref
    data, media = session.get_manifest(ref.target)
    digest = manifest_digest(data)
    if ref.digest is not None and digest != ref.digest:
        raise Tampered(
            f"registry {session.shown} served a manifest whose digest is not "
            f"{ref.digest[:19]}…; refused"
        )
    return digest, bart.parse_manifest(data, media)


def _pull(
    session: Session, folder: Path, artifact: bart.BackupArtifact, progress: Progress | None
) -> Path:
    """The artifact's blobs into ``folder``, and the backup to restore: the zip put together
    from them, or an encrypted backup's age file as it came (its empty config is known by its
    digest, and not fetched)."""
    ref = session.ref
    if artifact.encrypted:
        blobs = [(artifact.parts[0], folder / bart.ENCRYPTED_TITLE)]
    else:
        blobs = [(artifact.index, folder / _INDEX)]
        blobs += [(part, folder / f"part-{n}.zip") for n, part in enumerate(artifact.parts)]
    total = sum(blob.size for blob, _path in blobs)

    def advance(nbytes: int) -> None:
        if progress is not None:
            progress(0, nbytes)

    try:
        with phase(progress, "downloading", len(blobs), total):
            for blob, path in blobs:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as sink:
                    session.download_blob(blob.digest, blob.size, sink, advance)
                if progress is not None:
                    progress(1, 0)
        if artifact.encrypted:
            return blobs[0][1]
        parts = [(part.title, path) for part, path in blobs[1:]]
        assemble_backup(parts, folder / _INDEX, folder / _ZIP)
    except InvalidInput as exc:
        where = escape_display(str(ref))
        message = exc.message
        # the scratch names mean nothing: the parts' titles do
        for blob, path in blobs if artifact.encrypted else blobs[1:]:
            message = message.replace(str(path), f"part {escape_display(blob.title)}")
        raise exc.restated(f"{where}: {message}", path=where) from None
    except OSError as err:
        raise os_failure(
            f"pulling {escape_display(str(ref))} failed ({err.strerror or err})", err
        ) from None
    return folder / _ZIP
