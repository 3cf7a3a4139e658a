"""Retry policy and backoff with jitter (R6, R21, J5)."""

from __future__ import annotations

import math
from datetime import timedelta

import attrs

from ._errors import ValidationError
from ._validation import MAX_DELAY


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValidationError(message)


def _validate(policy: RetryPolicy) -> None:
    _check(
        _is_int(policy.max_attempts) and policy.max_attempts >= 1,
        f"max_attempts must be an int >= 1, got {policy.max_attempts!r}",
    )
    _check(policy.base >= timedelta(0), f"backoff base must be >= 0, got {policy.base}")
    _check(
        math.isfinite(policy.factor) and policy.factor >= 1,
        f"backoff factor must be >= 1, got {policy.factor!r}",
    )
    _check(
        policy.cap >= policy.base,
        f"backoff cap must be >= base, got cap={policy.cap} base={policy.base}",
    )
    _check(0 <= policy.jitter <= 1, f"backoff jitter must be within [0, 1], got {policy.jitter!r}")


@attrs.frozen
class RetryPolicy:
    """``delay(n) = min(base * factor**(n-1), cap) + U(0, jitter * that)``.

    Invalid values raise :class:`~skiplock.core.ValidationError` at construction.
    """

    max_attempts: int = 5
    base: timedelta = timedelta(seconds=30)
    factor: float = 2.0
    cap: timedelta = timedelta(hours=24)
    jitter: float = 0.1

    def __attrs_post_init__(self) -> None:
        _validate(self)


def base_delay(policy: RetryPolicy, attempt: int) -> float:
    """``min(base * factor**(attempt-1), cap)`` in seconds, without jitter."""
    _check(
        _is_int(attempt) and attempt >= 1,
        f"attempt must be an int >= 1, got {attempt!r}",
    )
    base = policy.base.total_seconds()
    cap = policy.cap.total_seconds()
    if base == 0 or policy.factor == 1:
        return base
    # Compare exponents (int vs float compares exactly in Python) so a huge attempt number
    # never overflows a float.
    if policy.factor > 1 and attempt - 1 >= math.log(cap / base) / math.log(policy.factor):
        return cap
    return min(base * policy.factor ** (attempt - 1), cap)


def next_delay(policy: RetryPolicy, attempt: int, jitter: float) -> timedelta:
    """Delay before the attempt after ``attempt`` (1-based).

    ``jitter`` is U(0,1) drawn by the caller; the result lies within
    ``[d, d * (1 + policy.jitter)]`` where ``d = min(base * factor**(attempt-1), cap)``,
    and never beyond :data:`~skiplock.core._validation.MAX_DELAY`: a retry is due within the bounds
    every store accepts (``MAX_AVAILABLE_AT``), whatever the policy's cap.
    """
    _check(0 <= jitter < 1, f"jitter must be within [0, 1), got {jitter!r}")
    delay = base_delay(policy, attempt)
    seconds = delay + policy.jitter * delay * jitter
    # Compared in seconds: a cap near timedelta.max plus jitter must not overflow.
    if seconds >= MAX_DELAY.total_seconds():
        return MAX_DELAY
    return timedelta(seconds=seconds)
