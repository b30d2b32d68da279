#!/usr/bin/env python3
"""P6 (06 §1): ``bundler home backup`` vs ``sqlite3 chat.db "VACUUM INTO 't.db'"`` + ``zip -r -q``.

    python tools/bench.py backup [--root /tmp/bundler-bench-backup] [--rounds 3]
                                 [--db-mb 200] [--files 5000] [--big-files 0]
                                 [--content random|text|b64] [--profile] [--incremental]

The home (seeded, generated once under ``--root`` and reused): a ``chat.db`` of about
``--db-mb`` MB of chat-like text rows (compressible, like real conversations), ``--files``
files of 1-16 KiB in ``files/`` (random bytes in 50 folders, :mod:`reftree`, or with
``--content text|b64`` the notes, code and logs or base64 JSON lines of :mod:`benchdata`, in 200
folders) plus ``--big-files`` files of 8 MiB, and a few skills. Each side
runs once untimed, then the two are timed alternately ``--rounds`` times; the median of the
per-round ratios is reported (bar <= 1.3x, goal <= 1.0x). Both sides are whole processes and
both write their zip to the same folder. ``--profile`` runs the backup once under cProfile in
this process and prints the top functions by cumulative time.

``--incremental`` measures instead, on the same home, a first backup into an empty folder, a
second after 10 small files changed (which copies every unchanged entry from the first, 04
§5.1.1; goal <= 0.25x the first) and a restore of the second (with the first deleted, after
``unzip -t`` and ``verify-backup`` of the second, untimed), beside ``restic`` (backup, backup
again, restore) and ``borg`` (``create --compression lz4`` twice, ``extract``) when they are
installed (each skipped with the reason when not), each side ending with ``sync -f``. The
sides take turns (the first goes last in the next round), and when run as root the page cache
is dropped before each timed step (:func:`_cold`), so every side reads the home from the disk.
"""

from __future__ import annotations

import argparse
import os
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


def ensure_home(
    root: Path, db_mb: int, files: int, big_files: int = 0, content: str = "random"
) -> Path:
    """The project folder (Agent.yaml + home/), generated once per parameter set."""
    name = f"project-{db_mb}mb-{files}"
    if big_files or content != "random":
        name += f"-{big_files}big-{content}"
    project = root / name
    if (project / "ready").exists():
        return project
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchdata import MAKERS
    from reftree import make_reference_tree

    if project.exists():
        shutil.rmtree(project)
    home = project / "home"
    home.mkdir(parents=True)
    (project / "Agent.yaml").write_text("name: bench\ndata:\n  home: ./home\n")
    print(f"  generating a {db_mb} MB chat.db and {files} files under {project}", flush=True)
    _make_database(home / "chat.db", db_mb, seed=6)
    if content == "random":
        make_reference_tree(home / "files", files=files, folders=50, big_files=big_files, seed=6)
    else:
        MAKERS[content](home / "files", files, big_files, seed=6)
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
    parser.add_argument("--big-files", type=int, default=0)
    parser.add_argument("--content", choices=("random", "text", "b64"), default="random")
    parser.add_argument(
        "--compare",
        default="restic,borg",
        help="with --incremental: the tools measured beside bundler (default restic,borg)",
    )
    parser.add_argument("--compression", help="with --incremental: ours at this level")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--incremental", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("sqlite3") is None or shutil.which("zip") is None:
        print("  needs the sqlite3 and zip programs (apt install sqlite3 zip)")
        return 1
    project = ensure_home(args.root, args.db_mb, args.files, args.big_files, args.content)
    out_dir = args.root / "out"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / "backup.zip"
    if args.profile:
        _profile(project, out)
        return 0
    if args.incremental:
        compare = [tool for tool in args.compare.split(",") if tool]
        if args.compression:
            _COMPRESSION[:] = ["--compression", args.compression]
        return _incremental(project, args.root / "incremental", args.rounds, compare)
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


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def _cold(warm: list[list[str]]) -> None:
    """Where the machine allows it (root): write back and drop the page cache, then run the
    ``warm`` commands (the programs and their modules, not the data) so that the step timed
    next reads its home and its backups from the disk, whichever side ran before it."""
    if not os.access(DROP_CACHES, os.W_OK):
        return
    os.sync()
    DROP_CACHES.write_text("3\n")
    for argv in warm:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


_WARM_OURS = [
    [sys.executable, "-c", "import bundler.cli, bundler.home.backup, bundler.home.restore"]
]
_WARM_RESTIC = [["restic", "version"]]
_WARM_BORG = [["borg", "--version"]]


def _run(
    argv: list[str], env: dict[str, str] | None = None, warm: list[list[str]] | None = None
) -> float:
    _cold(warm or [])
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
    # what each side wrote reaches the disk before the clock stops (all under the same root)
    subprocess.run(["sync", "-f", str(Path(__file__).resolve().parent)], check=True)
    return time.perf_counter() - start


