"""age encryption for what bundler hands to one receiver: recipients, identities, the file.

One module for every writer and reader of an age file (a bundle's sealed ``secrets.age``, an
encrypted backup), so a recipient means the same thing everywhere:

* a recipient is an age X25519 public key (``age1…``) or an SSH public key (``ssh-ed25519``,
  ``ssh-rsa``), or ``@FILE`` naming a file of such lines (blank lines and ``#`` comments
  allowed, as ``age -R`` reads them). Plugin and post-quantum recipients are refused: what
  bundler writes must open with the ``age`` that distributions ship (Debian's 1.1.1);
* an identity is an age identity file (``AGE-SECRET-KEY-1…`` lines) or an SSH private key; a
  passphrase-protected SSH key is opened in memory with the passphrase the caller's ``ask``
  gives (a no-echo prompt on a terminal), never written anywhere opened.

The file is written with ``pyrage`` (the Rust ``age`` crate's bindings), imported inside the
functions that need it. age authenticates the file key to the recipient, not the sender: anyone
holding a recipient's public key can write a file that opens under its identity, so what a file
says is the caller's to bind and to judge. No key, identity, passphrase or plain text reaches a
message or an exception here: errors name the argument, the file and its line.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundler.errors import (
    CredentialsRefused,
    InvalidInput,
    Malformed,
    NoAnswer,
    UsageError,
)
from bundler.fs.smallfile import NotSmallFile, read_small_file
from bundler.rules.names import escape_display

__all__ = [
    "AGE_MAGIC",
    "AgeHeader",
    "AskPassphrase",
    "NotOpened",
    "Recipient",
    "decrypt",
    "encrypt",
    "load_identities",
    "parse_header",
    "parse_recipient",
    "parse_recipients",
]

AGE_MAGIC = b"age-encryption.org/v1\n"
MAX_KEY_FILE_BYTES = 256 * 1024
"""More than any recipients or identity file a person keeps (an RSA key is a few KiB)."""
MAX_RECIPIENTS = 64
MAX_HEADER_BYTES = 256 * 1024
_STANZA_BODY_COLUMNS = 64
_MAC_LENGTH = 43  # base64 of 32 bytes, unpadded
_PAYLOAD_MIN = 16 + 16  # the payload nonce and one chunk's tag
_VCHAR_ARG = re.compile(rb"[\x21-\x7e]+")
_B64_LINE = re.compile(rb"[A-Za-z0-9+/]*")
SSH_KINDS = ("ssh-ed25519", "ssh-rsa")
PEM_ENCRYPTED = b"Proc-Type: 4,ENCRYPTED"
_OPENSSH_KEY = re.compile(
    rb"-----BEGIN OPENSSH PRIVATE KEY-----(.*?)-----END OPENSSH PRIVATE KEY-----", re.S
)
_OPENSSH_MAGIC = b"openssh-key-v1\0"


@dataclass(frozen=True)
class Recipient:
    """One recipient as written: ``kind`` (``x25519``, ``ssh-ed25519``, ``ssh-rsa``) and the
    public key's text (an SSH key without its comment)."""

    kind: str
    text: str


AskPassphrase = Callable[[str], str]
"""Asks for the passphrase of the key named by its argument (without echo); raises
:class:`bundler.errors.Interrupted` or returns ``""`` to give up."""


def _lib() -> Any:
    import pyrage

    return pyrage


