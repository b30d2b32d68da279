"""One size style for people (issue 14 item 14): IEC units; ``--json`` keeps exact bytes."""

from __future__ import annotations


def size_text(count: int) -> str:
    """A byte count in IEC units: ``512 bytes``, ``1.5 KiB``, ``3.0 GiB``."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
