"""Leak oracles and small builders for the end-to-end property and leak-hunting tests.

The encodings here are computed independently of :mod:`bundler.rules.secrets` on purpose: a test
that searched with the code under test could not catch that code missing a form.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli_w

from support.installs import run_cli

# fixed time so two exports of the same inputs are byte-identical (02 §9.2)
FIXED_EPOCH = "1700000000"


def base64_cores(raw: bytes) -> list[bytes]:
    """The base64 characters fully determined by ``raw`` at each of the three alignments.

    Whatever surrounds the value in a stream only changes the first and last 4-character
    groups, so each core appears in any base64 text that encodes ``raw`` at that alignment.
    """
    cores: list[bytes] = []
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw)
        skip = {0: 0, 1: 2, 2: 3}[pad]
        end = (pad + len(raw)) // 3 * 4
        core = encoded[skip:end]
        if len(core) >= 4:
            cores.append(core)
    return cores


def secret_forms(value: str) -> dict[str, list[bytes]]:
    """Every byte form in which ``value`` could leak: raw, base64, URL-encoded, JSON-escaped."""
    raw = value.encode("utf-8")
    return {
        "raw": [raw],
        "base64": base64_cores(raw),
        "url-encoded": [
            urllib.parse.quote(value, safe="").encode(),
            urllib.parse.quote_plus(value, safe="").encode(),
        ],
        "json-escaped": [
            json.dumps(value)[1:-1].encode(),
            json.dumps(value, ensure_ascii=False)[1:-1].encode(),
        ],
    }


def leaks_in(data: bytes | str, secrets: Iterable[str], *, encoded: bool = True) -> list[str]:
    """Which secrets occur in ``data``, described by index and form (never by value).

    With ``encoded`` false only the raw bytes are searched (for text that legitimately holds
    base64 of something else, such as digests).
    """
    blob = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    found: list[str] = []
    for index, value in enumerate(sorted(set(secrets))):
        for form, patterns in secret_forms(value).items():
            if not encoded and form != "raw":
                continue
            if any(pattern in blob for pattern in patterns):
                found.append(f"secret #{index} ({len(value)} chars) as {form}")
    return found


def iter_tree(root: Path) -> Iterator[tuple[str, bytes]]:
    """Every entry under ``root`` as (relative path, content), never following a link.

    Folders and links yield their name with empty content (a link's target text included),
    so a secret in a *name* or a link target is found too.
    """
    for current, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            full = Path(current) / name
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode):
                yield rel, full.read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                yield rel, os.readlink(full).encode("utf-8", "surrogateescape")
            else:
                yield rel, b""


def tree_leaks(root: Path, secrets: Iterable[str], *, encoded: bool = True) -> list[str]:
    """Leaks in every file name and every file's bytes under ``root`` (see :func:`leaks_in`)."""
    values = list(secrets)
    found: list[str] = []
    if not root.exists():
        return found
    for rel, content in iter_tree(root):
        for leak in leaks_in(rel.encode("utf-8", "surrogateescape"), values, encoded=encoded):
            found.append(f"name {rel!r}: {leak}")
        for leak in leaks_in(content, values, encoded=encoded):
            found.append(f"{rel}: {leak}")
    return found


def write_config(root: Path, config: Mapping[str, Any]) -> Path:
    """Write ``config`` as ``<root>/config.toml`` (creating ``root``); returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_bytes(tomli_w.dumps(dict(config)).encode("utf-8"))
    return root


def write_secrets_file(path: Path, values: Mapping[str, str], mode: int = 0o600) -> Path:
    """A ``--secrets-file`` TOML table mapping config paths to values, created with ``mode``."""
    text = "".join(f"{json.dumps(key)} = {json.dumps(value)}\n" for key, value in values.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)
    return path


def bundler_cli(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, input_text: str | None = None
) -> Any:
    """``python -m bundler ARGS`` in a real process with a fixed ``SOURCE_DATE_EPOCH``."""
    return run_cli(
        list(args),
        env={"SOURCE_DATE_EPOCH": FIXED_EPOCH, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})},
        input_text=input_text,
    )
