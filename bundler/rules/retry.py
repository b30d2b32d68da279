"""When a request to a registry is tried again, and how long a slow answer is waited for.

A 429 (a rate limit), a 502, 503 or 504 (a proxy or the registry itself overloaded), or a
connection refused, reset or timed out before an answer, says nothing of the artifact: a later
try may well succeed. Such a request is tried at most :attr:`Timings.tries` times within
:attr:`Timings.budget` seconds, waiting between tries an exponential backoff with full jitter,
or what the registry's ``Retry-After`` asks (seconds, or an HTTP date) up to
:attr:`Timings.retry_after_cap`. A ``Retry-After`` that is garbage or already past gets the
backoff. Only a request whose repetition cannot change what the registry holds is retried (a
GET, a HEAD, a PUT whose body can be sent again); a chunked upload is never repeated.

A stall is an answer that arrives slower than :attr:`Timings.stall_rate` bytes a second over
:attr:`Timings.stall_window` seconds; a small document (a manifest, a token, an error body, a
tag list) must arrive whole within :attr:`Timings.small_deadline` seconds.

Every duration is multiplied by ``$BUNDLER_REGISTRY_TIME_SCALE`` (a number in (0, 1]), so that
tests of the waits run in seconds; the limits themselves do not change.
"""

from __future__ import annotations

import email.utils
from collections.abc import Mapping
from dataclasses import dataclass, replace

RETRY_STATUSES = frozenset({429, 502, 503, 504})
TIME_SCALE_VARIABLE = "BUNDLER_REGISTRY_TIME_SCALE"


@dataclass(frozen=True)
class Timings:
    """The bounds of the retries and of the waits for slow answers (seconds, bytes)."""

    tries: int = 5
    budget: float = 300.0
    retry_after_cap: float = 60.0
    backoff_first: float = 1.0
    backoff_max: float = 30.0
    stall_rate: int = 1024
    stall_window: float = 60.0
    small_deadline: float = 60.0


DEFAULT = Timings()


def timings(environ: Mapping[str, str]) -> Timings:
    """:data:`DEFAULT`, its durations scaled by ``$BUNDLER_REGISTRY_TIME_SCALE`` when that is a
    number in (0, 1] (anything else is ignored: it can only shorten the waits)."""
    raw = environ.get(TIME_SCALE_VARIABLE, "")
    try:
        scale = float(raw)
    except ValueError:
        return DEFAULT
    if not 0 < scale <= 1:
        return DEFAULT
    return replace(
        DEFAULT,
        budget=DEFAULT.budget * scale,
        retry_after_cap=DEFAULT.retry_after_cap * scale,
        backoff_first=DEFAULT.backoff_first * scale,
        backoff_max=DEFAULT.backoff_max * scale,
        stall_window=DEFAULT.stall_window * scale,
        small_deadline=DEFAULT.small_deadline * scale,
    )


def retry_after(value: str | None, now: float, cap: float) -> float | None:
    """The wait a ``Retry-After`` header asks, at most ``cap`` seconds: a number of seconds, or
    an HTTP date after ``now`` (seconds since the epoch); None when absent, garbage or past."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(int(text[:12])), cap)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    wait = when.timestamp() - now
    return min(wait, cap) if wait > 0 else None


def backoff(attempt: int, timings: Timings, unit: float) -> float:
    """The wait before try ``attempt + 2`` (``attempt`` counts the failed tries from 0): full
    jitter over an exponential bound, ``unit`` a random number in [0, 1)."""
    bound = min(timings.backoff_max, timings.backoff_first * float(2 ** min(attempt, 32)))
    return float(bound * (0.5 + unit / 2))


def next_wait(
    failed: int, header: str | None, *, now: float, elapsed: float, timings: Timings, unit: float
) -> float | None:
    """How long to wait before trying again after ``failed`` failed tries (``elapsed`` seconds
    since the first began), the last answer's ``Retry-After`` being ``header``; None when no
    try is left, or the wait would pass the budget."""
    if failed >= timings.tries:
        return None
    asked = retry_after(header, now, timings.retry_after_cap)
    wait = backoff(failed - 1, timings, unit) if asked is None else asked
    if elapsed + wait >= timings.budget:
        return None
    return wait


__all__ = [
    "DEFAULT",
    "RETRY_STATUSES",
    "TIME_SCALE_VARIABLE",
    "Timings",
    "backoff",
    "next_wait",
    "retry_after",
    "timings",
]
