#!/usr/bin/env python3
"""Safe copy of the 06 §1 reference tree vs ``cp -a --reflink=never SRC X && sync -f X``.

    python tools/bench.py copy [--root /tmp/bundler-bench] [--rounds 3] [--compare]
                               [--parts ratio,large,durable,method] [--large-files 200000]

Each side runs once untimed, then the two are timed alternately ``--rounds`` times; the median
of the per-round ratios is reported (target <= 1.3x). Both sides are whole processes (the copy
is ``copy_tree`` + ``make_durable`` in a child), and peak memory is the child's ``ru_maxrss``
from ``wait4``, for the reference tree and for a 200,000-file tree of tiny files (<= 80 MB
both). ``--compare`` also times the alternatives the copier was chosen over: one ``syncfs``
vs an fsync of every file and folder, and ``copy_file_range`` plus a read-back for the digest
vs read+write hashing in the same pass. Trees are generated (seeded, :mod:`reftree`) under
``--root`` and reused.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_RATIO = 1.3
TARGET_MEMORY_MB = 80.0


def _ensure_tree(root: Path, name: str, **params: int) -> Path:
    """The tree ``root/name`` made with ``params``; regenerated when the parameters changed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from reftree import make_reference_tree

    tree = root / name
    stamp = root / f"{name}.params"
    wanted = repr(sorted(params.items()))
    if tree.exists() and stamp.exists() and stamp.read_text() == wanted:
        return tree
    if tree.exists():
        shutil.rmtree(tree)
    print(f"  generating {tree} ...", flush=True)
    make_reference_tree(tree, **params)
    stamp.write_text(wanted)
    return tree


def _run(argv: list[str]) -> tuple[float, float]:
    """Run a command; (wall seconds, peak RSS in MB of that process)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv)
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed with exit {proc.returncode}")
    return elapsed, usage.ru_maxrss / 1024  # Linux reports KiB


def _ours(src: Path, dst: Path, *, durable: str = "auto", method: str = "cfr") -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(src),
        str(dst),
        "--durable",
        durable,
        "--method",
        method,
    ]


def _cp(src: Path, dst: Path) -> list[str]:
    return ["sh", "-c", 'cp -a --reflink=never "$1" "$2" && sync -f "$2"', "cp", str(src), str(dst)]


def _fresh(dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    # Start every timed run with no dirty pages left by the previous one.
    subprocess.run(["sync", "-f", str(dst.parent)], check=True)


def _timed(argv: list[str], dst: Path) -> tuple[float, float]:
    _fresh(dst)
    result = _run(argv)
    _fresh(dst)
    return result


def _alternate(
    name_a: str, argv_a: list[str], name_b: str, argv_b: list[str], dst: Path, rounds: int
) -> tuple[list[float], list[float], float]:
    """Once each untimed, then ``rounds`` alternate timings; (times a, times b, peak MB of a)."""
    _timed(argv_a, dst)
    _timed(argv_b, dst)
    times_a: list[float] = []
    times_b: list[float] = []
    peak = 0.0
    for index in range(rounds):
        elapsed, rss = _timed(argv_a, dst)
        times_a.append(elapsed)
        peak = max(peak, rss)
        times_b.append(_timed(argv_b, dst)[0])
        print(
            f"  round {index + 1}: {name_a} {times_a[-1]:.2f}s  {name_b} {times_b[-1]:.2f}s  "
            f"ratio {times_a[-1] / times_b[-1]:.2f}",
            flush=True,
        )
    return times_a, times_b, peak


def _median_ratio(times_a: list[float], times_b: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(times_a, times_b, strict=True))


def _child(src: Path, dst: Path, durable: str, method: str) -> int:
    """The measured copy: open, copy (digests computed), make durable."""
    from bundler.fs.copytree import CopyOptions, copy_tree, make_durable
    from bundler.fs.safefs import open_source_root

    os.mkdir(dst, 0o700)
    src_fd = open_source_root(src, install_root=None)
    assert src_fd is not None
    dst_fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for _copied in copy_tree(src_fd, dst_fd, CopyOptions(use_copy_file_range=method == "cfr")):
            pass
        make_durable(dst_fd, method=durable)  # type: ignore[arg-type]
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    return 0


def _ratio_part(ref: Path, dst: Path, rounds: int, files: int) -> tuple[bool, float]:
    ours, cp, peak = _alternate("copy", _ours(ref, dst), "cp -a", _cp(ref, dst), dst, rounds)
    ratio = _median_ratio(ours, cp)
    print(
        f"copy vs cp -a --reflink=never && sync -f: median ratio {ratio:.2f}x "
        f"(target <= {TARGET_RATIO}x); median times {statistics.median(ours):.2f}s vs "
        f"{statistics.median(cp):.2f}s"
    )
    print(f"peak memory, {files}-file tree: {peak:.1f} MB (target <= {TARGET_MEMORY_MB:.0f})")
    return ratio <= TARGET_RATIO and peak <= TARGET_MEMORY_MB, peak


def _compare_part(ref: Path, dst: Path, rounds: int, what: str) -> None:
    if what == "durable":
        a, b = ("syncfs", {"durable": "syncfs"}), ("fsync-each", {"durable": "fsync"})
    else:
        a, b = ("copy_file_range+read-back", {"method": "cfr"}), ("read+write", {"method": "rw"})
    times_a, times_b, _ = _alternate(
        a[0], _ours(ref, dst, **a[1]), b[0], _ours(ref, dst, **b[1]), dst, rounds
    )
    print(f"{a[0]} / {b[0]}: median ratio {_median_ratio(times_a, times_b):.2f}")


def _large_part(root: Path, dst: Path, files: int) -> tuple[bool, float]:
    large = _ensure_tree(
        root,
        f"tiny-{files}",
        files=files,
        folders=files // 100,
        big_files=0,
        min_size=0,
        max_size=64,
    )
    _fresh(dst)
    elapsed, peak = _run(_ours(large, dst))
    _fresh(dst)
    print(
        f"peak memory, {files}-file tree: {peak:.1f} MB "
        f"(target <= {TARGET_MEMORY_MB:.0f}; copy took {elapsed:.1f}s)"
    )
    return peak <= TARGET_MEMORY_MB, peak


def main(argv: list[str]) -> int:
    """Run the benchmark; exit 0 when the ratio and memory targets hold, else 1."""
    parser = argparse.ArgumentParser(prog="bench.py copy", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--large-files", type=int, default=200000)
    parser.add_argument(
        "--parts",
        default="ratio,large",
        help="comma-separated: ratio, large (200,000-file memory), durable, method",
    )
    parser.add_argument("--compare", action="store_true", help="same as adding durable,method")
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--durable", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--method", default="cfr", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child[0], args.child[1], args.durable, args.method)

    parts = set(args.parts.split(",")) | ({"durable", "method"} if args.compare else set())
    args.root.mkdir(parents=True, exist_ok=True)
    ref = _ensure_tree(args.root, f"ref-{args.files}", files=args.files)
    dst = args.root / "copy-out"
    print(f"  reference tree: {ref}; {args.rounds} alternating rounds", flush=True)
    ok = True
    peak = 0.0
    if "ratio" in parts:
        ok, peak = _ratio_part(ref, dst, args.rounds, args.files)
    for what in ("durable", "method"):
        if what in parts:
            _compare_part(ref, dst, args.rounds, what)
    if "large" in parts:
        large_ok, large_peak = _large_part(args.root, dst, args.large_files)
        ok = ok and large_ok
        if peak:
            print(f"  the {args.large_files}-file peak is {large_peak / peak:.2f}x the other")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
