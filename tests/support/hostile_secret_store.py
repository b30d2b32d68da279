"""Hostile inputs to ZeroClaw's secret store: key files ZeroClaw would not read, and
stored-encrypted values that do not open under the install's key.

Each key case writes ``<install>/.secret_key`` as it must never be accepted; each value case
makes an ``enc2:``/``enc:`` string that does not open under a given key. A command meeting one
says so in one line with exit 3, names the file or the config path, changes nothing and
prints no value (``tests/config/test_secret_store_hostile.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bundler.config.secretcipher import encrypt
from bundler.config.secretkey import KEY_NAME, SecretKey


@dataclass(frozen=True)
class HostileKey:
    """A ``.secret_key`` that is no key: ``make(install)`` puts it in place."""

    name: str
    make: Callable[[Path], None]


def _write(text: str) -> Callable[[Path], None]:
    def make(install: Path) -> None:
        (install / KEY_NAME).write_text(text, encoding="utf-8")
        os.chmod(install / KEY_NAME, 0o600)

    return make


def _symlink(install: Path) -> None:
    real = install.parent / "key-elsewhere"
    real.write_text(os.urandom(32).hex())
    (install / KEY_NAME).symlink_to(real)


def _fifo(install: Path) -> None:
    os.mkfifo(install / KEY_NAME)


HOSTILE_KEYS = (
    HostileKey("symlink", _symlink),
    HostileKey("fifo", _fifo),
    HostileKey("empty", _write("")),
    HostileKey("not-hex", _write("zz" * 32)),
    HostileKey("31-bytes", _write("ab" * 31)),
    HostileKey("33-bytes", _write("ab" * 33)),
)


@dataclass(frozen=True)
class HostileValue:
    """A stored-encrypted value that does not open under ``key``: ``make(key)``."""

    name: str
    make: Callable[[SecretKey], str]


HOSTILE_VALUES = (
    HostileValue("enc2-not-hex", lambda key: "enc2:" + "xy" * 40),
    HostileValue("enc2-shorter-than-nonce-and-tag", lambda key: "enc2:" + "ab" * 27),
    HostileValue("enc2-fails-authentication", lambda key: "enc2:" + os.urandom(60).hex()),
    HostileValue(
        "enc2-under-another-key",
        lambda key: encrypt("sk-FAKE-hostile-0123456789", SecretKey(os.urandom(32))),
    ),
    HostileValue("enc-not-hex", lambda key: "enc:" + "qq" * 20),
    HostileValue(
        "enc-not-utf8",
        lambda key: "enc:" + bytes(b ^ 0xFF for b in key.raw[:16]).hex(),
    ),
)


# --- the sealed handoff: identities and recipients -----------------------------------------------
# Met by ``agents import --age-identity`` and ``agents export --seal-to``
# (``tests/bundle/test_sealed_handoff.py``): one line, the right exit code, nothing changed,
# no key quoted.


@dataclass(frozen=True)
class HostileIdentity:
    """An ``--age-identity`` file that is no identity: ``make(path)`` puts it (or nothing) at
    ``path``."""

    name: str
    make: Callable[[Path], None]


def _text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


HOSTILE_IDENTITIES = (
    HostileIdentity("missing", lambda path: None),
    HostileIdentity("not-an-identity", _text("hello\n")),
    HostileIdentity("a-public-key", _text("age1qqqq\n")),
    HostileIdentity("a-bad-secret-key", _text("AGE-SECRET-KEY-1NOTBECH32\n")),
    HostileIdentity("a-torn-ssh-key", _text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n")),
    HostileIdentity("not-utf8", lambda path: path.write_bytes(b"\xff\xfe\x00age")),
    HostileIdentity("a-folder", lambda path: path.mkdir()),
    HostileIdentity("a-fifo", lambda path: os.mkfifo(path)),
)

AGE_SECRET_KEY_LINE = "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ"

HOSTILE_RECIPIENTS = (
    "age1notbech32",
    "age1pq1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq",
    "age1yubikey1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq",
    "ssh-ed25519 AAAAnotbase64",
    "ssh-dss AAAAB3NzaC1kc3M",
    "ecdsa-sha2-nistp256 AAAAE2VjZHNh",
    AGE_SECRET_KEY_LINE,
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "@/nonexistent/receiver.pub",
    "",
)
"""Malformed ``--seal-to`` arguments (exit 2, refused before anything is read or written)."""
