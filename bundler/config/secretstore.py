"""ZeroClaw's secret store: the install's ``.secret_key`` and the ``enc2:``/``enc:`` values.

ZeroClaw encrypts every secret field of ``config.toml`` at rest unless ``[secrets] encrypt`` is
false. What it writes, and so what this module reads and writes alike:

* the key: ``<folder holding the config.toml name>/.secret_key`` (the install root, never the
  folder of a symlinked config's target), 32 bytes written as 64 hex digits. ZeroClaw reads the
  text, trims white space around it and decodes it as hex of either case; it never looks at the
  file's mode. :func:`load_key` accepts exactly that (read without following a link, bounded);
  a mode wider than 0600 is a warning (:attr:`KeyFile.too_open`), never a refusal.
* ``enc2:<hex(nonce 12 ‖ ciphertext ‖ tag 16)>``: ChaCha20-Poly1305, a fresh random nonce, no
  associated data (:func:`encrypt`, :func:`decrypt`).
* ``enc:<hex>``: the legacy form, the plain text XORed with the key repeated; it has no
  integrity, so a result that is not UTF-8 is the only sign of a wrong key. ZeroClaw rewrites it
  as ``enc2:`` on its next save, and so does every writer here.
* ``op://…``: a 1Password reference, resolved by ZeroClaw at start-up, never by bundler.

A key that is missing is created as ZeroClaw creates it (:func:`create_key`): a temporary file
0600 written and fsynced, the folder fsynced, published with ``link(2)`` (never replacing a key:
when another process published one first, that key is used), the folder fsynced, the temporary
removed.

The API, by use: reading the key (:func:`load_key`, :func:`read_key_file`, :func:`read_key_at`),
values (:func:`is_encrypted`, :func:`is_reference`, :func:`decrypt`, :func:`try_decrypt`,
:func:`encrypt`), creating the key (:func:`create_key`, :func:`publish_key`), writing under the
policy (:func:`encrypt_policy`, :func:`store_value`, :func:`store_tree`, :class:`SecretWriter`),
the export's sweep (:func:`open_stored`) and ``doctor``/``config get`` (:func:`census`,
:func:`reveal`).

Neither the key nor a decrypted value ever reaches a message, an exception, a ``repr`` or a
file other than ``.secret_key`` itself: errors say which check failed, never what was read.
``cryptography`` is imported inside the functions that need it, so a command that never meets
a secret does not pay for it at start-up.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundler.errors import InvalidInput, Refused
from bundler.fs import durable
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules import schema
from bundler.rules.names import escape_display
from bundler.rules.paths import format_path
from bundler.rules.secrets import (
    CIPHERTEXT_PREFIXES,
    SECRET_MIN_LENGTH,
    SweepTarget,
    iter_leaves,
)

__all__ = [
    "KEY_BYTES",
    "KEY_NAME",
    "KeyFile",
    "NotDecrypted",
    "OpenedConfig",
    "SecretKey",
    "SecretWriter",
    "census",
    "create_key",
    "decrypt",
    "encrypt",
    "encrypt_policy",
    "is_encrypted",
    "is_reference",
    "key_error",
    "key_leftovers",
    "key_problem",
    "key_spellings",
    "load_key",
    "needs_key",
    "open_stored",
    "parse_key_text",
    "publish_key",
    "read_key_at",
    "read_key_file",
    "replace_sealed",
    "reveal",
    "secret_strings",
    "store_tree",
    "store_value",
    "try_decrypt",
]

KEY_NAME = ".secret_key"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
ENC, ENC2 = CIPHERTEXT_PREFIXES
REFERENCE = "op://"
KEY_FILE_LIMIT = 64 * 1024
"""More than any key ZeroClaw writes (64 digits) with room for white space around it."""
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


class NotDecrypted(Exception):
    """A stored value that does not open under the key; ``reason`` completes "does not
    decrypt: …" and holds nothing of the value or the key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


def is_encrypted(value: object) -> bool:
    """Whether ``value`` is a stored-encrypted string (``enc2:`` or the legacy ``enc:``)."""
    return isinstance(value, str) and value.startswith((ENC2, ENC))


