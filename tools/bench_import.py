#!/usr/bin/env python3
"""P2 of 06 §1: ``agents import`` of the reference bundle into an empty install vs ``cp -a``.

    python tools/bench.py import [--root /tmp/bundler-bench] [--rounds 3] [--profile FILE]
                                 [--content random|text|b64] [--secrets 100]
                                 [--files N] [--big-files N] [--big-size BYTES]

The bundle is the export of agent ``a00`` of the benchmark install (:mod:`bench_export`: 50
agents, ``--secrets`` secrets, a seeded tree of ``--content`` as ``a00``'s workspace), made
once and cached.
The import runs with its defaults (verification first, every file re-hashed while it is staged,
durability) and ``--accept-risks``; the baseline copies the bundle's ``workspace/`` with
``cp -a --reflink=never X Y && sync -f Y``. Each side runs once untimed, then they alternate
``--rounds`` times; the median per-round ratio is reported (bar <= 1.5x).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse as _argparse  # noqa: E402

from bench_export import _cp, _export, _fresh, _run, add_tree_options, tree_install  # noqa: E402

BAR_RATIO = 1.5


def _bundle(root: Path, args: _argparse.Namespace) -> Path:
    """The benchmark bundle, exported once from the benchmark install."""
    install = tree_install(root, args)
    bundle = root / f"import-bundle-{install.name}"
    stamp = root / f"import-bundle-{install.name}.params"
    wanted = (root / f"{install.name}.params").read_text()
    if bundle.exists() and stamp.exists() and stamp.read_text() == wanted:
        return bundle
    _fresh(bundle)
    print(f"  exporting {bundle} ...", flush=True)
    _run(_export(install, bundle))
    stamp.write_text(wanted)
    return bundle


def _import(bundle: Path, target: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bundler",
        "--install",
        str(target),
        "--quiet",
        "agents",
        "import",
        str(bundle),
        "--accept-risks",
    ]


def p2(bundle: Path, work: Path, rounds: int) -> tuple[float, list[float], list[float]]:
    """(median ratio, import seconds, cp seconds)."""
    target, copy = work / "target", work / "cp"
    ours: list[float] = []
    base: list[float] = []
    for index in range(rounds + 1):
        _fresh(target)
        target.mkdir(parents=True)
        seconds, _ = _run(_import(bundle, target))
        _fresh(copy)
        baseline, _ = _run(_cp(bundle / "workspace", copy))
        if index:  # the first pair warms the caches, untimed
            ours.append(seconds)
            base.append(baseline)
    _fresh(target)
    _fresh(copy)
    return statistics.median(a / b for a, b in zip(ours, base, strict=True)), ours, base


def main(argv: list[str]) -> int:
    """Print P2 as a ratio; exit 1 when the bar is missed."""
    parser = argparse.ArgumentParser(prog="bench.py import", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of one import instead")
    add_tree_options(parser)
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    bundle = _bundle(args.root, args)
    print(f"   tree: {args.content}, {args.secrets} secrets ({bundle.name})")
    work = args.root / "import-work"
    work.mkdir(exist_ok=True)
    if args.profile:
        target = work / "target"
        _fresh(target)
        target.mkdir()
        code = subprocess.call(
            [sys.executable, "-m", "cProfile", "-o", args.profile, *_import(bundle, target)[1:]]
        )
        _fresh(target)
        print(f"profile written to {args.profile} (python -m pstats {args.profile})")
        return code
    ratio, ours, base = p2(bundle, work, args.rounds)
    verdict = "meets" if ratio <= BAR_RATIO else "MISSES"
    seconds = f"{statistics.median(ours):.2f}s vs {statistics.median(base):.2f}s"
    print(f"P2 import vs cp -a --reflink=never && sync -f: {seconds}")
    print(f"P2 ratio {ratio:.2f}x (median of {args.rounds} rounds; bar <= {BAR_RATIO}x: {verdict})")
    return 0 if ratio <= BAR_RATIO else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
