#!/usr/bin/env python3
"""Seeded workspaces in the three contents of 06 §1: random bytes, text, base64 JSON lines.

    python tools/benchdata.py random|text|b64 ROOT [--files 5000] [--big-files 5]
                                                   [--big-size 8388608] [--seed 1]

A matcher's speed depends on the data (06 §1), and real workspaces are mostly text (notes,
code, chat logs) and JSON lines carrying base64 attachments, not random bytes. Each tree has
``files`` small files of 1-16 KiB spread over 200 folders two levels deep (the reference tree's
layout, :mod:`reftree`) and ``big_files`` files of ``big_size`` bytes; same arguments, same
bytes. ``ROOT`` must not exist.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reftree import MiB, _layout, _write, make_reference_tree  # noqa: E402

FOLDERS = 200
MIN_SIZE, MAX_SIZE = 1024, 16 * 1024

# a vocabulary with the shapes of notes and code: words, identifiers, numbers, punctuation
_WORDS = str.split(
    "the agent notes a meeting with the team about the release plan and the open questions "
    "review summary todo done next week report research paper draft figure table result "
    "def return import class self value None True False for in if else while try except "
    "config path file folder memory skill tool server request response error retry timeout "
    "alice bob carol dave user assistant system model provider token budget context window"
)
_CODE_LINES = (
    "def {a}_{b}(value):",
    "    return {a}.{b}(value, retries=3)",
    "import {a}",
    "class {A}{B}:",
    "    {a} = {n}",
    "# {a} {b} {c}",
    "if {a} is None:",
    "    raise ValueError('{a} {b}')",
)


def _text_file(rng: random.Random, size: int, kind: int) -> bytes:
    """About ``size`` bytes of a note (markdown), code, or a chat log, by ``kind``."""
    lines: list[str] = []
    length = 0
    while length < size:
        words = rng.choices(_WORDS, k=rng.randint(4, 16))
        if kind == 0:
            line = ("## " if rng.random() < 0.1 else "- ") + " ".join(words)
        elif kind == 1:
            a, b, c = words[:3]
            pattern = rng.choice(_CODE_LINES)
            line = pattern.format(a=a, b=b, c=c, A=a.title(), B=b.title(), n=rng.randint(0, 999))
        else:
            line = f"[{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}] {words[0]}: " + " ".join(
                words[1:]
            )
        lines.append(line)
        length += len(line) + 1
    return ("\n".join(lines) + "\n").encode()[:size]


def _b64_file(rng: random.Random, size: int) -> bytes:
    """About ``size`` bytes of chat-log JSON lines, one in three carrying a base64 attachment."""
    out = bytearray()
    while len(out) < size:
        record: dict[str, object] = {
            "ts": 1_700_000_000 + rng.randint(0, 10_000_000),
            "role": rng.choice(("user", "assistant", "tool")),
            "text": " ".join(rng.choices(_WORDS, k=rng.randint(3, 24))),
        }
        if rng.random() < 1 / 3:
            blob = rng.randbytes(rng.randint(256, 6144))
            record["attachment"] = {"name": "image.png", "data": base64.b64encode(blob).decode()}
        out += json.dumps(record).encode() + b"\n"
    return bytes(out[:size])


def _make(
    root: Path,
    files: int,
    big_files: int,
    big_size: int,
    seed: int,
    content: Callable[[random.Random, int, int], bytes],
    suffixes: tuple[str, ...],
) -> int:
    rng = random.Random(seed)
    leaves = _layout(FOLDERS)
    root.mkdir(parents=True)
    for leaf in leaves:
        (root / leaf).mkdir(parents=True)
    total = 0
    for index in range(files):
        kind = index % len(suffixes)
        data = content(rng, rng.randint(MIN_SIZE, MAX_SIZE), kind)
        name = f"{leaves[index % len(leaves)]}/file-{index:06d}{suffixes[kind]}"
        _write(bytes(root / name), data)
        total += len(data)
    for index in range(big_files):
        data = content(rng, big_size, index % len(suffixes))
        _write(bytes(root / f"{leaves[index % len(leaves)]}/big-{index:02d}{suffixes[0]}"), data)
        total += len(data)
    return total


def make_random_tree(
    root: Path, files: int = 5000, big_files: int = 5, big_size: int = 8 * MiB, seed: int = 1
) -> int:
    """Random bytes (the 06 §1 reference tree's content); returns the byte count."""
    return make_reference_tree(
        root, files=files, folders=FOLDERS, big_files=big_files, big_size=big_size, seed=seed
    )


def make_text_tree(
    root: Path, files: int = 5000, big_files: int = 5, big_size: int = 8 * MiB, seed: int = 1
) -> int:
    """Notes (markdown), code and chat logs in turn; returns the byte count."""
    return _make(root, files, big_files, big_size, seed, _text_file, (".md", ".py", ".log"))


def make_b64_tree(
    root: Path, files: int = 5000, big_files: int = 5, big_size: int = 8 * MiB, seed: int = 1
) -> int:
    """Chat logs as JSON lines with base64 attachments; returns the byte count."""
    return _make(
        root, files, big_files, big_size, seed, lambda r, s, _k: _b64_file(r, s), (".jsonl",)
    )


MAKERS: dict[str, Callable[..., int]] = {
    "random": make_random_tree,
    "text": make_text_tree,
    "b64": make_b64_tree,
}


def main(argv: list[str]) -> int:
    """Command line entry: create one tree and print its size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("content", choices=sorted(MAKERS))
    parser.add_argument("root", type=Path)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--big-files", type=int, default=5)
    parser.add_argument("--big-size", type=int, default=8 * MiB)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.root.exists():
        print(f"error: {args.root} already exists", file=sys.stderr)
        return 1
    total = MAKERS[args.content](args.root, args.files, args.big_files, args.big_size, args.seed)
    print(f"{args.root}: {args.files + args.big_files} {args.content} files, {total / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
