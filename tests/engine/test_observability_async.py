"""The engine's side of observability (sync twin generated): what it tells the metrics and
tracing ports (R5, R3), that a failing sink fails nothing (R7), ``current_job()`` and the
worker's log lines."""

from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncEngine,
    Enqueue,
    JobContext,
    JobState,
    NoopMetrics,
    NoopTracer,
    RateLimit,
    Settings,
    ValidationError,
    current_job,
)
from skiplock._compat_async import IS_ASYNC, join, spawn

from .helpers_async import CountingStore, eventually
from .support import RecordingMetrics, RecordingTracer

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from skiplock import Job, StateCount
    from skiplock.ports import Attempt, Publication, WorkerStatus
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(clock=clock)


def make_engine(store: CountingStore, clock: FakeClock, **kw: Any) -> AsyncEngine:
    metrics = kw.pop("metrics", None)
    tracer = kw.pop("tracer", None)
    return AsyncEngine(store, Settings(**kw), clock=clock, metrics=metrics, tracer=tracer)


# ---- the tracer port (R3) -------------------------------------------------------------


async def test_enqueue_publishes_once_per_call_and_stores_the_context(
    store: CountingStore, clock: FakeClock
) -> None:
    tracer = RecordingTracer()
    engine = make_engine(store, clock, tracer=tracer)
    engine.declare_kind("a")
    engine.declare_kind("b")
    one = await engine.enqueue("a", 1)
    many = await engine.enqueue_many([Enqueue("a", 2), Enqueue("b", 3)])
    assert tracer.publications == [(["a"], [one.id]), (["a", "b"], [r.id for r in many])]
    for job_id in (one.id, *(r.id for r in many)):
        assert (await engine.get_job(job_id)).trace_context == RecordingTracer.CONTEXT


async def test_a_refused_enqueue_is_not_published(store: CountingStore, clock: FakeClock) -> None:
    tracer = RecordingTracer()
    engine = make_engine(store, clock, tracer=tracer)
    engine.declare_kind("a")
    with pytest.raises(ValidationError):
        await engine.enqueue("a", priority=10**6)
    assert tracer.publications == [(["a"], None)]  # the span saw the error, nothing else
    assert await engine.counts() == []


async def test_every_attempt_gets_a_span_with_its_outcome_and_error(
    store: CountingStore, clock: FakeClock
) -> None:
    tracer = RecordingTracer()
    engine = make_engine(store, clock, tracer=tracer, backoff_base=0.0, backoff_jitter=0.0)
    calls = 0

    @engine.processor("flaky", max_attempts=3)
    async def flaky(payload: Any, ctx: JobContext) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("first try fails")

    @engine.processor("doomed", max_attempts=1)
    async def doomed(payload: Any, ctx: JobContext) -> None:
        raise KeyError("never works")

    @engine.processor("unstorable", max_attempts=3)
    async def unstorable(payload: Any, ctx: JobContext) -> object:
        return {1, 2}  # not JSON: dead at once, the span told why (X5)

    flaky_id = (await engine.enqueue("flaky")).id
    doomed_id = (await engine.enqueue("doomed")).id
    unstorable_id = (await engine.enqueue("unstorable")).id
    # No processor here: a worker claiming every kind buries it (R8).
    stranger = (await make_engine(store, clock).enqueue("stranger")).id
    await engine.worker(all_kinds=True).run_until_idle()
    assert sorted(tracer.ended) == sorted(
        [
            (flaky_id, "retry", "ValueError"),
            (flaky_id, "succeeded", None),
            (doomed_id, "dead", "KeyError"),
            (unstorable_id, "dead", "UnstorableResultError"),
            (stranger, "dead", "UnknownKindError"),
        ]
    )
    assert sorted(tracer.spans) == sorted([flaky_id, flaky_id, doomed_id, unstorable_id, stranger])


