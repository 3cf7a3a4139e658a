"""``AsyncEngine.health()`` (sync twin generated): the report on the in-memory store (R9)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, Settings, StoreError, ValidationError
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.core import HealthSnapshot, WorkerInfo

if TYPE_CHECKING:
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio

KIND = "email.send"


@pytest.fixture
def store(clock: FakeClock) -> AsyncInMemoryJobStore:
    return AsyncInMemoryJobStore(clock=clock)


@pytest.fixture
def engine(store: AsyncInMemoryJobStore, clock: FakeClock) -> AsyncEngine:
    engine = AsyncEngine(store, clock=clock)

    @engine.processor(KIND, max_attempts=1)
    async def send(payload: Any, ctx: JobContext) -> None:
        if payload == "fail":
            raise RuntimeError("smtp down")

    return engine


async def _register(store: AsyncInMemoryJobStore, worker_id: str, *kinds: str) -> None:
    await store.register_worker(
        WorkerInfo(id=worker_id, host="h", pid=1, kinds=frozenset(kinds) or None)
    )


async def test_health_of_live_workers_and_their_queues(
    engine: AsyncEngine, store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    await _register(store, "w1", KIND)
    await engine.enqueue(KIND, "a")
    await engine.enqueue(KIND, "b", delay=60)
    clock.advance(10)
    report = await engine.health()
    assert report.healthy, report.problems
    assert report.checked_at == await store.now()
    assert report.schema is None  # the in-memory store has no versioned schema
    [worker] = report.workers
    assert (worker.id, worker.live, worker.kinds) == ("w1", True, frozenset({KIND}))
    assert worker.heartbeat_age == timedelta(seconds=10)
    [kind] = report.kinds
    assert (kind.kind, kind.pending_due, kind.scheduled) == (KIND, 1, 1)
    assert kind.oldest_due_age == timedelta(seconds=10)


@pytest.mark.parametrize(
    ("settings", "timeout"),
    [
        (Settings(), timedelta(seconds=30)),
        (Settings(heartbeat_interval=20, stale_ttl=600), timedelta(seconds=60)),
        (Settings(heartbeat_interval=10, stale_ttl=25), timedelta(seconds=25)),
    ],
)
async def test_health_default_worker_timeout_is_three_heartbeats_at_most_the_stale_ttl(
    clock: FakeClock, settings: Settings, timeout: timedelta
) -> None:
    store = AsyncInMemoryJobStore(clock=clock)
    engine = AsyncEngine(store, settings, clock=clock)
    await _register(store, "w1", KIND)
    await engine.enqueue(KIND)
    clock.advance(timeout)
    report = await engine.health()
    assert report.thresholds.worker_timeout == timeout
    assert report.healthy
    clock.advance(0.001)
    report = await engine.health()
    assert not report.workers[0].live
    assert report.uncovered_kinds == [KIND]
    assert report.problems == [
        f"kind {KIND!r}: 1 due job(s) and no live worker claims the kind; worker(s) that "
        f"claim it stopped sending heartbeats: w1 (silent for {_short(timeout)})"
    ]


def _short(value: timedelta) -> str:
    return {30: "30s", 60: "1m", 25: "25s"}[int(value.total_seconds())]


async def test_health_thresholds_from_arguments(
    engine: AsyncEngine, store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    await _register(store, "w1")
    await engine.enqueue(KIND)
    clock.advance(120)
    await _register(store, "w1")  # a fresh heartbeat
    assert (await engine.health(max_pending_age=120)).healthy
    report = await engine.health(max_pending_age=timedelta(seconds=119), worker_timeout=5)
    assert report.problems == [f"kind {KIND!r}: the oldest due job has waited 2m (max 1m59s)"]
    assert report.thresholds.worker_timeout == timedelta(seconds=5)
    assert report.thresholds.max_pending_age == timedelta(seconds=119)


async def test_health_counts_dead_jobs_after_a_worker_ran(
    engine: AsyncEngine, store: AsyncInMemoryJobStore
) -> None:
    await engine.enqueue(KIND, "ok")
    await engine.enqueue(KIND, "fail")
    await engine.worker().run_until_idle()
    report = await engine.health(max_dead=1)
    assert report.healthy  # the worker unregistered, and nothing is due
    assert report.workers == []
    [kind] = report.kinds
    assert (kind.pending_due, kind.running, kind.dead) == (0, 0, 1)
    assert (await engine.health(max_dead=0)).problems == [f"kind {KIND!r}: 1 dead job(s) (max 0)"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_pending_age": -1}, "max_pending_age must be >= 0"),
        ({"worker_timeout": 0}, "worker_timeout must be > 0"),
        ({"worker_timeout": "30s"}, "worker_timeout must be a timedelta"),
        ({"max_dead": -1}, "max_dead must be >= 0"),
        ({"max_dead": True}, "max_dead must be an int"),
    ],
)
async def test_health_rejects_bad_thresholds(
    engine: AsyncEngine, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        await engine.health(**arguments)


class _DownStore(AsyncInMemoryJobStore):
    error: Exception = StoreError("down")

    async def health_snapshot(self) -> HealthSnapshot:
        raise self.error


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            StoreError("cannot get a PostgreSQL connection:\n  Connection refused"),
            "database unreachable: cannot get a PostgreSQL connection: Connection refused",
        ),
        (TimeoutError(), "database unreachable: TimeoutError"),
        (
            OSError(111, "Connection refused"),
            "database unreachable: [Errno 111] Connection refused",
        ),
    ],
)
async def test_health_of_a_store_that_cannot_be_read_says_so_without_raising(
    clock: FakeClock, error: Exception, line: str
) -> None:
    store = _DownStore(clock=clock)
    store.error = error
    report = await AsyncEngine(store, clock=clock).health()
    assert not report.healthy
    assert not report.reachable
    assert report.problems == [line]
    assert report.checked_at is None
    assert report.to_dict()["database"] == {"reachable": False, "error": line.split(": ", 1)[1]}
