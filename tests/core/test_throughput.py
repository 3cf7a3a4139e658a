"""Throughput buckets: alignment, zero-filling, counts outside the window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from skiplock.core import FinishedCount, JobState, ValidationError
from skiplock.core._throughput import throughput_from, throughput_window

NOW = datetime(2030, 5, 6, 7, 8, 9, 500_000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("window", "bucket", "first", "count"),
    [
        (timedelta(hours=1), timedelta(minutes=1), datetime(2030, 5, 6, 6, 9, tzinfo=UTC), 60),
        (timedelta(minutes=10), timedelta(minutes=5), datetime(2030, 5, 6, 7, 0, tzinfo=UTC), 2),
        (
            timedelta(seconds=20),
            timedelta(seconds=7),
            datetime(2030, 5, 6, 7, 7, 53, tzinfo=UTC),
            3,
        ),
        (timedelta(seconds=1), timedelta(seconds=1), datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC), 1),
    ],
)
def test_buckets_are_aligned_on_the_epoch_and_the_last_holds_now(
    window: timedelta, bucket: timedelta, first: datetime, count: int
) -> None:
    since, n = throughput_window(NOW, window, bucket)
    assert (since, n) == (first, count)
    assert (since - datetime(1970, 1, 1, tzinfo=UTC)) % bucket == timedelta(0)
    assert since + (n - 1) * bucket <= NOW < since + n * bucket


@pytest.mark.parametrize(
    ("window", "bucket", "message"),
    [
        (timedelta(minutes=1), timedelta(milliseconds=500), "whole number of seconds"),
        (timedelta(minutes=1), timedelta(seconds=1, milliseconds=1), "whole number of seconds"),
        (timedelta(seconds=59), timedelta(minutes=1), "at least one bucket"),
        (timedelta(days=1, seconds=1), timedelta(minutes=1), "at most 1440 buckets"),
    ],
)
def test_bad_windows_are_refused(window: timedelta, bucket: timedelta, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        throughput_window(NOW, window, bucket)


def test_counts_are_summed_per_bucket_and_state_and_the_rest_zero() -> None:
    since, minute = datetime(2030, 5, 6, 7, 5, tzinfo=UTC), timedelta(minutes=1)
    rows = [
        FinishedCount(since, JobState.SUCCEEDED, 4),
        FinishedCount(since, JobState.SUCCEEDED, 1),  # a second row of one bucket adds up
        FinishedCount(since + 2 * minute, JobState.DEAD, 2),
        FinishedCount(since + 2 * minute, JobState.FAILED, 1),
        FinishedCount(since + 3 * minute, JobState.CANCELLED, 3),
        FinishedCount(since - minute, JobState.SUCCEEDED, 9),  # before the window
        FinishedCount(since + 4 * minute, JobState.SUCCEEDED, 9),  # after it
        FinishedCount(since + timedelta(seconds=30), JobState.SUCCEEDED, 9),  # not a start
    ]
    throughput = throughput_from(NOW, since, minute, 4, rows)
    assert [(b.succeeded, b.dead, b.failed, b.cancelled) for b in throughput.buckets] == [
        (5, 0, 0, 0),
        (0, 0, 0, 0),
        (0, 2, 1, 0),
        (0, 0, 0, 3),
    ]
    assert [b.failures for b in throughput.buckets] == [0, 0, 3, 0]
    assert [b.start for b in throughput.buckets] == [since + i * minute for i in range(4)]
    assert (throughput.succeeded, throughput.failures, throughput.now) == (5, 3, NOW)
    assert throughput.to_dict()["bucket_seconds"] == 60.0
