#!/usr/bin/env python3
"""P1 and P4 of 06 §1: ``agents export`` vs ``cp -a --reflink=never && sync -f``; peak memory.

    python tools/bench.py export [--root /tmp/bundler-bench] [--rounds 3] [--no-large]
                                 [--large-files 200000] [--profile FILE]
                                 [--content random|text|b64] [--secrets 100]
                                 [--files N] [--big-files N] [--big-size BYTES]

The install has 50 agents and ``--secrets`` secret values (100 by default, so the sweep runs at
full width); agent ``a00``'s workspace is a seeded tree (:mod:`benchdata`) of ``--content``:
random bytes (by default the 06 §1 reference tree, 20,000 files + 20 x 8 MiB), text (notes,
code, chat logs) or base64 JSON lines (chat logs with attachments), these two 5,000 files +
5 x 8 MiB by default. The same options choose the bundle of ``import`` and ``verify``. Both
sides are whole processes; each runs once untimed, then they are timed alternately
``--rounds`` times and the median of the per-round ratios is reported (bar <= 1.5x).
Defaults stay on: the secret sweep and durability. P4 is the export child's peak RSS
(``ru_maxrss`` from ``wait4``) on the tree and on a 200,000-file tree of tiny files (bar: <= 80
MB both, second <= 1.25x the first). ``--profile FILE`` writes a cProfile of one export
instead of timing.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import string
import subprocess
import sys
import time
from pathlib import Path

BAR_RATIO = 1.5
BAR_MEMORY_MB = 80.0
BAR_MEMORY_GROWTH = 1.25
AGENTS = 50
SECRETS = 100


def _config(secrets: int = SECRETS, seed: int = 7) -> str:
    """50 agents, ``secrets`` model providers each with a 40-character key: the sweep targets."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    lines = ['[risk_profiles.rp]\nlevel = "supervised"\n']
    for index in range(secrets):
        key = "sk-bench-" + "".join(rng.choice(alphabet) for _ in range(32))
        lines.append(f'[providers.models.openai.p{index:03d}]\napi_key = "{key}"\n')
    for index in range(AGENTS):
        provider = f"openai.p{index % secrets:03d}"
        lines.append(f'[agents.a{index:02d}]\nmodel_provider = "{provider}"\nrisk_profile = "rp"\n')
    return "\n".join(lines)


# per content: the default tree (files, big files), the 06 §1 reference tree in each of its
# three contents; --files / --big-files make smaller ones for quick runs
DEFAULT_TREES = {"random": (20_000, 20), "text": (20_000, 20), "b64": (20_000, 20)}


def add_tree_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose the benchmark install: its workspace's content and size, and
    how many secrets its config holds (shared by export, import and verify)."""
    parser.add_argument("--content", choices=sorted(DEFAULT_TREES), default="random")
    parser.add_argument("--secrets", type=int, default=SECRETS, help="secret values (>= 1)")
    parser.add_argument("--files", type=int, help="small files (default: per content)")
    parser.add_argument("--big-files", type=int, help="8 MiB files (default: per content)")
    parser.add_argument("--big-size", type=int, default=8 << 20, help="bytes of each big file")


def tree_install(root: Path, args: argparse.Namespace) -> Path:
    """The benchmark install the tree options describe, made once under ``root``."""
    files, big_files = DEFAULT_TREES[args.content]
    files = files if args.files is None else args.files
    big_files = big_files if args.big_files is None else args.big_files
    if args.secrets < 1:
        raise SystemExit("--secrets must be at least 1 (every agent needs a provider)")
    name = f"install-{args.content}-{files}f-{big_files}x{args.big_size}-{args.secrets}s"
    return _ensure_install(
        root,
        name,
        content=args.content,
        secrets=args.secrets,
        files=files,
        big_files=big_files,
        big_size=args.big_size,
    )


def _ensure_install(
    root: Path, name: str, *, content: str = "random", secrets: int = SECRETS, **tree: int
) -> Path:
    """An install ``root/name`` whose agent ``a00`` has the tree ``tree`` as its workspace."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchdata import MAKERS
    from reftree import make_reference_tree

    install = root / name
    stamp = root / f"{name}.params"
    config = _config(secrets)
    wanted = repr((content, sorted(tree.items()))) + config
    if install.exists() and stamp.exists() and stamp.read_text() == wanted:
        return install
    if install.exists():
        shutil.rmtree(install)
    print(f"  generating {install} ...", flush=True)
    install.mkdir(parents=True)
    (install / "config.toml").write_text(config)
    workspace = install / "agents" / "a00" / "workspace"
    if content == "random":
        make_reference_tree(workspace, **tree)
    else:
        MAKERS[content](workspace, tree["files"], tree["big_files"], tree["big_size"])
    stamp.write_text(wanted)
    return install


CPU_SECONDS: dict[str, list[float]] = {"export": [], "cp": []}


