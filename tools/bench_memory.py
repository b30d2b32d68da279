#!/usr/bin/env python3
"""P4 of 06 §1 for every command that walks a whole bundle: peak memory of export, verify,
import and pull, on a tree of tiny files at two sizes.

    python tools/bench.py memory [--root /tmp/bundler-bench] [--files 20000,200000]
                                 [--no-pull] [--work DIR] [--tracemalloc]

For each size, agent ``a00``'s workspace is ``N`` files of 0-64 bytes in 200 folders
(:func:`reftree.make_reference_tree`, seeded), made once and cached under ``--root``; the
install is :mod:`bench_export`'s (50 agents, 100 secrets). Each command runs once, as a whole
process, with its defaults: ``agents export a00``, ``bundle verify`` of that bundle, ``agents
import`` of it into an empty install and, unless ``--no-pull``, ``bundle pull`` of it from a
local registry into a folder (after a ``bundle push`` that is not measured). The figure is the
command's peak RSS as the kernel counts it for its own address space (``VmHWM``, written at
exit by the test kit's ``PEAK_RSS`` wrapper: a child's ``ru_maxrss`` would start at this
process's size when it forked); the bar is <= 80 MB at every size. Tiny files
make the per-file cost stand out: the bytes are negligible, the count is everything.
``--tracemalloc`` runs verify and import once more under ``python -X tracemalloc`` and prints
where their peak Python allocations were made.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_export import _ensure_install, _export, _fresh, _run  # noqa: E402
from bench_import import _import  # noqa: E402
from support.kit import PEAK_RSS  # noqa: E402

BAR_MEMORY_MB = 80.0


def _install(root: Path, files: int) -> Path:
    return _ensure_install(
        root, f"memory-install-{files}f", files=files, big_files=0, min_size=0, max_size=64
    )


def _bundle(root: Path, install: Path) -> Path:
    """The export of ``install`` (made once; the stamp says which install it came from)."""
    bundle = root / f"memory-bundle-{install.name}"
    stamp = root / f"memory-bundle-{install.name}.params"
    wanted = (root / f"{install.name}.params").read_text()
    if bundle.exists() and stamp.exists() and stamp.read_text() == wanted:
        return bundle
    _fresh(bundle)
    _run(_export(install, bundle))
    stamp.write_text(wanted)
    return bundle


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bundler", "--quiet", *args]


def _peak(argv: list[str]) -> float:
    """Run ``python -m bundler ARGS`` (``argv`` as :func:`_cli` makes it); its peak RSS in MB."""
    with tempfile.NamedTemporaryFile("r") as sink:
        _run([sys.executable, "-c", PEAK_RSS, sink.name, *argv[3:]])
        return int(sink.read()) / 1024


def _peaks(root: Path, work: Path, files: int, pull: bool) -> dict[str, float]:
    """Peak RSS in MB of each command on the ``files``-file tree; outputs go under ``work``."""
    install = _install(root, files)
    bundle = _bundle(root, install)
    work.mkdir(exist_ok=True)
    out, target = work / "bundle", work / "target"
    peaks: dict[str, float] = {}
    _fresh(out)
    peaks["export"] = _peak(_export(install, out))
    _fresh(out)
    peaks["verify"] = _peak(_cli("bundle", "verify", str(bundle)))
    _fresh(target)
    target.mkdir()
    peaks["import"] = _peak(_import(bundle, target))
    _fresh(target)
    if pull:
        peaks["pull"] = _pull_peak(bundle, work)
    return peaks


def _pull_peak(bundle: Path, work: Path) -> float:
    """Push ``bundle`` to a local registry (unmeasured), then the peak of pulling it back."""
    from bench_registry import _registry  # a local CNCF registry for the run's length

    pulled, cache = work / "pulled", work / "cache"
    registry = _registry(work)
    # a layer cache of the run's own, empty: a first pull, and nothing left in the user's
    os.environ["XDG_CACHE_HOME"] = str(cache)
    try:
        reference = f"oci://{registry.host}/bench/memory:1"  # type: ignore[attr-defined]
        _run(_cli("bundle", "push", str(bundle), reference, "--plain-http"))
        _fresh(pulled)
        _fresh(cache)
        peak = _peak(_cli("bundle", "pull", reference, str(pulled), "--plain-http"))
    finally:
        registry.kill()  # type: ignore[attr-defined]
    _fresh(pulled)
    _fresh(cache)
    return peak


def _tracemalloc(root: Path, files: int) -> None:
    """Where verify's and import's peak Python allocations come from, at ``files`` files."""
    install = _install(root, files)
    bundle = _bundle(root, install)
    target = root / "memory-work" / "target"
    script = (
        "import runpy, sys, tracemalloc\n"
        "tracemalloc.start(8)\n"
        "sys.argv = ['bundler', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('bundler', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "current, peak = tracemalloc.get_traced_memory()\n"
        "print(f'tracemalloc peak {peak / 1e6:.1f} MB, now {current / 1e6:.1f} MB', "
        "file=sys.stderr)\n"
        "for stat in tracemalloc.take_snapshot().statistics('lineno')[:12]:\n"
        "    print('  ', stat, file=sys.stderr)\n"
    )
    for name, argv in (
        ("verify", _cli("bundle", "verify", str(bundle))),
        ("import", _import(bundle, target)),
    ):
        _fresh(target)
        target.mkdir(parents=True)
        print(f"-- {name} at {files:,} files (allocations still held at exit)", flush=True)
        subprocess.call([sys.executable, "-c", script, *argv[3:]])
    _fresh(target)


def main(argv: list[str]) -> int:
    """Print each command's peak memory at each size; exit 1 when one misses the bar."""
    parser = argparse.ArgumentParser(prog="bench.py memory", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench"))
    parser.add_argument("--files", default="20000,200000", help="tree sizes, comma-separated")
    parser.add_argument("--no-pull", action="store_true", help="skip push and pull")
    parser.add_argument("--work", type=Path, help="outputs (default ROOT/memory-work)")
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    sizes = [int(part) for part in args.files.split(",") if part]
    ok = True
    table: dict[int, dict[str, float]] = {}
    for files in sizes:
        work = args.work or args.root / "memory-work"
        table[files] = peaks = _peaks(args.root, work, files, not args.no_pull)
        shown = "  ".join(f"{name} {mb:.1f} MB" for name, mb in peaks.items())
        good = all(mb <= BAR_MEMORY_MB for mb in peaks.values())
        ok = ok and good
        print(f"P4 peak memory, {files:,} tiny files: {shown} ({'ok' if good else 'FAIL'})")
    if len(sizes) > 1:
        first, last = table[sizes[0]], table[sizes[-1]]
        growth = "  ".join(f"{name} {last[name] / first[name]:.2f}x" for name in first)
        print(f"   growth {sizes[0]:,} -> {sizes[-1]:,} files: {growth}")
    print(f"   bar <= {BAR_MEMORY_MB:.0f} MB for each command at each size")
    if args.tracemalloc:
        _tracemalloc(args.root, sizes[-1])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
