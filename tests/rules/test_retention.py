"""Retention by restic's ``forget`` rules (04 §5.4), checked exhaustively against a second,
independent reading of the rules: the newest backup of each of the N most recent periods."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

from bundler.rules.retention import Policy, kept_by

UTC = timezone.utc
# around a day, an ISO week (Sun 2026-11-29 → Mon 11-30) and a month (11-30 → 12-01) boundary
TIMES = [
    datetime(2026, 11, 29, 10, 0, tzinfo=UTC),
    datetime(2026, 11, 29, 23, 59, tzinfo=UTC),
    datetime(2026, 11, 30, 0, 0, tzinfo=UTC),
    datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
    datetime(2026, 12, 1, 0, 0, tzinfo=UTC),
    datetime(2027, 1, 4, 8, 0, tzinfo=UTC),
]


def reference(times: list[datetime], policy: Policy) -> set[int]:
    """Newest first; for each rule, the newest of each of its N most recent periods."""
    order = sorted(range(len(times)), key=lambda i: (times[i], i), reverse=True)
    kept = set(order[:1]) | set(order[: policy.last])
    periods = {
        "daily": (policy.daily, lambda t: t.date()),
        "weekly": (policy.weekly, lambda t: t.isocalendar()[:2]),
        "monthly": (policy.monthly, lambda t: (t.year, t.month)),
    }
    for count, period in periods.values():
        seen: list[object] = []
        for i in order:
            p = period(times[i])
            if p not in seen:
                seen.append(p)
                if len(seen) <= count:
                    kept.add(i)
    return kept


def test_every_policy_on_every_sequence_of_up_to_four_backups_matches_the_reading() -> None:
    policies = [Policy(*counts) for counts in itertools.product(range(3), repeat=4)]
    checked = 0
    for length in range(5):
        for times in itertools.product(TIMES, repeat=length):
            for policy in policies:
                got = kept_by(list(times), lambda t: t, policy)
                assert set(got) == reference(list(times), policy), (times, policy)
                checked += 1
    assert checked == 81 * sum(6**n for n in range(5))


def test_the_newest_is_kept_whatever_the_policy() -> None:
    times = [TIMES[0], TIMES[3], TIMES[1]]
    assert kept_by(times, lambda t: t, Policy()) == {1: ["newest"]}
    assert "newest" in kept_by(times, lambda t: t, Policy(daily=1))[1]


def test_a_month_of_daily_backups_keeps_seven_days_four_weeks_and_the_month() -> None:
    start = datetime(2026, 11, 1, 3, 0, tzinfo=UTC)
    times = [start + timedelta(days=d, hours=h) for d in range(30) for h in (0, 12)]
    kept = kept_by(times, lambda t: t, Policy(last=2, daily=7, weekly=4, monthly=2))
    days = {times[i].date() for i in kept}
    # the newest two; the last of each of the 7 newest days (11-24 to 11-30); of each of 4 ISO
    # weeks (Monday 11-30 begins one; then Sundays 11-29, 11-22, 11-15); of the month (11-30)
    assert days == {datetime(2026, 11, d).date() for d in (15, 22, 24, 25, 26, 27, 28, 29, 30)}
    assert sorted(kept_by(times, lambda t: t, Policy(last=3))) == [57, 58, 59]
    # the period rules keep each day's newest backup; only keep-last takes 11-30's first
    assert [times[i] for i in kept if times[i].hour != 15] == [times[58]]
    assert kept[58] == ["last"]


def test_equal_times_count_the_later_position_as_newer() -> None:
    same = [TIMES[2], TIMES[2], TIMES[2]]
    assert kept_by(same, lambda t: t, Policy(last=1)) == {2: ["newest", "last"]}
    assert kept_by(same, lambda t: t, Policy(daily=3)) == {2: ["newest", "daily"]}
