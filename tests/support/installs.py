"""Build installs on disk for tests: ``make_install(tmp_path, toml_text, files={})``.

Shared by every helper's tests; keep it small and free of assertions.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# the CLI runner and the one-error-line check live in the shared kit; re-exported for callers
from support.kit import one_error, run_cli

__all__ = [
    "EXAMPLES",
    "MINIMAL_CONFIG",
    "copy_example",
    "encrypt_install",
    "make_install",
    "opened_config",
    "one_error",
    "run_cli",
    "stored_secrets",
]

# a minimal valid config: one enabled agent with its provider and risk profile
MINIMAL_CONFIG = """\
[agents.researcher]
model_provider = "anthropic.main"
risk_profile = "default"

[providers.models.anthropic.main]
api_key = "sk-FAKE-minimal-0123456789abcdef"
model = "claude"

[risk_profiles.default]
level = "supervised"
"""


def make_install(
    tmp_path: Path,
    toml_text: str = MINIMAL_CONFIG,
    files: Mapping[str, str | bytes] | None = None,
    *,
    name: str = "install",
) -> Path:
    """Create ``<tmp_path>/<name>/`` with ``config.toml`` and ``files`` (relative path -> content).

    Parent folders of each file are created; returns the install root.
    """
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text(toml_text, encoding="utf-8")
    for relative, content in (files or {}).items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return root


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def copy_example(tmp_path: Path, which: str = "install") -> Path:
    """A private copy of ``examples/<which>`` (``install`` or ``project``) under ``tmp_path``.

    Tests that change an example must use a copy: the originals are the README's demo.
    """
    target = tmp_path / f"example-{which}"
    shutil.copytree(EXAMPLES / which, target, symlinks=True)
    return target


def stored_secrets(text: str) -> dict[str, str]:
    """Every non-empty string a secret field (or secret map) of the config ``text`` holds, by
    config path, as the file stores it."""
    from bundler.rules.secrets import iter_leaves
    from bundler.rules.tomlcompat import loads

    return {
        leaf.path: leaf.value
        for leaf in iter_leaves(loads(text))
        if (leaf.secret or leaf.secret_map_value) and isinstance(leaf.value, str) and leaf.value
    }


def encrypt_install(root: Path, key: bytes | None = None) -> dict[str, str]:
    """Put the install at ``root`` in ZeroClaw's default state: a ``.secret_key`` (0600) and
    every non-empty secret value of ``config.toml`` stored as ``enc2:`` under it (those already
    ``enc:``/``enc2:``/``op://`` left alone), ``config.toml`` 0600. Returns the plain values by
    config path. Each value is replaced where the file spells it as a basic string (``"…"``),
    which is how every test config writes its secrets."""
    from bundler.config.secretcipher import encrypt
    from bundler.config.secretkey import KEY_NAME, SecretKey

    secret_key = SecretKey(key if key is not None else os.urandom(32))
    key_path = root / KEY_NAME
    key_path.write_text(secret_key.raw.hex(), encoding="ascii")
    os.chmod(key_path, 0o600)
    config = root / "config.toml"
    text = config.read_text(encoding="utf-8")
    plain = {
        path: value
        for path, value in stored_secrets(text).items()
        if not value.startswith(("enc:", "enc2:", "op://"))
    }
    for value in sorted(set(plain.values()), key=len, reverse=True):
        text = text.replace(json.dumps(value), json.dumps(encrypt(value, secret_key)))
    config.write_text(text, encoding="utf-8")
    os.chmod(config, 0o600)
    return plain


def opened_config(root: Path) -> dict[str, Any]:
    """``<root>/config.toml`` parsed, with every ``enc2:``/``enc:`` value opened under the
    install's ``.secret_key`` (as ZeroClaw reads it at start-up): what a test compares when it
    asks what value an import or ``config set`` stored, whatever the policy."""
    from bundler.config.secretcipher import decrypt, is_encrypted
    from bundler.config.secretkey import KEY_NAME, SecretKey
    from bundler.rules.tomlcompat import loads

    data = loads((root / "config.toml").read_text(encoding="utf-8"))
    key_path = root / KEY_NAME
    key = SecretKey(bytes.fromhex(key_path.read_text().strip())) if key_path.exists() else None

    def opened(value: object) -> object:
        if isinstance(value, dict):
            return {k: opened(v) for k, v in value.items()}
        if isinstance(value, list):
            return [opened(v) for v in value]
        if is_encrypted(value) and key is not None:
            assert isinstance(value, str)
            return decrypt(value, key)
        return value

    result = opened(data)
    assert isinstance(result, dict)
    return result
