"""ZeroClaw's ``.secret_key``: read, judged, created and published as ZeroClaw does.

The key is ``<folder holding the config.toml name>/.secret_key`` (the install root, never the
folder of a symlinked config's target), 32 bytes written as 64 hex digits. ZeroClaw reads the
text, trims white space around it and decodes it as hex of either case; it never looks at the
file's mode. :func:`load_key` accepts exactly that (read without following a link, bounded); a
mode wider than 0600 is a warning (:attr:`KeyFile.too_open`), never a refusal.

A key that is missing is created as ZeroClaw creates it (:func:`create_key`): a temporary file
0600 written and fsynced, the folder fsynced, published with ``link(2)`` (never replacing a key:
when another process published one first, that key is used), the folder fsynced, the temporary
removed. The key never reaches a message, an exception or a ``repr``.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from bundler.errors import (
    CannotAccess,
    ChangedMeanwhile,
    InvalidInput,
    Malformed,
    Refused,
    os_failure,
)
from bundler.fs import durable
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules.names import escape_display

KEY_NAME = ".secret_key"


KEY_BYTES = 32


KEY_FILE_LIMIT = 64 * 1024


KEY_TEMP_PREFIX = f"{KEY_NAME}.tmp-"


# Rust's str::trim: the Unicode White_Space property (Python's str.strip also takes U+001C-1F)
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class SecretKey:
    """The install's 32-byte key. Its ``repr`` and ``str`` withhold it; :attr:`raw` is read by
    the cipher and by the sweep that looks for the key itself."""

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes) -> None:
        if len(raw) != KEY_BYTES:
            raise ValueError("a secret key is 32 bytes")
        self._raw = bytes(raw)

    @property
    def raw(self) -> bytes:
        """The 32 bytes (for the cipher, and for the sweep that looks for the key itself)."""
        return self._raw

    def __repr__(self) -> str:
        return "SecretKey(<withheld>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        import hmac  # in constant time; imported here, as hashlib is costly at start-up

        return isinstance(other, SecretKey) and hmac.compare_digest(other._raw, self._raw)

    def __hash__(self) -> int:
        return hash(self._raw)


@dataclass(frozen=True)
class KeyFile:
    """What ``<install>/.secret_key`` holds: ``state`` is ``present``, ``missing`` or
    ``unreadable`` (``problem`` then says why, in words that hold no byte of the file)."""

    state: str
    where: str
    key: SecretKey | None = field(default=None, repr=False)
    mode: int = 0
    problem: str = ""
    failed_io: bool = False
    """The file could not be read (the system said why): an environment failure, not bad
    content."""

    @property
    def too_open(self) -> bool:
        """Whether others than the owner may read or write the key (ZeroClaw never checks)."""
        return self.state == "present" and bool(self.mode & 0o077)

    def mode_warning(self) -> str:
        """The warning a too-open key deserves, or ``""``."""
        if not self.too_open:
            return ""
        return (
            f"{self.where} is mode {self.mode:04o}: others may read the key that opens every "
            f"stored secret; make it private with: chmod 600 {self.where}"
        )


def hex_decode(text: str) -> bytes | None:
    """ZeroClaw's ``hex_decode``: even length, ASCII, then each pair read as Rust's
    ``u8::from_str_radix(pair, 16)`` reads it (either case, and a leading ``+`` accepted)."""
    if len(text) % 2 or not text.isascii():
        return None
    out = bytearray()
    for i in range(0, len(text), 2):
        pair = text[i : i + 2]
        digits = pair[1:] if pair[0] == "+" else pair
        if not all(ch in _HEX_DIGITS for ch in digits):
            return None
        out.append(int(digits, 16))
    return bytes(out)


def parse_key_text(raw: bytes) -> SecretKey | str:
    """The key in a ``.secret_key``'s bytes, or the reason it is none (pure).

    Exactly what ZeroClaw accepts: UTF-8 text, trimmed of white space, hex of 32 bytes.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "is not text"
    decoded = hex_decode(text.strip(_WHITE_SPACE))
    if decoded is None:
        return "is not hex"
    if len(decoded) != KEY_BYTES:
        return f"holds {len(decoded)} bytes, not {KEY_BYTES}"
    return SecretKey(decoded)


def read_key_file(install_fd: int, install_root: Path) -> KeyFile:
    """Read ``<install>/.secret_key`` below the open install folder, never following a link,
    never blocking on a FIFO, at most :data:`KEY_FILE_LIMIT` bytes. Never raises for what the
    file is: the answer's ``state`` says."""
    where = escape_display(str(install_root / KEY_NAME))
    modes: list[int] = []

    def remember(st: os.stat_result) -> None:
        modes.append(stat.S_IMODE(st.st_mode))

    try:
        raw = read_small_file(
            KEY_NAME, KEY_FILE_LIMIT, dir_fd=install_fd, follow=False, check=remember
        )
    except FileNotFoundError:
        return KeyFile("missing", where)
    except NotSmallFile as err:
        return KeyFile("unreadable", where, problem=err.reason)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return KeyFile("unreadable", where, problem="is a symbolic link")
        return KeyFile(
            "unreadable", where, problem=f"cannot be read ({err.strerror})", failed_io=True
        )
    parsed = parse_key_text(raw)
    del raw
    if isinstance(parsed, str):
        return KeyFile("unreadable", where, mode=modes[0], problem=parsed)
    return KeyFile("present", where, parsed, modes[0])


