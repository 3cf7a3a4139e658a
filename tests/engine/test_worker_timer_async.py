"""The worker's next-due timer on the in-memory store with a fake clock (sync twin
generated): an idle worker sleeps until the next job of its kinds falls due, not longer
(and not until its next poll), re-armed by jobs enqueued for later and by its own
retries; an idle worker with nothing new asks the store once, not at every poll (see
docs/worker-internals.md, "The worker").

The fake clock never moves by itself, so the armed wake-up is exact: the tests read it
(``worker.next_wakeup``) instead of timing anything.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings

from .helpers_async import CountingStore, armed_for, eventually

if TYPE_CHECKING:
    from skiplock.core import NextDue
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio

#: Far longer than any due time here: a wait that ends sooner was armed by the timer.
POLL = 600.0


class AskingStore(CountingStore):
    """Counts the next-due reads."""

    next_dues = 0

    async def next_due(
        self, kinds: frozenset[str] | None, tenants: frozenset[str] | None
    ) -> NextDue | None:
        self.next_dues += 1
        return await super().next_due(kinds, tenants)


@pytest.fixture
def store(clock: FakeClock) -> AskingStore:
    return AskingStore(clock=clock)


def make_engine(store: AskingStore, clock: FakeClock, **kw: Any) -> AsyncEngine:
    engine = AsyncEngine(store, Settings(poll_interval=POLL, **kw), clock=clock)
    engine.declare_kind("other")

    @engine.processor("report", max_attempts=3, backoff_base=10, backoff_jitter=0)
    async def report(payload: Any, ctx: JobContext) -> None:
        if payload == "fail":
            raise ValueError("boom")

    return engine


def retried(store: AskingStore, job_id: int) -> bool:
    job = store.state.get(job_id)
    return job is not None and job.state is JobState.PENDING and job.attempts == 1


async def test_an_idle_worker_sleeps_until_the_next_due_job_and_not_longer(
    store: AskingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    await engine.enqueue_after(30, "report", tenant="t1")
    first = await engine.enqueue_after(5, "report", tenant="t1")
    await engine.enqueue_after(1, "other", tenant="t1")  # sooner, but not this worker's kind
    await engine.enqueue_after(2, "report", tenant="t9")  # nor its tenant
    due_at = (await engine.get_job(first.id)).available_at
    worker = engine.worker(kinds=["report"], tenants=["t1"])
    async with worker.in_background():
        await eventually(lambda: armed_for(worker, due_at))
        wakeup = worker.next_wakeup
        assert wakeup is not None
        now = clock.monotonic()
        assert wakeup.due == pytest.approx(now + 5.0, abs=0.01)
        # It sleeps until then: not longer (the 600 s poll), and not shorter.
        assert wakeup.at == pytest.approx(wakeup.due, abs=1e-9)


async def test_a_job_enqueued_for_sooner_rearms_the_timer(
    store: AskingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    worker = engine.worker()
    async with worker.in_background():
        # Nothing due at all: the wait is the poll.
        await eventually(lambda: worker.next_wakeup is not None)
        wakeup = worker.next_wakeup
        assert wakeup is not None
        assert (wakeup.due, wakeup.due_at) == (None, None)
        assert wakeup.at == pytest.approx(clock.monotonic() + POLL)
        later = await engine.enqueue_after(40, "report")
        later_at = (await engine.get_job(later.id)).available_at
        await eventually(lambda: armed_for(worker, later_at))
        sooner = await engine.enqueue_after(2, "report")
        sooner_at = (await engine.get_job(sooner.id)).available_at
        await eventually(lambda: armed_for(worker, sooner_at))
        wakeup = worker.next_wakeup
        assert wakeup is not None
        assert wakeup.at == pytest.approx(clock.monotonic() + 2.0, abs=0.01)


async def test_a_retry_the_worker_writes_arms_its_timer(
    store: AskingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    job_id = (await engine.enqueue("report", "fail")).id
    worker = engine.worker()
    async with worker.in_background():
        await eventually(lambda: retried(store, job_id))
        retry_at = (await engine.get_job(job_id)).available_at
        assert retry_at == clock.now() + timedelta(seconds=10)
        await eventually(lambda: armed_for(worker, retry_at))
        wakeup = worker.next_wakeup
        assert wakeup is not None
        assert wakeup.at == pytest.approx(clock.monotonic() + 10.0, abs=0.01)


async def test_an_idle_worker_asks_the_store_once_not_at_every_poll(
    store: AskingStore, clock: FakeClock
) -> None:
    engine = AsyncEngine(store, Settings(poll_interval=0.005), clock=clock)
    engine.declare_kind("report")
    await engine.enqueue_after(3600, "report")
    worker = engine.worker(all_kinds=True)
    async with worker.in_background():
        await eventually(lambda: store.claims >= 20)
        # 20 empty claims (polls), one next-due read: the timer's answer holds until a
        # notification or its due time; idle load is the poll's, as without the timer.
        assert store.next_dues == 1
        await engine.enqueue_after(1800, "report")
        seen = store.claims
        await eventually(lambda: store.claims >= seen + 20)
        assert store.next_dues == 2
