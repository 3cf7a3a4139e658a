"""The queue over time: the sampling rule, percentiles, and the buckets of a history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from skiplock.core import FinishedCount, Job, JobState
from skiplock.core._health import PENDING_SPLIT_BOUND
from skiplock.core._history import (
    ALL_KINDS,
    PICKUP_SAMPLE,
    QueueSample,
    fold_samples,
    history_from,
    percentile,
    sample_minute,
    take_samples,
)
from skiplock.core._throughput import throughput_window

NOW = datetime(2030, 5, 6, 7, 8, 9, 500_000, tzinfo=UTC)
MINUTE = sample_minute(NOW)
_ids = iter(range(1, 10**9))


def _job(kind: str, state: JobState, tenant: str | None = None, **fields: Any) -> Job:
    job = Job(
        id=next(_ids),
        kind=kind,
        payload=None,
        state=state,
        priority=0,
        tenant=tenant,
        available_at=NOW - timedelta(minutes=5),
        created_at=NOW - timedelta(minutes=5),
        attempts=0,
        max_attempts=3,
    )
    return attrs.evolve(job, **fields)


def test_the_sample_minute_is_the_utc_minute_holding_now() -> None:
    assert datetime(2030, 5, 6, 7, 8, tzinfo=UTC) == MINUTE
    assert sample_minute(MINUTE) == MINUTE


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [
        ([], 0.5, None),
        ([3.0], 0.99, 3.0),
        ([2.0, 4.0, 30.0], 0.5, 4.0),
        ([2.0, 4.0, 30.0], 0.99, 29.48),
        ([30.0, 2.0, 4.0, 10.0], 0.5, 7.0),
    ],
)
def test_percentile_interpolates_between_ranks(
    values: list[float], fraction: float, expected: float | None
) -> None:
    assert percentile(values, fraction) == (None if expected is None else pytest.approx(expected))


def test_samples_count_pending_due_and_running_per_kind_and_in_all() -> None:
    later = NOW + timedelta(hours=1)
    jobs = [
        _job("mail", JobState.PENDING),
        _job("mail", JobState.PENDING, tenant="acme"),
        _job("mail", JobState.PENDING, available_at=later),
        _job("mail", JobState.RUNNING),
        _job("scan", JobState.PENDING, available_at=later),
        _job("gone", JobState.DEAD),
    ]
    samples = {s.kind: s for s in take_samples(NOW, jobs)}
    assert set(samples) == {"mail", "scan", ALL_KINDS}
    counted = {k: (s.pending, s.due, s.running, s.due_bounded) for k, s in samples.items()}
    assert counted == {
        "mail": (3, 2, 1, False),
        "scan": (1, 0, 0, False),
        ALL_KINDS: (4, 2, 1, False),
    }
    assert all(s.minute == MINUTE for s in samples.values())


def test_an_empty_queue_still_has_its_sum() -> None:
    assert take_samples(NOW, []) == [QueueSample(MINUTE, ALL_KINDS, 0, 0, 0)]


def test_the_due_split_is_bounded_as_the_health_reports() -> None:
    later = NOW + timedelta(hours=1)
    many = PENDING_SPLIT_BOUND + 1
    jobs = [_job("bulk", JobState.PENDING) for _ in range(many)]
    jobs += [_job("bulk", JobState.PENDING, available_at=later) for _ in range(many)]
    [total, bulk] = take_samples(NOW, jobs)
    assert (bulk.pending, bulk.due, bulk.due_bounded) == (2 * many, PENDING_SPLIT_BOUND, True)
    assert total.due_bounded


def test_claim_latency_comes_from_the_latest_successes_of_the_minute_before() -> None:
    def done(kind: str, wait: float, completed: datetime) -> Job:
        due = completed - timedelta(seconds=60)
        return _job(
            kind,
            JobState.SUCCEEDED,
            available_at=due,
            claimed_at=due + timedelta(seconds=wait),
            completed_at=completed,
        )

    before = MINUTE - timedelta(seconds=30)
    jobs = [
        done("mail", 2.0, before),
        done("mail", 4.0, before),
        done("scan", 30.0, before),
        done("mail", 99.0, MINUTE + timedelta(seconds=1)),  # this minute: not yet
        done("mail", 99.0, MINUTE - timedelta(seconds=61)),  # two minutes back: no more
        attrs.evolve(done("mail", 99.0, before), state=JobState.DEAD),  # only successes
    ]
    samples = {s.kind: s for s in take_samples(NOW, jobs)}
    assert {k: (s.claims, s.claim_p50) for k, s in samples.items()} == {
        "mail": (2, 3.0),
        "scan": (1, 30.0),
        ALL_KINDS: (3, 4.0),
    }
    assert samples[ALL_KINDS].claim_p99 == pytest.approx(29.48)
    assert samples["mail"].pending == 0  # in the sample for its latency only


def test_at_most_a_bounded_number_of_successes_are_read() -> None:
    start = MINUTE - timedelta(minutes=1)
    jobs = [
        _job(
            "mail",
            JobState.SUCCEEDED,
            available_at=start,
            claimed_at=start + timedelta(seconds=1 if i < PICKUP_SAMPLE else 50),
            completed_at=start + timedelta(milliseconds=i),  # the latest 50 waited 50 s
        )
        for i in range(PICKUP_SAMPLE + 50)
    ]
    jobs.reverse()
    [total, _] = take_samples(NOW, jobs)
    assert total.claims == PICKUP_SAMPLE
    assert total.claim_p99 == pytest.approx(50.0)  # the latest 200: 150 of 1 s, 50 of 50 s


def test_a_history_buckets_finished_jobs_per_kind_and_their_failure_rate() -> None:
    bucket = timedelta(minutes=5)
    since, count = throughput_window(NOW, timedelta(minutes=30), bucket)
    finished = [
        FinishedCount(since, JobState.SUCCEEDED, 8, kind="mail"),
        FinishedCount(since, JobState.DEAD, 1, kind="mail"),
        FinishedCount(since, JobState.FAILED, 1, kind="scan"),
        FinishedCount(since, JobState.CANCELLED, 5, kind="scan"),
        FinishedCount(since + bucket, JobState.SUCCEEDED, 3, kind=None),
        FinishedCount(since - bucket, JobState.SUCCEEDED, 99, kind="mail"),  # outside
    ]
    history = history_from(NOW, since, bucket, count, finished, [])
    first, second, *rest = history.buckets
    assert len(history.buckets) == count == 6
    assert dict(first.finished) == {"mail": 9, "scan": 6}
    assert (first.succeeded, first.failures, first.cancelled) == (8, 2, 5)
    assert first.failure_rate == pytest.approx(0.2)  # cancelled jobs count on no side
    assert dict(second.finished) == {"(unknown)": 3}
    assert second.failure_rate == 0.0
    assert all(b.failure_rate is None and not b.finished for b in rest)
    assert history.kinds == ("mail", "scan", "(unknown)")  # busiest first
    assert all(b.due is None and b.claim_p50 is None for b in history.buckets)


def test_a_history_takes_the_last_sample_of_each_bucket_and_the_worst_p99() -> None:
    bucket = timedelta(minutes=5)
    since, count = throughput_window(NOW, timedelta(minutes=10), bucket)

    def sample(minutes: int, kind: str, due: int, **fields: Any) -> QueueSample:
        return QueueSample(since + timedelta(minutes=minutes), kind, due, due, 0, **fields)

    samples = [
        sample(0, ALL_KINDS, 10, claims=10, claim_p50=1.0, claim_p99=2.0),
        sample(0, "mail", 10),
        sample(3, ALL_KINDS, 7, claims=30, claim_p50=3.0, claim_p99=9.0),
        sample(3, "mail", 4),
        sample(3, "scan", 3),
        sample(4, ALL_KINDS, 0, due_bounded=False),  # the last of the first bucket: empty
        sample(5, ALL_KINDS, PENDING_SPLIT_BOUND, due_bounded=True),
        sample(5, "bulk", PENDING_SPLIT_BOUND, due_bounded=True),
        sample(-1, "mail", 50),  # before the window
    ]
    folded = fold_samples(samples, since, bucket)
    assert [(s.minute, s.kind) for s in folded] == [
        (since, ALL_KINDS),
        (since, "mail"),
        (since, "scan"),
        (since + bucket, ALL_KINDS),
        (since + bucket, "bulk"),
    ]
    assert {s.kind: s.due for s in folded[:3]} == {ALL_KINDS: 0, "mail": 0, "scan": 0}
    history = history_from(NOW, since, bucket, count, [], folded)
    first, second = history.buckets
    assert (first.due, first.due_total, first.due_bounded) == ({}, 0, False)
    assert first.claims == 40
    assert first.claim_p50 == pytest.approx((10 * 1.0 + 30 * 3.0) / 40)
    assert first.claim_p99 == 9.0
    assert (second.due, second.due_total, second.due_bounded) == (
        {"bulk": PENDING_SPLIT_BOUND},
        PENDING_SPLIT_BOUND,
        True,
    )
    assert second.claim_p50 is None
    assert set(history.kinds) == {"mail", "scan", "bulk"}
    assert history.to_dict()["buckets"][1]["due"] == {"bulk": PENDING_SPLIT_BOUND}
