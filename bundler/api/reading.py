"""The operations that read a bundle and change nothing: :func:`verify`, :func:`inspect`, and
what an interrupted export left beside a bundle folder.

Apart from the other operations so that ``bundle verify`` of a folder imports only what it
runs (06 §1). Part of :mod:`bundler.api`: import the names from there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from bundler.api.source import (
    LISTED_BY_INSPECT,
    BundleKind,
    OpenBundle,
    RegistryOptions,
    bundle_kind,
    name_as_given,
    opened,
)
from bundler.rules.progress import Progress

if TYPE_CHECKING:
    from bundler.bundle.inspect import InspectReport
    from bundler.bundle.verify_report import VerifyReport


def verify(
    bundle: OpenBundle | str | os.PathLike[str],
    *,
    registry: RegistryOptions = RegistryOptions(),
    progress: Progress | None = None,
) -> VerifyReport:
    """Check a bundle completely (03 §1), changing nothing. Every fault found in the bundle is
    an error of the report (``ok`` is then false); a bundle that cannot be read at all raises."""
    from bundler.bundle.verify import verify_bundle

    with opened(bundle, registry, progress) as read:
        report = verify_bundle(read.folder, progress=progress)
        name_as_given(report, read)
        return report


def inspect(
    bundle: OpenBundle | str | os.PathLike[str],
    *,
    registry: RegistryOptions = RegistryOptions(),
    progress: Progress | None = None,
) -> InspectReport:
    """Verify a bundle and describe what it holds and grants (03 §2). A reference given by
    name has its workspace judged as it arrives, never written: the same rules and digests as
    a pulled folder's verify, without a copy of the bulk of an agent."""
    from bundler.bundle.inspect import inspect_bundle

    list_only = LISTED_BY_INSPECT if not isinstance(bundle, OpenBundle) else frozenset()
    with opened(bundle, registry, progress, list_only) as read:
        report = inspect_bundle(
            read.folder, progress=progress, known_digests=read.digests, listed=read.listed
        )
        name_as_given(report.verify, read)
        return report


def leftovers_beside(bundle: str | os.PathLike[str]) -> list[str]:
    """What an interrupted export left beside the bundle folder ``bundle`` (its staging, a
    retired copy), one line each naming the command that clears it; none for an archive or a
    reference. Changes nothing."""
    given = os.fspath(bundle)
    if bundle_kind(given) is not BundleKind.FOLDER:
        return []
    from bundler.bundle.leftovers import leftovers_beside as beside

    return beside(Path(given))
