"""Token bucket: bounds, rate, waits, clock going backwards."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiplock.core import RateLimit, ValidationError
from skiplock.core._bucket import TokenBucket, new_bucket, refill, take

limits = st.builds(
    RateLimit,
    rps=st.floats(min_value=0.01, max_value=1000, allow_nan=False),
    burst=st.integers(min_value=1, max_value=50),
)
# Time steps, some backwards (a clock that jumps back must not create tokens).
steps = st.lists(
    st.one_of(
        st.floats(min_value=0, max_value=5, allow_nan=False),
        st.floats(min_value=-5, max_value=0, allow_nan=False),
    ),
    max_size=300,
)


@given(limits, st.floats(min_value=-1e6, max_value=1e6), steps)
def test_take_tokens_stay_within_zero_and_burst(
    limit: RateLimit, start: float, deltas: list[float]
) -> None:
    bucket = new_bucket(limit, start)
    now = start
    for delta in deltas:
        now += delta
        bucket, wait = take(bucket, now)
        assert 0 <= bucket.tokens <= limit.burst
        assert wait >= 0


@given(limits, st.floats(min_value=-1e6, max_value=1e6), steps)
def test_take_successes_bounded_by_burst_plus_rate(
    limit: RateLimit, start: float, deltas: list[float]
) -> None:
    bucket = new_bucket(limit, start)
    now = latest = start
    taken = 0
    for delta in deltas:
        now += delta
        latest = max(latest, now)
        bucket, wait = take(bucket, now)
        taken += wait == 0
        allowed = limit.burst + limit.rps * (latest - start)
        assert taken <= allowed + 1e-6 * max(1.0, allowed)


@given(limits, st.floats(min_value=-1e6, max_value=1e6), steps)
def test_take_after_returned_wait_succeeds(
    limit: RateLimit, start: float, deltas: list[float]
) -> None:
    bucket = new_bucket(limit, start)
    now = start
    for delta in deltas:
        now += delta
        new, wait = take(bucket, now)
        if wait > 0:
            assert new.tokens < 1
            after, wait_again = take(new, now + wait)
            assert wait_again == 0
            assert after.tokens >= 0
        bucket = new


def test_new_bucket_starts_full() -> None:
    bucket = new_bucket(RateLimit(rps=2, burst=3), now=10.0)
    assert bucket == TokenBucket(limit=RateLimit(rps=2, burst=3), tokens=3.0, updated=10.0)


def test_take_burst_then_wait_time_until_one_token() -> None:
    bucket = new_bucket(RateLimit(rps=4, burst=2), now=0.0)
    bucket, w1 = take(bucket, 0.0)
    bucket, w2 = take(bucket, 0.0)
    bucket, w3 = take(bucket, 0.0)
    assert (w1, w2) == (0.0, 0.0)
    assert w3 == pytest.approx(0.25)
    assert bucket.tokens == 0
    # Half the wait refills half a token: still not enough.
    _, w4 = take(bucket, 0.125)
    assert w4 == pytest.approx(0.125)
    bucket, w5 = take(bucket, 0.25)
    assert w5 == 0
    assert bucket.tokens == pytest.approx(0)


def test_refill_capped_at_burst() -> None:
    bucket = TokenBucket(limit=RateLimit(rps=100, burst=5), tokens=0.0, updated=0.0)
    assert refill(bucket, 1000.0).tokens == 5


def test_take_clock_backwards_creates_no_tokens() -> None:
    limit = RateLimit(rps=1, burst=5)
    bucket = TokenBucket(limit=limit, tokens=0.5, updated=100.0)
    after, wait = take(bucket, 50.0)
    assert after.tokens == 0.5
    assert after.updated == 100.0
    # The token is due at 100.5 on the bucket's clock, i.e. 50.5 s from now.
    assert wait == pytest.approx(50.5)
    # Going back to where we were gives nothing either.
    again, wait_again = take(after, 100.0)
    assert again.tokens == 0.5
    assert wait_again == pytest.approx(0.5)


def test_take_wait_is_positive_when_denied() -> None:
    bucket = TokenBucket(limit=RateLimit(rps=1e9, burst=1), tokens=1 - 1e-12, updated=0.0)
    _, wait = take(bucket, 0.0)
    assert wait > 0
    assert not math.isinf(wait)


@pytest.mark.parametrize(
    ("rps", "burst", "fragment"),
    [
        (0, 1, "rps must be > 0"),
        (-1.0, 1, "rps must be > 0"),
        (float("nan"), 1, "rps must be > 0"),
        (float("inf"), 1, "rps must be > 0"),
        (True, 1, "rps must be > 0"),
        (1.0, 0, "burst must be an int >= 1"),
        (1.0, 1.5, "burst must be an int >= 1"),
        (1.0, True, "burst must be an int >= 1"),
    ],
)
def test_rate_limit_rejects_invalid(rps: float, burst: int, fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        RateLimit(rps=rps, burst=burst)
