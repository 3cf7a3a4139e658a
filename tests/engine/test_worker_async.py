"""AsyncWorker (sync twin ``Worker`` generated): claiming, running, failing, limits, shutdown."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import signal
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncEngine,
    Enqueue,
    JobContext,
    JobState,
    JobTimeoutError,
    PolicyOverrides,
    Processor,
    RateLimit,
    Settings,
    ValidationError,
)
from skiplock._compat_async import Event, join, skip_sync, spawn, wait_event
from skiplock.adapters.memory import InMemoryTransaction
from skiplock.core import RetryPolicy
from skiplock.core._retry import base_delay
from skiplock.engine.worker import _completer_async as completer_module

from .helpers_async import CountingStore, eventually
from .support import Email, Invoice, RecordingMetrics, RecordingTracer, Report

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from skiplock import Job
    from skiplock.core import ClaimRequest, Completion
    from skiplock.core.store import ClaimedJobs
    from skiplock.ports import AsyncAudit
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(clock=clock)


@pytest.fixture
def metrics() -> RecordingMetrics:
    return RecordingMetrics()


@pytest.fixture
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Completion retries after 1 ms doubling to 4 ms instead of 0.1 s to 5 s."""
    policy = RetryPolicy(base=timedelta(milliseconds=1), cap=timedelta(milliseconds=4))
    monkeypatch.setattr(completer_module, "STORE_RETRY", policy)


def make_engine(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics | None = None, **kw: Any
) -> AsyncEngine:
    return AsyncEngine(store, Settings(**kw), clock=clock, metrics=metrics)


async def block_until_interrupted(ctx: JobContext) -> None:
    """Wait for an event nobody sets, in short waits so a sync interrupt can land."""
    never = Event()
    while not await wait_event(never, 0.01):
        pass


def state_of(store: CountingStore, job_id: int) -> JobState:
    job = store.state.get(job_id)
    assert job is not None
    return job.state


# ---- basics ---------------------------------------------------------------------------