def is_reference(value: object) -> bool:
    """Whether ``value`` is a 1Password reference (``op://``), which bundler never resolves."""
    return isinstance(value, str) and value.startswith(REFERENCE)


def _hex_decode(text: str) -> bytes | None:
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
    decoded = _hex_decode(text.strip(_WHITE_SPACE))
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
        return Refused(key_problem(found), path=found.where)
    return InvalidInput(key_problem(found), path=found.where)


def _cipher(key: SecretKey) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    return ChaCha20Poly1305(key.raw)


def encrypt(plain: str, key: SecretKey) -> str:
    """``plain`` sealed as ZeroClaw seals it: ``enc2:`` and the hex of a fresh 12-byte nonce,
    the ciphertext and its tag. (Whether a value is to be sealed at all is the caller's call:
    ZeroClaw never seals an empty value, nor one already ``enc:``/``enc2:``/``op://``.)"""
    nonce = os.urandom(NONCE_BYTES)
    sealed: bytes = _cipher(key).encrypt(nonce, plain.encode("utf-8"), None)
    return ENC2 + (nonce + sealed).hex()


def decrypt(value: str, key: SecretKey) -> str:
    """The plain text of the stored value ``value`` (``enc2:`` or ``enc:``) under ``key``.

    Raises :class:`NotDecrypted` (its reason holds nothing of the value) when the hex is bad,
    an ``enc2:`` value is shorter than a nonce and a tag or fails authentication (another key,
    or altered), or the result is not UTF-8; ``ValueError`` for a value that is not stored
    encrypted at all.
    """
    if value.startswith(ENC2):
        blob = _hex_decode(value[len(ENC2) :])
        if blob is None:
            raise NotDecrypted("its enc2: value is not hex")
        if len(blob) < NONCE_BYTES + TAG_BYTES:
            raise NotDecrypted("its enc2: value is shorter than a nonce and a tag")
        plain = _open_chacha(blob, key)
        if plain is None:
            raise NotDecrypted("it fails authentication (another key, or altered)")
    elif value.startswith(ENC):
        blob = _hex_decode(value[len(ENC) :])
        if blob is None:
            raise NotDecrypted("its enc: value is not hex")
        pad = key.raw
        plain = bytes(b ^ pad[i % KEY_BYTES] for i, b in enumerate(blob))
    else:
        raise ValueError("not a stored-encrypted value")
    text = _utf8(plain)
    if text is None:
        # raised outside any handler: a decode error keeps the bytes it failed on
        raise NotDecrypted("its plain text is not UTF-8 (another key, or altered)")
    return text


