"""Drain or stop a worker through the store (issue 45 item 5) on the in-memory store
(async source; ``test_worker_requests.py`` is its generated twin): another engine (an
operator in another process) asks, the running worker reads the request with its
controls, and drains (its running job finishes, nothing new starts, then it exits) or
stops (its running job gets ``shutdown_timeout``, then is released); audited."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings
from skiplock._compat_async import Event, join, spawn, wait_event
from skiplock.core import AuditAction

from .helpers_async import CountingStore, eventually

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.core import AuditEvent
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"controls_refresh": 0.05, "poll_interval": 0.05, "heartbeat_interval": 0.1}


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(clock=clock)


class Blocking:
    """A processor whose jobs run until released."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.finished: list[int] = []
        self.release = Event()

    async def __call__(self, payload: object, ctx: JobContext) -> None:
        self.started.append(ctx.job_id)
        await self.release.wait()
        self.finished.append(ctx.job_id)


def _worker_engine(
    store: CountingStore, clock: FakeClock, **kw: Any
) -> tuple[AsyncEngine, Blocking]:
    engine = AsyncEngine(store, Settings(concurrency=2, **FAST, **kw), clock=clock)
    blocking = Blocking()
    engine.processor("sync")(blocking)
    return engine, blocking


async def test_a_drained_worker_finishes_its_running_job_and_exits(
    store: CountingStore, clock: FakeClock
) -> None:
    events: list[AuditEvent] = []

    def sink(recorded: Sequence[AuditEvent], connection: object) -> None:
        events.extend(recorded)

    engine, blocking = _worker_engine(store, clock, shutdown_timeout=0.1)
    operator = AsyncEngine(store, Settings(audit=True), clock=clock, audit_sink=sink)
    first = (await engine.enqueue("sync", {})).id
    worker = engine.worker()
    task = spawn(worker.run)
    await eventually(lambda: blocking.started == [first])
    [shown] = (await operator.health()).workers
    assert (shown.id, shown.slots, shown.request) == (worker.id, 2, None)
    request = await operator.operator("alice").drain_worker(worker.id)
    assert request is not None
    assert (request.worker_id, request.action, request.actor) == (worker.id, "drain", "alice")
    [shown] = (await operator.health()).workers
    assert shown.request == request
    await eventually(lambda: worker.state == "draining", timeout=5)
    # Draining: nothing new starts, and the running job is not cut short, well past the
    # shutdown_timeout a stop would give it.
    later = (await operator.enqueue("sync", {})).id
    assert not await wait_event(Event(), 0.5)
    assert blocking.started == [first]
    assert worker.running == 1
    blocking.release.set()
    await join(task)  # run() returned: the worker exited
    assert blocking.finished == [first]
    assert (await operator.get_job(first)).state is JobState.SUCCEEDED
    assert (await operator.get_job(later)).state is JobState.PENDING
    assert (await operator.health()).workers == []  # unregistered
    assert [(e.action, e.actor, e.details) for e in events if e.job_id is None] == [
        (AuditAction.WORKER_DRAIN, "alice", {"worker_id": worker.id})
    ]


async def test_a_stopped_worker_releases_what_outlives_its_shutdown_timeout(
    store: CountingStore, clock: FakeClock
) -> None:
    engine, blocking = _worker_engine(store, clock, shutdown_timeout=0.2)
    operator = AsyncEngine(store, clock=clock)
    job_id = (await engine.enqueue("sync", {})).id
    worker = engine.worker()
    task = spawn(worker.run)
    await eventually(lambda: blocking.started == [job_id])
    assert await operator.stop_worker(worker.id) is not None
    await join(task)  # interrupted after shutdown_timeout, released, unregistered
    job = await operator.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.PENDING, 0)
    assert (await operator.health()).workers == []


async def test_a_stop_during_a_drain_gives_running_jobs_shutdown_timeout(
    store: CountingStore, clock: FakeClock
) -> None:
    engine, blocking = _worker_engine(store, clock, shutdown_timeout=0.2)
    operator = AsyncEngine(store, clock=clock)
    job_id = (await engine.enqueue("sync", {})).id
    worker = engine.worker()
    task = spawn(worker.run)
    await eventually(lambda: blocking.started == [job_id])
    await operator.drain_worker(worker.id)
    await eventually(lambda: worker.state == "draining", timeout=5)
    assert await operator.stop_worker(worker.id) is not None
    await join(task)
    assert (await operator.get_job(job_id)).state is JobState.PENDING
    assert blocking.finished == []


async def test_asking_a_worker_that_is_not_registered(
    store: CountingStore, clock: FakeClock
) -> None:
    operator = AsyncEngine(store, clock=clock)
    assert await operator.drain_worker("nobody") is None
    assert await operator.stop_worker("nobody") is None