async def test_worker_runs_a_job_with_its_context(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    tracer = RecordingTracer()
    engine = AsyncEngine(store, clock=clock, metrics=metrics, tracer=tracer)
    seen: list[tuple[Any, ...]] = []

    @engine.processor("greet")
    async def greet(payload: dict[str, Any], ctx: JobContext) -> None:
        ctx.logger.info("hello %s", payload["name"])
        seen.append(
            (
                payload,
                ctx.job_id,
                ctx.kind,
                ctx.attempt,
                ctx.tenant,
                ctx.worker_id,
                ctx.job.claimed_by,
                ctx.cancelled,
                ctx.connection,
            )
        )
        ctx.check_cancelled()

    worker = engine.worker()
    assert re.fullmatch(r"[^/]+/\d+/[0-9a-f]{32}", worker.id)
    job_id = (await engine.enqueue("greet", {"name": "Ada"}, tenant="acme")).id
    clock.advance(5)
    assert await worker.run_until_idle() == 1
    assert seen == [
        ({"name": "Ada"}, job_id, "greet", 1, "acme", worker.id, worker.id, False, None)
    ]
    job = await engine.get_job(job_id)
    assert job.state is JobState.SUCCEEDED
    assert job.completed_at is not None
    assert metrics.claimed == [("greet", "acme", 5.0)]
    assert metrics.outcomes() == ["succeeded"]
    assert tracer.spans == [job_id]
    assert store.state.workers() == []  # unregistered again


async def test_worker_id_can_be_given_and_a_worker_runs_once(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    worker = engine.worker(worker_id="node-1/slot")
    assert worker.id == "node-1/slot"
    assert await worker.run_until_idle() == 0
    with pytest.raises(RuntimeError, match="runs once"):
        await worker.run_until_idle()
    with pytest.raises(ValidationError, match="concurrency"):
        engine.worker(concurrency=0)


async def test_worker_logger_carries_job_fields(
    store: CountingStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store, clock)

    @engine.processor("log")
    async def log(payload: Any, ctx: JobContext) -> None:
        ctx.logger.warning("processing")

    job_id = (await engine.enqueue("log", None, tenant="t")).id
    with caplog.at_level(logging.INFO, logger="skiplock.job"):
        await engine.worker().run_until_idle()
    record = next(r for r in caplog.records if r.getMessage() == "processing")
    assert (record.job_id, record.kind, record.attempt, record.tenant) == (  # type: ignore[attr-defined]
        job_id,
        "log",
        1,
        "t",
    )


# ---- typed payloads (R25) -----------------------------------------------------------


async def test_worker_decodes_typed_payloads(store: CountingStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    received: dict[str, Any] = {}

    @engine.processor("attrs")
    async def on_attrs(payload: Email, ctx: JobContext) -> None:
        received["attrs"] = payload

    @engine.processor("dataclass")
    async def on_dataclass(payload: Report, ctx: JobContext) -> None:
        received["dataclass"] = payload

    @engine.processor("pydantic")
    async def on_pydantic(payload: Invoice, ctx: JobContext) -> None:
        received["pydantic"] = payload

    @engine.processor("dict")
    async def on_dict(payload: dict[str, Any], ctx: JobContext) -> None:
        received["dict"] = payload

    @engine.processor("str")
    async def on_str(payload: str) -> None:  # the context is optional
        received["str"] = payload

    class OnClass(Processor):
        kind = "class"

        async def process(self, payload: Email, ctx: JobContext) -> None:
            received["class"] = payload

    engine.register(OnClass)

    await engine.enqueue("attrs", Email("a@b.c", "hi"))
    await engine.enqueue("dataclass", Report("q1", 3))
    await engine.enqueue("pydantic", Invoice(number=7, customer="acme"))
    await engine.enqueue("dict", {"free": ["form"]})
    await engine.enqueue("str", "plain text")
    await engine.enqueue("class", {"to": "raw@dict.ok"})
    assert await engine.worker().run_until_idle() == 6
    assert received == {
        "attrs": Email("a@b.c", "hi"),
        "dataclass": Report("q1", 3),
        "pydantic": Invoice(number=7, customer="acme"),
        "dict": {"free": ["form"]},
        "str": "plain text",
        "class": Email("raw@dict.ok"),
    }


async def test_worker_buries_an_undecodable_payload_without_retry(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics)
    calls: list[Email] = []

    @engine.processor("email", max_attempts=5)
    async def email(payload: Email, ctx: JobContext) -> None:
        calls.append(payload)

    job_id = (await engine.enqueue("email", {"subject": "no recipient"})).id
    assert await engine.worker().run_until_idle() == 1
    job = await engine.get_job(job_id)
    assert job.state is JobState.DEAD
    assert job.attempts == 1
    assert (job.last_error or "").startswith("undecodable payload: not a valid Email")
    assert calls == []
    assert metrics.outcomes() == ["dead"]


# ---- failures, retries, policies ------------------------------------------------------


async def test_worker_retries_with_backoff_then_succeeds(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics)
    attempts: list[int] = []

    @engine.processor("flaky", max_attempts=3, backoff_base=10, backoff_jitter=0)
    async def flaky(payload: Any, ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("boom")

    start = clock.now()
    job_id = (await engine.enqueue("flaky", {})).id
    assert await engine.worker().run_until_idle() == 1
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.PENDING, 1)
    assert job.available_at == start + timedelta(seconds=10)
    assert (job.last_error or "").startswith("ValueError: boom")
    assert "Traceback" in (job.last_error or "")

    assert await engine.worker().run_until_idle() == 0  # not due yet: nothing waits
    clock.advance(10)
    assert await engine.worker().run_until_idle() == 1
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.SUCCEEDED, 2)
    assert attempts == [1, 2]
    assert metrics.outcomes() == ["retry", "succeeded"]


async def test_worker_buries_after_max_attempts(store: CountingStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)

    @engine.processor("doomed", max_attempts=2, backoff_base=0)
    async def doomed(payload: Any, ctx: JobContext) -> None:
        raise RuntimeError(f"attempt {ctx.attempt} failed")

    job_id = (await engine.enqueue("doomed", {})).id
    assert await engine.worker().run_until_idle() == 2
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.DEAD, 2)
    assert job.completed_at is not None
    assert (job.last_error or "").startswith("RuntimeError: attempt 2 failed")
    assert [j.id for j in await engine.dead_jobs()] == [job_id]


async def test_worker_uses_the_per_kind_policy(store: CountingStore, clock: FakeClock) -> None:
    # Settings.kinds (explicit) > processor default > global.
    engine = make_engine(
        store, clock, max_attempts=4, backoff_base=0, kinds={"a": PolicyOverrides(max_attempts=1)}
    )
    calls: dict[str, int] = {"a": 0, "b": 0, "c": 0}

    @engine.processor("a", max_attempts=5)
    async def a(payload: Any, ctx: JobContext) -> None:
        calls["a"] += 1
        raise ValueError("a")

    @engine.processor("b", max_attempts=2)
    async def b(payload: Any, ctx: JobContext) -> None:
        calls["b"] += 1
        raise ValueError("b")

    @engine.processor("c")
    async def c(payload: Any, ctx: JobContext) -> None:
        calls["c"] += 1
        raise ValueError("c")

    for kind in calls:
        await engine.enqueue(kind, {})
    assert await engine.worker().run_until_idle() == 1 + 2 + 4
    assert calls == {"a": 1, "b": 2, "c": 4}


# ---- the job's transaction (R10) ------------------------------------------------------


async def test_worker_processor_writes_commit_with_the_completion(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    children: list[int] = []

    @engine.processor("parent", max_attempts=1, transactional=True)
    async def parent(payload: dict[str, Any], ctx: JobContext) -> None:
        await engine.enqueue("child", {"n": payload["n"]}, connection=ctx.connection)
        if payload["fail"]:
            raise RuntimeError("after the write")

    @engine.processor("child")
    async def child(payload: dict[str, Any], ctx: JobContext) -> None:
        children.append(payload["n"])

    failed = (await engine.enqueue("parent", {"n": 1, "fail": True})).id
    assert await engine.worker().run_until_idle() == 1
    assert (await engine.get_job(failed)).state is JobState.DEAD
    assert await engine.list_jobs(kind="child") == []  # rolled back with the attempt

    await engine.enqueue("parent", {"n": 2, "fail": False})
    assert await engine.worker().run_until_idle() == 2  # the parent, then its child
    assert children == [2]


async def test_worker_lost_lease_rolls_back_the_processors_writes(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics)
    engine.declare_kind("child")

    @engine.processor("parent", transactional=True)
    async def parent(payload: Any, ctx: JobContext) -> None:
        await engine.enqueue("child", {}, connection=ctx.session)  # the alias
        await engine.cancel_job(ctx.job_id)  # an operator cancels the running job

    job_id = (await engine.enqueue("parent", {})).id
    assert await engine.worker().run_until_idle() == 1
    assert (await engine.get_job(job_id)).state is JobState.CANCELLED
    assert await engine.list_jobs(kind="child") == []
    assert metrics.outcomes() == ["lost"]


async def test_worker_hands_each_connection_mode_its_connection(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    seen: dict[str, Any] = {}

    @engine.processor("tx", transactional=True)
    async def tx(payload: Any, ctx: JobContext) -> None:
        seen["tx"] = (ctx.connection, ctx.session)

    @engine.processor("ac", autocommit=True)
    async def ac(payload: Any, ctx: JobContext) -> None:
        seen["ac"] = (ctx.connection, ctx.session)

    class Ddl(Processor):  # the class-style attribute
        kind = "ddl"
        autocommit = True

        async def process(self, payload: Any, ctx: JobContext) -> None:
            seen["ddl"] = (ctx.connection, ctx.session)

    engine.register(Ddl)
    for kind in ("tx", "ac", "ddl"):
        await engine.enqueue(kind, {})
    assert await engine.worker().run_until_idle() == 3
    for kind, autocommit in (("tx", False), ("ac", True), ("ddl", True)):
        connection, session = seen[kind]
        assert isinstance(connection, InMemoryTransaction), kind
        assert session is connection
        assert connection.autocommit is autocommit, kind
    assert (store.transactions, store.autocommits) == (1, 2)


async def test_worker_bounds_job_connections_with_the_kind_timeout(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, kinds={"ac.slow": {"timeout": 7}})

    @engine.processor("tx", transactional=True, timeout=2.5)
    async def tx(payload: Any, ctx: JobContext) -> None: ...

    @engine.processor("tx.open", transactional=True)
    async def tx_open(payload: Any, ctx: JobContext) -> None: ...

    @engine.processor("ac.slow", autocommit=True, timeout=1)
    async def ac_slow(payload: Any, ctx: JobContext) -> None: ...

    for kind, priority in (("tx", 3), ("tx.open", 2), ("ac.slow", 1)):
        await engine.enqueue(kind, {}, priority=priority)
    assert await engine.worker(concurrency=1).run_until_idle() == 3
    assert store.statement_timeouts == [
        ("transaction", 2.5),
        ("transaction", None),  # no timeout: the server's setting stays
        ("autocommit", 7.0),  # Settings.kinds wins over the processor
    ]


async def test_worker_default_processors_acquire_no_connection(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    seen: dict[str, Any] = {}

    @engine.processor("native")
    async def native(payload: Any, ctx: JobContext) -> None:
        seen["native"] = (ctx.connection, ctx.session)

    @engine.processor("plain")
    def plain(payload: Any, ctx: JobContext) -> None:
        seen["plain"] = (ctx.connection, ctx.session)
        seen["thread"] = threading.current_thread() is not threading.main_thread()

    @engine.processor("failing", max_attempts=1)
    async def failing(payload: Any, ctx: JobContext) -> None:
        raise RuntimeError("no connection needed to fail either")

    for kind in ("native", "plain", "failing"):
        await engine.enqueue(kind, {})
    assert await engine.worker().run_until_idle() == 3
    assert seen["native"] == (None, None)
    assert seen["plain"] == (None, None)
    assert seen["thread"]  # a plain function runs in its own thread in both flavours
    # Neither a transaction nor an autocommit connection was opened for any job.
    assert (store.transactions, store.autocommits) == (0, 0)
    states = {job.kind: job.state for job in await engine.list_jobs()}
    assert states == {
        "native": JobState.SUCCEEDED,
        "plain": JobState.SUCCEEDED,
        "failing": JobState.DEAD,
    }


async def test_worker_rejects_both_connection_modes_at_registration(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, kinds={"mixed": {"autocommit": True}})
    with pytest.raises(ValidationError, match="mutually exclusive"):
        engine.processor("both", transactional=True, autocommit=True)

    class Both(Processor):
        kind = "both.cls"
        transactional = True
        autocommit = True

        async def process(self, payload: Any, ctx: JobContext) -> None: ...

    with pytest.raises(ValidationError, match="mutually exclusive"):
        engine.register(Both)
    # Explicit configuration and the processor each choose one mode.
    with pytest.raises(ValidationError, match="mutually exclusive"):

        @engine.processor("mixed", transactional=True)
        async def mixed(payload: Any, ctx: JobContext) -> None: ...

    assert engine.kinds == frozenset()


# ---- completion batching (docs/worker-internals.md, "The worker") --------------------------


class GatedStore(CountingStore):
    """Holds its first ``complete`` outside a transaction until ``gate`` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = Event()
        self.held = Event()

    async def complete(
        self,
        completions: Sequence[Completion],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[bool]:
        if connection is None and not self.held.is_set():
            self.held.set()
            assert await wait_event(self.gate, 5.0), "the gate was never opened"
        return await super().complete(completions, connection=connection, audit=audit)


class FlakyStore(CountingStore):
    """Its ``complete`` outside a transaction fails ``failures`` times (None: always),
    then works; remembers when each call came and its job ids."""

    def __init__(self, *args: Any, failures: int | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures = failures
        self.failed = Event()
        self.calls: list[tuple[float, list[int]]] = []
        self._calls_lock = threading.Lock()

    async def complete(
        self,
        completions: Sequence[Completion],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[bool]:
        if connection is None:
            with self._calls_lock:
                self.calls.append((time.monotonic(), [c.lease.job_id for c in completions]))
                fail = self.failures is None or self.failures > 0
                if self.failures is not None and fail:
                    self.failures -= 1
            if fail:
                self.failed.set()
                raise ConnectionError("the database went away mid-flush")
        return await super().complete(completions, connection=connection, audit=audit)

    def ids(self, calls: list[tuple[float, list[int]]]) -> list[list[int]]:
        return [ids for _, ids in calls]


async def test_worker_batches_completions_of_jobs_outside_their_transaction(
    clock: FakeClock, metrics: RecordingMetrics
) -> None:
    store = GatedStore(clock=clock)
    engine = make_engine(store, clock, metrics, concurrency=8)
    ran: list[int] = []
    lock = threading.Lock()
    all_ran = Event()

    @engine.processor("quick")
    async def quick(payload: dict[str, int], ctx: JobContext) -> None:
        with lock:
            ran.append(payload["i"])
            if len(ran) == 40:
                all_ran.set()

    ids = [r.id for r in await engine.enqueue_many(Enqueue("quick", {"i": i}) for i in range(40))]
    worker = engine.worker()
    task = spawn(worker.run_until_idle)
    # The first write is held: slots are free once processors return, so every job
    # still runs, and the other outcomes wait for the next write together.
    assert await wait_event(all_ran, 5.0)
    await eventually(store.held.is_set)
    assert all(state_of(store, i) is JobState.RUNNING for i in ids)
    store.gate.set()
    assert await join(task) == 40
    assert sorted(ran) == list(range(40))
    # run_until_idle returned only after the last write.
    assert all(state_of(store, i) is JobState.SUCCEEDED for i in ids)
    assert sum(store.batches) == 40
    assert len(store.batches) < 40
    assert max(store.batches) > 1
    assert metrics.outcomes() == ["succeeded"] * 40


async def test_worker_completion_batches_are_capped(clock: FakeClock) -> None:
    store = GatedStore(clock=clock)
    engine = make_engine(store, clock, concurrency=8, completion_batch_size=3)
    all_ran = Event()
    lock = threading.Lock()
    count = [0]

    @engine.processor("quick")
    async def quick(payload: Any, ctx: JobContext) -> None:
        with lock:
            count[0] += 1
            if count[0] == 20:
                all_ran.set()

    await engine.enqueue_many(Enqueue("quick", {}) for _ in range(20))
    task = spawn(engine.worker().run_until_idle)
    assert await wait_event(all_ran, 5.0)
    store.gate.set()
    assert await join(task) == 20
    assert sum(store.batches) == 20
    assert max(store.batches) == 3  # the outcomes waiting were written three at a time


async def test_worker_transactional_jobs_complete_in_their_transaction(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, concurrency=4)

    @engine.processor("tx", transactional=True)
    async def tx(payload: Any, ctx: JobContext) -> None: ...

    await engine.enqueue_many(Enqueue("tx", {}) for _ in range(6))
    assert await engine.worker().run_until_idle() == 6
    assert store.transactions == 6
    assert store.batches == []  # nothing went through the completer
    assert {job.state for job in await engine.list_jobs()} == {JobState.SUCCEEDED}


async def test_worker_shutdown_writes_the_waiting_outcomes(clock: FakeClock) -> None:
    store = GatedStore(clock=clock)
    engine = make_engine(store, clock, concurrency=4, poll_interval=0.01)
    done: list[int] = []

    @engine.processor("quick")
    async def quick(payload: Any, ctx: JobContext) -> None:
        done.append(ctx.job_id)

    ids = [r.id for r in await engine.enqueue_many(Enqueue("quick", {}) for _ in range(10))]
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: len(done) == 10 and worker.running == 0)
    # Every slot is free, but the outcomes are not written yet.
    assert any(state_of(store, i) is JobState.RUNNING for i in ids)
    worker.stop()
    await eventually(lambda: worker.state == "draining")
    store.gate.set()
    await join(task)
    assert worker.state == "stopped"
    assert all(state_of(store, i) is JobState.SUCCEEDED for i in ids)
    assert sum(store.batches) == 10
    assert store.state.workers() == []  # unregistered only after the last write


async def test_worker_retries_a_failed_completion_write_until_it_works(
    clock: FakeClock,
    metrics: RecordingMetrics,
    caplog: pytest.LogCaptureFixture,
    quick_retry: None,
) -> None:
    store = FlakyStore(clock=clock, failures=3)
    engine = make_engine(store, clock, metrics, concurrency=2)
    ran: list[int] = []

    @engine.processor("k")
    async def k(payload: dict[str, int], ctx: JobContext) -> None:
        if payload["i"] > 0:  # finish only once the first write has failed
            assert await wait_event(store.failed, 5.0)
        ran.append(payload["i"])

    ids = [r.id for r in await engine.enqueue_many(Enqueue("k", {"i": i}) for i in range(6))]
    with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
        assert await engine.worker().run_until_idle() == 6
    assert sorted(ran) == list(range(6))  # the worker kept working meanwhile
    assert [state_of(store, i) for i in ids] == [JobState.SUCCEEDED] * 6
    failed, written = store.ids(store.calls[:3]), store.ids(store.calls[3:])
    assert failed[0] == ids[:1]
    # The failed batch stayed at the head and went with the next attempts, joined by the
    # outcomes that arrived meanwhile; no job was lost or written twice.
    assert all(batch[0] == ids[0] for batch in [*failed, written[0]])
    assert sorted(i for batch in written for i in batch) == ids
    assert metrics.outcomes() == ["succeeded"] * 6
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 3
    assert "ConnectionError: the database went away mid-flush" in retries[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert store.state.workers() == []


async def test_worker_backs_off_between_completion_retries(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    defaults = [base_delay(completer_module.STORE_RETRY, n) for n in range(1, 9)]
    # Capped at 1 s: after an outage outcomes are written within a second (issue 29).
    assert defaults == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0])
    policy = RetryPolicy(base=timedelta(milliseconds=10), cap=timedelta(milliseconds=20))
    monkeypatch.setattr(completer_module, "STORE_RETRY", policy)
    store = FlakyStore(clock=clock, failures=3)
    engine = make_engine(store, clock)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    await engine.enqueue("k", {})
    assert await engine.worker().run_until_idle() == 1
    times = [t for t, _ in store.calls]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(gaps) == 3
    assert gaps[0] >= 0.009
    assert gaps[1] >= 0.019
    assert gaps[2] >= 0.019


async def test_worker_keeps_serving_while_completion_writes_fail(
    clock: FakeClock, quick_retry: None
) -> None:
    store = FlakyStore(clock=clock, failures=20)
    engine = make_engine(store, clock, concurrency=2, poll_interval=0.01)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    def succeeded(ids: list[int]) -> bool:
        return all(state_of(store, i) is JobState.SUCCEEDED for i in ids)

    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    first = [r.id for r in await engine.enqueue_many(Enqueue("k", {}) for _ in range(3))]
    await eventually(lambda: succeeded(first), 5.0)
    assert worker.state == "running"
    assert store.failures == 0
    later = (await engine.enqueue("k", {})).id
    await eventually(lambda: succeeded([later]), 5.0)
    worker.stop()
    await join(task)
    assert store.state.workers() == []


async def test_worker_shutdown_gives_up_on_failing_completion_writes(
    clock: FakeClock,
    metrics: RecordingMetrics,
    caplog: pytest.LogCaptureFixture,
    quick_retry: None,
) -> None:
    store = FlakyStore(clock=clock, failures=None)
    engine = make_engine(store, clock, metrics, shutdown_timeout=0.1, poll_interval=0.01)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    job_id = (await engine.enqueue("k", {})).id
    worker = engine.worker(install_signal_handlers=False)
    with caplog.at_level(logging.INFO, logger="skiplock.worker"):
        task = spawn(worker.run)
        await eventually(lambda: len(store.calls) >= 2)  # retrying while it runs
        worker.stop()
        calls = len(store.calls)
        await join(task)
    assert len(store.calls) - calls >= 2  # the final write was tried a few times
    assert metrics.outcomes() == ["error"]
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"giving up completing 1 job(s) (ids {job_id})" in m for m in messages)
    # The worker unregistered nevertheless, which released the job it still held (its
    # attempt kept): not left running until stale-claim recovery (issue 41).
    assert store.state.workers() == []
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts, job.recovered) == (JobState.PENDING, 1, True)
    assert job.claimed_by is None
    assert messages[-1].endswith(
        f"job(s) [{job_id}] still running under its id were released to pending "
        "(attempts unchanged)"
    )
    assert (await engine.maintain())[0] == []
    store.failures = 0
    assert await engine.worker().run_until_idle() == 1
    assert state_of(store, job_id) is JobState.SUCCEEDED


async def test_worker_forced_stop_tries_a_failing_write_once(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Default retry waits and a long shutdown timeout: only the force ends this quickly.
    store = FlakyStore(clock=clock, failures=None)
    engine = make_engine(store, clock, shutdown_timeout=60.0, poll_interval=0.01)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    job_id = (await engine.enqueue("k", {})).id
    worker = engine.worker(install_signal_handlers=False)
    with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
        task = spawn(worker.run)
        await eventually(lambda: len(store.calls) >= 1)
        calls = len(store.calls)
        worker.stop(force=True)
        await eventually(task.done, 10.0)
        await join(task)
    assert 1 <= len(store.calls) - calls <= 3
    assert any("giving up completing 1 job(s)" in r.getMessage() for r in caplog.records)
    assert state_of(store, job_id) is JobState.PENDING  # released as it unregistered
    assert store.state.workers() == []


async def test_worker_logs_lost_leases_of_a_batch_per_job(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = GatedStore(clock=clock)
    engine = make_engine(store, clock, concurrency=4)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    ids = [r.id for r in await engine.enqueue_many(Enqueue("k", {}) for _ in range(3))]
    task = spawn(engine.worker().run_until_idle)
    await eventually(store.held.is_set)  # all three were claimed by one claim
    # An operator cancels two running jobs before their outcomes are written.
    for job_id in ids[1:]:
        assert state_of(store, job_id) is JobState.RUNNING
        await engine.cancel_job(job_id)
    with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
        store.gate.set()
        assert await join(task) == 3
    lost = [r.getMessage() for r in caplog.records if "no longer ours" in r.getMessage()]
    assert len(lost) == 2
    assert [state_of(store, i) for i in ids] == [
        JobState.SUCCEEDED,
        JobState.CANCELLED,
        JobState.CANCELLED,
    ]


# ---- backpressure: claims wait for the completer ---------------------------------------


class BlockedStore(CountingStore):
    """Its ``complete`` outside a transaction waits until ``gate`` is set. After every
    claim it records how many jobs are ``running`` (held by the worker, outcome not
    written); ``probe`` runs at every claim and write."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = Event()
        self.running_after_claims: list[int] = []
        self.probe: Callable[[], None] = lambda: None

    def running(self) -> int:
        return sum(c.count for c in self.state.counts() if c.state is JobState.RUNNING)

    async def claim(self, request: ClaimRequest, *, audit: AsyncAudit | None = None) -> ClaimedJobs:
        self.probe()
        jobs = await super().claim(request, audit=audit)
        self.running_after_claims.append(self.running())
        return jobs

    async def complete(
        self,
        completions: Sequence[Completion],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[bool]:
        if connection is None:
            self.probe()
            assert await wait_event(self.gate, 10.0), "the gate was never opened"
        return await super().complete(completions, connection=connection, audit=audit)


async def test_worker_claims_no_faster_than_its_outcomes_are_written(
    clock: FakeClock, metrics: RecordingMetrics
) -> None:
    store = BlockedStore(clock=clock)
    engine = make_engine(store, clock, metrics, concurrency=2, prefetch=2, completion_batch_size=3)
    lock = threading.Lock()
    ran: list[int] = []
    samples: list[int] = []

    @engine.processor("k")
    async def k(payload: dict[str, int], ctx: JobContext) -> None:
        with lock:
            ran.append(payload["i"])
            samples.append(worker.unwritten)

    n = 60
    ids = [r.id for r in await engine.enqueue_many(Enqueue("k", {"i": i}) for i in range(n))]
    worker = engine.worker()
    store.probe = lambda: samples.append(worker.unwritten)
    limit = worker.unwritten_limit
    assert limit == 2 + 2 + 2 * 3  # slots, prefetch, two completion batches
    task = spawn(worker.run_until_idle)
    # The first write does not return: the worker runs jobs until it holds `limit`
    # outcomes, then claims nothing more (nothing runs, nothing is held).
    await eventually(lambda: worker.unwritten == limit)
    assert store.claimed == len(ran) == limit
    assert store.running() == limit
    assert worker.running == 0
    store.gate.set()
    assert await join(task) == n
    assert sorted(ran) == list(range(n))  # every job ran, once
    assert max(samples) <= limit
    assert max(store.running_after_claims) <= limit
    assert sum(store.batches) == n
    jobs = await engine.list_jobs()
    assert sorted(job.id for job in jobs) == ids
    assert {(job.state, job.attempts) for job in jobs} == {(JobState.SUCCEEDED, 1)}
    assert metrics.outcomes() == ["succeeded"] * n


async def test_worker_at_its_unwritten_limit_stops_cleanly(
    clock: FakeClock, metrics: RecordingMetrics
) -> None:
    store = BlockedStore(clock=clock)
    engine = make_engine(
        store, clock, metrics, concurrency=2, prefetch=2, completion_batch_size=3,
        poll_interval=0.01,
    )  # fmt: skip
    lock = threading.Lock()
    ran: list[int] = []
    go = Event()

    @engine.processor("k")
    async def k(payload: dict[str, int], ctx: JobContext) -> None:
        with lock:
            ran.append(payload["i"])
            late = len(ran) > 6
        if late:  # the seventh job on waits for `go`
            assert await wait_event(go, 5.0)

    n = 20
    ids = [r.id for r in await engine.enqueue_many(Enqueue("k", {"i": i}) for i in range(n))]
    worker = engine.worker(install_signal_handlers=False)
    limit = worker.unwritten_limit
    task = spawn(worker.run)
    # Six outcomes wait behind the blocked write, two jobs run, one or two are held (a
    # claim of one may meet a finishing job counted twice; with prefetch 2 the next
    # claim waits for an empty buffer).
    await eventually(lambda: worker.unwritten == 6 and worker.running == 2 and store.running() > 8)
    held = store.running() - 8
    assert held in (1, 2)
    worker.stop()
    await eventually(lambda: worker.state == "draining")
    # The held jobs are given back through the completer: still within the limit.
    await eventually(lambda: worker.unwritten == 6 + held)
    go.set()
    await eventually(lambda: worker.unwritten == 8 + held)
    assert worker.unwritten <= limit
    store.gate.set()
    await join(task)
    assert worker.state == "stopped"
    assert store.state.workers() == []
    assert max(store.running_after_claims) <= limit
    jobs = {job.id: job for job in await engine.list_jobs()}
    done = [i for i in ids if jobs[i].state is JobState.SUCCEEDED]
    assert len(done) == 8
    assert all(jobs[i].attempts == 1 for i in done)
    # The two released held jobs and the ten never claimed are pending, no attempt used.
    assert {(jobs[i].state, jobs[i].attempts) for i in ids if i not in done} == {
        (JobState.PENDING, 0)
    }
    assert metrics.outcomes().count("succeeded") == 8
    assert await engine.worker().run_until_idle() == n - 8
    assert sorted(ran) == list(range(n))  # every job ran, once


# ---- timeouts (R22) -------------------------------------------------------------------


async def test_worker_times_out_a_hanging_processor(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics)
    seen_cancelled: list[bool] = []

    @engine.processor("hang", timeout=0.05, max_attempts=2, backoff_base=0)
    async def hang(payload: Any, ctx: JobContext) -> None:
        try:
            await block_until_interrupted(ctx)
        finally:
            seen_cancelled.append(ctx.cancelled)

    job_id = (await engine.enqueue("hang", {})).id
    assert await engine.worker().run_until_idle() == 2
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.DEAD, 2)
    assert (job.last_error or "").startswith("timeout exceeded: ran longer than 0.05 s")
    assert seen_cancelled == [True, True]
    assert metrics.outcomes() == ["retry", "dead"]


async def test_worker_interrupts_a_blocking_function_in_its_thread(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    interrupted: list[bool] = []
    swallowed: list[bool] = []

    @engine.processor("blocking", timeout=0.05, max_attempts=1, transactional=False)
    def blocking(payload: Any, ctx: JobContext) -> None:
        gate = threading.Event()
        try:
            while not gate.wait(0.01):
                pass
        except JobTimeoutError:
            interrupted.append(ctx.cancelled)
            raise

    @engine.processor("stubborn", timeout=0.05, max_attempts=1, transactional=False)
    def stubborn(payload: Any, ctx: JobContext) -> None:
        gate = threading.Event()
        try:
            while not gate.wait(0.01):
                pass
        except JobTimeoutError:
            # Swallowing the interrupt does not turn a timeout into a success.
            swallowed.append(ctx.cancelled)

    first = (await engine.enqueue("blocking", {})).id
    second = (await engine.enqueue("stubborn", {})).id
    assert await engine.worker().run_until_idle() == 2
    await eventually(lambda: interrupted == [True] and swallowed == [True])
    for job_id in (first, second):
        job = await engine.get_job(job_id)
        assert job.state is JobState.DEAD
        assert (job.last_error or "").startswith("timeout exceeded")


async def test_worker_cooperative_processor_sees_the_cancellation(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    checks: list[str] = []

    @engine.processor("polite", timeout=0.05, max_attempts=1, transactional=False)
    def polite(payload: Any, ctx: JobContext) -> None:
        gate = threading.Event()
        try:
            while not ctx.cancelled:
                gate.wait(0.005)
        except JobTimeoutError:
            checks.append("interrupted")
            raise
        checks.append("noticed")
        ctx.check_cancelled()

    job_id = (await engine.enqueue("polite", {})).id
    assert await engine.worker().run_until_idle() == 1
    await eventually(lambda: len(checks) == 1)
    assert (await engine.get_job(job_id)).state is JobState.DEAD


# ---- graceful shutdown ----------------------------------------------------------------


async def test_worker_stop_drains_running_jobs(store: CountingStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock, shutdown_timeout=5.0, poll_interval=0.01)
    started, release = Event(), Event()

    @engine.processor("long")
    async def long(payload: Any, ctx: JobContext) -> None:
        started.set()
        assert await wait_event(release, 5.0)

    job_id = (await engine.enqueue("long", {})).id
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(started.is_set)
    worker.stop()
    worker.stop()  # idempotent
    await eventually(lambda: worker.state == "draining")
    assert state_of(store, job_id) is JobState.RUNNING
    assert not task.done()
    release.set()
    await join(task)
    assert worker.state == "stopped"
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.SUCCEEDED, 1)
    assert store.state.workers() == []


async def test_worker_prefetch_holds_claimed_jobs_and_releases_them_at_stop(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, concurrency=2, prefetch=3, poll_interval=0.01)
    started, release = Event(), Event()
    running = {"now": 0, "peak": 0}

    @engine.processor("long")
    async def long(payload: Any, ctx: JobContext) -> None:
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
        started.set()
        assert await wait_event(release, 5.0)
        running["now"] -= 1

    ids = [(await engine.enqueue("long", {"i": i})).id for i in range(8)]
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: worker.running == 2)
    # Two running and three buffered: all five are claimed (running) in the store.
    await eventually(lambda: sum(state_of(store, i) is JobState.RUNNING for i in ids) == 5)
    assert store.last_request is not None
    assert store.last_request.limit <= 5  # concurrency plus prefetch
    worker.stop()
    await eventually(lambda: worker.state == "draining")
    release.set()
    await join(task)
    jobs = [await engine.get_job(i) for i in ids]
    assert sorted(j.state.value for j in jobs).count("succeeded") == 2
    # The buffered ones never started: back to pending without using an attempt.
    pending = [j for j in jobs if j.state is JobState.PENDING]
    assert len(pending) == 6
    assert all((j.attempts, j.claimed_by) == (0, None) for j in pending)
    assert running["peak"] == 2


async def test_worker_prefetch_counts_buffered_jobs_against_node_limits(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, concurrency=4, prefetch=8, poll_interval=0.01)
    release = Event()

    @engine.processor("heavy", node_limit=2)
    async def heavy(payload: Any, ctx: JobContext) -> None:
        assert await wait_event(release, 5.0)

    @engine.processor("light")  # keeps the dispatcher claiming while "heavy" is full
    async def light(payload: Any, ctx: JobContext) -> None: ...

    ids = [(await engine.enqueue("heavy", {})).id for _ in range(6)]
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: worker.running == 2)
    claims = store.claims
    await eventually(lambda: store.claims >= claims + 3)
    # The node limit caps running plus buffered: no more "heavy" jobs are claimed.
    assert sum(state_of(store, i) is JobState.RUNNING for i in ids) == 2
    release.set()
    await eventually(lambda: all(state_of(store, i) is JobState.SUCCEEDED for i in ids))
    worker.stop()
    await join(task)


async def test_worker_prefetched_jobs_start_as_slots_free(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, concurrency=1, prefetch=9)
    done: list[int] = []

    @engine.processor("quick")
    async def quick(payload: dict[str, int], ctx: JobContext) -> None:
        done.append(payload["i"])

    for i in range(20):
        await engine.enqueue("quick", {"i": i})
    assert await engine.worker().run_until_idle() == 20
    assert sorted(done) == list(range(20))
    # Claims top the buffer up as slots free (a thread may claim a few at a time), but
    # never one job per claim (the claims that find nothing while the last jobs run do
    # not count: how many there are depends on the scheduler).
    assert store.takes <= 10


async def test_worker_releases_jobs_that_outlast_the_shutdown_timeout(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics, shutdown_timeout=0.05, poll_interval=0.01)
    started = Event()

    @engine.processor("stuck", max_attempts=1)
    async def stuck(payload: Any, ctx: JobContext) -> None:
        started.set()
        await block_until_interrupted(ctx)

    job_id = (await engine.enqueue("stuck", {})).id
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(started.is_set)
    worker.stop()
    await join(task)
    job = await engine.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.PENDING, 0)  # no attempt used
    assert (job.claimed_by, job.last_error) == (None, None)
    assert metrics.outcomes() == ["released"]


def released(job: Job) -> bool:
    """Back in pending by a release: no attempt used, no stale-recovery mark."""
    return (job.state, job.attempts, job.claimed_by, job.last_error) == (
        JobState.PENDING,
        0,
        None,
        None,
    )


@pytest.mark.parametrize("graceful_first", [False, True])
async def test_worker_forced_stop_releases_running_jobs_and_unregisters(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics, graceful_first: bool
) -> None:
    # A long shutdown timeout: only the force ends the drain quickly.
    engine = make_engine(
        store, clock, metrics, concurrency=2, shutdown_timeout=60.0, poll_interval=0.01
    )
    started: list[int] = []
    lock = threading.Lock()

    @engine.processor("stuck", max_attempts=1)
    async def stuck(payload: Any, ctx: JobContext) -> None:
        with lock:
            started.append(ctx.job_id)
        await block_until_interrupted(ctx)

    @engine.processor("stuck_tx", max_attempts=1, transactional=True)
    async def stuck_tx(payload: Any, ctx: JobContext) -> None:
        with lock:
            started.append(ctx.job_id)
        await block_until_interrupted(ctx)

    ids = [(await engine.enqueue(kind, {})).id for kind in ("stuck", "stuck_tx")]
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: len(started) == 2)
    if graceful_first:  # the CLI: the first signal drains, the second forces
        worker.stop()
        await eventually(lambda: worker.state == "draining")
        assert worker.running == 2
    # From another thread, as a signal handler would.
    forcer = threading.Thread(target=worker.stop, kwargs={"force": True})
    forcer.start()
    await eventually(task.done, 10.0)
    await join(task)
    forcer.join()
    assert worker.state == "stopped"
    for job_id in ids:
        assert released(await engine.get_job(job_id))
    assert metrics.outcomes() == ["released", "released"]
    assert store.state.workers() == []


async def test_worker_interrupted_run_releases_and_unregisters(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics, shutdown_timeout=60.0, poll_interval=0.01)
    started = Event()

    @engine.processor("stuck", max_attempts=1)
    async def stuck(payload: Any, ctx: JobContext) -> None:
        started.set()
        await block_until_interrupted(ctx)

    job_id = (await engine.enqueue("stuck", {})).id
    worker = engine.worker(install_signal_handlers=False)
    if True:  # ASYNC
        task = spawn(worker.run)
        await eventually(started.is_set)
        worker.stop()  # the first stop signal drains ...
        await eventually(lambda: worker.state == "draining")
        task.cancel()  # ... and on the second the CLI cancels run()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:

        def interrupt() -> None:
            eventually(started.is_set)
            worker.stop()
            eventually(lambda: worker.state == "draining")
            os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt in the main thread

        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            helper = spawn(interrupt)
            with pytest.raises(KeyboardInterrupt):
                worker.run()
            join(helper)
        finally:
            signal.signal(signal.SIGINT, previous)
    assert worker.state == "stopped"
    assert released(await engine.get_job(job_id))
    assert metrics.outcomes() == ["released"]
    assert store.state.workers() == []


async def test_worker_stopped_before_running_returns_at_once(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    await engine.enqueue("k", {})
    worker = engine.worker(install_signal_handlers=False)
    worker.stop()
    await worker.run()
    assert store.claims == 0


async def test_worker_run_heartbeats_maintains_and_wakes_on_notify(
    store: CountingStore, clock: FakeClock
) -> None:
    # A long poll interval: only the store's notifier can wake the idle worker quickly.
    engine = make_engine(store, clock, poll_interval=60.0, heartbeat_interval=0.01)
    done: list[int] = []

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None:
        done.append(ctx.job_id)

    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: [w.id for w in store.state.workers()] == [worker.id])
    assert store.state.workers()[0].kinds == frozenset({"k"})
    await eventually(lambda: store.heartbeats >= 2 and store.recoveries >= 1)
    await eventually(lambda: store.claims >= 1)
    job_id = (await engine.enqueue("k", {})).id
    await eventually(lambda: done == [job_id])
    worker.stop()
    await join(task)
    assert store.state.workers() == []


async def test_worker_heartbeat_interrupts_a_cancelled_running_job(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics, poll_interval=60.0, heartbeat_interval=0.05)
    started: list[int] = []
    seen_cancelled: list[bool] = []

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None:
        started.append(ctx.job_id)
        try:
            await block_until_interrupted(ctx)
        finally:
            seen_cancelled.append(ctx.cancelled)

    job_id = (await engine.enqueue("k", {})).id
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: started == [job_id])
    await engine.cancel_job(job_id)
    await eventually(lambda: seen_cancelled == [True] and worker.running == 0, timeout=2.0)
    assert ("k", None, "lost") in metrics.finished
    assert state_of(store, job_id) is JobState.CANCELLED
    worker.stop()
    await join(task)
    assert state_of(store, job_id) is JobState.CANCELLED