def parse_recipient(line: str, where: str) -> Recipient:
    """The recipient ``line`` (one public key), or ``UsageError`` naming ``where`` (an option
    and its argument number, or a file and its line) and what is accepted. The line itself is
    never shown: a secret key pasted by mistake must not reach the terminal's history of
    errors."""
    pyrage = _lib()
    text = line.strip()
    if text.upper().startswith("AGE-SECRET-KEY-"):
        raise UsageError(
            f"{where} is an age identity (a secret key), not a recipient: give its public key "
            "(age-keygen -y FILE prints it)",
            path=where,
        )
    if "PRIVATE KEY" in text:
        raise UsageError(
            f"{where} is a private key, not a recipient: give its public key (the .pub file)",
            path=where,
        )
    if text.startswith("age1"):
        if _is_plugin(text):
            raise _unsupported(where)
        try:
            pyrage.x25519.Recipient.from_str(text)
        except pyrage.RecipientError:
            raise _malformed(where) from None
        return Recipient("x25519", text)
    kind = text.split(" ", 1)[0]
    if kind in SSH_KINDS:
        key = " ".join(text.split()[:2])  # the comment is nobody's business
        try:
            pyrage.ssh.Recipient.from_str(key)
        except pyrage.RecipientError:
            raise _malformed(where) from None
        return Recipient(kind, key)
    if kind.startswith(("ssh-", "ecdsa-", "sk-")):
        raise UsageError(
            f"{where} is an SSH key of a kind age does not encrypt to: use an ssh-ed25519 or "
            "ssh-rsa key, or an age key (age-keygen)",
            path=where,
        )
    raise _malformed(where)


def _is_plugin(text: str) -> bool:
    # Bech32's data alphabet has no "1": a second one means a longer human-readable part, as
    # in a plugin's "age1<name>1…" or the post-quantum "age1pq1…"
    return "1" in text[4:]


def _malformed(where: str) -> UsageError:
    return UsageError(
        f"{where} is not a recipient: expected an age public key (age1…), an ssh-ed25519 or "
        "ssh-rsa public key, or @FILE of such lines",
        path=where,
    )


def _unsupported(where: str) -> UsageError:
    return UsageError(
        f"{where} is a plugin or post-quantum age recipient, which the age that distributions "
        "ship cannot decrypt: give an age X25519 key (age-keygen) or an SSH key",
        path=where,
    )


def parse_recipients(arguments: Sequence[str], option: str) -> list[Recipient]:
    """Every recipient of ``option``'s ``arguments`` (each a public key or ``@FILE``), in order,
    each once. ``UsageError`` (exit 2) for a malformed one, naming the argument or the file and
    line; ``UsageError`` too for a file that cannot be read or names none, and for more than
    :data:`MAX_RECIPIENTS`."""
    found: dict[Recipient, None] = {}
    for number, argument in enumerate(arguments, start=1):
        if argument.startswith("@"):
            name = argument[1:]
            shown = escape_display(name)
            lines = _read_lines(Path(name), f"{option} @{shown}", UsageError)
            listed = 0
            for line_number, line in enumerate(lines, start=1):
                text = line.strip()
                if not text or text.startswith("#"):
                    continue
                listed += 1
                found.setdefault(parse_recipient(text, f"{option} @{shown} line {line_number}"))
            if not listed:
                raise UsageError(f"{option} @{shown} names no recipient", path=argument)
        else:
            found.setdefault(parse_recipient(argument, f"{option} argument {number}"))
    if len(found) > MAX_RECIPIENTS:
        raise UsageError(f"{option}: more than {MAX_RECIPIENTS} recipients", path=option)
    return list(found)


def _read_lines(path: Path, where: str, error: type[UsageError | InvalidInput]) -> list[str]:
    """The text lines of the small file ``path`` (a key file: never endless, never a FIFO that
    blocks); ``error`` naming ``where`` when it cannot be read or is not UTF-8."""
    raw = _read_key_file(path, where, error)
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise error(f"{where} is not a text file of keys", path=str(path)) from None


def _read_key_file(path: Path, where: str, error: type[UsageError | InvalidInput]) -> bytes:
    try:
        return read_small_file(path, MAX_KEY_FILE_BYTES)
    except FileNotFoundError:
        raise error(f"{where}: no such file", path=str(path)) from None
    except NotSmallFile as err:
        raise error(f"{where} {err.reason}", path=str(path)) from None
    except OSError as err:
        raise error(f"{where} cannot be read ({err.strerror})", path=str(path)) from None


