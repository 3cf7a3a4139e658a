"""Exactly-once starts on the in-memory store: held (prefetched) jobs, the lease keeper,
node limits per process, the running processor's retry policy (the sync twin
``test_worker_leases.py`` is generated)."""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings
from skiplock._compat_async import Event, join, spawn, wait_event
from skiplock.core import ClaimRequest, DatabaseUnavailableError, WorkerInfo
from skiplock.engine.worker import _slots_async
from skiplock.engine.worker._lease_async import LeaseKeeper

from .helpers_async import CountingStore, eventually
from .support import RecordingMetrics

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from skiplock import Job
    from skiplock.adapters.memory import InMemoryTransaction
    from skiplock.core import Lease
    from skiplock.core.store import ClaimedJobs
    from skiplock.ports import AsyncAudit
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(clock=clock)


def make_engine(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics | None = None, **kw: Any
) -> AsyncEngine:
    return AsyncEngine(store, Settings(**kw), clock=clock, metrics=metrics)


def job_of(store: CountingStore, job_id: int) -> Job:
    job = store.state.get(job_id)
    assert job is not None
    return job


async def test_worker_starts_no_held_job_that_is_no_longer_its_own(
    store: CountingStore, clock: FakeClock
) -> None:
    # No heartbeat in the test's time: only the start's own check can notice.
    metrics = RecordingMetrics()
    engine = make_engine(store, clock, metrics, poll_interval=60.0, heartbeat_interval=60.0)
    gate = Event()
    ran: list[int] = []

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        ran.append(payload)
        if payload == 0:
            assert await wait_event(gate, 5.0)

    ids = [(await engine.enqueue("job", i, priority=9 - i)).id for i in range(5)]
    # A worker that vanished while it held them: recovered jobs must be paid for (and so
    # checked) before they run, even when they were only prefetched.
    assert len(await store.claim(ClaimRequest(worker_id="ghost", limit=5, start_now=0))) == 5
    assert sorted(await store.recover_stale(default_ttl=timedelta(hours=1), ttls={})) == ids
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: ran == [0] and job_of(store, ids[4]).state is JobState.RUNNING)
    assert [job_of(store, i).attempts for i in ids] == [1, 0, 0, 0, 0]  # held: not charged
    for job_id in ids[1:]:
        await engine.cancel_job(job_id)  # taken away while only held
    gate.set()
    await eventually(lambda: sorted(metrics.outcomes()) == ["lost"] * 4 + ["succeeded"])
    worker.stop()
    await join(task)
    assert ran == [0]
    assert [job_of(store, i).attempts for i in ids[1:]] == [0, 0, 0, 0]


async def test_worker_starts_held_jobs_without_a_round_trip_and_their_outcome_pays(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, prefetch=8)
    ran: list[int] = []

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        ran.append(ctx.attempt)

    ids = [(await engine.enqueue("job", i)).id for i in range(10)]
    await engine.worker(concurrency=2).run_until_idle()
    assert ran == [1] * 10
    assert [job_of(store, i).attempts for i in ids] == [1] * 10
    assert store.starts == 0  # none of them was recovered: no store.start round trip


async def test_worker_releases_held_jobs_at_shutdown_without_charging_them(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, poll_interval=60.0, prefetch=3)
    started = Event()

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        started.set()
        assert await wait_event(Event(), 0.05) is False

    ids = [(await engine.enqueue("job", i, priority=9 - i)).id for i in range(4)]
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    task = spawn(worker.run)
    assert await wait_event(started, 5.0)
    worker.stop()
    await join(task)
    first, *held = (job_of(store, i) for i in ids)
    assert (first.state, first.attempts) == (JobState.SUCCEEDED, 1)
    assert [(j.state, j.attempts, j.claims) for j in held] == [(JobState.PENDING, 0, 1)] * 3