def load_key(install_fd: int, install_root: Path) -> SecretKey | None:
    """The install's key; None when there is none. A key file that is not one ZeroClaw would
    read (a link, a FIFO, empty, not hex, not 32 bytes) is ``InvalidInput`` (exit 3) naming it:
    ZeroClaw would not start either, and every value stored under it stays sealed."""
    found = read_key_file(install_fd, install_root)
    if found.state == "unreadable":
        raise key_error(found)
    return found.key


def key_problem(found: KeyFile) -> str:
    """The one line that says why ``found`` holds no usable key, and what to do."""
    if found.failed_io:
        return f"{found.where} {found.problem}; nothing was changed"
    return (
        f"{found.where} {found.problem}: ZeroClaw reads it as 64 hex digits (32 bytes); "
        "restore the install's own key file"
    )


def key_error(found: KeyFile) -> InvalidInput | Refused:
    """The error for an unreadable key: ``Refused`` (exit 1) when the system failed the read,
    ``InvalidInput`` (exit 3) when the file is not a key ZeroClaw would read."""
    if found.failed_io:
        return CannotAccess(key_problem(found), path=found.where)
    return Malformed(key_problem(found), path=found.where)


def key_spellings(key: SecretKey) -> list[str]:
    """The key as a leaked copy would spell it: the file's hex in either case, base64 of the
    raw bytes (standard and URL-safe, padded or not). The raw bytes are not text; the sweep's
    byte targets take them from :attr:`SecretKey.raw`."""
    raw = key.raw
    hexed = raw.hex()
    standard = base64.b64encode(raw).decode("ascii")
    urlsafe = base64.urlsafe_b64encode(raw).decode("ascii")
    spellings = [hexed, hexed.upper(), standard, standard.rstrip("="), urlsafe, urlsafe.rstrip("=")]
    return list(dict.fromkeys(spellings))


def create_key(
    install_fd: int, install_root: Path, *, owner: tuple[int, int] | None = None
) -> tuple[SecretKey, bool]:
    """Make sure ``<install>/.secret_key`` exists: ``(the key on disk, whether this call made it)``.

    An existing key is read (:func:`load_key`; a bad one refuses); else a new random one is
    published (:func:`publish_key`).
    """
    existing = load_key(install_fd, install_root)
    if existing is not None:
        return existing, False
    return publish_key(install_fd, install_root, SecretKey(os.urandom(KEY_BYTES)), owner=owner)


def publish_key(
    install_fd: int, install_root: Path, key: SecretKey, *, owner: tuple[int, int] | None = None
) -> tuple[SecretKey, bool]:
    """Publish ``key`` as ``<install>/.secret_key`` unless a key is there: ``(the key on disk,
    whether it is ``key``)``. Written as ZeroClaw's master writes it, each step durable before
    the next:

    1. ``.secret_key.tmp-<token>``, created 0600 with ``O_EXCL`` and never through a link, gets
       the hex, ``owner`` (uid, gid: the config's, best effort) and an fsync; the folder is
       fsynced. A crash leaves only that temporary (``recover --install`` removes it), never a
       torn key.
    2. ``link(2)`` to ``.secret_key``, which never replaces a name: ``EEXIST`` means another
       process published its key first, and that key is the answer. The folder is fsynced:
       the key is durable under its name.
    3. The temporary is removed and the folder fsynced.

    ``Refused`` (nothing left behind) when a step before the link fails.
    """
    where = escape_display(str(install_root / KEY_NAME))
    temp = f"{KEY_TEMP_PREFIX}{durable.random_token()}"
    try:
        _write_temp_key(install_fd, temp, key, owner)
        try:
            os.link(
                temp, KEY_NAME, src_dir_fd=install_fd, dst_dir_fd=install_fd, follow_symlinks=False
            )
        except FileExistsError:
            made = False
        else:
            made = True
        durable.fsync_dir(install_fd)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=install_fd)
        raise os_failure(
            f"cannot create {where}: {err.strerror}; nothing was written", err, path=where
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=install_fd)
        raise
    with contextlib.suppress(OSError):
        # the key is published: a temporary left here is litter recovery clears, not a failure
        os.unlink(temp, dir_fd=install_fd)
        durable.fsync_dir(install_fd)
    if made:
        return key, True
    winner = load_key(install_fd, install_root)
    if winner is None:  # published, then removed by someone else before this read
        raise ChangedMeanwhile(
            f"{where} vanished while it was created; run the command again", path=where
        )
    return winner, winner == key


def _write_temp_key(
    install_fd: int, temp: str, key: SecretKey, owner: tuple[int, int] | None
) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600, dir_fd=install_fd)
    try:
        durable.write_all(fd, key.raw.hex().encode("ascii"))
        info = os.fstat(fd)
        if owner is not None and (info.st_uid, info.st_gid) != owner:
            # not ours to give away when unprivileged: the key then stays ours, 0600
            with contextlib.suppress(PermissionError):
                os.fchown(fd, *owner)
        os.fchmod(fd, 0o600)
        os.fsync(fd)
    finally:
        os.close(fd)
    durable.fsync_dir(install_fd)


def read_key_at(install_root: Path) -> KeyFile:
    """:func:`read_key_file` for a caller holding no descriptor (a missing install: missing)."""
    where = escape_display(str(install_root / KEY_NAME))
    try:
        fd = os.open(install_root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return KeyFile("missing", where)
    except OSError as err:
        return KeyFile("unreadable", where, problem=f"cannot be read ({err.strerror})")
    try:
        return read_key_file(fd, install_root)
    finally:
        os.close(fd)


def key_leftovers(install_fd: int) -> list[str]:
    """The temporary key files (``.secret_key.tmp-<token>``) a crash left before the key was
    published; never the install's key (``recover --install`` removes them)."""
    return sorted(name for name in os.listdir(install_fd) if name.startswith(KEY_TEMP_PREFIX))
