"""The import receipt written (03 §4): its listing published first, then the receipt linked to
its final name (never replacing one), and marked undone when an undo completes."""

from __future__ import annotations

import contextlib
import os
import stat
from datetime import datetime, timezone

import tomli_w

from bundler.fs import durable, safefs
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.install import receipt_files
from bundler.install.files import ensure_dirs, partial_name, write_new_file
from bundler.install.journal import (
    MAX_RECEIPT_BYTES,
    RECEIPTS,
    Journal,
    is_install_path,
    listing_named,
    staging_name,
)
from bundler.install.undo_files import kept_in
from bundler.rules import tomlcompat
from bundler.rules.actions import step


def mark_undone(install_fd: int, journal: Journal, actions: list[str], *, dry_run: bool) -> None:
    """Add ``[undone]`` (when, how many files kept, the folders kept) to the receipt the undo
    names, replacing it atomically; a receipt marked already, missing or not the one the
    journal's undo read is left as it is (``agents imports`` then reads its state from disk)."""
    name = journal.undone_receipt
    shown = "/".join([*RECEIPTS, name])
    try:
        dir_fd = safefs.open_beneath(install_fd, "/".join(RECEIPTS))
    except OSError:
        return
    try:
        try:
            raw = read_small_file(name, MAX_RECEIPT_BYTES, dir_fd=dir_fd, follow=False)
            data = tomlcompat.loads(raw.decode("utf-8"))
            mode = stat.S_IMODE(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except (OSError, NotSmallFile, UnicodeDecodeError, tomlcompat.TOMLDecodeError):
            return
        if not isinstance(data, dict) or "undone" in data:
            return
        folders = [str(f.get("path")) for f in data.get("folders", []) if isinstance(f, dict)]
        kept, standing = kept_in(install_fd, [f for f in folders if is_install_path(f)])
        actions.append(step("write", shown, f"{shown} marked undone", dry_run=dry_run))
        if dry_run:
            return
        mark = {
            "undone": {
                "at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "kept_files": len(kept),
                "kept_folders": standing,
            }
        }
        text = raw.rstrip(b"\n") + b"\n\n" + tomli_w.dumps(mark).encode("utf-8")
        durable.atomic_write(dir_fd, name, text, mode=mode)
    finally:
        os.close(dir_fd)


def remove_partial_receipt(
    install_fd: int, journal: Journal, actions: list[str], *, dry_run: bool
) -> None:
    """Remove a receipt a crash left half-written under its temporary name."""
    try:
        fd = safefs.open_beneath(install_fd, "/".join(RECEIPTS))
    except OSError:
        return
    try:
        os.stat(partial_name(journal.receipt_stem), dir_fd=fd, follow_symlinks=False)
        actions.append(
            step(
                "remove",
                "/".join([*RECEIPTS, partial_name(journal.receipt_stem)]),
                "a half-written receipt",
                dry_run=dry_run,
            )
        )
        if not dry_run:
            os.unlink(partial_name(journal.receipt_stem), dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def receipt_present(install_fd: int, journal: Journal) -> str | None:
    """The name of the journal's receipt when it is written already (its listing too)."""
    try:
        fd = safefs.open_beneath(install_fd, "/".join(RECEIPTS))
    except OSError:
        return None
    try:
        for name in sorted(os.listdir(fd)):
            if name.startswith(journal.receipt_stem) and name.endswith(".toml"):
                with contextlib.suppress(OSError, NotSmallFile):
                    raw = read_small_file(name, MAX_RECEIPT_BYTES, dir_fd=fd, follow=False)
                    if raw == journal.receipt_text.encode("utf-8"):
                        # published before the receipt; made again if removed since
                        _publish_listing(install_fd, fd, journal, name)
                        return name
        return None
    finally:
        os.close(fd)


def _publish_listing(install_fd: int, dir_fd: int, journal: Journal, name: str) -> None:
    """Publish the journal's staged file listing beside the receipt ``name`` (when the journal
    has one): whole and durable before the receipt is linked."""
    named = listing_named(journal.receipt_text) if journal.receipt_files else None
    if named is None:  # Journal.loads refused a journal naming a listing its receipt does not
        return
    staging_fd = safefs.open_dir_nofollow(install_fd, staging_name(journal.token))
    try:
        receipt_files.publish(staging_fd, dir_fd, name, *named)
    finally:
        os.close(staging_fd)


def write_receipt(install_fd: int, journal: Journal) -> str:
    """Write the journal's receipt under ``data/state/imports/``, its file listing first;
    returns its install path."""
    dir_fd, _ = ensure_dirs(install_fd, "/".join(RECEIPTS))
    try:
        name = write_new_file(
            dir_fd,
            journal.receipt_stem,
            ".toml",
            journal.receipt_text.encode("utf-8"),
            before_link=lambda chosen: _publish_listing(install_fd, dir_fd, journal, chosen),
        )
    finally:
        os.close(dir_fd)
    return "/".join([*RECEIPTS, name])