def encrypt(plain: bytes, recipients: Sequence[Recipient]) -> bytes:
    """``plain`` as one binary age file that each of ``recipients`` can open."""
    if not recipients:
        raise ValueError("an age file needs a recipient")
    pyrage = _lib()
    made = [
        pyrage.x25519.Recipient.from_str(r.text)
        if r.kind == "x25519"
        else pyrage.ssh.Recipient.from_str(r.text)
        for r in recipients
    ]
    sealed: bytes = pyrage.encrypt(plain, made)
    return sealed


# --- identities ---------------------------------------------------------------------------------


def load_identities(
    paths: Sequence[Path], option: str, ask: AskPassphrase | None = None
) -> list[Any]:
    """The identities in the files ``paths`` (age identity files, SSH private keys), as
    ``pyrage`` objects for :func:`decrypt`.

    ``InvalidInput`` (exit 3) naming ``option`` and the file when one is missing, unreadable or
    holds no identity; a passphrase-protected SSH key is opened with what ``ask`` returns, and
    ``Refused`` (exit 1) without ``ask`` (no terminal to ask on) or when the passphrase does
    not open it.
    """
    found: list[Any] = []
    for path in paths:
        where = f"{option} {escape_display(str(path))}"
        raw = _read_key_file(path, where, InvalidInput)
        found += _identities_in(raw, path, where, ask)
    return found


def _identities_in(raw: bytes, path: Path, where: str, ask: AskPassphrase | None) -> list[Any]:
    pyrage = _lib()
    if b"PRIVATE KEY-----" in raw:
        try:
            return [pyrage.ssh.Identity.from_buffer(raw)]
        except pyrage.IdentityError:
            if not _passphrase_protected(raw):
                raise _not_identity(where, path) from None
        return [pyrage.ssh.Identity.from_buffer(_unlock_ssh(raw, path, where, ask))]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _not_identity(where, path) from None
    identities = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            identities.append(pyrage.x25519.Identity.from_str(stripped))
        except pyrage.IdentityError:
            raise _not_identity(where, path) from None
    if not identities:
        raise _not_identity(where, path)
    return identities


def _not_identity(where: str, path: Path) -> InvalidInput:
    return Malformed(
        f"{where} is not an identity: expected an age identity file (age-keygen) or an SSH "
        "private key (ssh-ed25519 or ssh-rsa)",
        path=str(path),
    )


def _passphrase_protected(raw: bytes) -> bool:
    """Whether the SSH private key ``raw`` is sealed by a passphrase, as the key itself says: a
    legacy PEM key in its headers, an OpenSSH key by the cipher its body names first (``none``
    when it is open; PROTOCOL.key)."""
    if PEM_ENCRYPTED in raw:
        return True
    found = _OPENSSH_KEY.search(raw)
    if found is None:
        return False
    try:
        body = base64.b64decode(b"".join(found.group(1).split()), validate=True)
    except binascii.Error:
        return False
    start = len(_OPENSSH_MAGIC) + 4
    if not body.startswith(_OPENSSH_MAGIC) or len(body) < start:
        return False
    size = int.from_bytes(body[len(_OPENSSH_MAGIC) : start], "big")
    cipher = body[start : start + size]
    return len(cipher) == size and cipher not in (b"", b"none")


def _unlock_ssh(raw: bytes, path: Path, where: str, ask: AskPassphrase | None) -> bytes:
    """The passphrase-protected SSH key ``raw`` opened, re-encoded unencrypted in memory only."""
    if ask is None:
        raise NoAnswer(
            f"{where} is protected by a passphrase and there is no terminal to ask for it; "
            "run the command on a terminal, or give an age identity",
            path=str(path),
        )
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    passphrase = ask(escape_display(str(path)))
    if not passphrase:
        raise NoAnswer(f"{where}: no passphrase given; nothing changed", path=str(path))
    secret = passphrase.encode("utf-8")
    del passphrase
    try:
        if b"BEGIN OPENSSH PRIVATE KEY" in raw:
            key: Any = serialization.load_ssh_private_key(raw, secret)
        else:
            key = serialization.load_pem_private_key(raw, secret)
    except UnsupportedAlgorithm:
        reason = (
            "opening an OpenSSH key protected by a passphrase needs the bcrypt package, which "
            "is not installed: install it, or give an age identity"
        )
    except (ValueError, TypeError):
        reason = "the passphrase does not open it"
    else:
        return bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption(),
            )
        )
    raise CredentialsRefused(f"{where}: {reason}; nothing changed", path=str(path))


