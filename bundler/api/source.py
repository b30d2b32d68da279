"""What a BUNDLE names, resolved once: a folder, an archive file or an ``oci://`` reference,
and how to reach a registry for one.

Part of :mod:`bundler.api`, which re-exports :func:`open_bundle`, :class:`OpenBundle`,
:class:`BundleKind` and :class:`RegistryOptions`; import them from there.
"""

from __future__ import annotations

import contextlib
import enum
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.errors import withholding
from bundler.rules.progress import Progress

if TYPE_CHECKING:
    from bundler.bundle.archive_listing import ListedMember
    from bundler.bundle.archive_spill import SpilledDigests
    from bundler.bundle.verify_report import VerifyReport
    from bundler.registry.transport import Options

REFERENCE_SCHEME = "oci://"
"""How a BUNDLE names a registry artifact (:data:`bundler.registry.reference.SCHEME`; a test
checks the two agree, so that telling a reference apart loads no registry code)."""

LISTED_BY_INSPECT = frozenset({"workspace"})
"""The layers :func:`inspect` of a reference judges as they arrive without keeping them (the
bulk of an agent): every rule and every file's digest, as a pulled folder's verify judges."""


@dataclass(frozen=True, kw_only=True)
class RegistryOptions:
    """How to reach an OCI registry: over plain HTTP (credentials then go to loopback hosts
    only), and which CA file's certificates to trust besides the system's. ``username`` and
    ``password`` are credentials for this call alone; ``authfile`` the one credentials file to
    read; without them credentials are searched where podman, skopeo and docker keep them
    (:mod:`bundler.registry.auth`). ``no_cache``: a pull (``pull``, and ``open_bundle`` of a
    reference, under ``verify``, ``inspect`` and the import) neither reads nor writes the
    layer cache (:mod:`bundler.registry.cache`); every blob is downloaded."""

    plain_http: bool = False
    ca_file: Path | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    authfile: Path | None = None
    no_cache: bool = False

    def _library(self) -> Options:
        from bundler.registry.transport import Options

        return Options(
            plain_http=self.plain_http,
            ca_file=None if self.ca_file is None else os.fspath(self.ca_file),
            username=self.username,
            password=self.password,
            authfile=None if self.authfile is None else os.fspath(self.authfile),
        )


class BundleKind(enum.Enum):
    """What a BUNDLE named: a bundle folder, an archive file, or an ``oci://`` reference."""

    FOLDER = "folder"
    ARCHIVE = "archive"
    REFERENCE = "reference"


@dataclass(frozen=True)
class OpenBundle:
    """A BUNDLE resolved to a folder to read, for the length of :func:`open_bundle`'s block.

    ``source`` is the name as given; ``folder`` the bundle folder (the folder itself, or a
    private copy of an archive or of a registry artifact, removed when the block ends);
    ``reference`` the registry reference pinned to the digest read (``None`` for a local
    bundle). ``scrub`` withholds the credentials a registry was sent: what a registry serves is
    its text, so whatever a caller shows of the copy goes through it.
    """

    source: str
    kind: BundleKind
    folder: Path
    reference: str | None = None
    scrub: Callable[[str], str] = str
    listed: list[ListedMember] = field(default_factory=list)
    """Members of the layers judged as they arrived and not written (a reference only)."""
    digests: SpilledDigests | None = None
    """The digests the pull recorded of its files, those layers' included (a reference only)."""
    unpacked: bool = True
    """False for an archive opened with ``unpack=False``: ``folder`` is then the archive
    itself, unpacked by the operation it is handed where that operation needs it."""

    @property
    def shown(self) -> str:
        """The bundle as reports name it: the pinned reference, or the path as given."""
        return self.reference if self.reference is not None else self.source

    @property
    def digest(self) -> str | None:
        """The artifact's digest (``sha256:…``) for a reference, else ``None``."""
        if self.reference is None:
            return None
        return self.reference.rsplit("@", 1)[1]

    def tag_warning(self) -> str | None:
        """For a reference given by tag: that a tag can move, and the digest to pin to."""
        if self.reference is None:
            return None
        from bundler.registry.reference import parse_reference

        digest = parse_reference(self.reference).digest or ""
        return parse_reference(self.source).unpinned_warning(digest)


