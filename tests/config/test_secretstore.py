"""ZeroClaw's secret store (``bundler.config.secretstore``): the key file read exactly as ZeroClaw
reads it, ``enc2:`` and ``enc:`` values opened and sealed as ZeroClaw does, and the key created
as ZeroClaw's master creates it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bundler.config import secretkey
from bundler.config.secretcipher import NotDecrypted, decrypt, encrypt, is_encrypted, is_reference
from bundler.config.secretkey import (
    KEY_NAME,
    SecretKey,
    create_key,
    load_key,
    publish_key,
    read_key_file,
)
from bundler.errors import InvalidInput

KEY = SecretKey(bytes(range(32)))
OTHER = SecretKey(bytes(range(100, 132)))
PLAIN = "sk-FAKE-store-0123456789abcdef"


@contextmanager
def _opened(root: Path) -> Iterator[int]:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def _load(root: Path) -> SecretKey | None:
    with _opened(root) as fd:
        return load_key(fd, root)


def _xor(plain: bytes, key: SecretKey) -> str:
    return "enc:" + bytes(b ^ key.raw[i % 32] for i, b in enumerate(plain)).hex()


# --- the key file, read as ZeroClaw reads it ---------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        KEY.raw.hex(),
        KEY.raw.hex().upper(),
        f"  {KEY.raw.hex()}\n",
        f"\r\n\t{KEY.raw.hex()}\u00a0\u3000",  # Rust's trim takes Unicode white space
        "+0" + KEY.raw.hex()[2:],  # u8::from_str_radix reads a leading '+'
    ],
)
def test_key_file_accepts_what_zeroclaw_accepts(tmp_path: Path, text: str) -> None:
    (tmp_path / KEY_NAME).write_text(text, encoding="utf-8")
    assert _load(tmp_path) == KEY


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "holds 0 bytes"),
        (b"zz" * 32, "is not hex"),
        (b"ab" * 31, "holds 31 bytes"),
        (b"ab" * 33, "holds 33 bytes"),
        (b"ab" * 31 + b"a", "is not hex"),  # odd length
        (b"\x1c" + b"ab" * 32, "is not hex"),  # Python's strip takes U+001C, Rust's trim does not
        (b"\xff" * 64, "is not text"),
        (bytes(KEY.raw.hex()[:32] + " " + KEY.raw.hex()[32:], "ascii"), "is not hex"),
    ],
)
def test_key_file_zeroclaw_refuses_is_refused_naming_it(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    (tmp_path / KEY_NAME).write_bytes(content)
    with pytest.raises(InvalidInput) as caught:
        _load(tmp_path)
    assert reason in caught.value.message and KEY_NAME in caught.value.message
    assert caught.value.code == 3


def test_key_file_that_is_a_symlink_is_never_followed(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text(KEY.raw.hex())
    (tmp_path / KEY_NAME).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InvalidInput, match="symbolic link"):
        _load(tmp_path)


def test_key_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / KEY_NAME)
    with pytest.raises(InvalidInput, match="not a regular file"):
        _load(tmp_path)


def test_missing_key_is_none_and_a_wide_mode_only_a_warning(tmp_path: Path) -> None:
    assert _load(tmp_path) is None
    (tmp_path / KEY_NAME).write_text(KEY.raw.hex())
    os.chmod(tmp_path / KEY_NAME, 0o644)
    with _opened(tmp_path) as fd:
        found = read_key_file(fd, tmp_path)
    assert found.key == KEY and found.too_open
    assert "0644" in found.mode_warning() and KEY.raw.hex() not in found.mode_warning()
    os.chmod(tmp_path / KEY_NAME, 0o600)
    with _opened(tmp_path) as fd:
        assert read_key_file(fd, tmp_path).mode_warning() == ""


def test_key_never_shows_in_its_repr() -> None:
    assert KEY.raw.hex() not in repr(KEY) and KEY.raw.hex() not in str(KEY)


# --- values ------------------------------------------------------------------------------------


def test_enc2_round_trips_with_a_fresh_nonce_and_zeroclaws_layout() -> None:
    first, second = encrypt(PLAIN, KEY), encrypt(PLAIN, KEY)
    assert first != second and first.startswith("enc2:")
    blob = bytes.fromhex(first[5:])
    assert len(blob) == 12 + len(PLAIN) + 16
    assert decrypt(first, KEY) == PLAIN == decrypt(second.upper().replace("ENC2:", "enc2:"), KEY)


def test_enc2_opens_what_an_independent_chacha20poly1305_sealed() -> None:
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    nonce = b"\x07" * 12
    sealed = ChaCha20Poly1305(KEY.raw).encrypt(nonce, PLAIN.encode(), None)
    assert decrypt("enc2:" + (nonce + sealed).hex(), KEY) == PLAIN


def test_legacy_enc_is_xor_with_the_key_repeated() -> None:
    long_plain = PLAIN * 3  # longer than the key: the key repeats
    assert decrypt(_xor(long_plain.encode(), KEY), KEY) == long_plain


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("enc2:xyz0", "not hex"),
        ("enc2:" + "ab" * 27, "shorter than a nonce and a tag"),
        ("enc2:" + "ab" * 40, "fails authentication"),
        ("enc:zz", "not hex"),
        ("enc:" + "ab" * 4, "not UTF-8"),
    ],
)
def test_a_value_that_does_not_open_says_why_and_nothing_of_itself(value: str, reason: str) -> None:
    with pytest.raises(NotDecrypted) as caught:
        decrypt(value, KEY)
    assert reason in caught.value.reason
    assert value[5:] not in str(caught.value) and caught.value.__context__ is None


def test_enc2_under_another_key_fails_authentication() -> None:
    with pytest.raises(NotDecrypted, match="authentication"):
        decrypt(encrypt(PLAIN, OTHER), KEY)


def test_prefixes() -> None:
    assert is_encrypted("enc2:00") and is_encrypted("enc:00") and not is_encrypted("op://a/b/c")
    assert is_reference("op://vault/item/field") and not is_reference(PLAIN)
    assert not is_encrypted(3)


# --- creating the key --------------------------------------------------------------------------


def test_create_key_writes_hex_0600_and_leaves_no_temporary(tmp_path: Path) -> None:
    with _opened(tmp_path) as fd:
        key, made = create_key(fd, tmp_path)
    assert made
    path = tmp_path / KEY_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == key.raw.hex()
    assert os.listdir(tmp_path) == [KEY_NAME]
    with _opened(tmp_path) as fd:
        assert create_key(fd, tmp_path) == (key, False)


def test_publishing_over_an_existing_key_uses_the_winners_key(tmp_path: Path) -> None:
    (tmp_path / KEY_NAME).write_text(OTHER.raw.hex())
    with _opened(tmp_path) as fd:
        assert publish_key(fd, tmp_path, KEY) == (OTHER, False)
    assert (tmp_path / KEY_NAME).read_text() == OTHER.raw.hex()
    assert os.listdir(tmp_path) == [KEY_NAME]


def test_create_key_refuses_a_bad_key_it_finds(tmp_path: Path) -> None:
    (tmp_path / KEY_NAME).write_text("")
    with _opened(tmp_path) as fd, pytest.raises(InvalidInput):
        create_key(fd, tmp_path)
    assert (tmp_path / KEY_NAME).read_text() == ""


def test_racing_creators_end_with_one_key(tmp_path: Path) -> None:
    """Eight processes create the key at once: each answers the one key on disk."""
    read_end, write_end = os.pipe()
    results = []
    children = []
    for _ in range(8):
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(write_end)
            os.read(read_end, 1)
            with _opened(tmp_path) as fd:
                key, _made = create_key(fd, tmp_path)
            os.write(out_w, key.raw)
            os._exit(0)
        os.close(out_w)
        children.append((pid, out_r))
    os.close(read_end)
    os.write(write_end, b"g" * 8)
    os.close(write_end)
    for pid, out_r in children:
        with os.fdopen(out_r, "rb") as out:
            results.append(out.read())
        os.waitpid(pid, 0)
    on_disk = bytes.fromhex((tmp_path / KEY_NAME).read_text())
    assert set(results) == {on_disk}
    assert os.listdir(tmp_path) == [KEY_NAME]


def test_the_module_keeps_cryptography_out_of_its_import() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, bundler.config.secretstore, bundler.config.secretcipher; "
        "print(any(m.startswith('cryptography') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert secretkey.KEY_BYTES == 32
