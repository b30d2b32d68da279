"""An export from an install in ZeroClaw's default state (every secret ``enc2:`` under its
``.secret_key``) sweeps for the plain text of every stored value and for the key itself
(02 §5.3): only what does not open is counted as not swept, with the reason."""

from __future__ import annotations

import base64
import json
import os
import urllib.parse
from pathlib import Path

import pytest
from support.e2e_helpers import leaks_in
from support.installs import copy_example, encrypt_install, run_cli, stored_secrets

from bundler.config.secretkey import KEY_NAME

KEY_PATH = "providers.models.anthropic.main.api_key"
NOTE = Path("agents/researcher/workspace/notes/pasted.txt")


@pytest.fixture
def install(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = copy_example(tmp_path)
    return root, encrypt_install(root)


def _export(root: Path, out: Path, *extra: str) -> tuple[int, str, dict[str, object] | None]:
    done = run_cli(["--install", str(root), "agents", "export", "researcher", "--out", str(out),
                    "--json", *extra])  # fmt: skip
    payload = json.loads(done.stdout) if done.stdout.strip() else None
    return done.returncode, done.stdout + done.stderr, payload


def _forms(value: str) -> dict[str, bytes]:
    raw = value.encode()
    return {
        "raw": raw,
        "base64": base64.b64encode(b"key=" + raw),
        "url-encoded": urllib.parse.quote(f"k={value}&x=/", safe="").encode(),
        "json-escaped": json.dumps({"key": value + "\n"}).encode(),
    }


@pytest.mark.parametrize("form", ["raw", "base64", "url-encoded", "json-escaped"])
def test_a_pasted_secret_stored_encrypted_refuses_the_export_naming_file_and_path(
    install: tuple[Path, dict[str, str]], tmp_path: Path, form: str
) -> None:
    root, plain = install
    assert stored_secrets((root / "config.toml").read_text())[KEY_PATH].startswith("enc2:")
    (root / NOTE).write_bytes(b"pasted: " + _forms(plain[KEY_PATH])[form] + b"\n")
    before = (root / "config.toml").read_bytes()
    code, text, payload = _export(root, tmp_path / "out")
    assert code == 1, text
    assert payload is not None and payload["ok"] is False
    assert "workspace/notes/pasted.txt" in text and KEY_PATH in text
    assert leaks_in(text, list(plain.values())) == []
    assert not (tmp_path / "out").exists()
    assert (root / "config.toml").read_bytes() == before


def test_a_clean_export_sweeps_everything_and_counts_nothing_unswept(
    install: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, _plain = install
    key_before = (root / KEY_NAME).read_bytes()
    code, text, payload = _export(root, tmp_path / "out")
    assert code == 0, text
    assert payload is not None
    assert payload["encrypted_not_swept"] == 0 and payload["encrypted_not_swept_why"] == {}
    assert (root / KEY_NAME).read_bytes() == key_before


@pytest.mark.parametrize("spelling", ["hex", "HEX", "base64", "raw"])
def test_a_carried_copy_of_the_key_refuses_the_export(
    install: tuple[Path, dict[str, str]], tmp_path: Path, spelling: str
) -> None:
    root, _plain = install
    key = bytes.fromhex((root / KEY_NAME).read_text())
    data = {
        "hex": key.hex().encode(),
        "HEX": key.hex().upper().encode(),
        "base64": base64.b64encode(key),
        "raw": key,
    }[spelling]
    (root / NOTE).write_bytes(b"backup of the key: " + data + b"\n")
    code, text, _payload = _export(root, tmp_path / "out")
    assert code == 1, text
    assert "workspace/notes/pasted.txt" in text and KEY_NAME in text
    assert key.hex() not in text.lower()


def test_without_the_key_the_values_are_counted_with_the_reason_and_no_key_is_made(
    install: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, plain = install
    (root / KEY_NAME).unlink()
    code, text, payload = _export(root, tmp_path / "out")
    assert code == 0, text
    assert payload is not None
    assert payload["encrypted_not_swept"] == len(set(plain.values()))
    assert payload["encrypted_not_swept_why"] == {"no key": len(set(plain.values()))}
    assert not (root / KEY_NAME).exists()
    human = run_cli(["--install", str(root), "agents", "export", "researcher", "--out",
                     str(tmp_path / "out2")])  # fmt: skip
    assert "could not be swept for their plain text (" in human.stdout
    assert "no key" in human.stdout


def test_values_under_another_key_and_references_are_counted_by_reason(
    install: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, plain = install
    (root / KEY_NAME).write_text(os.urandom(32).hex())
    config = root / "config.toml"
    text = config.read_text()
    stored = stored_secrets(text)[KEY_PATH]
    config.write_text(text.replace(json.dumps(stored), '"op://vault/anthropic/key"'))
    code, out, payload = _export(root, tmp_path / "out")
    assert code == 0, out
    assert payload is not None
    why = payload["encrypted_not_swept_why"]
    assert why == {"does not decrypt under the key": len(set(plain.values())) - 1,
                   "op:// reference": 1}  # fmt: skip
    assert payload["encrypted_not_swept"] == len(set(plain.values()))


def test_a_legacy_enc_value_is_opened_and_swept_too(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    plain = encrypt_install(root)
    key = bytes.fromhex((root / KEY_NAME).read_text())
    value = plain[KEY_PATH]
    legacy = "enc:" + bytes(b ^ key[i % 32] for i, b in enumerate(value.encode())).hex()
    config = root / "config.toml"
    text = config.read_text()
    config.write_text(text.replace(json.dumps(stored_secrets(text)[KEY_PATH]), json.dumps(legacy)))
    (root / NOTE).write_text(f"pasted {value}\n")
    code, out, _payload = _export(root, tmp_path / "out")
    assert code == 1 and KEY_PATH in out


def test_the_policy_override_zeroclaw_honours_does_not_stop_an_export(
    install: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    # ZeroClaw reads ZEROCLAW_secrets__encrypt like any override: an install run with it set
    # must still export, its stored values still swept for
    root, plain = install
    (root / NOTE).write_text("pasted: " + plain[KEY_PATH] + "\n")
    done = run_cli(
        ["--install", str(root), "agents", "export", "researcher", "--out", str(tmp_path / "o")],
        env={"ZEROCLAW_secrets__encrypt": "false"},
    )
    assert done.returncode == 1, done.stderr
    assert "not a config field" not in done.stderr
    assert "workspace/notes/pasted.txt" in done.stderr and KEY_PATH in done.stderr
