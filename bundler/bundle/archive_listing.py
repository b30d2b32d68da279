"""What the archive reader's listing mode records of a member (:func:`bundler.bundle.archive_read.
list_tar`): a data type of its own, shared by the reader, the writer that copies listed members
(:func:`bundler.bundle.archive_write.write_listed`) and the walk that judges them as files of a
bundle (:mod:`bundler.bundle.walk`)."""

from __future__ import annotations

from typing import NamedTuple


class ListedMember(NamedTuple):
    """One member :func:`list_tar` admitted, and where its bytes are in the archive.

    ``header_at`` is where its first header block starts (a pax or long-name header, when it
    has one), ``data_at`` where its data starts; ``mode`` is a file's permission bits (a
    folder's is the archive form's own, which nothing reads). ``archive_form``: its header is
    one block, exactly the one a bundle archive has for it, and its padding is zeros, so its
    bytes from ``header_at`` are those of a bundle archive.
    """

    name: str
    is_dir: bool
    mode: int
    size: int
    header_at: int
    data_at: int
    archive_form: bool
