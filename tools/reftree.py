#!/usr/bin/env python3
"""The 06 §1 reference tree, seeded so every benchmark measures the same bytes.

    python tools/reftree.py ROOT [--files 20000] [--folders 200] [--big-files 20] [--seed 1]
                                 [--min-size 1024] [--max-size 16384] [--big-size 8388608]

Defaults: 20,000 files of 1–16 KiB random bytes in 200 folders two levels deep
(``gNN/fNN``), plus 20 files of 8 MiB (≈ 365 MB). ``--min-size 0 --max-size 64`` makes the
"tiny files" tree used for the 200,000-file memory figure. ``ROOT`` must not exist.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from pathlib import Path

MiB = 1 << 20


def _layout(folders: int) -> list[str]:
    """``folders`` leaf folders two levels deep: about sqrt(folders) groups of as many each."""
    groups = max(1, math.isqrt(folders))
    per_group = math.ceil(folders / groups)
    return [f"g{index // per_group:03d}/f{index % per_group:03d}" for index in range(folders)]


def _write(path: bytes, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def make_reference_tree(
    root: Path,
    *,
    files: int = 20000,
    folders: int = 200,
    big_files: int = 20,
    seed: int = 1,
    min_size: int = 1024,
    max_size: int = 16 * 1024,
    big_size: int = 8 * MiB,
) -> int:
    """Create the reference tree at ``root`` (which must not exist); return its byte count.

    Same arguments, same tree: names, sizes and contents come from ``random.Random(seed)``.
    Small files are spread round-robin over the folders; big files sit in the first folders.
    """
    rng = random.Random(seed)
    leaves = _layout(folders)
    root.mkdir(parents=True)
    base = os.fsencode(root)
    for leaf in leaves:
        os.makedirs(os.path.join(base, os.fsencode(leaf)))
    total = 0
    for index in range(files):
        size = rng.randint(min_size, max_size)
        folder = os.fsencode(leaves[index % len(leaves)])
        _write(os.path.join(base, folder, b"file-%06d.bin" % index), rng.randbytes(size))
        total += size
    for index in range(big_files):
        folder = os.fsencode(leaves[index % len(leaves)])
        _write(os.path.join(base, folder, b"big-%02d.bin" % index), rng.randbytes(big_size))
        total += big_size
    return total


def main(argv: list[str]) -> int:
    """Command line entry: create the tree and print its size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--folders", type=int, default=200)
    parser.add_argument("--big-files", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-size", type=int, default=1024)
    parser.add_argument("--max-size", type=int, default=16 * 1024)
    parser.add_argument("--big-size", type=int, default=8 * MiB)
    args = parser.parse_args(argv)
    if args.root.exists():
        print(f"error: {args.root} already exists", file=sys.stderr)
        return 1
    total = make_reference_tree(
        args.root,
        files=args.files,
        folders=args.folders,
        big_files=args.big_files,
        seed=args.seed,
        min_size=args.min_size,
        max_size=args.max_size,
        big_size=args.big_size,
    )
    print(f"{args.root}: {args.files + args.big_files} files, {total / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