async def test_worker_heartbeat_drops_a_cancelled_buffered_job(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(
        store, clock, metrics, poll_interval=60.0, heartbeat_interval=0.05, prefetch=1
    )
    started: list[int] = []

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None:
        started.append(ctx.job_id)
        await block_until_interrupted(ctx)

    first = (await engine.enqueue("k", {}, priority=1)).id
    second = (await engine.enqueue("k", {})).id
    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: started == [first] and state_of(store, second) is JobState.RUNNING)
    await engine.cancel_job(second)
    await eventually(lambda: ("k", None, "lost") in metrics.finished, timeout=2.0)
    worker.stop(force=True)
    await join(task)
    assert started == [first]
    assert state_of(store, second) is JobState.CANCELLED
    assert state_of(store, first) is JobState.PENDING  # released by the forced stop


async def test_worker_heartbeat_registers_again_when_its_row_is_gone(
    store: CountingStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store, clock, poll_interval=60.0, heartbeat_interval=0.05)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: [w.id for w in store.state.workers()] == [worker.id])
    with caplog.at_level(logging.WARNING, logger="skiplock.worker"):
        await store.unregister_worker(worker.id)
        assert store.state.workers() == []
        await eventually(lambda: [w.id for w in store.state.workers()] == [worker.id], 2.0)
    assert "registering again" in caplog.text
    assert store.state.workers()[0].kinds == frozenset({"k"})
    worker.stop()
    await join(task)
    assert store.state.workers() == []


