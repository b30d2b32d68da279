"""How many processors this process may run on: what a pool of worker threads is sized by.

The affinity mask, not the machine's count: a container or ``taskset`` that grants two of
sixty-four cores must get two threads, or the extra ones only wait their turn. Each caller
decides what its pool does with the number (none on one processor, a cap on large machines).
"""

from __future__ import annotations

import os


def usable_processors() -> int:
    """The processors the scheduler lets this process use, at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
