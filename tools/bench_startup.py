#!/usr/bin/env python3
"""Issue 15: start-up of ``bundler --help`` and of ``bundle verify`` on a tiny bundle (<= 120 ms).

    python tools/bench.py startup [--root /tmp/bundler-bench] [--runs 15]

The tiny bundle is the shipped example's ``researcher`` (8 files). Each command runs once
untimed, then ``--runs`` times; the median wall time is reported beside ``python -c pass`` (the
interpreter alone) for scale. The package's bytecode is compiled first, as ``pip install``
does: a run that compiles every module from source measures the compiler, not bundler.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_MS = 120.0
REPO_ROOT = Path(__file__).resolve().parent.parent


def _median_ms(argv: list[str], runs: int) -> float:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    """Print each start-up time and whether the goal holds (exit 1 when it does not)."""
    parser = argparse.ArgumentParser(prog="bench.py startup", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench"))
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    tiny = args.root / "tiny-bundle"
    if not tiny.exists():
        subprocess.run(
            [sys.executable, "-m", "bundler", "--install", str(REPO_ROOT / "examples" / "install")]
            + ["--quiet", "agents", "export", "researcher", "--out", str(tiny)],
            check=True,
        )
    bundler = [sys.executable, "-m", "bundler"]
    figures = {
        "python -c pass": _median_ms([sys.executable, "-c", "pass"], args.runs),
        "bundler --help": _median_ms([*bundler, "--help"], args.runs),
        "bundle verify TINY": _median_ms(
            [*bundler, "--quiet", "bundle", "verify", str(tiny)], args.runs
        ),
    }
    ok = all(ms <= GOAL_MS for name, ms in figures.items() if name != "python -c pass")
    for name, ms in figures.items():
        print(f"   {name:20} {ms:6.1f} ms (median of {args.runs})")
    print(f"start-up goal <= {GOAL_MS:.0f} ms: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