def _run(argv: list[str], label: str = "") -> tuple[float, float]:
    """Run a command; (wall seconds, peak RSS in MB of that process).

    The user+system CPU seconds of the command and its waited-for children (``wait4`` counts
    them, so ``sh -c 'cp && sync'`` includes cp and sync) are kept under ``label``:
    on a shared, I/O-contended machine they say where the time went when wall clock cannot.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{argv[:4]} failed with exit {code}")
    if label:
        cpu = usage.ru_utime + usage.ru_stime
        CPU_SECONDS[label].append(cpu)
    return elapsed, usage.ru_maxrss / 1024  # Linux reports KiB


def _export(install: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bundler",
        "--install",
        str(install),
        "--quiet",
        "agents",
        "export",
        "a00",
        "--out",
        str(out),
    ]


def _cp(src: Path, dst: Path) -> list[str]:
    return ["sh", "-c", 'cp -a --reflink=never "$1" "$2" && sync -f "$2"', "cp", str(src), str(dst)]


def _fresh(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    # the removal's write-back must not be billed to the next timed command
    os.sync()


def p1(install: Path, work: Path, rounds: int) -> tuple[float, list[float], list[float], float]:
    """(median ratio, export seconds, cp seconds, export peak MB) on ``install``."""
    workspace = install / "agents" / "a00" / "workspace"
    out, copy = work / "bundle", work / "cp"
    ours_s: list[float] = []
    cp_s: list[float] = []
    peak = 0.0
    for index in range(rounds + 1):
        _fresh(out)
        seconds, rss = _run(_export(install, out), "export" if index else "")
        peak = max(peak, rss)
        _fresh(copy)
        base, _ = _run(_cp(workspace, copy), "cp" if index else "")
        if index:  # the first pair warms the caches, untimed
            ours_s.append(seconds)
            cp_s.append(base)
    _fresh(out)
    _fresh(copy)
    ratios = [a / b for a, b in zip(ours_s, cp_s, strict=True)]
    return statistics.median(ratios), ours_s, cp_s, peak


def _peak(install: Path, work: Path) -> float:
    out = work / "bundle"
    _fresh(out)
    _run(_export(install, out))  # warm
    _fresh(out)
    _seconds, rss = _run(_export(install, out))
    _fresh(out)
    return rss


def _profile(install: Path, work: Path, target: str) -> int:
    out = work / "bundle"
    _fresh(out)
    code = subprocess.call(
        [sys.executable, "-m", "cProfile", "-o", target, *_export(install, out)[1:]]
    )
    _fresh(out)
    print(f"profile written to {target} (python -m pstats {target})")
    return code


def _times(values: list[float]) -> str:
    return " ".join(f"{value:.2f}" for value in values)


def main(argv: list[str]) -> int:
    """Run P1 and P4; print the figures and whether the bars hold (exit 1 when one fails)."""
    parser = argparse.ArgumentParser(prog="bench.py export", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-large", action="store_true", help="skip the 200,000-file P4 tree")
    parser.add_argument("--large-files", type=int, default=200_000)
    parser.add_argument("--profile", metavar="FILE")
    add_tree_options(parser)
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    work = args.root / "export-work"
    work.mkdir(exist_ok=True)
    install = tree_install(args.root, args)
    print(f"   tree: {args.content}, {args.secrets} secrets ({install.name})")
    if args.profile:
        return _profile(install, work, args.profile)
    ratio, ours, cps, peak = p1(install, work, args.rounds)
    ok = ratio <= BAR_RATIO
    verdict = "ok" if ok else "FAIL"
    print(f"P1 export vs cp -a && sync -f: median {ratio:.2f}x (bar <= {BAR_RATIO}x) {verdict}")
    print(f"   export s: {_times(ours)}   cp s: {_times(cps)}")
    cpu = CPU_SECONDS
    print(f"   CPU s (user+sys): export {_times(cpu['export'])}   cp {_times(cpu['cp'])}")
    print(f"P4 peak memory, reference tree: {peak:.1f} MB (bar <= {BAR_MEMORY_MB:.0f} MB)")
    ok = ok and peak <= BAR_MEMORY_MB
    if not args.no_large:
        large = _ensure_install(
            args.root,
            "export-install-large",
            files=args.large_files,
            big_files=0,
            min_size=0,
            max_size=64,
        )
        large_peak = _peak(large, work)
        growth = large_peak / peak
        good = large_peak <= BAR_MEMORY_MB and growth <= BAR_MEMORY_GROWTH
        print(
            f"P4 peak memory, {args.large_files:,} tiny files: {large_peak:.1f} MB, "
            f"{growth:.2f}x the reference tree (bar <= {BAR_MEMORY_MB:.0f} MB and "
            f"<= {BAR_MEMORY_GROWTH}x) {'ok' if good else 'FAIL'}"
        )
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
