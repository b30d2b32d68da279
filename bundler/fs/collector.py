"""The cyclic garbage collector, paused while a backup builds its tables.

A backup of 20,000 files builds tables that live until it ends (the listing, the zip's
directory, the index: some hundred thousand objects) and next to no garbage cycle: CPython frees
its garbage by reference counting, and a whole backup left a few hundred objects in cycles. Yet
each pass of the collector walks every object made since the last, and the passes over those
tables took 5 to 8 % of a second backup. While :func:`collector_paused` runs, the collector
makes no pass; when it ends, the collector is enabled again if it was before, and the few cycles
made meanwhile are collected by its next pass. Memory stays bounded by what the backup keeps
anyway.

The collector's switch is the process's: another thread of a program that runs a backup goes
without passes meanwhile too, and a program that itself turns the collector off or on during a
backup finds it as the backup's end leaves it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """While the block runs, the cyclic garbage collector makes no pass; it is enabled again
    afterwards when it was enabled before, however the block ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
