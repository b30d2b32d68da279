"""Which backups a retention policy keeps: restic's ``forget`` rules (04 §5.4). Pure.

Backups are taken newest first. ``last`` keeps the ``last`` newest. ``daily``, ``weekly`` and
``monthly`` each keep the newest backup of each of the ``N`` most recent UTC days, ISO weeks
and months that hold one: a rule keeps a backup when it still has a count left and the
backup's period differs from the period of the last backup that rule kept. A backup is kept
when any rule keeps it, and the newest backup is always kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Policy:
    """How many backups, or periods, each rule keeps (0: the rule keeps none)."""

    last: int = 0
    daily: int = 0
    weekly: int = 0
    monthly: int = 0

    def empty(self) -> bool:
        """No rule keeps anything: a prune with it would keep only the newest backup, which
        is never what was asked; callers refuse it."""
        return not (self.last or self.daily or self.weekly or self.monthly)


def _day(at: datetime) -> tuple[int, ...]:
    at = at.astimezone(timezone.utc)
    return at.year, at.month, at.day


def _week(at: datetime) -> tuple[int, ...]:
    year, week, _weekday = at.astimezone(timezone.utc).isocalendar()
    return year, week


def _month(at: datetime) -> tuple[int, ...]:
    at = at.astimezone(timezone.utc)
    return at.year, at.month


def kept_by(
    items: Sequence[T], when: Callable[[T], datetime], policy: Policy
) -> dict[int, list[str]]:
    """The positions in ``items`` the policy keeps, each with the rules keeping it (``last``,
    ``daily``, ``weekly``, ``monthly``, or ``newest``). Equal times are ordered by position,
    the later position counting as the newer."""
    order = sorted(range(len(items)), key=lambda i: (when(items[i]), i), reverse=True)
    rules: list[tuple[str, int, Callable[[datetime], tuple[int, ...]] | None]] = [
        ("last", policy.last, None),
        ("daily", policy.daily, _day),
        ("weekly", policy.weekly, _week),
        ("monthly", policy.monthly, _month),
    ]
    left = {name: count for name, count, _ in rules}
    last_period: dict[str, tuple[int, ...] | None] = {name: None for name, _, _ in rules}
    kept: dict[int, list[str]] = {}
    for rank, index in enumerate(order):
        at = when(items[index])
        reasons = ["newest"] if rank == 0 else []
        for name, _count, period_of in rules:
            if left[name] <= 0:
                continue
            period = (rank,) if period_of is None else period_of(at)
            if period != last_period[name]:
                last_period[name] = period
                left[name] -= 1
                reasons.append(name)
        if reasons:
            kept[index] = reasons
    return kept