async def test_worker_maintenance_runs_once_per_period_across_workers(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, poll_interval=60.0, maintenance_interval=0.02)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    workers = [engine.worker(install_signal_handlers=False) for _ in range(2)]
    tasks = [spawn(w.run) for w in workers]

    def tries(name: str) -> int:
        return sum(1 for n, _ in store.maintenance_tries if n == name)

    # The store's clock stands still: however often both workers tick, one run.
    await eventually(lambda: tries("recover") >= 6 and tries("purge") >= 6)
    assert (store.recoveries, store.purges) == (1, 1)
    clock.advance(timedelta(seconds=0.02))  # the next period
    seen = tries("recover")
    await eventually(lambda: tries("recover") >= seen + 4 and tries("purge") >= seen + 4)
    assert (store.recoveries, store.purges) == (2, 2)
    for worker in workers:
        worker.stop()
    for task in tasks:
        await join(task)
    # Explicit maintenance is not gated.
    await engine.maintain()
    assert (store.recoveries, store.purges) == (3, 3)


@skip_sync
async def test_worker_stops_on_sigterm(store: CountingStore, clock: FakeClock) -> None:
    import os
    import signal

    engine = make_engine(store, clock, poll_interval=60.0)

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None: ...

    worker = engine.worker(install_signal_handlers=True)
    task = spawn(worker.run)
    await eventually(lambda: bool(store.state.workers()))
    os.kill(os.getpid(), signal.SIGTERM)
    await join(task)
    assert store.state.workers() == []


