"""Worker pools are sized by the processors the process may run on, counted by one rule: a
backup's deflate threads and an archive replay's threads both follow the affinity mask."""

from __future__ import annotations

import os
import subprocess
import sys

from support.kit import clean_env

PROBE = (
    "from bundler.fs.processors import usable_processors\n"
    "from bundler.home.deflate import workers\n"
    "from bundler.bundle.archive_replay import MAX_WORKERS, default_workers\n"
    "print(usable_processors(), workers(), default_workers(), MAX_WORKERS)\n"
)


def _probe(cpus: set[int]) -> list[int]:
    """What the pools would be in a process pinned to ``cpus``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    assert done.returncode == 0, done.stderr
    return [int(word) for word in done.stdout.split()]


def test_one_processor_means_no_deflate_threads_and_one_replay_thread() -> None:
    first = min(os.sched_getaffinity(0))
    usable, deflate, replay, _cap = _probe({first})
    assert (usable, deflate, replay) == (1, 0, 1)


def test_every_processor_granted_is_counted_by_both_pools() -> None:
    granted = os.sched_getaffinity(0)
    assert len(granted) >= 2, "this test compares one processor with several"
    usable, deflate, replay, cap = _probe(granted)
    assert usable == deflate == len(granted)
    assert replay == min(cap, len(granted))
