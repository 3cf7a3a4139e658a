"""Retry policy and backoff with jitter (R6, R21, J5)."""

from __future__ import annotations

from datetime import timedelta

import attrs


@attrs.frozen
class RetryPolicy:
    """``delay(n) = min(base * factor**(n-1), cap) + U(0, jitter * that)``."""

    max_attempts: int = 5
    base: timedelta = timedelta(seconds=30)
    factor: float = 2.0
    cap: timedelta = timedelta(hours=24)
    jitter: float = 0.1


def next_delay(policy: RetryPolicy, attempt: int, jitter: float) -> timedelta:
    """Delay before the attempt after ``attempt`` (1-based); ``jitter`` is U(0,1) drawn by the caller."""
    raise NotImplementedError