def bundle_kind(source: str) -> BundleKind:
    """What ``source`` names, told by its spelling and, for a file, its first bytes."""
    if source.startswith(REFERENCE_SCHEME):
        return BundleKind.REFERENCE
    from bundler.bundle.archive_kind import is_archive

    return BundleKind.ARCHIVE if is_archive(Path(source)) else BundleKind.FOLDER


@contextlib.contextmanager
def open_bundle(
    source: str | os.PathLike[str],
    *,
    registry: RegistryOptions = RegistryOptions(),
    progress: Progress | None = None,
    list_only: frozenset[str] = frozenset(),
    unpack: bool = True,
) -> Iterator[OpenBundle]:
    """Resolve BUNDLE ``source`` once: a bundle folder is read where it is, an archive is
    unpacked into a private scratch folder, an ``oci://`` reference is pulled into one (the
    layers ``list_only`` names are judged as they arrive and not written: their members and
    digests are in the answer's ``listed`` and ``digests``); a scratch copy is removed when the
    block ends, however it ends, and a killed run's by the next run, ``recover`` and ``doctor``.

    ``registry`` applies to a reference only. With ``unpack=False`` an archive is left as it
    is, for the operation it is handed to unpack where that operation needs it: an import
    unpacks it inside the install, where the files are moved into place rather than copied and
    its recovery finds what a kill leaves.
    Nothing is verified here: :func:`verify` (or the operation the bundle is for) does that.
    """
    given = os.fspath(source)
    kind = bundle_kind(given)
    if kind is BundleKind.FOLDER:
        yield OpenBundle(given, kind, Path(given))
        return
    if kind is BundleKind.ARCHIVE and not unpack:
        yield OpenBundle(given, kind, Path(given), unpacked=False)
        return
    if kind is BundleKind.ARCHIVE:
        from bundler.bundle.archive import unpacked

        with unpacked(Path(given)) as folder:
            yield OpenBundle(given, kind, folder)
        return
    from bundler.bundle.archive_spill import SpilledDigests
    from bundler.registry.pull import pulled
    from bundler.registry.reference import parse_reference

    ref = parse_reference(given)
    listed: list[ListedMember] = []
    library = registry._library()
    with (
        SpilledDigests() as digests,
        pulled(
            ref,
            library,
            progress=progress,
            list_only=list_only,
            listed=listed,
            digests=digests,
            cache=not registry.no_cache,
        ) as copy,
    ):
        folder, digest, scrub = copy
        pinned = str(ref.with_digest(digest))
        yield OpenBundle(given, kind, folder, pinned, scrub, listed, digests)


@contextlib.contextmanager
def opened(
    bundle: OpenBundle | str | os.PathLike[str],
    registry: RegistryOptions,
    progress: Progress | None,
    list_only: frozenset[str] = frozenset(),
) -> Iterator[OpenBundle]:
    """``bundle`` as it is when already open (an archive opened without unpacking it unpacked
    now), else opened for the block (and errors made in it withhold what the registry was
    sent)."""
    if isinstance(bundle, OpenBundle) and not bundle.unpacked:
        from bundler.bundle.archive import unpacked

        with unpacked(Path(bundle.source)) as folder:
            yield replace(bundle, folder=folder, unpacked=True)
        return
    if isinstance(bundle, OpenBundle):
        with _withholding(bundle.scrub):
            yield bundle
        return
    with (
        open_bundle(bundle, registry=registry, progress=progress, list_only=list_only) as resolved,
        _withholding(resolved.scrub),
    ):
        yield resolved


def _withholding(scrub: Callable[[str], str]) -> contextlib.AbstractContextManager[None]:
    """:func:`bundler.errors.withholding` of what a registry was sent; nothing for a local
    bundle, which was sent nowhere (so its errors keep their form: a hint stays a hint)."""
    return contextlib.nullcontext() if scrub is str else withholding(scrub)


def name_as_given(report: VerifyReport, bundle: OpenBundle) -> None:
    """Make ``report`` name the bundle as given, not its scratch copy: an archive by its
    absolute path, a registry artifact by its reference pinned to the digest read."""
    if bundle.kind is BundleKind.ARCHIVE:
        report.path = Path(os.path.abspath(bundle.source))
    elif bundle.kind is BundleKind.REFERENCE:
        report.reference = bundle.reference