async def test_worker_second_stop_signal_forces_the_stop(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, shutdown_timeout=60.0, poll_interval=0.01)
    started = Event()

    @engine.processor("stuck")
    async def stuck(payload: Any, ctx: JobContext) -> None:
        started.set()
        await block_until_interrupted(ctx)

    job_id = (await engine.enqueue("stuck", {})).id
    worker = engine.worker(install_signal_handlers=True)
    if True:  # ASYNC
        task = spawn(worker.run)
        await eventually(started.is_set)
        os.kill(os.getpid(), signal.SIGTERM)
        await eventually(lambda: worker.state == "draining")
        os.kill(os.getpid(), signal.SIGTERM)
        await eventually(task.done, 10.0)
        await join(task)
    else:

        def send() -> None:
            eventually(started.is_set)
            os.kill(os.getpid(), signal.SIGTERM)
            eventually(lambda: worker.state == "draining")
            os.kill(os.getpid(), signal.SIGTERM)

        helper = spawn(send)
        begun = time.monotonic()
        worker.run()  # in the main thread: Python runs signal handlers only there
        assert time.monotonic() - begun < 30.0  # not the 60 s drain
        join(helper)
    assert released(await engine.get_job(job_id))
    assert store.state.workers() == []


# ---- rate limits (J6) -----------------------------------------------------------------