def _open_chacha(blob: bytes, key: SecretKey) -> bytes | None:
    from cryptography.exceptions import InvalidTag

    try:
        opened: bytes = _cipher(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], None)
    except InvalidTag:
        return None
    return opened


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def try_decrypt(value: str, key: SecretKey | None) -> str | None:
    """:func:`decrypt`, None when there is no key or the value does not open."""
    if key is None:
        return None
    try:
        return decrypt(value, key)
    except NotDecrypted:
        return None


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
        raise Refused(
            f"cannot create {where}: {err.strerror}; nothing was written", path=where
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
        raise Refused(f"{where} vanished while it was created; run the command again", path=where)
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


# --- what the sweep looks for ------------------------------------------------------------------

KEY_TARGET_PATH = KEY_NAME
"""The name a hit on the key itself reports in place of a config path."""

NO_KEY = "no key"
KEY_UNREADABLE = "key unreadable"
WRONG_KEY = "does not decrypt under the key"
REFERENCE_REASON = "op:// reference"


@dataclass
class OpenedConfig:
    """The config's views with every stored value that opens replaced by its plain text (in
    memory only), what else to sweep for, and what could not be opened, counted by reason."""

    views: list[Any]
    targets: list[SweepTarget] = field(default_factory=list, repr=False)
    unswept: dict[str, int] = field(default_factory=dict)

    @property
    def unswept_total(self) -> int:
        """How many stored secrets hide a plain text the sweep cannot look for."""
        return sum(self.unswept.values())


def open_stored(views: Sequence[Any], found: KeyFile) -> OpenedConfig:
    """Every ``enc2:``/``enc:`` string anywhere in ``views`` opened under ``found``'s key.

    The answer's ``views`` are copies with each value that opened replaced by its plain text, so
    the sweep's own rules (:func:`bundler.rules.secrets.sweep_targets`: floors, bearer tokens)
    apply to it; ``targets`` adds each opened value of at least the secret floor at its path
    (ciphertext outside a secret field too) and the key in each spelling a copy of
    ``.secret_key`` would leak it (its raw bytes among them). ``unswept`` counts the distinct
    values that stay hidden: with no key, an unreadable key, under another key, and
    ``op://`` references (never resolved).
    """
    key = found.key
    opened: dict[str, str | None] = {}
    unswept: dict[str, set[str]] = {}

    def visit(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: visit(v) for k, v in value.items()}
        if isinstance(value, list):
            return [visit(v) for v in value]
        if isinstance(value, str):
            if is_encrypted(value):
                if value not in opened:
                    opened[value] = try_decrypt(value, key)
                plain = opened[value]
                if plain is not None:
                    return plain
                reason = {"present": WRONG_KEY, "unreadable": KEY_UNREADABLE}.get(
                    found.state, NO_KEY
                )
                unswept.setdefault(reason, set()).add(value)
            elif is_reference(value):
                unswept.setdefault(REFERENCE_REASON, set()).add(value)
        return value

    result = OpenedConfig([visit(view) for view in views])
    for view in views:
        for leaf in iter_leaves(view):
            plain = opened.get(leaf.value) if isinstance(leaf.value, str) else None
            if plain is not None and len(plain) >= SECRET_MIN_LENGTH:
                result.targets.append(SweepTarget(leaf.path, plain))
    if key is not None:
        spellings = [*key_spellings(key), key.raw.decode("utf-8", "surrogateescape")]
        result.targets += [SweepTarget(KEY_TARGET_PATH, spelling) for spelling in spellings]
    result.unswept = {reason: len(values) for reason, values in sorted(unswept.items())}
    return result


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


# --- what a writer stores ----------------------------------------------------------------------

POLICY_VARIABLE = "ZEROCLAW_secrets__encrypt"


def encrypt_policy(file_data: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[bool, str]:
    """Whether secrets are stored encrypted: the file's ``[secrets] encrypt``, default true (as
    ZeroClaw's ``SecretsConfig``), and a warning when :data:`POLICY_VARIABLE` says otherwise
    (the file is what a writer follows: the override is the running agent's, not the file's).

    ``InvalidInput`` when the file's value is not a boolean (ZeroClaw would not start).
    """
    table = file_data.get("secrets")
    policy: Any = table.get("encrypt", True) if isinstance(table, Mapping) else True
    if not isinstance(policy, bool):
        raise InvalidInput(
            "secrets.encrypt must be true or false in config.toml", path="secrets.encrypt"
        )
    raw = environ.get(POLICY_VARIABLE)
    overridden = {"true": True, "false": False}.get(raw.strip().lower()) if raw else None
    warning = ""
    if overridden is not None and overridden != policy:
        stored = "encrypted" if policy else "in plain text"
        warning = (
            f"{POLICY_VARIABLE} says secrets.encrypt = {str(overridden).lower()}, but "
            f"config.toml says {str(policy).lower()}: secrets are written {stored}, as the "
            "file says"
        )
    return policy, warning


def needs_key(values: Iterable[str], policy: bool) -> bool:
    """Whether storing ``values`` needs the install's key: to seal one (policy on, a value that
    is neither empty, nor a reference, nor already stored-encrypted) or to check one given
    stored-encrypted."""
    return any(
        is_encrypted(value) or (policy and value and not is_reference(value)) for value in values
    )


def store_value(value: str, key: SecretKey | None, *, policy: bool, path: str, where: str) -> str:
    """What a writer stores for the secret ``value`` at the config path ``path``, as ZeroClaw's
    save does: under the policy, a plain value sealed as ``enc2:`` (never an empty one, never an
    ``op://`` reference); a value given already ``enc2:`` kept as it is, and one given as the
    legacy ``enc:`` rewritten as ``enc2:`` (plain with the policy off), each only when it opens
    under ``key``: a value the install cannot open would stop ZeroClaw from starting.

    ``InvalidInput`` naming ``path`` and the key file ``where`` when a given stored-encrypted
    value does not open (or there is no key to open it).
    """
    if not value or is_reference(value):
        return value
    if is_encrypted(value):
        if key is None:
            raise InvalidInput(
                f"{path}: the value given is stored-encrypted, and there is no {where} to "
                "decrypt it; give the plain value",
                path=path,
            )
        try:
            plain = decrypt(value, key)
        except NotDecrypted as err:
            reason = err.reason
        else:
            if value.startswith(ENC2):
                return value
            return encrypt(plain, key) if policy else plain
        raise InvalidInput(
            f"{path}: the value given is stored-encrypted but does not decrypt under {where} "
            f"({reason}); give the plain value, or one encrypted under this install's key",
            path=path,
        )
    if not policy:
        return value
    if key is None:
        raise ValueError("sealing needs the install's key")
    return encrypt(value, key)


def store_tree(
    value: Any, segments: Sequence[str], seal: Callable[[str, str], str], *, secret: bool = False
) -> Any:
    """``value`` (to be written at ``segments``) with ``seal(text, path)`` applied to every
    string ZeroClaw encrypts in it: a secret field's string, each string item of a secret list,
    each string value of a secret map, found by the schema's ``x-secret`` (pure)."""
    node = schema.resolve(list(segments))[1]
    return _store(value, list(segments), node, seal, secret or bool(node and node.get("x-secret")))


def secret_strings(value: Any, segments: Sequence[str]) -> list[str]:
    """The strings of ``value`` (to be written at ``segments``) that :func:`store_tree` would
    give to its ``seal``."""
    found: list[str] = []

    def collect(text: str, _path: str) -> str:
        found.append(text)
        return text

    store_tree(value, segments, collect)
    return found


def _store(
    value: Any, segments: list[str], node: Any, seal: Callable[[str, str], str], secret: bool
) -> Any:
    if isinstance(value, str):
        return seal(value, format_path(segments)) if secret else value
    if isinstance(value, list):
        if secret:
            return [_store(v, [*segments, str(i)], None, seal, True) for i, v in enumerate(value)]
        items = node.get("items") if isinstance(node, dict) else None
        keyed = isinstance(node, dict) and node.get("x-keyed-by")
        out = []
        for i, item in enumerate(value):
            name = item.get("name") if keyed and isinstance(item, dict) else None
            step = name if isinstance(name, str) else str(i)
            sub = items if isinstance(items, dict) else None
            out.append(
                _store(item, [*segments, step], sub, seal, bool(sub and sub.get("x-secret")))
            )
        return out
    if isinstance(value, dict):
        out_map: dict[str, Any] = {}
        for key, sub in value.items():
            child = None if secret else schema.child(node, str(key))
            inner = secret or bool(child and child.get("x-secret"))
            out_map[key] = _store(sub, [*segments, str(key)], child, seal, inner)
        return out_map
    return value


class SecretWriter:
    """What one write of the config stores for each secret value it is given (:meth:`store`),
    under the install's policy and key.

    With the policy on and no key yet, values are sealed under a new key held in memory
    (``pending``); :meth:`publish` puts it on disk, before the staged config that needs it
    exists. If another process published a key first, its key is the install's and every value
    sealed under the pending one is sealed again under it (the replacements are returned).
    """

    def __init__(
        self,
        install_fd: int,
        install_root: Path,
        file_data: Mapping[str, Any],
        environ: Mapping[str, str],
        *,
        owner: tuple[int, int] | None = None,
    ) -> None:
        self.install_fd = install_fd
        self.install_root = install_root
        self.warnings: list[str] = []
        self._bad_policy: InvalidInput | None = None
        try:
            self.policy, warning = encrypt_policy(file_data, environ)
        except InvalidInput as err:
            # only a write that stores a secret depends on the policy: it refuses then
            self.policy, warning, self._bad_policy = True, "", err
        if warning:
            self.warnings.append(warning)
        self.found = read_key_file(install_fd, install_root)
        self.owner = owner
        self.pending: SecretKey | None = None
        self._sealed: dict[str, str] = {}
        self._warned_mode = False

    @property
    def key(self) -> SecretKey | None:
        """The key values are sealed under: the install's, else the pending one."""
        return self.found.key or self.pending

    def store(self, value: str, path: str) -> str:
        """:func:`store_value` of ``value`` at ``path`` under this install's policy and key."""
        if self._bad_policy is not None and value:
            raise self._bad_policy
        if not needs_key([value], self.policy):
            return value
        if self.found.state == "unreadable":
            raise key_error(self.found)
        if self.found.too_open and not self._warned_mode:
            self._warned_mode = True
            self.warnings.append(self.found.mode_warning())
        if self.key is None and not is_encrypted(value):
            self.pending = SecretKey(os.urandom(KEY_BYTES))
        stored = store_value(value, self.key, policy=self.policy, path=path, where=self.found.where)
        if self.pending is not None and stored != value:
            self._sealed[stored] = value
        return stored

    def publish(self) -> tuple[bool, dict[str, str]]:
        """Put the pending key on disk (:func:`publish_key`): ``(whether this made the key, the
        values to replace when another process's key is used instead)``. Nothing to do without a
        pending key."""
        if self.pending is None:
            return False, {}
        key, made = publish_key(self.install_fd, self.install_root, self.pending, owner=self.owner)
        self.found = KeyFile("present", self.found.where, key, 0o600)
        self.pending = None
        if made:
            return True, {}
        return False, {sealed: encrypt(plain, key) for sealed, plain in self._sealed.items()}


def replace_sealed(text: str, replacements: Mapping[str, str]) -> str:
    """``text`` with each sealed value of ``replacements`` swapped for its new sealing. An
    ``enc2:`` value is hex after its prefix, written as it is in any TOML string, and its random
    nonce makes it unique in the file."""
    for old, new in replacements.items():
        text = text.replace(old, new)
    return text


def reveal(value: Any, found: KeyFile, path: str) -> Any:
    """``value`` (read at the config path ``path``) with every ``enc2:``/``enc:`` string in it
    opened under ``found``'s key, for ``config get --reveal``. ``InvalidInput`` naming ``path``
    (never a value) when one does not open; an ``op://`` reference stays as written."""
    if isinstance(value, dict):
        return {key: reveal(sub, found, path) for key, sub in value.items()}
    if isinstance(value, list):
        return [reveal(sub, found, path) for sub in value]
    if not is_encrypted(value):
        return value
    if found.state == "unreadable":
        raise key_error(found)
    if found.key is None:
        raise InvalidInput(
            f"{path} is stored encrypted and there is no {found.where} to decrypt it",
            path=path,
        )
    try:
        return decrypt(value, found.key)
    except NotDecrypted as err:
        reason = err.reason
    raise InvalidInput(f"{path} does not decrypt under {found.where}: {reason}", path=path)


def census(data: Any, found: KeyFile) -> tuple[int, int]:
    """How many stored-encrypted strings of ``data`` open under ``found``'s key, and how many do
    not (none opens without a key): ``doctor``'s count, which never says which."""
    opened = closed = 0
    pending: list[Any] = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending += value.values()
        elif isinstance(value, list):
            pending += value
        elif is_encrypted(value):
            if try_decrypt(value, found.key) is None:
                closed += 1
            else:
                opened += 1
    return opened, closed


def key_leftovers(install_fd: int) -> list[str]:
    """The temporary key files (``.secret_key.tmp-<token>``) a crash left before the key was
    published; never the install's key (``recover --install`` removes them)."""
    return sorted(name for name in os.listdir(install_fd) if name.startswith(KEY_TEMP_PREFIX))