class FailingClaimStore(CountingStore):
    """Its ``claim`` fails once when armed; records the order of claims, starts and
    heartbeats."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.armed = False
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def _record(self, call: str) -> None:
        with self._lock:
            self.calls.append(call)

    async def claim(self, request: ClaimRequest, *, audit: AsyncAudit | None = None) -> ClaimedJobs:
        self._record("claim")
        if self.armed:
            self.armed = False
            self._record("claim failed")
            raise ConnectionError("the database went away")
        return await super().claim(request, audit=audit)

    async def start(self, leases: Sequence[Lease]) -> list[bool]:
        self._record("start")
        return await super().start(leases)

    async def heartbeat(
        self,
        worker_id: str,
        running: Sequence[int] = (),
        *,
        release_unheld: bool = False,
    ) -> list[int] | None:
        self._record("heartbeat")
        return await super().heartbeat(worker_id, running, release_unheld=release_unheld)


async def test_worker_renews_its_lease_before_claiming_after_a_store_error(
    clock: FakeClock,
) -> None:
    store = FailingClaimStore(clock=clock)
    engine = make_engine(store, clock, poll_interval=0.01, heartbeat_interval=60.0)
    ran: list[int] = []

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        ran.append(payload)

    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: store.claims >= 1)
    store.armed = True
    await eventually(lambda: "claim failed" in store.calls)
    await engine.enqueue("job", 1)
    await eventually(lambda: ran == [1])
    worker.stop()
    await join(task)
    after = store.calls[store.calls.index("claim failed") + 1 :]
    # Nothing is claimed or started before a heartbeat renewed the lease.
    assert after[0] == "heartbeat"


async def test_a_heartbeat_that_finds_the_database_down_leaves_the_lease_in_doubt(
    store: CountingStore,
) -> None:
    """An outage's heartbeat is no good one: maintenance must not run on it (it would take
    the worker's own jobs for stale the moment the database is back), nor a held job
    start; the next heartbeat that reaches the store clears the doubt."""
    down = [True]
    beat = store.heartbeat

    async def heartbeat(
        worker_id: str,
        running: Sequence[int] = (),
        *,
        release_unheld: bool = False,
    ) -> list[int] | None:
        if down[0]:
            raise DatabaseUnavailableError("connection refused")
        return await beat(worker_id, running, release_unheld=release_unheld)

    store.heartbeat = heartbeat  # type: ignore[method-assign]
    lease = LeaseKeeper(
        store=store,
        info=WorkerInfo(id="w-1", host="h", pid=1),
        interval=1.0,
        stale_ttl=10.0,
        held=list,
        on_lost=lambda ids: None,
        on_gone=lambda: None,
    )
    await lease.register()
    assert not lease.in_doubt()
    assert await lease.renew(always=True) is False
    assert lease.in_doubt()
    assert await lease.renew() is False  # still down: still in doubt
    down[0] = False
    assert await lease.renew() is True
    assert not lease.in_doubt()


async def test_worker_claims_again_at_once_when_the_store_is_back_after_a_failed_claim(
    clock: FakeClock,
) -> None:
    # A lost connection fails one claim; the next try comes after a short backoff, not
    # after the poll interval (nothing else would wake this worker: no notifier).
    store = FailingClaimStore(clock=clock)
    store.armed = True
    engine = make_engine(store, clock, poll_interval=30.0, heartbeat_interval=60.0)
    ran: list[int] = []

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        ran.append(payload)

    await engine.enqueue("job", 1)
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: ran == [1], timeout=5.0)
    worker.stop()
    await join(task)
    assert store.calls[:4] == ["claim", "claim failed", "heartbeat", "claim"]


async def test_worker_whose_registration_is_gone_drops_what_it_held_and_starts_over(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, poll_interval=60.0, heartbeat_interval=0.02, prefetch=2)
    gate = Event()
    runs: list[tuple[int, int]] = []

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        runs.append((payload, ctx.attempt))
        if payload == 0 and ctx.attempt == 1:
            # The first run is interrupted when the worker drops every job it held (short
            # waits, so the sync flavour's interruption lands between them).
            for _ in range(500):
                assert not await wait_event(gate, 0.01)

    ids = [(await engine.enqueue("job", i, priority=9 - i)).id for i in range(3)]
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: runs == [(0, 1)] and job_of(store, ids[2]).state is JobState.RUNNING)
    await store.unregister_worker(worker.id)  # as maintenance does with a silent worker
    await eventually(lambda: all(job_of(store, i).state is JobState.SUCCEEDED for i in ids))
    worker.stop()
    await join(task)
    # Held jobs never ran before the drop; after it everything was claimed afresh.
    assert sorted(runs) == [(0, 1), (0, 2), (1, 1), (2, 1)]
    assert [job_of(store, i).attempts for i in ids] == [2, 1, 1]


async def test_workers_of_one_engine_share_the_node_limit(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, poll_interval=0.01)
    lock = threading.Lock()
    running = 0
    peak = 0
    done: list[int] = []

    @engine.processor("node", node_limit=2)
    async def node(payload: int, ctx: JobContext) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        await wait_event(Event(), 0.01)
        with lock:
            running -= 1
            done.append(payload)

    for i in range(30):
        await engine.enqueue("node", i)
    workers = [engine.worker(concurrency=4, install_signal_handlers=False) for _ in range(2)]
    tasks = [spawn(w.run) for w in workers]
    await eventually(lambda: len(done) == 30, 10.0)
    for w in workers:
        w.stop()
    for t in tasks:
        await join(t)
    assert peak == 2


async def test_the_running_processors_policy_decides_retries_unless_the_enqueue_did(
    store: CountingStore, clock: FakeClock
) -> None:
    web = make_engine(store, clock, max_attempts=5)  # no processor here
    workers = make_engine(store, clock, backoff_base=0)

    @workers.processor("fails", max_attempts=2)
    async def fails(payload: None, ctx: JobContext) -> None:
        raise RuntimeError("always")

    implicit = (await web.enqueue("fails", None)).id
    explicit = (await web.enqueue("fails", None, max_attempts=3)).id
    assert (await web.get_job(implicit)).max_attempts == 5
    await workers.worker().run_until_idle()
    assert (job_of(store, implicit).state, job_of(store, implicit).attempts) == (JobState.DEAD, 2)
    assert (job_of(store, explicit).state, job_of(store, explicit).attempts) == (JobState.DEAD, 3)


async def test_a_transactional_jobs_completed_at_is_when_it_completed(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)

    @engine.processor("tx", transactional=True)
    async def tx(payload: None, ctx: JobContext) -> None:
        clock.advance(30)  # the job takes half a minute

    job_id = (await engine.enqueue("tx", None)).id
    await engine.worker().run_until_idle()
    job = job_of(store, job_id)
    assert job.claimed_at is not None
    assert job.completed_at is not None
    assert (job.completed_at - job.claimed_at).total_seconds() == 30


async def test_heartbeats_pay_for_a_long_job_that_started_without_a_round_trip(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, poll_interval=60.0, heartbeat_interval=0.02, prefetch=1)
    gate = Event()

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        if payload == 1:  # the held one: it runs until the test has seen its attempt
            assert await wait_event(gate, 5.0)

    first, held = [(await engine.enqueue("job", i, priority=9 - i)).id for i in range(2)]
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: job_of(store, first).state is JobState.SUCCEEDED)
    # Running, started from the buffer (unpaid), then paid by a heartbeat's store.start.
    await eventually(lambda: store.starts >= 1 and job_of(store, held).attempts == 1)
    assert job_of(store, held).state is JobState.RUNNING
    gate.set()
    await eventually(lambda: job_of(store, held).state is JobState.SUCCEEDED)
    worker.stop()
    await join(task)
    assert job_of(store, held).attempts == 1  # the outcome did not pay a second time


class SlowReturnStore(CountingStore):
    """A store whose transactions take a while to hand their connection back after the
    commit (as a pooled connection's session reset does), with a gate to hold them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hand_back = Event()

    @asynccontextmanager
    async def transaction(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[InMemoryTransaction]:
        async with super().transaction(statement_timeout=statement_timeout) as tx:
            yield tx
        assert await wait_event(self.hand_back, 5.0)


async def test_a_heartbeat_does_not_take_a_transactional_job_that_just_committed_for_lost(
    clock: FakeClock,
) -> None:
    # A transactional job commits with its outcome, and a heartbeat then finds it no
    # longer running here before its slot is free: done, not lost.
    store = SlowReturnStore(clock=clock)
    metrics = RecordingMetrics()
    engine = make_engine(
        store, clock, metrics, poll_interval=60.0, heartbeat_interval=0.01, prefetch=1
    )

    go = Event()

    @engine.processor("job", transactional=True)
    async def job(payload: int, ctx: JobContext) -> None:
        if payload == 1:  # the held one
            assert await wait_event(go, 5.0)

    first, held = [(await engine.enqueue("job", i, priority=9 - i)).id for i in range(2)]
    store.hand_back.set()  # the first job (paid by its claim) goes through at once
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: job_of(store, first).state is JobState.SUCCEEDED)
    await eventually(lambda: job_of(store, held).state is JobState.RUNNING)
    store.hand_back.clear()
    go.set()
    await eventually(lambda: job_of(store, held).state is JobState.SUCCEEDED)
    beats = store.heartbeats
    # Committed, its connection not handed back yet: a heartbeat (which also pays for
    # jobs started unpaid) finds it no longer running here.
    await eventually(lambda: store.heartbeats > beats + 1)
    store.hand_back.set()
    await eventually(lambda: len(metrics.outcomes()) == 2)
    worker.stop()
    await join(task)
    assert sorted(metrics.outcomes()) == ["succeeded", "succeeded"]
    assert job_of(store, held).attempts == 1


async def test_a_charged_job_that_finds_no_task_is_released_and_the_slot_stays_free(
    store: CountingStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first job a claim charged cannot get its task (thread): it gives its attempt
    # back and is claimed again; its slot's reservation ends, so every job still runs.
    engine = make_engine(store, clock, poll_interval=0.05)
    ran: list[tuple[int, int]] = []

    @engine.processor("job")
    async def job(payload: int, ctx: JobContext) -> None:
        ran.append((payload, ctx.attempt))

    failed: list[int] = []

    def spawn_once_failing(fn: Any, *args: Any) -> Any:
        if not failed:
            failed.append(args[0].job.id)
            raise RuntimeError("can't start new thread")
        return spawn(fn, *args)

    monkeypatch.setattr(_slots_async, "spawn", spawn_once_failing)
    ids = [(await engine.enqueue("job", i, priority=9 - i)).id for i in range(3)]
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: all(job_of(store, i).state is JobState.SUCCEEDED for i in ids))
    worker.stop()
    await join(task)
    assert failed == [ids[0]]
    assert sorted(ran) == [(0, 1), (1, 1), (2, 1)]  # the failed start cost no attempt
    assert [job_of(store, i).attempts for i in ids] == [1, 1, 1]