def _touch_ten(project: Path, round_: int) -> None:
    """Change 10 small files of the home (append a line; the time moves on)."""
    files = sorted(p for p in (project / "home" / "files").rglob("*") if p.is_file())[:10]
    for path in files:
        with open(path, "ab") as sink:
            sink.write(f"changed in round {round_}\n".encode())


_COMPRESSION: list[str] = []  # --compression LEVEL for ours, when the benchmark is given one


def _steps_ours(project: Path, work: Path, round_: int) -> tuple[float, float, float]:
    folder = work / "ours"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cmd = [sys.executable, "-m", "bundler", "home", "backup", "--project", str(project)]
    cmd += _COMPRESSION
    first = _run([*cmd, "--quiet", "--to", str(folder)], warm=_WARM_OURS)
    time.sleep(1.1)  # the default names are per second
    _touch_ten(project, round_)
    second = _run([*cmd, "--quiet", "--to", str(folder)], warm=_WARM_OURS)
    first_zip, newest = sorted(folder.glob("backup-*.zip"))
    # each zip stands alone: the second is checked and restored with the first deleted (untimed)
    first_zip.unlink()
    subprocess.run(["unzip", "-tq", str(newest)], check=True, stdout=subprocess.DEVNULL)
    check = [sys.executable, "-m", "bundler", "home", "verify-backup", str(newest), "--quiet"]
    subprocess.run(check, check=True, stdout=subprocess.DEVNULL)
    target = work / "ours-restore"
    shutil.rmtree(target, ignore_errors=True)
    restore = [sys.executable, "-m", "bundler", "home", "restore", str(newest)]
    took = _run(
        [*restore, "--project", str(project), "--home", str(target), "--quiet"], warm=_WARM_OURS
    )
    return first, second, took


def _steps_restic(project: Path, work: Path, round_: int) -> tuple[float, float, float]:
    repo = work / "restic"
    shutil.rmtree(repo, ignore_errors=True)
    env = {**os.environ, "RESTIC_PASSWORD": "bench", "RESTIC_REPOSITORY": str(repo)}
    subprocess.run(["restic", "init", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    home = str(project / "home")
    backup = ["restic", "backup", "-q", "--exclude", f"{home}/backups", home]
    first = _run(backup, env, _WARM_RESTIC)
    _touch_ten(project, round_)
    second = _run(backup, env, _WARM_RESTIC)
    target = work / "restic-restore"
    shutil.rmtree(target, ignore_errors=True)
    took = _run(["restic", "restore", "-q", "latest", "--target", str(target)], env, _WARM_RESTIC)
    return first, second, took


def _steps_borg(project: Path, work: Path, round_: int) -> tuple[float, float, float]:
    repo = work / "borg"
    shutil.rmtree(repo, ignore_errors=True)
    env = {**os.environ, "BORG_PASSPHRASE": "", "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes"}
    subprocess.run(["borg", "init", "-e", "none", str(repo)], check=True, env=env)
    home = str(project / "home")
    create = ["borg", "create", "--compression", "lz4", "--exclude", f"{home}/backups"]
    first = _run([*create, f"{repo}::a", home], env, _WARM_BORG)
    _touch_ten(project, round_)
    second = _run([*create, f"{repo}::b", home], env, _WARM_BORG)
    target = work / "borg-restore"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    _cold(_WARM_BORG)
    start = time.perf_counter()
    subprocess.run(["borg", "extract", f"{repo}::b"], check=True, env=env, cwd=target)
    subprocess.run(["sync", "-f", str(target)], check=True)
    return first, second, time.perf_counter() - start


def _incremental(project: Path, work: Path, rounds: int, compare: list[str]) -> int:
    """First backup, second after 10 changes, restore: ours beside restic's and borg's."""
    sides = {"bundler": _steps_ours}
    for tool, steps in (("restic", _steps_restic), ("borg", _steps_borg)):
        if tool not in compare:
            continue
        if shutil.which(tool) is None:
            package = "borgbackup" if tool == "borg" else tool
            print(f"  {tool}: skipped (not installed; apt install {package})")
        else:
            sides[tool] = steps
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    for index in range(rounds):
        order = list(sides) if index % 2 == 0 else list(reversed(sides))
        for name in order:
            results[name].append(sides[name](project, work, index))
            first, second, restore = results[name][-1]
            print(
                f"  round {index + 1} {name}: first {first:.2f}s  second {second:.2f}s  "
                f"restore {restore:.2f}s",
                flush=True,
            )
    shutil.rmtree(work, ignore_errors=True)
    median = {
        name: [statistics.median(r[step] for r in runs) for step in range(3)]
        for name, runs in results.items()
    }
    ours = median["bundler"]
    ratio = ours[1] / ours[0]
    print(f"P6b second backup after 10 changed files / first: {ratio:.2f}x (goal <= 0.25x)")
    for name in sides:
        if name == "bundler":
            continue
        theirs = median[name]
        print(
            f"P6b vs {name}: first {ours[0] / theirs[0]:.2f}x  second {ours[1] / theirs[1]:.2f}x  "
            f"restore {ours[2] / theirs[2]:.2f}x"
        )
    return 0 if ratio <= 0.25 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
