#!/usr/bin/env python3
"""The secret sweep's throughput alone, per engine, beside ``cat``'s on the same files.

    python tools/bench.py sweep [--root /tmp/bundler-bench] [--rounds 3] [--secrets 100]
                                [--files 5000] [--big-files 5] [--big-size 8388608]

For each content (random bytes, text, base64 JSON lines; :mod:`benchdata`, seeded) the tree is
read file by file in 1 MiB chunks, as the exporter's read-back does, and every chunk fed to a
sweep stream of ``--secrets`` 40-character keys, once per engine; the file names are swept
too. ``find ROOT -type f -exec cat {} + >/dev/null`` reads the same files. Caches are warm
(a first untimed round); each round runs ``cat`` then each engine, and the medians are printed
as MB/s, with the median per-round ratio of the engine's time to ``cat``'s.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20


def _targets(count: int, seed: int = 7) -> list[object]:
    from bundler.rules.secrets import SweepTarget

    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    return [
        SweepTarget(
            f"providers.models.openai.p{i:03d}.api_key",
            "sk-bench-" + "".join(rng.choice(alphabet) for _ in range(32)),
        )
        for i in range(count)
    ]


def _files(root: Path) -> list[bytes]:
    found: list[bytes] = []
    for folder, _dirs, names in os.walk(os.fsencode(root)):
        found += [os.path.join(folder, name) for name in sorted(names)]
    return sorted(found)


def _sweep(files: list[bytes], root: Path, sweeper: object) -> int:
    """Read every file in chunks into a sweep stream, and sweep its name; the hit count."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    prefix = len(os.fsencode(root)) + 1
    hits = 0
    for path in files:
        name = path[prefix:].decode("utf-8", "surrogateescape")
        stream = sweeper.stream(name)  # type: ignore[attr-defined]
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            while count := os.readv(fd, [buf]):
                stream.feed(view[:count])
        finally:
            os.close(fd)
        hits += len(stream.close()) + len(sweeper.scan_bytes(name, path[prefix:]))  # type: ignore[attr-defined]
    return hits


def _cat(root: Path) -> None:
    subprocess.run(
        ["sh", "-c", 'find "$1" -type f -exec cat {} + >/dev/null', "cat", str(root)], check=True
    )


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _ensure_tree(root: Path, content: str, files: int, big_files: int, big_size: int) -> Path:
    import benchdata

    tree = root / f"sweep-{content}"
    stamp = root / f"sweep-{content}.params"
    wanted = repr((files, big_files, big_size))
    if tree.exists() and stamp.exists() and stamp.read_text() == wanted:
        return tree
    if tree.exists():
        import shutil

        shutil.rmtree(tree)
    print(f"  generating {tree} ...", flush=True)
    make = getattr(benchdata, f"make_{content}_tree")
    make(tree, files, big_files, big_size)
    stamp.write_text(wanted)
    return tree


def main(argv: list[str]) -> int:
    """Print the sweep's MB/s per content and engine beside cat's."""
    parser = argparse.ArgumentParser(prog="bench.py sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--secrets", type=int, default=100)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--big-files", type=int, default=5)
    parser.add_argument("--big-size", type=int, default=8 << 20)
    parser.add_argument("--content", choices=("random", "text", "b64"), action="append")
    args = parser.parse_args(argv)
    from bundler.rules import sweep_hyperscan
    from bundler.rules.sweeper import Sweeper

    args.root.mkdir(parents=True, exist_ok=True)
    targets = _targets(args.secrets)
    engines = ["hyperscan", "python"] if sweep_hyperscan.available() else ["python"]
    for content in args.content or ["random", "text", "b64"]:
        tree = _ensure_tree(args.root, content, args.files, args.big_files, args.big_size)
        files = _files(tree)
        size_mb = sum(os.path.getsize(f) for f in files) / 1e6
        sweepers = {}
        for engine in engines:
            start = time.perf_counter()
            sweepers[engine] = Sweeper(targets, engine=engine)  # type: ignore[arg-type]
            print(
                f"  {engine}: {len(targets)} secrets compiled in "
                f"{(time.perf_counter() - start) * 1000:.0f} ms",
                flush=True,
            )
        runs: dict[str, list[float]] = {name: [] for name in ["cat", *engines]}
        for index in range(args.rounds + 1):  # the first round warms caches, untimed
            cat = _timed(lambda t=tree: _cat(t))
            swept = {
                name: _timed(lambda s=sweeper, f=files, t=tree: _sweep(f, t, s))
                for name, sweeper in sweepers.items()
            }
            if index:
                runs["cat"].append(cat)
                for name, seconds in swept.items():
                    runs[name].append(seconds)
        cat_s = statistics.median(runs["cat"])
        line = f"{content:6} {len(files)} files {size_mb:.0f} MB: cat {size_mb / cat_s:5.0f} MB/s"
        for engine in engines:
            ratio = statistics.median(
                [a / b for a, b in zip(runs[engine], runs["cat"], strict=True)]
            )
            seconds = statistics.median(runs[engine])
            line += f" | {engine} {size_mb / seconds:5.0f} MB/s ({ratio:.2f}x cat's time)"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
