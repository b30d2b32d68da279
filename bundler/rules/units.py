"""How a size is shown to a person: one style, written once.

Human output gives sizes in IEC units with one decimal (``1.5 MiB``) so that every line of every
command reads alike; ``--json`` keeps exact byte counts, which is what a script compares.
"""

from __future__ import annotations

import re

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:([KMGTP])(?:i?B)?|B)?\s*", re.IGNORECASE)


def human_size(count: int) -> str:
    """``count`` bytes as a person reads it: ``"1 byte"``, ``"900 bytes"``, ``"1.5 MiB"``.

    Below 1 KiB the exact count; above, the largest IEC unit that keeps the value below 1024
    once rounded to one decimal (so 1048575 bytes is ``1.0 MiB``, never ``1024.0 KiB``).
    """
    if count < 1024:
        return "1 byte" if count == 1 else f"{count} bytes"
    value = float(count)
    for unit in _UNITS:
        value /= 1024
        if round(value, 1) < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def parse_size(text: str) -> int | None:
    """A size a person typed, in bytes: a number of bytes, or one with an IEC unit (``2GiB``,
    ``500 MiB``, ``1.5G``; ``K``, ``M``, ``G``, ``T`` and ``P`` are powers of 1024 with or
    without ``iB``, as ``du`` and ``sort -S`` read them). None when it is no size."""
    found = _SIZE.fullmatch(text)
    if found is None:
        return None
    number, unit = found.groups()
    scale = 1 if unit is None else 1024 ** ("KMGTP".index(unit.upper()) + 1)
    value = float(number) * scale if "." in number else int(number) * scale
    return int(value)


__all__ = ["human_size", "parse_size"]