async def test_worker_throttles_without_using_attempts_or_reclaiming(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics, poll_interval=0.01)
    ran: list[int] = []

    @engine.processor("limited", rate_limit=RateLimit(rps=1, burst=1))
    async def limited(payload: dict[str, int], ctx: JobContext) -> None:
        ran.append(payload["i"])

    ids = [(await engine.enqueue("limited", {"i": i})).id for i in range(12)]
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: len(ran) == 1)
    await eventually(lambda: worker.running == 0)
    claimed = store.claimed
    claims = store.claims
    # Several more polls happen, but the throttled pair is excluded: nothing is claimed.
    await eventually(lambda: store.claims >= claims + 5)
    assert store.claimed == claimed
    # A claim never takes more of the pair than its bucket can start: no job was claimed
    # only to be throttled and released.
    assert claimed == 1
    assert metrics.throttled == []
    for job_id in ids:
        job = store.state.get(job_id)
        assert job is not None
        if job.state is JobState.PENDING:
            assert job.attempts == 0  # throttling uses no attempt

    clock.advance(1)  # the bucket refills one token
    await eventually(lambda: len(ran) == 2)
    worker.stop()
    await join(task)
    assert len(set(ran)) == 2


@pytest.mark.parametrize("scope", ["cluster", "process"])
async def test_worker_throttled_backlog_costs_few_claims(
    store: CountingStore, clock: FakeClock, scope: str
) -> None:
    engine = make_engine(store, clock, concurrency=4, rate_limit_scope=scope)
    ran: list[int] = []

    @engine.processor("limited", rate_limit=RateLimit(rps=1, burst=2))
    async def limited(payload: dict[str, int], ctx: JobContext) -> None:
        ran.append(payload["i"])

    for i in range(20):
        await engine.enqueue("limited", {"i": i}, tenant="t1")
    await engine.enqueue("limited", {"i": 100}, tenant="t2")  # another tenant, own bucket
    await engine.worker().run_until_idle()
    assert len([i for i in ran if i < 100]) == 2  # the burst
    assert 100 in ran
    assert store.claims <= 4
    assert store.claimed <= 8


