"""``AsyncEngine.throughput()`` (sync twin generated): jobs finished per bucket on the
in-memory store, with a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, ValidationError
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.core._throughput import MAX_BUCKETS
from skiplock.testing import FakeClock

if TYPE_CHECKING:
    from skiplock.core._throughput import Throughput

pytestmark = pytest.mark.anyio

KIND = "report.build"
#: 12:00:30 UTC: half a minute into a minute bucket.
START = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def engine(clock: FakeClock) -> AsyncEngine:
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), clock=clock)

    @engine.processor(KIND, max_attempts=1)
    async def build(payload: Any, ctx: JobContext) -> None:
        if payload == "fail":
            raise RuntimeError("no data")

    return engine


async def _run(engine: AsyncEngine, *payloads: str) -> None:
    for payload in payloads:
        await engine.enqueue(KIND, payload)
    await engine.worker().run_until_idle()


def _series(throughput: Throughput) -> list[tuple[int, int, int, int]]:
    return [(b.succeeded, b.dead, b.failed, b.cancelled) for b in throughput.buckets]


async def test_buckets_are_aligned_and_count_each_outcome(
    engine: AsyncEngine, clock: FakeClock
) -> None:
    await _run(engine, "ok", "ok", "fail")
    clock.advance(timedelta(minutes=2))
    await _run(engine, "ok")
    cancelled = await engine.enqueue(KIND, "never")
    await engine.cancel_job(cancelled.id)
    failed = await engine.enqueue(KIND, "stopped")
    await engine.fail_job(failed.id)

    throughput = await engine.throughput(window=timedelta(minutes=5))
    assert throughput.now == START + timedelta(minutes=2)
    assert throughput.bucket == timedelta(minutes=1)
    assert [b.start for b in throughput.buckets] == [
        datetime(2030, 1, 1, 11, 58, tzinfo=UTC) + timedelta(minutes=i) for i in range(5)
    ]
    assert all(b.end - b.start == timedelta(minutes=1) for b in throughput.buckets)
    assert _series(throughput) == [(0, 0, 0, 0)] * 2 + [(2, 1, 0, 0), (0, 0, 0, 0), (1, 0, 1, 1)]
    assert [b.failures for b in throughput.buckets] == [0, 0, 1, 0, 1]
    assert (throughput.succeeded, throughput.failures) == (3, 2)
    assert throughput.to_dict()["buckets"][2] == {
        "start": "2030-01-01T12:00:00+00:00",
        "end": "2030-01-01T12:01:00+00:00",
        "succeeded": 2,
        "failed": 0,
        "dead": 1,
        "cancelled": 0,
        "failures": 1,
    }


async def test_jobs_finished_before_the_window_or_replayed_do_not_count(
    engine: AsyncEngine, clock: FakeClock
) -> None:
    await _run(engine, "ok", "fail")
    dead = (await engine.dead_jobs())[0]
    clock.advance(timedelta(minutes=10))
    await _run(engine, "ok")
    assert _series(await engine.throughput(window=300, bucket=300)) == [(1, 0, 0, 0)]

    await engine.retry_job(dead.id)
    whole = await engine.throughput(window=timedelta(minutes=15))
    assert (whole.succeeded, whole.failures) == (2, 0)


async def test_an_empty_store_has_every_bucket_at_zero(engine: AsyncEngine) -> None:
    throughput = await engine.throughput(window=timedelta(hours=1), bucket=timedelta(minutes=5))
    assert len(throughput.buckets) == 12
    assert _series(throughput) == [(0, 0, 0, 0)] * 12
    assert throughput.buckets[-1].start <= throughput.now < throughput.buckets[-1].end


async def test_a_window_that_is_no_whole_number_of_buckets_is_rounded_up(
    engine: AsyncEngine,
) -> None:
    throughput = await engine.throughput(window=150, bucket=60)
    assert len(throughput.buckets) == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bucket": 0.5}, "bucket must be a whole number of seconds"),
        ({"bucket": 1.5}, "bucket must be a whole number of seconds"),
        ({"bucket": 0}, "bucket must be > 0"),
        ({"window": -1}, "window must be > 0"),
        ({"window": 30, "bucket": 60}, "window must be at least one bucket"),
        ({"window": timedelta(days=2), "bucket": 60}, f"at most {MAX_BUCKETS} buckets"),
        ({"window": "1h"}, "window must be a timedelta"),
    ],
)
async def test_bad_arguments_are_refused(
    engine: AsyncEngine, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        await engine.throughput(**options)
