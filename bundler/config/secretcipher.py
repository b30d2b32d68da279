"""ZeroClaw's stored secret values, sealed and opened under the install's key.

* ``enc2:<hex(nonce 12 ‖ ciphertext ‖ tag 16)>``: ChaCha20-Poly1305, a fresh random nonce, no
  associated data (:func:`encrypt`, :func:`decrypt`).
* ``enc:<hex>``: the legacy form, the plain text XORed with the key repeated; it has no
  integrity, so a result that is not UTF-8 is the only sign of a wrong key. ZeroClaw rewrites it
  as ``enc2:`` on its next save, and so does every writer here.
* ``op://…``: a 1Password reference, resolved by ZeroClaw at start-up, never by bundler.

``cryptography`` is imported inside the functions that need it, so a command that never meets
a secret does not pay for it at start-up. A decrypted value never reaches a message.
"""

from __future__ import annotations

import os
from typing import Any

from bundler.config.secretkey import KEY_BYTES, SecretKey, hex_decode
from bundler.rules.secrets import CIPHERTEXT_PREFIXES

NONCE_BYTES = 12


TAG_BYTES = 16


ENC, ENC2 = CIPHERTEXT_PREFIXES


REFERENCE = "op://"


class NotDecrypted(Exception):
    """A stored value that does not open under the key; ``reason`` completes "does not
    decrypt: …" and holds nothing of the value or the key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_encrypted(value: object) -> bool:
    """Whether ``value`` is a stored-encrypted string (``enc2:`` or the legacy ``enc:``)."""
    return isinstance(value, str) and value.startswith((ENC2, ENC))


def is_reference(value: object) -> bool:
    """Whether ``value`` is a 1Password reference (``op://``), which bundler never resolves."""
    return isinstance(value, str) and value.startswith(REFERENCE)


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
        blob = hex_decode(value[len(ENC2) :])
        if blob is None:
            raise NotDecrypted("its enc2: value is not hex")
        if len(blob) < NONCE_BYTES + TAG_BYTES:
            raise NotDecrypted("its enc2: value is shorter than a nonce and a tag")
        plain = _open_chacha(blob, key)
        if plain is None:
            raise NotDecrypted("it fails authentication (another key, or altered)")
    elif value.startswith(ENC):
        blob = hex_decode(value[len(ENC) :])
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
