"""Periodic schedules on the in-memory store with a fake clock (sync twin generated):
one job per tick, intervals and cron, catch-up after downtime, validation, racing
workers, the admin view (see docs/periodic.md)."""

from __future__ import annotations

import logging
import re
import sys
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncEngine,
    JobContext,
    JobState,
    ScheduleInfo,
    Settings,
    UnknownKindError,
    ValidationError,
    declare,
)
from skiplock._compat_async import gather, join, spawn
from skiplock.adapters.memory import AsyncInMemoryJobStore

from .helpers_async import eventually

if TYPE_CHECKING:
    from skiplock import Job, TickResult
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio

#: 00:00:30 on a Monday: the clock fixtures start here, half-way between minute ticks.
START = datetime(2024, 1, 1, 0, 0, 30, tzinfo=UTC)


def at(hour: int, minute: int, second: int = 0, *, day: int = 1) -> datetime:
    return datetime(2024, 1, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def store(clock: FakeClock) -> AsyncInMemoryJobStore:
    clock.set(START)
    return AsyncInMemoryJobStore(clock=clock)


def make_engine(store: AsyncInMemoryJobStore, clock: FakeClock, **settings: Any) -> AsyncEngine:
    engine = AsyncEngine(store, Settings(**settings), clock=clock)
    engine.declare_kind("tick")
    return engine


def another_process(store: AsyncInMemoryJobStore, clock: FakeClock, **settings: Any) -> AsyncEngine:
    """An engine on the same jobs, as another process (or a restarted one) would have."""
    return make_engine(AsyncInMemoryJobStore(state=store.state), clock, **settings)


async def tick_jobs(engine: AsyncEngine, kind: str = "tick") -> list[Job]:
    return await engine.list_jobs(kind=kind, limit=1000)


def ticks(results: list[TickResult]) -> list[datetime]:
    return [r.tick for r in results]


# ---- one job per tick -----------------------------------------------------------------


async def test_interval_ticks_enqueue_one_keyed_job_each(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", every=timedelta(minutes=1), payload={"n": 1}, priority=3, tenant="t")
    first = await engine.enqueue_due_ticks()
    # The first pass takes the tick just past (00:00) for missed: catch_up="latest".
    assert [(r.tick, r.created) for r in first] == [(at(0, 0), True)]
    assert await engine.enqueue_due_ticks() == []  # same tick: nothing more
    clock.advance(29)
    assert await engine.enqueue_due_ticks() == []  # 00:00:59
    clock.advance(1)
    second = await engine.enqueue_due_ticks()  # 00:01:00: due right now
    assert [(r.tick, r.created) for r in second] == [(at(0, 1), True)]
    clock.advance(60)
    third = await engine.enqueue_due_ticks()
    assert ticks(third) == [at(0, 2)]

    jobs = await tick_jobs(engine)
    assert [job.id for job in jobs] == [r.job_id for r in first + second + third]
    assert [job.idempotency_key for job in jobs] == [
        "periodic:tick:2024-01-01T00:00:00+00:00",
        "periodic:tick:2024-01-01T00:01:00+00:00",
        "periodic:tick:2024-01-01T00:02:00+00:00",
    ]
    assert [job.available_at for job in jobs] == [at(0, 0), at(0, 1), at(0, 2)]
    assert {(job.payload["n"], job.priority, job.tenant) for job in jobs} == {(1, 3, "t")}


async def test_interval_ticks_are_multiples_of_the_interval_since_the_epoch(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", every=7)  # seconds; 2024-01-01 00:00:00 is 1704067200 s
    [result] = await engine.enqueue_due_ticks()
    # 1704067230 // 7 * 7 = 1704067225: 00:00:25, whenever the process started.
    assert result.tick == at(0, 0, 25)
    clock.advance(1)
    assert await engine.enqueue_due_ticks() == []
    clock.advance(1)  # 00:00:32, the next multiple
    assert ticks(await engine.enqueue_due_ticks()) == [at(0, 0, 32)]


async def test_cron_ticks_in_utc_by_default(store: AsyncInMemoryJobStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", cron="*/15 * * * *", catch_up="skip")
    assert await engine.enqueue_due_ticks() == []  # skip: 00:00 was before the start
    clock.set(at(0, 14, 59))
    assert await engine.enqueue_due_ticks() == []
    clock.set(at(0, 15))
    assert ticks(await engine.enqueue_due_ticks()) == [at(0, 15)]
    clock.set(at(0, 29, 10))
    assert await engine.enqueue_due_ticks() == []
    clock.set(at(0, 30, 10))
    assert ticks(await engine.enqueue_due_ticks()) == [at(0, 30)]


async def test_cron_with_a_time_zone(store: AsyncInMemoryJobStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    # 06:00 in Paris is 05:00 UTC in January (and 04:00 UTC in July).
    engine.periodic("tick", cron="0 6 * * *", tz="Europe/Paris", catch_up="skip")
    [info] = await engine.schedules()
    assert (info.cron, info.tz, info.next_tick) == ("0 6 * * *", "Europe/Paris", at(5, 0))
    clock.set(at(5, 0))
    assert ticks(await engine.enqueue_due_ticks()) == [at(5, 0)]
    clock.set(datetime(2024, 7, 1, 4, 0, tzinfo=UTC))
    assert ticks(await engine.enqueue_due_ticks()) == [datetime(2024, 7, 1, 4, 0, tzinfo=UTC)]


async def test_cron_across_daylight_saving_changes(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    # Europe/Paris, 02:30 local. 2024-03-31: clocks jump from 02:00 to 03:00, so the
    # skipped 02:30 runs right after the jump (03:00 CEST = 01:00 UTC), as in Debian cron.
    clock.set(datetime(2024, 3, 31, 0, 59, 59, tzinfo=UTC))
    engine = make_engine(store, clock)
    engine.periodic("tick", cron="30 2 * * *", tz="Europe/Paris", catch_up="skip")
    assert await engine.enqueue_due_ticks() == []
    clock.advance(1)
    assert ticks(await engine.enqueue_due_ticks()) == [datetime(2024, 3, 31, 1, tzinfo=UTC)]
    # 2024-10-27: 02:00-03:00 happens twice (CEST, then CET); 02:30 runs once, in CEST
    # (00:30 UTC). A process starting during the second 02:00-02:30 (01:15 UTC) finds
    # that tick as the latest, not the day before's.
    clock.set(datetime(2024, 10, 27, 1, 15, tzinfo=UTC))
    late = make_engine(store, clock)
    late.periodic("tick", cron="30 2 * * *", tz="Europe/Paris")
    assert ticks(await late.enqueue_due_ticks()) == [datetime(2024, 10, 27, 0, 30, tzinfo=UTC)]
    seen = []
    for _ in range(25 * 60):  # a pass a minute for 25 hours: no tick twice, none more
        clock.advance(60)
        seen += ticks(await late.enqueue_due_ticks())
    assert seen == [datetime(2024, 10, 28, 1, 30, tzinfo=UTC)]  # 02:30 CET


async def test_cron_with_a_seconds_field_and_a_tzinfo(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", cron="*/20 * * * * *", tz=timezone(timedelta(hours=2)))
    assert ticks(await engine.enqueue_due_ticks()) == [at(0, 0, 20)]
    clock.advance(10)
    assert ticks(await engine.enqueue_due_ticks()) == [at(0, 0, 40)]


async def test_schedules_show_next_and_last_ticks(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.declare_kind("report")
    engine.periodic("tick", every=60, name="minutely", payload=[1], catch_up=3, max_attempts=2)
    engine.periodic("report", cron="0 6 * * 1-5", catch_up="skip")
    before = await engine.schedules()
    assert before == [
        ScheduleInfo(
            name="minutely",
            kind="tick",
            cron=None,
            every=timedelta(minutes=1),
            tz=None,
            catch_up=3,
            payload=[1],
            priority=None,
            tenant=None,
            max_attempts=2,
            next_tick=at(0, 1),
            last_tick=None,
            last_job_id=None,
        ),
        ScheduleInfo(
            name="report",
            kind="report",
            cron="0 6 * * 1-5",
            every=None,
            tz="UTC",
            catch_up="skip",
            payload=None,
            priority=None,
            tenant=None,
            max_attempts=None,
            next_tick=at(6, 0),
            last_tick=None,
            last_job_id=None,
        ),
    ]
    results = await engine.enqueue_due_ticks()
    minutely, report = await engine.schedules()
    assert (minutely.last_tick, minutely.last_job_id) == (at(0, 0), results[-1].job_id)
    assert (await engine.get_job(results[-1].job_id)).max_attempts == 2  # as shown
    assert report.last_tick is None
    # The tick jobs are ordinary jobs: filter them by kind.
    assert [job.id for job in await engine.list_jobs(kind="tick")] == [r.job_id for r in results]


async def test_the_decorator_form_returns_the_processor_unchanged(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    seen: list[tuple[Any, str | None]] = []

    @engine.periodic("daily.report", cron="0 6 * * *", payload={"scope": "all"})
    @engine.processor("daily.report")
    async def report(payload: Any, ctx: JobContext) -> None:
        seen.append((payload, ctx.job.idempotency_key))

    assert engine.processors["daily.report"].fn is report
    await engine.enqueue_due_ticks()
    assert await engine.worker().run_until_idle() == 1
    assert seen == [({"scope": "all"}, "periodic:daily.report:2023-12-31T06:00:00+00:00")]


# ---- catch-up ---------------------------------------------------------------------------


async def test_latest_catch_up_enqueues_only_the_most_recent_missed_tick(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", every=60)
    await engine.enqueue_due_ticks()  # 00:00
    clock.advance(600)  # ten minutes down
    restarted = another_process(store, clock)
    restarted.periodic("tick", every=60)
    assert ticks(await restarted.enqueue_due_ticks()) == [at(0, 10)]
    assert len(await tick_jobs(engine)) == 2
    # A process that stalls (no pass for minutes) is no different.
    clock.advance(300)
    assert ticks(await restarted.enqueue_due_ticks()) == [at(0, 15)]


async def test_skip_catch_up_enqueues_no_missed_tick(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", every=60, catch_up="skip")
    assert await engine.enqueue_due_ticks() == []
    clock.advance(30)  # 00:01:00
    assert ticks(await engine.enqueue_due_ticks()) == [at(0, 1)]
    clock.advance(600)  # down until 00:11:00: the ten ticks in between are skipped...
    restarted = another_process(store, clock)
    restarted.periodic("tick", every=60, catch_up="skip")
    # ... and a tick due right now is not missed.
    assert ticks(await restarted.enqueue_due_ticks()) == [at(0, 11)]
    clock.advance(150)  # a stall: 00:12 and 00:13 came due since the last pass
    assert ticks(await restarted.enqueue_due_ticks()) == [at(0, 13)]
    assert len(await tick_jobs(engine)) == 3


class PassCountingStore(AsyncInMemoryJobStore):
    """Counts reads of the store's clock: each scheduler pass begins with one."""

    reads = 0

    async def now(self) -> datetime:
        self.reads += 1
        return await super().now()


@pytest.mark.parametrize(("catch_up", "after_stall"), [("skip", []), ("latest", [at(0, 11)])])
async def test_a_worker_that_stalled_catches_up_as_its_policy_says(
    clock: FakeClock, catch_up: str, after_stall: list[datetime]
) -> None:
    # A worker's scheduler that did not run for ten minutes (a stall: the fake clock
    # jumps while the loop waits) finds the ticks of those minutes missed. "skip"
    # enqueues none of them, "latest" the most recent; a tick due while it runs is
    # enqueued either way (docs/periodic.md, "Catch-up").
    clock.set(START)
    store = PassCountingStore(clock=clock)
    engine = make_engine(store, clock, poll_interval=0.01)
    engine.periodic("tick", every=60, catch_up=catch_up)  # type: ignore[arg-type]

    async def passes() -> None:
        # Two more passes: one began after the clock moved and ended.
        seen = store.reads
        await eventually(lambda: store.reads >= seen + 2)

    async def tick_times() -> list[datetime]:
        return [job.available_at for job in await tick_jobs(engine)]

    worker = engine.worker(all_kinds=True)
    async with worker.in_background():
        await passes()
        first = [] if catch_up == "skip" else [at(0, 0)]
        assert await tick_times() == first
        clock.set(at(0, 1))  # on time
        await passes()
        assert await tick_times() == [*first, at(0, 1)]
        clock.set(at(0, 11, 30))  # nothing ran since 00:01: ten ticks missed
        await passes()
        assert await tick_times() == [*first, at(0, 1), *after_stall]
        clock.set(at(0, 12))  # running again, on time
        await passes()
        assert await tick_times() == [*first, at(0, 1), *after_stall, at(0, 12)]


async def test_bounded_catch_up_enqueues_up_to_n_missed_ticks_oldest_first(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", every=60, catch_up=3)
    # First pass: the three most recent ticks at or before now (00:00 and two before).
    assert ticks(await engine.enqueue_due_ticks()) == [
        at(23, 58, day=1) - timedelta(days=1),
        at(23, 59, day=1) - timedelta(days=1),
        at(0, 0),
    ]
    clock.advance(120)  # 00:02:30: two ticks missed, both enqueued
    assert ticks(await engine.enqueue_due_ticks()) == [at(0, 1), at(0, 2)]
    clock.advance(600)  # 00:12:30: ten missed, the three most recent enqueued
    restarted = another_process(store, clock)
    restarted.periodic("tick", every=60, catch_up=3)
    results = await restarted.enqueue_due_ticks()
    assert ticks(results) == [at(0, 10), at(0, 11), at(0, 12)]
    assert all(r.created for r in results)
    assert len(await tick_jobs(engine)) == 8


async def test_catch_up_never_goes_past_retention(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    # A tick older than retention may have had its job purged: enqueueing it again could
    # run it twice, so it counts as lost.
    engine = make_engine(store, clock, retention=150)
    engine.periodic("tick", every=60, catch_up=10)
    assert ticks(await engine.enqueue_due_ticks()) == [
        at(23, 58) - timedelta(days=1),
        at(23, 59) - timedelta(days=1),
        at(0, 0),
    ]
    late = make_engine(store, clock, retention=20)
    late.periodic("tick", every=60)  # the most recent tick, 00:00, is 30 s old
    assert await late.enqueue_due_ticks() == []


async def test_a_tick_whose_job_was_purged_is_not_enqueued_again(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    # Retention frees a purged job's key; the retention bound keeps its tick from coming
    # back on a restart (it would run twice).
    engine = make_engine(store, clock, retention=60)

    @engine.periodic("hourly", every=3600)
    @engine.processor("hourly")
    async def hourly(payload: Any) -> None:
        pass

    [first] = await engine.enqueue_due_ticks()
    assert first.tick == at(0, 0)
    assert await engine.worker().run_until_idle() == 1
    clock.advance(120)
    assert await engine.maintain() == ([], 1)  # purged: the key is free again
    restarted = another_process(store, clock, retention=60)
    restarted.declare_kind("hourly")
    restarted.periodic("hourly", every=3600)
    assert await restarted.enqueue_due_ticks() == []
    assert await restarted.list_jobs(kind="hourly") == []
    clock.set(at(1, 0))  # the next tick is enqueued as usual
    assert ticks(await restarted.enqueue_due_ticks()) == [at(1, 0)]


async def test_a_restart_within_a_tick_finds_the_tick_job(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", every=60, catch_up=2)
    first = await engine.enqueue_due_ticks()
    clock.advance(10)
    restarted = another_process(store, clock)
    restarted.periodic("tick", every=60, catch_up=2)
    again = await restarted.enqueue_due_ticks()
    assert [(r.tick, r.job_id, r.created) for r in again] == [
        (r.tick, r.job_id, False) for r in first
    ]
    [info] = await restarted.schedules()
    assert (info.last_tick, info.last_job_id) == (first[-1].tick, first[-1].job_id)
    assert len(await tick_jobs(engine)) == 2


async def test_a_failed_enqueue_is_tried_again_by_the_next_pass(
    store: AsyncInMemoryJobStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store, clock)
    engine.declare_kind("other")
    engine.periodic("tick", every=60, catch_up="skip")
    engine.periodic("other", every=60, catch_up="skip")
    clock.advance(30)
    real_enqueue = store.enqueue
    calls: list[str] = []

    async def failing_once(requests: Any, *, connection: Any = None, audit: Any = None) -> Any:
        calls.append(requests[0].kind)
        if len(calls) == 1:
            raise ConnectionError("store down")
        return await real_enqueue(requests, connection=connection, audit=audit)

    store.enqueue = failing_once  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="skiplock.periodic"):
        results = await engine.enqueue_due_ticks()
    assert [r.schedule for r in results] == ["other"]  # the other schedule went on
    assert "schedule 'tick'" in caplog.text
    assert "store down" in caplog.text
    clock.advance(5)
    assert [(r.schedule, r.tick) for r in await engine.enqueue_due_ticks()] == [("tick", at(0, 1))]


# ---- racing workers -----------------------------------------------------------------


async def test_racing_passes_create_one_job_per_tick(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engines = [another_process(store, clock) for _ in range(4)]
    for engine in engines:
        engine.periodic("tick", every=60)
    for _ in range(3):
        clock.advance(60)
        rounds = await gather(*(engine.enqueue_due_ticks() for engine in engines))
        created = [r for results in rounds for r in results if r.created]
        assert len(created) == 1
        assert {r.job_id for results in rounds for r in results} == {created[0].job_id}
    jobs = await tick_jobs(engines[0])
    assert [job.available_at for job in jobs] == [at(0, 1), at(0, 2), at(0, 3)]


async def test_two_running_workers_enqueue_and_run_each_tick_once(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    runs: list[str | None] = []
    engines = []
    for _ in range(2):
        engine = another_process(store, clock, poll_interval=0.01)

        @engine.periodic("beat", every=60)
        @engine.processor("beat")
        async def beat(payload: Any, ctx: JobContext) -> None:
            runs.append(ctx.job.idempotency_key)

        engines.append(engine)
    workers = [engine.worker(install_signal_handlers=False) for engine in engines]
    tasks = [spawn(worker.run) for worker in workers]
    try:
        await eventually(lambda: len(runs) == 1)  # the latest tick, 00:00
        for expected in (2, 3, 4):
            clock.advance(60)
            await eventually(lambda expected=expected: len(runs) == expected)  # type: ignore[misc]
    finally:
        for worker in workers:
            worker.stop()
        for task in tasks:
            await join(task)
    assert runs == [f"periodic:beat:2024-01-01T00:0{m}:00+00:00" for m in range(4)]
    jobs = await engines[0].list_jobs(kind="beat")
    assert [job.state for job in jobs] == [JobState.SUCCEEDED] * 4


async def test_run_until_idle_runs_no_schedule(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)

    @engine.periodic("beat", every=60)
    @engine.processor("beat")
    async def beat(payload: Any) -> None:
        pass

    assert await engine.worker().run_until_idle() == 0
    assert await tick_jobs(engine, "beat") == []


# ---- validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of cron= and every="),
        ({"cron": "* * * * *", "every": 60}, "exactly one of cron= and every="),
        ({"every": 0}, "every must be at least 1 s"),
        ({"every": -5}, "every must be at least 1 s"),
        ({"every": timedelta(milliseconds=500)}, "every must be at least 1 s"),
        ({"every": float("nan")}, "finite number of seconds"),
        ({"every": timedelta.max}, "every out of range"),
        ({"every": "60"}, "every must be a timedelta or seconds"),
        ({"every": True}, "every must be a timedelta or seconds"),
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *': Bad minute"),
        ({"cron": "* * *"}, "invalid cron expression '* * *': Wrong number of fields"),
        ({"cron": "0 0 31 2 *"}, "invalid cron expression"),
        ({"cron": 5}, "cron must be a str"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"cron": "* * * * *", "tz": 2}, "tz must be a zoneinfo key or a tzinfo"),
        ({"every": 60, "tz": "UTC"}, "tz applies to cron schedules only"),
        ({"every": 60, "catch_up": 0}, "catch_up must be 'latest', 'skip' or an int"),
        ({"every": 60, "catch_up": 1001}, "catch_up must be"),
        ({"every": 60, "catch_up": "all"}, "catch_up must be"),
        ({"every": 60, "catch_up": True}, "catch_up must be"),
        ({"every": 60, "name": "has space"}, "invalid schedule name 'has space'"),
        ({"every": 60, "name": ""}, "invalid schedule name"),
        ({"every": 60, "payload": {1, 2}}, "payload"),
        ({"every": 60, "priority": "high"}, "priority"),
        ({"every": 60, "tenant": ""}, "tenant"),
        ({"every": 60, "max_attempts": 0}, "max_attempts"),
    ],
)
async def test_bad_declarations_raise_and_declare_nothing(
    store: AsyncInMemoryJobStore, clock: FakeClock, options: dict[str, Any], message: str
) -> None:
    engine = make_engine(store, clock)
    with pytest.raises(ValidationError, match=re.escape(message)):
        engine.periodic("tick", **options)
    assert await engine.schedules() == []


@pytest.mark.parametrize("kind", ["", "has space", 7])
async def test_a_bad_kind_raises(store: AsyncInMemoryJobStore, clock: FakeClock, kind: Any) -> None:
    engine = make_engine(store, clock)
    with pytest.raises(ValidationError, match="kind"):
        engine.periodic(kind, every=60)


async def test_a_duplicate_name_raises(store: AsyncInMemoryJobStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    engine.periodic("tick", every=60)
    with pytest.raises(ValidationError, match="a schedule named 'tick' exists already"):
        engine.periodic("tick", cron="0 * * * *")
    engine.periodic("tick", cron="0 * * * *", name="tick.hourly")  # another name is fine
    assert [s.name for s in await engine.schedules()] == ["tick", "tick.hourly"]


async def test_a_kind_the_engine_may_not_enqueue_fails_at_worker(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)  # knows "tick" only (unknown_kinds="error")

    @engine.processor("tick")
    async def tick(payload: Any) -> None:
        pass

    engine.periodic("tock", every=60)  # may still get a processor or declaration
    with pytest.raises(UnknownKindError, match="tock"):
        engine.worker()
    engine.declare_kind("tock")
    engine.worker()


async def test_cron_without_cronsim_names_the_extra(
    store: AsyncInMemoryJobStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cronsim", None)  # import cronsim -> ImportError
    engine = make_engine(store, clock)
    with pytest.raises(ImportError, match=r"pip install 'skiplock\[cron\]'"):
        engine.periodic("tick", cron="* * * * *")
    engine.periodic("tick", every=60)  # intervals need no library


async def test_a_task_handle_schedules_its_kind_with_a_typed_payload(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = AsyncEngine(store, clock=clock)
    engine.declare_kind("tick")
    report = engine.declare(declare("report.daily", dict, priority=-5))
    report.periodic({"scope": "all"}, every=60, name="reports")
    [info] = await engine.schedules()
    assert (info.name, info.kind, info.payload) == ("reports", "report.daily", {"scope": "all"})
    [result] = await engine.enqueue_due_ticks()
    job = await engine.get_job(result.job_id)
    # The declaration's default priority applies to the tick's job.
    assert (job.kind, job.payload, job.priority) == ("report.daily", {"scope": "all"}, -5)
