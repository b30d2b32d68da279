"""One size style: IEC units with one decimal for people, written once."""

from __future__ import annotations

import pytest

from bundler.rules.units import human_size


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0 bytes"),
        (1, "1 byte"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (1024 * 1024 - 1, "1.0 MiB"),
        (5 * 1024**2 + 300 * 1024, "5.3 MiB"),
        (16 << 20, "16.0 MiB"),
        (64 << 30, "64.0 GiB"),
        (3 * 1024**4, "3.0 TiB"),
    ],
)
def test_sizes_are_iec_units_with_one_decimal_exact_below_a_kibibyte(
    count: int, shown: str
) -> None:
    assert human_size(count) == shown


def test_a_value_that_rounds_to_1024_moves_up_a_unit() -> None:
    assert human_size(1024 * 1024 - 20) == "1.0 MiB"
