"""``agents import FILE.tar``: an archive is unpacked where recovery of the install finds it.

The archive is unpacked (:func:`bundler.bundle.archive.unpacked`) into ``.bundler-unpack-<token>/``
inside the install root, 0700 and locked for the import's whole run, and imported from there like
a folder (the import then verifies it, as always). The folder is removed when the import ends,
however it ends; a kill leaves it unlocked, and ``recover --install``, the next import and
``doctor`` find it by its prefix. A dry run writes nothing in the install, so it unpacks into the
temporary folder instead, as ``bundle verify`` does; so does an import that is to create the
install.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from bundler.bundle.archive import unpacked
from bundler.install.import_types import ImportOptions, ImportReport
from bundler.install.importer import import_bundle
from bundler.install.journal import UNPACK_PREFIX
from bundler.rules import hints


def import_archive(install_root: Path, archive: Path, options: ImportOptions) -> ImportReport:
    """Import the bundle archive ``archive`` into the install (:func:`import_bundle`'s rules)."""
    chosen = replace(options, source=Path(os.path.abspath(archive)))
    if options.dry_run or not os.path.isdir(install_root):
        with unpacked(archive) as folder:
            return import_bundle(install_root, folder, chosen)
    # a folder this import cannot remove is one recover --install removes
    fix = hints.command("recover", "--install", os.path.abspath(install_root))
    with unpacked(archive, parent=install_root, prefix=UNPACK_PREFIX, fix=fix) as folder:
        return import_bundle(install_root, folder, chosen)