class BrokenTracer:
    """Fails wherever it is asked, at the named step."""

    def __init__(self, step: str) -> None:
        self.step = step

    def _maybe_fail(self, step: str) -> None:
        if step == self.step:
            raise RuntimeError(f"tracer broken at {step}")

    @contextmanager
    def publish(self, kinds: Sequence[str]) -> Iterator[Publication]:
        self._maybe_fail("publish")
        yield self
        self._maybe_fail("publish-exit")

    @property
    def context(self) -> dict[str, str]:
        self._maybe_fail("context")
        return {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

    def published(self, results: Sequence[Any]) -> None:
        self._maybe_fail("published")

    @contextmanager
    def span(self, job: Job) -> Iterator[Attempt]:
        self._maybe_fail("span")
        yield self
        self._maybe_fail("span-exit")

    def ended(self, outcome: str, error: BaseException | None) -> None:
        self._maybe_fail("ended")


@pytest.mark.parametrize(
    "step", ["publish", "publish-exit", "context", "published", "span", "span-exit", "ended"]
)
async def test_a_failing_tracer_fails_no_enqueue_and_no_job(
    store: CountingStore, clock: FakeClock, step: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store, clock, tracer=BrokenTracer(step))
    ran: list[int] = []

    @engine.processor("k")
    async def k(payload: int, ctx: JobContext) -> None:
        ran.append(payload)

    job_id = (await engine.enqueue("k", 7)).id
    await engine.worker().run_until_idle()
    assert ran == [7]
    job = await engine.get_job(job_id)
    assert job.state is JobState.SUCCEEDED
    # Without a context the job is stored without one; a tracer failing later keeps it.
    assert (job.trace_context is None) == (step in {"publish", "context"})
    assert f"tracer broken at {step}" in caplog.text


class BrokenMetrics(NoopMetrics):
    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        raise RuntimeError("claimed")

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        raise RuntimeError("finished")

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        raise RuntimeError("throttled")

    def claim_throttled(self, kind: str, tenant: str | None, limit: str) -> None:
        raise RuntimeError("decision")

    def worker_started(self, worker: WorkerStatus, counts: Any) -> None:
        raise RuntimeError("started")

    def worker_stopped(self, worker: WorkerStatus) -> None:
        raise RuntimeError("stopped")


async def test_failing_metrics_fail_no_job(
    store: CountingStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A provider cap of one token for two kinds claimed together, in per-process buckets
    # (a cluster-wide cap never claims a job it cannot pay for): one of them is
    # throttled at its start, so every hook is called (and raises).
    engine = make_engine(
        store,
        clock,
        metrics=BrokenMetrics(),
        caps={"p": RateLimit(rps=0.001, burst=1)},
        rate_limit_scope="process",
    )
    ran: list[str] = []

    @engine.processor("a", provider="p")
    async def a(payload: Any, ctx: JobContext) -> None:
        ran.append("a")

    @engine.processor("b", provider="p")
    async def b(payload: Any, ctx: JobContext) -> None:
        ran.append("b")

    ids = [(await engine.enqueue(kind)).id for kind in ("a", "b")]
    assert await engine.worker(concurrency=2).run_until_idle() == 2
    assert len(ran) == 1
    states = sorted([(await engine.get_job(i)).state for i in ids])
    assert states == sorted([JobState.SUCCEEDED, JobState.PENDING])  # one throttled
    for hook in ("claimed", "finished", "throttled", "decision", "started", "stopped"):
        assert f"RuntimeError: {hook}" in caplog.text


# ---- the metrics port: workers (R5) ---------------------------------------------------


async def test_worker_reports_itself_and_a_counts_source_while_it_runs(
    store: CountingStore, clock: FakeClock
) -> None:
    metrics = RecordingMetrics()
    engine = make_engine(store, clock, metrics=metrics, concurrency=3)
    release = threading.Event()
    started = threading.Event()

    @engine.processor("slow")
    def slow(payload: Any, ctx: JobContext) -> None:
        started.set()
        release.wait(10)

    engine.declare_kind("later")
    await engine.enqueue("slow", tenant="t1")
    await engine.enqueue("later", tenant="t2", delay=60)
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(started.is_set)
    [status] = metrics.workers
    [counts] = metrics.counts
    assert status is worker
    assert (status.id, status.concurrency, status.running, status.held) == (worker.id, 3, 1, 0)
    assert status.unwritten == 0
    if True:  # ASYNC
        # From another thread; from the worker's own loop it would block that loop.
        found = await asyncio.to_thread(counts, 5.0)
        with pytest.raises(RuntimeError, match="inside that loop"):
            counts(5.0)
    else:
        found = counts(5.0)
    assert sorted((c.state, c.kind, c.tenant, c.count) for c in found) == [
        (JobState.PENDING, "later", "t2", 1),
        (JobState.RUNNING, "slow", "t1", 1),
    ]
    release.set()
    worker.stop()
    await join(task)
    assert metrics.stopped == [worker.id]


async def test_the_default_sinks_are_noops(store: CountingStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    assert type(engine.metrics) is NoopMetrics
    assert type(engine.tracer) is NoopTracer


# ---- current_job() and the worker's log lines ------------------------------------------


async def test_current_job_is_the_running_jobs_context_everywhere_it_runs(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    seen: dict[str, tuple[int, str] | None] = {}

    def note(where: str) -> None:
        ctx = current_job()
        seen[where] = None if ctx is None else (ctx.job_id, ctx.kind)

    if True:  # ASYNC

        @engine.processor("in_task")
        async def in_task(payload: Any, ctx: JobContext) -> None:
            note("task")

            async def child() -> None:
                note("child task")

            await asyncio.create_task(child())

    @engine.processor("in_thread")
    def in_thread(payload: Any, ctx: JobContext) -> None:
        # An AsyncEngine runs it in a thread of its own; a sync Engine in the job's thread.
        note("sync processor thread")

    ids = {}
    for kind in engine.kinds:
        ids[kind] = (await engine.enqueue(kind)).id
    note("outside")
    await engine.worker().run_until_idle()
    note("after")
    expected: dict[str, tuple[int, str] | None] = {
        "outside": None,
        "after": None,
        "sync processor thread": (ids["in_thread"], "in_thread"),
    }
    if IS_ASYNC:
        expected["task"] = expected["child task"] = (ids["in_task"], "in_task")
    assert seen == expected


async def test_worker_logs_its_start_its_stop_and_each_job(
    store: CountingStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store, clock, backoff_base=0.0)

    @engine.processor("ok")
    async def ok(payload: Any, ctx: JobContext) -> None:
        pass

    @engine.processor("bad", max_attempts=1)
    async def bad(payload: Any, ctx: JobContext) -> None:
        raise ValueError("nope")

    ok_id = (await engine.enqueue("ok")).id
    bad_id = (await engine.enqueue("bad")).id
    caplog.set_level(logging.DEBUG, logger="skiplock")
    worker = engine.worker(concurrency=2, worker_id="w-obs")
    assert await worker.run_until_idle() == 2
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "skiplock.worker"]
    assert lines[0] == (
        "INFO",
        "worker w-obs started: 2 slots, kinds=['bad', 'ok'], tenants=all, store=CountingStore()",
    )
    assert lines[-1] == ("INFO", "worker w-obs stopped after 2 jobs")
    failed = f"worker w-obs: job {bad_id} (bad) attempt 1/1 failed (dead): ValueError: nope"
    assert ("ERROR", failed) in lines
    per_job = {message.split(" after ")[0] for level, message in lines if level == "DEBUG"}
    assert per_job >= {
        f"worker w-obs: job {ok_id} (ok) attempt 1: succeeded",
        f"worker w-obs: job {bad_id} (bad) attempt 1: dead",
    }


async def test_no_per_job_lines_unless_debug(
    store: CountingStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store, clock)

    @engine.processor("ok")
    async def ok(payload: Any, ctx: JobContext) -> None:
        pass

    await engine.enqueue("ok")
    caplog.set_level(logging.INFO, logger="skiplock")
    await engine.worker().run_until_idle()
    assert [r.levelname for r in caplog.records if r.name == "skiplock.worker"] == ["INFO", "INFO"]


async def test_counts_say_how_long_the_oldest_due_job_waited(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    engine.declare_kind("k")
    await engine.enqueue("k")
    clock.advance(90)
    await engine.enqueue("k", delay=30)
    found: Sequence[StateCount] = await engine.counts()
    assert [(c.state, c.count, c.oldest_due_age) for c in found] == [(JobState.PENDING, 2, 90.0)]
