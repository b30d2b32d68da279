#!/usr/bin/env python3
"""P3 of 06 §1: ``bundle verify`` vs ``find B -type f -exec cat {} + >/dev/null``.

    python tools/bench.py verify [--root /tmp/bundler-bench] [--rounds 5] [--profile FILE]
                                 [--content random|text|b64] [--secrets 100]
                                 [--files N] [--big-files N] [--big-size BYTES]

The bundle is the export of agent ``a00`` of the benchmark install (a seeded tree of
``--content`` as its workspace, ``--secrets`` secrets, built by :mod:`bench_export`), made
once with the real exporter and kept under ``--root``. Both sides are whole processes reading
the same files (from the page cache after the untimed first run of each); they are timed alternately
``--rounds`` times and the median of the per-round ratios is reported (bar <= 2x, goal 1.2x).
``--profile FILE`` writes a cProfile of one verification instead of timing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BAR_RATIO = 2.0
GOAL_RATIO = 1.2


def _ensure_bundle(root: Path, args: argparse.Namespace) -> Path:
    """The exported benchmark bundle, re-made when the install changed."""
    from bench_export import tree_install

    install = tree_install(root, args)
    bundle = root / f"verify-bundle-{install.name}"
    stamp = root / f"verify-bundle-{install.name}.source"
    source = (root / f"{install.name}.params").read_text()
    if bundle.exists() and stamp.exists() and stamp.read_text() == source:
        return bundle
    if bundle.exists():
        shutil.rmtree(bundle)
    print(f"  exporting {bundle} ...", flush=True)
    subprocess.run(
        [sys.executable, "-m", "bundler", "--install", str(install), "--quiet"]
        + ["agents", "export", "a00", "--out", str(bundle)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stamp.write_text(source)
    return bundle


def _verify(bundle: Path) -> list[str]:
    return [sys.executable, "-m", "bundler", "--quiet", "bundle", "verify", str(bundle)]


def _find_cat(bundle: Path) -> list[str]:
    return ["sh", "-c", 'find "$1" -type f -exec cat {} + >/dev/null', "find", str(bundle)]


def _timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def p3(bundle: Path, rounds: int) -> tuple[float, list[float], list[float]]:
    """(median ratio, verify seconds, find+cat seconds) over ``rounds`` alternating runs."""
    _timed(_verify(bundle))
    _timed(_find_cat(bundle))
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        ours.append(_timed(_verify(bundle)))
        theirs.append(_timed(_find_cat(bundle)))
    ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    return ratio, ours, theirs


def _times(values: list[float]) -> str:
    return " ".join(f"{value:.2f}" for value in values)


def _profile(bundle: Path, target: str) -> int:
    import cProfile

    from bundler.bundle.verify import verify_bundle

    cProfile.runctx(
        "verify_bundle(bundle)", {"verify_bundle": verify_bundle, "bundle": bundle}, {}, target
    )
    print(f"profile written to {target}")
    return 0


def main(argv: list[str]) -> int:
    """Print P3 and whether the bar holds (exit 1 when it does not)."""
    parser = argparse.ArgumentParser(prog="bench.py verify", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", metavar="FILE")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_export import add_tree_options

    add_tree_options(parser)
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    bundle = _ensure_bundle(args.root, args)
    print(f"   tree: {args.content}, {args.secrets} secrets ({bundle.name})")
    if args.profile:
        return _profile(bundle, args.profile)
    ratio, ours, theirs = p3(bundle, args.rounds)
    ok = ratio <= BAR_RATIO
    goal = " (goal met)" if ratio <= GOAL_RATIO else ""
    print(
        f"P3 bundle verify vs find -exec cat: median {ratio:.2f}x "
        f"(bar <= {BAR_RATIO}x){goal} {'ok' if ok else 'FAIL'}"
    )
    print(f"   verify s: {_times(ours)}   find+cat s: {_times(theirs)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
