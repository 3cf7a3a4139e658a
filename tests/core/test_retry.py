"""Backoff with jitter: bounds, monotonicity, validation."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiplock.core import MAX_AVAILABLE_AT, RetryPolicy, ValidationError
from skiplock.core._retry import base_delay, next_delay
from skiplock.core._validation import MAX_DELAY

# timedelta keeps microseconds, so results may be off by half a microsecond.
EPS = 1e-6


@st.composite
def policies(draw: st.DrawFn) -> RetryPolicy:
    base = draw(st.floats(min_value=0, max_value=10_000, allow_nan=False))
    cap = base + draw(st.floats(min_value=0, max_value=1_000_000, allow_nan=False))
    return RetryPolicy(
        max_attempts=draw(st.integers(min_value=1, max_value=100)),
        base=timedelta(seconds=base),
        factor=draw(st.floats(min_value=1, max_value=10, allow_nan=False)),
        cap=timedelta(seconds=cap),
        jitter=draw(st.floats(min_value=0, max_value=1)),
    )


def _expected(policy: RetryPolicy, attempt: int) -> float:
    base, cap = policy.base.total_seconds(), policy.cap.total_seconds()
    if base == 0:
        return 0.0
    try:
        return min(base * policy.factor ** (attempt - 1), cap)
    except OverflowError:
        return cap


jitters = st.floats(min_value=0, max_value=1, exclude_max=True)


@given(policies(), st.integers(min_value=1, max_value=2000), jitters)
def test_next_delay_within_jitter_bounds(policy: RetryPolicy, attempt: int, u: float) -> None:
    d = _expected(policy, attempt)
    got = next_delay(policy, attempt, u).total_seconds()
    assert d - EPS <= got <= d * (1 + policy.jitter) + EPS
    assert got <= policy.cap.total_seconds() * (1 + policy.jitter) + EPS


@given(policies(), st.integers(min_value=1, max_value=10**30), jitters)
def test_next_delay_never_above_cap_with_jitter(
    policy: RetryPolicy, attempt: int, u: float
) -> None:
    got = next_delay(policy, attempt, u).total_seconds()
    assert 0 <= got <= policy.cap.total_seconds() * (1 + policy.jitter) + EPS


@given(policies(), st.integers(min_value=1, max_value=500))
def test_next_delay_monotonic_without_jitter(policy: RetryPolicy, attempt: int) -> None:
    p0 = RetryPolicy(base=policy.base, factor=policy.factor, cap=policy.cap, jitter=0)
    assert next_delay(p0, attempt, 0.9) <= next_delay(p0, attempt + 1, 0.9)


def test_next_delay_defaults_match_spec() -> None:
    policy = RetryPolicy()
    assert next_delay(policy, 1, 0) == timedelta(seconds=30)
    assert next_delay(policy, 2, 0) == timedelta(seconds=60)
    assert next_delay(policy, 3, 0) == timedelta(seconds=120)
    assert next_delay(policy, 1, 0.5) == timedelta(seconds=31.5)
    assert next_delay(policy, 100, 0) == timedelta(hours=24)


def test_next_delay_huge_attempt_hits_cap_without_overflow() -> None:
    policy = RetryPolicy(factor=10.0, jitter=0)
    assert next_delay(policy, 10**400, 0) == policy.cap
    assert next_delay(RetryPolicy(factor=1.0), 10**400, 0) == timedelta(seconds=30)


def test_next_delay_max_cap_does_not_overflow() -> None:
    policy = RetryPolicy(cap=timedelta.max, jitter=1.0, factor=10.0)
    assert next_delay(policy, 10**6, 0.99) == MAX_DELAY


@given(st.integers(min_value=1, max_value=10**6), jitters)
def test_next_delay_keeps_a_retry_due_within_the_stores_bounds(attempt: int, u: float) -> None:
    # A cap past the latest due time a store accepts (a CHECK constraint on PostgreSQL):
    # the delay is clamped, so now + delay can always be written.
    policy = RetryPolicy(base=timedelta(days=1), cap=timedelta.max, jitter=1.0)
    delay = next_delay(policy, attempt, u)
    assert timedelta(days=1) <= delay <= MAX_DELAY
    assert datetime(2100, 1, 1, tzinfo=UTC) + delay < MAX_AVAILABLE_AT


def test_base_delay_zero_base() -> None:
    assert base_delay(RetryPolicy(base=timedelta(0)), 7) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_attempts": 0}, "max_attempts must be an int >= 1"),
        ({"max_attempts": True}, "max_attempts must be an int >= 1"),
        ({"base": timedelta(seconds=-1)}, "base must be >= 0"),
        ({"factor": 0.5}, "factor must be >= 1"),
        ({"factor": float("inf")}, "factor must be >= 1"),
        ({"factor": float("nan")}, "factor must be >= 1"),
        ({"cap": timedelta(seconds=1)}, "cap must be >= base"),
        ({"jitter": -0.1}, "jitter must be within [0, 1]"),
        ({"jitter": 1.5}, "jitter must be within [0, 1]"),
    ],
)
def test_retry_policy_rejects_invalid(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(fragment)):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("attempt", [0, -1, True])
def test_next_delay_rejects_bad_attempt(attempt: int) -> None:
    with pytest.raises(ValidationError, match="attempt must be an int >= 1"):
        next_delay(RetryPolicy(), attempt, 0)


@pytest.mark.parametrize("u", [-0.1, 1.0, float("nan")])
def test_next_delay_rejects_bad_jitter(u: float) -> None:
    with pytest.raises(ValidationError, match="jitter must be within"):
        next_delay(RetryPolicy(), 1, u)
