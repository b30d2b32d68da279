"""Seeded benchmark trees in the three contents of 06 §1: random bytes, text, base64 JSON lines.

    make_random_tree / make_text_tree / make_b64_tree(root, files, big_files, big_size)

Each writes ``files`` files of 1-16 KiB in 200 folders two levels deep (:mod:`reftree`'s
layout) plus ``big_files`` files of ``big_size`` bytes, and returns the byte count. The same
arguments give the same tree. A matcher's speed depends on the data: random bytes rarely hold
a run of a secret's alphabet, prose holds short runs, base64 is one long run.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from pathlib import Path

from reftree import make_reference_tree

FOLDERS = 200
_VOCABULARY = (
    "the agent reads notes and writes a summary of each meeting before the deadline while "
    "config value return self import def class for in if else none true false print open "
    "file path error message user model provider token request response memory workspace "
    "skill server channel delegate plan test build deploy review merge branch commit"
)
_WORDS = _VOCABULARY.split()


def _text(rng: random.Random, size: int) -> bytes:
    """Prose and code-like lines: short words between spaces and punctuation."""
    out: list[str] = []
    length = 0
    while length < size:
        line = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 14)))
        line = rng.choice(("", "    ", "# ", "- ")) + line + rng.choice((".", ":", "()", ","))
        out.append(line)
        length += len(line) + 1
    return ("\n".join(out) + "\n").encode()[:size]


def _b64_lines(rng: random.Random, size: int) -> bytes:
    """Chat-log JSON lines, most carrying a base64 attachment."""
    out: list[bytes] = []
    length = 0
    while length < size:
        record = {"role": rng.choice(("user", "assistant")), "text": _text(rng, 80).decode()}
        if rng.random() < 0.8:
            record["attachment"] = base64.b64encode(rng.randbytes(rng.randint(300, 6000))).decode()
        line = json.dumps(record).encode()
        out.append(line)
        length += len(line) + 1
    return (b"\n".join(out) + b"\n")[:size]


def _make_tree(
    root: Path, files: int, big_files: int, big_size: int, content: Callable[..., bytes]
) -> int:
    """The reference layout with every file's bytes from ``content(rng, size)``."""
    rng = random.Random(1)
    total = make_reference_tree(root, files=0, big_files=0, folders=FOLDERS)
    leaves = sorted(str(path.relative_to(root)) for path in root.glob("*/*") if path.is_dir())
    for index in range(files):
        size = rng.randint(1024, 16 * 1024)
        (root / leaves[index % len(leaves)] / f"file-{index:06d}.txt").write_bytes(
            content(rng, size)
        )
        total += size
    for index in range(big_files):
        data = content(rng, big_size)
        (root / leaves[index % len(leaves)] / f"big-{index:02d}.txt").write_bytes(data)
        total += len(data)
    return total


def make_random_tree(root: Path, files: int, big_files: int, big_size: int) -> int:
    """Random bytes: :func:`reftree.make_reference_tree` itself."""
    return make_reference_tree(
        root, files=files, big_files=big_files, big_size=big_size, folders=FOLDERS
    )


def make_text_tree(root: Path, files: int, big_files: int, big_size: int) -> int:
    """Notes and code: prose-like lines."""
    return _make_tree(root, files, big_files, big_size, _text)


def make_b64_tree(root: Path, files: int, big_files: int, big_size: int) -> int:
    """Chat logs: JSON lines carrying base64 attachments."""
    return _make_tree(root, files, big_files, big_size, _b64_lines)
