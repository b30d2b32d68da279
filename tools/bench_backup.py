#!/usr/bin/env python3
"""P6 (06 §1): ``bundler home backup`` vs ``sqlite3 chat.db "VACUUM INTO 't.db'"`` + ``zip -r -q``.

    python tools/bench.py backup [--root /tmp/bundler-bench-backup] [--rounds 3]
                                 [--db-mb 200] [--files 5000] [--profile]

The home (seeded, generated once under ``--root`` and reused): a ``chat.db`` of about
``--db-mb`` MB of chat-like text rows (compressible, like real conversations), ``--files``
files of 1-16 KiB random bytes in 50 folders (:mod:`reftree`), and a few skills. Each side
runs once untimed, then the two are timed alternately ``--rounds`` times; the median of the
per-round ratios is reported (bar <= 1.3x, goal <= 1.0x). Both sides are whole processes and
both write their zip to the same folder. ``--profile`` runs the backup once under cProfile in
this process and prints the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

BAR = 1.3
GOAL = 1.0
_WORDS = [
    *[
        "the",
        "agent",
        "said",
        "that",
        "it",
        "would",
        "look",
        "into",
        "the",
        "report",
        "and",
        "answer",
        "tomorrow",
        "with",
    ],
    *[
        "numbers",
        "please",
        "summarise",
        "meeting",
        "notes",
        "budget",
        "draft",
        "deploy",
        "server",
        "error",
    ],
    *[
        "retry",
        "timeout",
        "user",
        "assistant",
        "tool",
        "call",
        "result",
        "json",
        "file",
        "path",
        "memory",
        "context",
    ],
    *["token", "model", "provider"],
]


def _make_database(path: Path, megabytes: int, seed: int) -> None:
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE messages(id INTEGER PRIMARY KEY, role TEXT, body TEXT, ts REAL)")
    conn.execute("CREATE INDEX messages_ts ON messages(ts)")
    target = megabytes << 20
    written = 0
    batch: list[tuple[str, str, float]] = []
    while written < target:
        words = rng.choices(_WORDS, k=rng.randint(20, 300))
        body = " ".join(words) + f" #{rng.getrandbits(64):016x}"
        batch.append((rng.choice(("user", "assistant")), body, rng.random() * 1e9))
        written += len(body) + 40
        if len(batch) == 5000:
            conn.executemany("INSERT INTO messages(role, body, ts) VALUES (?, ?, ?)", batch)
            batch.clear()
    conn.executemany("INSERT INTO messages(role, body, ts) VALUES (?, ?, ?)", batch)
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()


def ensure_home(root: Path, db_mb: int, files: int) -> Path:
    """The project folder (Agent.yaml + home/), generated once per parameter set."""
    project = root / f"project-{db_mb}mb-{files}"
    if (project / "ready").exists():
        return project
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from reftree import make_reference_tree

    if project.exists():
        shutil.rmtree(project)
    home = project / "home"
    home.mkdir(parents=True)
    (project / "Agent.yaml").write_text("name: bench\ndata:\n  home: ./home\n")
    print(f"  generating a {db_mb} MB chat.db and {files} files under {project}", flush=True)
    _make_database(home / "chat.db", db_mb, seed=6)
    make_reference_tree(home / "files", files=files, folders=50, big_files=0, seed=6)
    for index in range(5):
        skill = home / "skills" / f"skill-{index}"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(
            f"---\nname: skill-{index}\ndescription: d\n---\n" + "x" * 2000
        )
    (home / "backups").mkdir()
    (project / "ready").write_text("")
    return project


def _ours(project: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bundler",
        "home",
        "backup",
        "--project",
        str(project),
        "--to",
        str(out),
        "--quiet",
    ]


def _baseline(home: Path, out: Path) -> str:
    # the standard tools' way: a VACUUM INTO snapshot, then zip of snapshot and folders
    return (
        f"cd {home} && sqlite3 chat.db \"VACUUM INTO '{out.parent}/t.db'\" && "
        f"ln -s {out.parent}/t.db t.db && zip -r -q {out} t.db files skills; "
        f"rc=$?; rm -f t.db {out.parent}/t.db; exit $rc"
    )


def _clean(out: Path) -> None:
    for path in (out, out.parent / "t.db"):
        if path.exists():
            path.unlink()


def _time(argv: list[str] | str, out: Path) -> float:
    _clean(out)
    start = time.perf_counter()
    subprocess.run(argv, shell=isinstance(argv, str), check=True)
    elapsed = time.perf_counter() - start
    _clean(out)
    return elapsed


def _profile(project: Path, out: Path) -> None:
    import cProfile
    import pstats

    from bundler.home.backup import backup_home

    _clean(out)
    profiler = cProfile.Profile()
    profiler.enable()
    backup_home(project, to=out)
    profiler.disable()
    _clean(out)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def main(argv: list[str]) -> int:
    """Print P6 as a median ratio; 0 when the bar is met, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="bench.py backup", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("/tmp/bundler-bench-backup"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db-mb", type=int, default=200)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("sqlite3") is None or shutil.which("zip") is None:
        print("  needs the sqlite3 and zip programs (apt install sqlite3 zip)")
        return 1
    project = ensure_home(args.root, args.db_mb, args.files)
    out_dir = args.root / "out"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / "backup.zip"
    if args.profile:
        _profile(project, out)
        return 0
    ours, theirs = _ours(project, out), _baseline(project / "home", out)
    _time(ours, out)
    _time(theirs, out)
    ratios = []
    for index in range(args.rounds):
        mine = _time(ours, out)
        base = _time(theirs, out)
        ratios.append(mine / base)
        print(
            f"  round {index + 1}: backup {mine:.2f}s  vacuum+zip {base:.2f}s  "
            f"ratio {ratios[-1]:.2f}",
            flush=True,
        )
    ratio = statistics.median(ratios)
    verdict = "meets" if ratio <= BAR else "MISSES"
    print(
        f"P6 home backup / (VACUUM INTO + zip -r): {ratio:.2f}x "
        f"({verdict} the {BAR}x bar; goal {GOAL}x)"
    )
    return 0 if ratio <= BAR else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