@pytest.mark.parametrize("scope", ["cluster", "process"])
@pytest.mark.parametrize("limit", ["rate_limit", "cap"])
async def test_worker_rate_limits_are_shared_by_the_engines_workers(
    store: CountingStore, clock: FakeClock, limit: str, scope: str
) -> None:
    rate = RateLimit(rps=1, burst=3)
    caps = {"smtp": rate} if limit == "cap" else {}
    engine = make_engine(store, clock, caps=caps, rate_limit_scope=scope)
    ran: list[int] = []

    @engine.processor(
        "limited",
        rate_limit=rate if limit == "rate_limit" else None,
        provider="smtp" if limit == "cap" else None,
    )
    async def limited(payload: dict[str, int], ctx: JobContext) -> None:
        ran.append(payload["i"])

    for i in range(10):
        await engine.enqueue("limited", {"i": i}, tenant="t1")

    async def run_two_workers() -> None:
        workers = [engine.worker(concurrency=2) for _ in range(2)]
        tasks = [spawn(w.run_until_idle) for w in workers]
        for task in tasks:
            await join(task)

    await run_two_workers()
    assert len(ran) == 3  # one burst for both workers, not one each
    clock.advance(2)  # two more tokens
    await run_two_workers()
    assert len(ran) == 5
    assert len(set(ran)) == 5


async def test_worker_provider_cap_spans_kinds(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics, caps={"smtp": RateLimit(rps=1, burst=1)})
    ran: list[str] = []

    @engine.processor("welcome", provider="smtp")
    async def welcome(payload: Any, ctx: JobContext) -> None:
        ran.append("welcome")

    @engine.processor("digest", provider="smtp")
    async def digest(payload: Any, ctx: JobContext) -> None:
        ran.append("digest")

    await engine.enqueue("welcome", {})
    await engine.enqueue("digest", {})
    await engine.worker(concurrency=1).run_until_idle()
    assert len(ran) == 1
    assert len(metrics.throttled) <= 1
    clock.advance(1)
    await engine.worker(concurrency=1).run_until_idle()
    assert sorted(ran) == ["digest", "welcome"]


async def test_worker_throttled_by_a_cluster_rate_sleeps_until_the_next_token(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    # A long poll: only the token due in 1 s (store clock) may wake the idle worker.
    engine = make_engine(store, clock, metrics, poll_interval=30.0)
    ran: list[int] = []

    @engine.processor("limited", rate_limit=RateLimit(rps=1, burst=1))
    async def limited(payload: dict[str, int], ctx: JobContext) -> None:
        ran.append(payload["i"])

    for i in range(3):
        await engine.enqueue("limited", {"i": i})
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: len(ran) == 1 and worker.running == 0)
    # The store said when the bucket has a token: the worker sleeps until then.
    await eventually(lambda: store.last_request is not None and store.claims >= 2)
    await eventually(lambda: worker.next_wakeup is not None)
    wakeup = worker.next_wakeup
    assert wakeup is not None
    assert wakeup.at - clock.monotonic() <= 1.0 + 1e-6
    assert ("limited", None, "rate_limit") in metrics.decisions
    assert metrics.throttled == []  # nothing was claimed only to be released
    clock.advance(1)
    await eventually(lambda: len(ran) == 2)
    worker.stop()
    await join(task)
    assert store.claimed == 2