class NotOpened(Exception):
    """An age file that no identity given opens, or that is not a whole age file; ``reason``
    completes "cannot be decrypted: …" and holds nothing of the file or the keys."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def decrypt(sealed: bytes, identities: Sequence[Any]) -> bytes:
    """The plain text of the age file ``sealed``; :class:`NotOpened` when none of
    ``identities`` is a recipient, or the file is corrupt or cut short."""
    pyrage = _lib()
    try:
        plain: bytes = pyrage.decrypt(sealed, list(identities))
    except pyrage.DecryptError as err:
        raise not_opened(err) from None
    return plain


def not_opened(err: Exception) -> NotOpened:
    """Why pyrage could not decrypt: no identity given is a recipient, or the file is not a
    whole age file. pyrage raises one ``DecryptError`` for both and tells them apart only in
    its text (the age library's ``NoMatchingKeys``), so that text is read here and nowhere
    else; it holds nothing of the file or the keys."""
    if "no matching keys" in str(err).lower():
        return NotOpened("no identity given is one of its recipients")
    return NotOpened("it is corrupt or cut short")


# --- the header, read without a key -------------------------------------------------------------


@dataclass(frozen=True)
class AgeHeader:
    """What an age file's header says without its file key: its stanzas' types, one per
    recipient and any "grease" stanzas (``<random>-grease``) the writer added so that readers
    keep skipping stanzas they do not know."""

    stanzas: tuple[str, ...]
    header_bytes: int

    @property
    def recipients(self) -> int:
        """How many stanzas are not grease: the recipients the file was written to."""
        return sum(1 for kind in self.stanzas if not kind.endswith("-grease"))


def parse_header(data: bytes) -> AgeHeader | str:
    """The header of the binary age file ``data`` checked for syntax (the version line, each
    stanza's arguments and base64 body, the MAC line) and a payload long enough to hold its
    nonce and one chunk; else the reason it is not one. The header's MAC needs the file key,
    so a header altered within its syntax is found only by a reader holding an identity."""
    if not data.startswith(AGE_MAGIC):
        return "does not start with the age v1 header line"
    at = len(AGE_MAGIC)
    stanzas: list[str] = []
    while True:
        end = data.find(b"\n", at, at + MAX_HEADER_BYTES)
        if end < 0:
            return "its header is cut short or longer than any bundler writes"
        line = data[at:end]
        at = end + 1
        if line.startswith(b"--- "):
            mac = line[4:]
            if len(mac) != _MAC_LENGTH or not _base64_ok(mac):
                return "its header's MAC line is malformed"
            break
        if not line.startswith(b"-> "):
            return "its header holds a line that is neither a stanza nor the MAC"
        args = line[3:].split(b" ")
        if not all(_VCHAR_ARG.fullmatch(arg) for arg in args):
            return "a stanza of its header has a malformed argument"
        stanzas.append(args[0].decode("ascii"))
        if len(stanzas) > MAX_RECIPIENTS:
            return f"its header names more than {MAX_RECIPIENTS} recipients"
        while True:
            end = data.find(b"\n", at, at + _STANZA_BODY_COLUMNS + 1)
            if end < 0:
                return "a stanza body of its header is cut short or malformed"
            body = data[at:end]
            at = end + 1
            if not _base64_ok(body):
                return "a stanza body of its header is not base64"
            if len(body) < _STANZA_BODY_COLUMNS:
                break
    if not stanzas:
        return "its header names no recipient"
    if len(data) - at < _PAYLOAD_MIN:
        return "its payload is cut short"
    return AgeHeader(tuple(stanzas), at)


def _base64_ok(text: bytes) -> bool:
    if not _B64_LINE.fullmatch(text) or len(text) % 4 == 1:
        return False
    try:
        base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        return False
    return True
