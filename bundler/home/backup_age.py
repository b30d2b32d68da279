"""Encrypted backups: a backup zip as one age file (04 §5.6, ``specs/backup-format.md``).

``home backup --encrypt-to RECIPIENT`` writes ``NAME.zip.age``: a binary age v1 file, to the
recipients :mod:`bundler.fs.age` reads (``age1…``, ``ssh-ed25519``/``ssh-rsa`` public keys,
``@FILE``), whose plain text is exactly the backup zip, so ``age -d -i KEY NAME.zip.age``
gives a zip any unzip reads.

The plain zip never gets a name outside a private folder: the backup builds it in a locked
``0700`` scratch folder inside the home's ``backups/`` (the home already holds those bytes in
clear, and ``recover --home`` clears a dead one), then streams it through ``pyrage`` into the
hidden temporary beside the destination; a restore decrypts into its own staging folder in
the home; ``verify-backup`` into a locked ``0700`` scratch folder beside the encrypted file.
``pyrage``'s ``encrypt_io``/``decrypt_io`` read and write through file objects in 8 KiB
calls, so memory stays flat whatever the size (``pyrage`` is imported only here, on use).

age authenticates the payload chunk by chunk: a decryption writes plain text before it has
seen the end, so a file cut short is found only at its end; every reader decrypts into a
private folder it removes on failure, and the zip's own checks run on the result.

Without a key, an encrypted file can still be told for one a backup made (``home backups``,
``home prune``): its header parses as age v1 with only X25519 or SSH recipient stanzas (those
bundler writes to), and its size is one an age payload can have.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bundler.errors import (
    InvalidInput,
    NotABundle,
    Undecryptable,
    UnsuitablePath,
    UsageError,
    os_failure,
)
from bundler.fs import age, durable
from bundler.fs.scratch import CHECK_PREFIX, clear_dead_scratch, scratch_folder
from bundler.rules.names import escape_display
from bundler.rules.progress import Progress, phase

AGE_SUFFIX = ".age"
"""What an encrypted backup's name ends with: ``backup-….zip.age``."""
_CHUNK = 64 << 10
_TAG = 16
_NONCE = 16
_STANZAS_BUNDLER_WRITES = frozenset({"X25519", "ssh-ed25519", "ssh-rsa"})
PLAIN_NAME = "backup.zip"
"""The decrypted zip's name inside the private folder it is written in."""
_OPEN = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def payload_size(plain: int) -> int:
    """The bytes of an age payload holding ``plain`` bytes: a 16-byte nonce, then chunks of
    64 KiB (the last may be shorter, and is empty only when the whole text is) each with a
    16-byte tag."""
    chunks = max(1, -(-plain // _CHUNK))
    return _NONCE + plain + _TAG * chunks


def payload_problem(payload: int) -> str | None:
    """Why ``payload`` bytes cannot be a whole age payload (its last piece too short to hold
    a chunk's tag), else None. Most lengths are some payload's: a file cut short elsewhere is
    found by the reader holding a key, at the chunk where it ends."""
    body = payload - _NONCE
    full, last = divmod(body, _CHUNK + _TAG)
    if (last == 0 and full >= 1) or last > _TAG or (last == _TAG and full == 0):
        return None
    return "its payload is cut short"


class _Side:
    """One side of ``pyrage``'s stream. What a call back into Python raises (a disk error, the
    CLI's interrupt) may come back from ``pyrage`` wrapped in its own error, or not at all: it
    is kept here and raised again as it was (:func:`_streamed`)."""

    failed: BaseException | None = None

    def _kept(self, exc: BaseException) -> BaseException:
        if self.failed is None:
            self.failed = exc
        return exc


class _Reader(_Side):
    """A descriptor read as the file object ``pyrage`` asks for, counting for a progress bar."""

    def __init__(self, fd: int, progress: Progress | None) -> None:
        self.fd = fd
        self.progress = progress

    def read(self, size: int = -1) -> bytes:
        try:
            data = os.read(self.fd, size if size > 0 else _CHUNK)
            if self.progress is not None and data:
                self.progress(0, len(data))
        except BaseException as exc:
            raise self._kept(exc) from None
        return data


class _Writer(_Side):
    """A descriptor written as the file object ``pyrage`` asks for."""

    def __init__(self, fd: int, progress: Progress | None = None) -> None:
        self.fd = fd
        self.progress = progress
        self.written = 0

    def write(self, data: bytes) -> int:
        try:
            self._write(data)
        except BaseException as exc:
            raise self._kept(exc) from None
        return len(data)

    def _write(self, data: bytes) -> None:
        durable.write_all(self.fd, data)
        self.written += len(data)
        if self.progress is not None:
            self.progress(0, len(data))

    def flush(self) -> None:
        return None


@contextlib.contextmanager
def _streamed(*sides: _Side) -> Iterator[None]:
    """Around a ``pyrage`` stream: what one of ``sides`` raised is raised again unwrapped."""
    try:
        yield
    except BaseException:
        for side in sides:
            if side.failed is not None:
                raise side.failed from None
        raise


def encrypt_into(
    src_fd: int, dst_fd: int, recipients: Sequence[age.Recipient], progress: Progress | None
) -> None:
    """Stream the file ``src_fd`` (from its start) into ``dst_fd`` as one age file to
    ``recipients``, fsync it, and check what was written: a header that parses and exactly
    the payload the zip's size makes (a write the file system lost shows here, not at the
    receiver's ``age -d``)."""
    import pyrage

    plain = os.fstat(src_fd).st_size
    os.lseek(src_fd, 0, os.SEEK_SET)
    made = [
        pyrage.x25519.Recipient.from_str(r.text)
        if r.kind == "x25519"
        else pyrage.ssh.Recipient.from_str(r.text)
        for r in recipients
    ]
    reader, writer = _Reader(src_fd, progress), _Writer(dst_fd)
    with _streamed(reader, writer):
        pyrage.encrypt_io(reader, writer, made)
    os.fsync(dst_fd)
    head = os.pread(dst_fd, age.MAX_HEADER_BYTES + _NONCE + _TAG, 0)
    header = age.parse_header(head)
    written = os.fstat(dst_fd).st_size
    if isinstance(header, str) or written - header.header_bytes != payload_size(plain):
        raise OSError(errno.EIO, "the encrypted backup read back is not what was written")


def is_encrypted(path: Path) -> bool:
    """Whether the file ``path`` starts as an age v1 file (a zip starts ``PK``); False when it
    cannot be read, which the zip reader then reports."""
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return os.pread(fd, len(age.AGE_MAGIC), 0) == age.AGE_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def load_identities(paths: Sequence[Path], ask: age.AskPassphrase | None) -> list[Any]:
    """The identities of ``--age-identity`` (``bundler.fs.age.load_identities``)."""
    return age.load_identities(paths, "--age-identity", ask)


def decrypt_into(
    path: Path,
    dst_fd: int,
    identities: Sequence[Any],
    progress: Progress | None,
    *,
    writer: _Writer | None = None,
) -> int:
    """Stream the encrypted backup ``path`` into ``dst_fd`` (an empty file in a private
    folder; or into ``writer``) and return its plain bytes; ``progress`` sees a
    ``decrypting`` phase. :class:`InvalidInput` (exit 3) naming the file when
    it is not an age file, when no identity opens it, or when it is corrupt or cut short;
    what was written then is the caller's to remove. Nothing of a key reaches a message."""
    import pyrage

    shown = escape_display(str(path))
    try:
        fd = os.open(path, _OPEN)
    except OSError as exc:
        raise os_failure(
            f"cannot open {shown} ({os.strerror(exc.errno or 0)}): name an existing backup",
            exc,
            path=shown,
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsuitablePath(f"{shown} is not a regular file", path=shown)
        os.set_blocking(fd, True)
        problem = header_problem(fd, st.st_size)
        if problem is not None:
            raise NotABundle(f"{shown} is not an encrypted backup: {problem}", path=shown)
        writer = _Writer(dst_fd) if writer is None else writer
        reader = _Reader(fd, progress)
        try:
            with phase(progress, "decrypting", 1, st.st_size), _streamed(reader, writer):
                pyrage.decrypt_io(reader, writer, list(identities))
        except pyrage.DecryptError as err:
            raise _not_opened(shown, age.not_opened(err).reason) from None
        except OSError as exc:
            if exc.errno:  # the disk's, not the file's: the caller says what failed
                raise
            raise _not_opened(shown, "it is corrupt or cut short") from None
        return writer.written
    finally:
        os.close(fd)


def _not_opened(shown: str, reason: str) -> InvalidInput:
    return Undecryptable(f"{shown} cannot be decrypted: {reason}", path=shown)


def header_problem(fd: int, size: int) -> str | None:
    """Why the open file ``fd`` of ``size`` bytes is not an encrypted backup bundler made, as
    far as can be told without a key (the header's syntax, recipient stanzas of the kinds
    bundler writes to, a payload of whole chunks); None when it may be one."""
    head = os.pread(fd, age.MAX_HEADER_BYTES + _NONCE + _TAG, 0)
    header = age.parse_header(head)
    if isinstance(header, str):
        return header
    kinds = {kind for kind in header.stanzas if not kind.endswith("-grease")}
    if not kinds <= _STANZAS_BUNDLER_WRITES:
        return "it is encrypted to a kind of recipient bundler never writes to"
    return payload_problem(size - header.header_bytes)


class _Opened(Exception):
    """Raised by the probe's writer at the first plain byte: the identities open the file."""


class _Probe(_Writer):
    def _write(self, data: bytes) -> None:
        raise _Opened


def identities_for(
    path: Path, paths: Sequence[Path], ask: age.AskPassphrase | None
) -> list[Any] | None:
    """The identities that open the encrypted backup ``path``, checked on its first chunk
    before anything is written (a wrong identity or a damaged header refuses here, exit 3);
    None for a backup that is not encrypted. ``UsageError`` (exit 2) for an encrypted one
    without ``--age-identity``, and for ``--age-identity`` with a plain zip."""
    shown = escape_display(str(path))
    if not is_encrypted(path):
        if paths and os.path.isfile(path):
            raise UsageError(
                f"{shown} is not an encrypted backup: give it without --age-identity", path=shown
            )
        return None
    if not paths:
        raise UsageError(
            f"{shown} is an encrypted backup: give --age-identity FILE (an age identity or SSH "
            "private key of one of its recipients)",
            path=shown,
        )
    identities = load_identities(paths, ask)
    with contextlib.suppress(_Opened):  # the first chunk opened: enough to know
        decrypt_into(path, -1, identities, None, writer=_Probe(-1))
    return identities


def renamed(exc: InvalidInput, plain: Path, path: Path) -> InvalidInput:
    """``exc``, raised by a check of the decrypted copy ``plain``, naming the encrypted
    backup ``path`` instead of the private copy."""
    shown = f"{escape_display(str(path))} (decrypted)"
    return exc.restated(exc.message.replace(str(plain), shown), path=escape_display(str(path)))


@contextlib.contextmanager
def decrypted_copy(
    path: Path, identities: Sequence[Any], progress: Progress | None
) -> Iterator[tuple[Path, Path]]:
    """The encrypted backup ``path`` decrypted into ``backup.zip`` of a locked 0700 scratch
    folder ``.bundler-check-<token>/`` beside it (the file's own file system, never the
    temporary folder), yielded as (the zip, the folder); the folder is removed when the block
    ends however it ends, and a dead one by the next check there. ``Refused`` when the
    folder cannot be written in."""
    parent = Path(os.path.dirname(os.path.abspath(path)))
    shown = escape_display(str(parent))
    try:
        parent_fd = durable.open_dir(parent, follow=True)
    except OSError as exc:
        raise os_failure(
            f"cannot open {shown} ({os.strerror(exc.errno or 0)}) to decrypt the backup in",
            exc,
            path=shown,
        ) from None
    with contextlib.ExitStack() as stack:
        stack.callback(os.close, parent_fd)
        try:
            clear_dead_scratch(parent_fd, CHECK_PREFIX)
            made = scratch_folder(parent_fd, CHECK_PREFIX, where=str(parent))
            name, folder_fd = stack.enter_context(made)
        except OSError as exc:
            raise os_failure(
                f"cannot decrypt the backup beside itself in {shown} "
                f"({os.strerror(exc.errno or 0)}): the plain zip is only ever written in a "
                "private folder there; copy the backup to a folder you can write in",
                exc,
                path=shown,
            ) from None
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(PLAIN_NAME, flags, 0o600, dir_fd=folder_fd)
        try:
            decrypt_into(path, fd, identities, progress)
        finally:
            os.close(fd)
        yield parent / name / PLAIN_NAME, parent / name