async def test_a_throttle_decision_counts_once_while_a_cluster_limit_holds(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    # Issue 41 item 10: an idle worker counted a decision at every claim (every poll)
    # while the kind stayed at its cluster limit.
    engine = make_engine(store, clock, metrics, poll_interval=0.01)
    gate = Event()
    started: list[int] = []

    @engine.processor("capped", cluster_limit=1)
    async def capped(payload: dict[str, int], ctx: JobContext) -> None:
        started.append(payload["i"])
        await wait_event(gate, 10.0)

    for i in range(3):
        await engine.enqueue("capped", {"i": i})
    worker = engine.worker(concurrency=2, install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: len(started) == 1)
    claims = store.claims
    await eventually(lambda: store.claims >= claims + 5)  # polls, each told "full"
    assert metrics.decisions == [("capped", None, "cluster_limit")]
    gate.set()
    await eventually(lambda: len(started) == 3)
    worker.stop()
    await join(task)
    # At most once more per job the limit held back after a claim found room.
    assert 1 <= len(metrics.decisions) <= 3


async def test_a_throttle_decision_counts_once_while_a_process_bucket_is_empty(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics, poll_interval=0.01, rate_limit_scope="process")
    ran: list[int] = []

    @engine.processor("limited", rate_limit=RateLimit(rps=1, burst=1))
    async def limited(payload: dict[str, int], ctx: JobContext) -> None:
        ran.append(payload["i"])

    for i in range(3):
        await engine.enqueue("limited", {"i": i}, tenant="t")
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: len(ran) == 1 and worker.running == 0)
    claims = store.claims
    await eventually(lambda: store.claims >= claims + 5)  # polls while the bucket is empty
    assert metrics.decisions == [("limited", "t", "rate_limit")]
    clock.advance(1)  # one token: one more job, and the bucket is empty again
    await eventually(lambda: len(ran) == 2 and worker.running == 0)
    claims = store.claims
    await eventually(lambda: store.claims >= claims + 5)
    worker.stop()
    await join(task)
    assert metrics.decisions == [("limited", "t", "rate_limit")] * 2


async def test_worker_holds_no_cluster_limited_job_it_cannot_start(
    store: CountingStore, clock: FakeClock
) -> None:
    # Two nodes (engines) of two slots on one store, a cluster limit of 4: each node
    # claims only what its free slots start, so each runs 2 and neither hoards.
    engines = [make_engine(store, clock, poll_interval=0.01) for _ in range(2)]
    gate = Event()
    running: list[str] = []
    for n, engine in enumerate(engines):

        @engine.processor("capped", cluster_limit=4)
        async def capped(payload: Any, ctx: JobContext, n: int = n) -> None:
            running.append(f"node{n}")
            await wait_event(gate, 10.0)

    for _ in range(8):
        await engines[0].enqueue("capped", {})
    workers = [engine.worker(concurrency=2, install_signal_handlers=False) for engine in engines]
    tasks = [spawn(worker.run) for worker in workers]
    await eventually(lambda: len(running) == 4)
    assert sorted(running) == ["node0", "node0", "node1", "node1"]
    assert [worker.held for worker in workers] == [0, 0]
    gate.set()
    await eventually(lambda: len(running) == 8)
    for worker in workers:
        worker.stop()
    for task in tasks:
        await join(task)


async def test_worker_prefetch_limit_of_a_kind_bounds_what_it_holds(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, kinds={"slow": {"prefetch_limit": 1}})

    @engine.processor("slow")
    async def slow(payload: Any, ctx: JobContext) -> None: ...

    for _ in range(10):
        await engine.enqueue("slow", {})
    await engine.worker(concurrency=2).run_until_idle()
    request = store.first_request
    assert request is not None
    assert request.kind_limits["slow"] == 3  # two to start, one held


# ---- concurrency limits (R15), restrictions (J2), unknown kinds (R8) ------------------


async def test_worker_never_exceeds_the_per_node_limit(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, concurrency=4, poll_interval=0.01)
    lock = threading.Lock()
    counters = {"active": 0, "peak": 0}
    gate = Event()

    @engine.processor("heavy", node_limit=2)
    async def heavy(payload: Any, ctx: JobContext) -> None:
        with lock:
            counters["active"] += 1
            counters["peak"] = max(counters["peak"], counters["active"])
        await wait_event(gate, 5.0)
        with lock:
            counters["active"] -= 1

    @engine.processor("light")  # keeps the dispatcher claiming while "heavy" is full
    async def light(payload: Any, ctx: JobContext) -> None: ...

    ids = [(await engine.enqueue("heavy", {})).id for _ in range(6)]
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    await eventually(lambda: counters["active"] == 2)
    claims = store.claims
    await eventually(lambda: store.claims >= claims + 3)
    assert counters["active"] == 2
    assert sum(state_of(store, i) is JobState.RUNNING for i in ids) == 2
    gate.set()
    await eventually(lambda: all(state_of(store, i) is JobState.SUCCEEDED for i in ids))
    worker.stop()
    await join(task)
    assert counters["peak"] == 2


async def test_worker_plans_claims_with_node_and_cluster_limits(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock, concurrency=8, batch_size=5)

    @engine.processor("report", node_limit=2, cluster_limit=3)
    async def report(payload: Any, ctx: JobContext) -> None: ...

    @engine.processor("email")
    async def email(payload: Any, ctx: JobContext) -> None: ...

    worker = engine.worker(tenants=["t1"])
    assert await worker.run_until_idle() == 0
    request = store.last_request
    assert request is not None
    assert request.worker_id == worker.id
    assert request.limit == 5  # the batch size, below the 8 free slots
    assert request.kinds == frozenset({"report", "email"})
    assert request.tenants == frozenset({"t1"})
    assert dict(request.kind_limits) == {"report": 2}
    assert dict(request.cluster_limits) == {"report": 3}


async def test_worker_claims_only_its_kinds_and_tenants(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    seen: list[tuple[str, str | None]] = []

    @engine.processor("a")
    async def a(payload: Any, ctx: JobContext) -> None:
        seen.append((ctx.kind, ctx.tenant))

    @engine.processor("b")
    async def b(payload: Any, ctx: JobContext) -> None:
        seen.append((ctx.kind, ctx.tenant))

    await engine.enqueue("a", {}, tenant="t1")
    await engine.enqueue("a", {}, tenant="t2")
    await engine.enqueue("b", {}, tenant="t1")
    await engine.enqueue("a", {})
    assert await engine.worker(kinds=["a"], tenants=["t1"]).run_until_idle() == 1
    assert seen == [("a", "t1")]
    assert await engine.worker(kinds="a").run_until_idle() == 2
    assert sorted(seen[1:], key=str) == sorted([("a", "t2"), ("a", None)], key=str)
    assert await engine.worker().run_until_idle() == 1
    assert seen[-1] == ("b", "t1")

    with pytest.raises(ValidationError, match="no processor registered"):
        engine.worker(kinds=["elsewhere"])
    with pytest.raises(ValidationError, match="tenants"):
        engine.worker(tenants=[""])


async def test_worker_ignores_or_buries_unknown_kinds(
    store: CountingStore, clock: FakeClock, metrics: RecordingMetrics
) -> None:
    engine = make_engine(store, clock, metrics)
    done: list[int] = []

    @engine.processor("known")
    async def known(payload: Any, ctx: JobContext) -> None:
        done.append(ctx.job_id)

    other_service = AsyncEngine(store, clock=clock)  # enqueue-only, knows no kinds
    mystery = (await other_service.enqueue("mystery", {"x": 1})).id
    first = (await engine.enqueue("known", {})).id

    assert await engine.worker().run_until_idle() == 1  # the default worker leaves it alone
    assert state_of(store, mystery) is JobState.PENDING

    second = (await engine.enqueue("known", {})).id
    assert await engine.worker(all_kinds=True).run_until_idle() == 2
    job = await engine.get_job(mystery)
    assert (job.state, job.attempts) == (JobState.DEAD, 1)
    assert job.last_error == "no processor registered for kind 'mystery'"
    assert done == [first, second]  # the worker survived and kept working
    assert sorted(metrics.outcomes()) == ["dead", "succeeded", "succeeded"]


async def test_worker_needs_something_to_claim(store: CountingStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    with pytest.raises(ValidationError, match="no processors"):
        engine.worker()
    assert await engine.worker(all_kinds=True).run_until_idle() == 0
