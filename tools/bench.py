#!/usr/bin/env python3
"""The 06 §1 benchmarks, each a ratio against the named standard tool measured in the same run.

    python tools/bench.py NAME [options]

    NAME: planner|copy|export|import|verify|memory|backup|sweep|push|pull|all

Each figure lives in its own module (tools/bench_<name>.py, ``main(argv) -> int``) so that one
benchmark can be run and profiled alone; this file only dispatches.
"""

from __future__ import annotations

import compileall
import importlib
import sys
from pathlib import Path

BENCHES = {
    "planner": ("bench_planner", "P5 closure planning, 5,000-agent vs 50-agent config"),
    "copy": ("bench_copy", "safe copy of the reference tree vs cp -a && sync -f; peak memory"),
    "export": ("bench_export", "P1 agents export vs cp -a && sync -f; P4 peak memory"),
    "import": ("bench_import", "P2 agents import vs cp -a && sync -f"),
    "verify": ("bench_verify", "P3 bundle verify vs find -exec cat"),
    "backup": ("bench_backup", "P6 home backup vs sqlite3 VACUUM INTO + zip -r"),
    "memory": ("bench_memory", "P4 peak memory of export, verify, import and pull, tiny files"),
    "startup": ("bench_startup", "start-up of --help and of bundle verify on a tiny bundle"),
    "sweep": ("bench_sweep", "secret sweep alone, MB/s per engine and content, beside cat's"),
    "push": ("bench_registry:main_push", "bundle push vs curl POST+PUT to a local registry"),
    "pull": (
        "bench_registry:main_pull",
        "bundle pull REF DIR vs curl GET + tar -x + sync -f (and FILE.tar, plain GET)",
    ),
}


def main(argv: list[str]) -> int:
    """Run the named benchmark (or ``all``) with the remaining arguments."""
    if not argv or argv[0] not in (*BENCHES, "all"):
        print(__doc__)
        for name, (_, what) in BENCHES.items():
            print(f"  {name:8} {what}")
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    # as 'pip install' does: with PYTHONDONTWRITEBYTECODE set (as on this project's machines)
    # every run would otherwise compile each module from source, and measure the compiler
    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "bundler"), quiet=1)
    names = list(BENCHES) if argv[0] == "all" else [argv[0]]
    status = 0
    for name in names:
        # "module" runs module.main; "module:function" a second entry of a shared module
        module_name, _, function = BENCHES[name][0].partition(":")
        module = importlib.import_module(module_name)
        print(f"== {name}: {BENCHES[name][1]}", flush=True)
        status = max(status, int(getattr(module, function or "main")(argv[1:])))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
