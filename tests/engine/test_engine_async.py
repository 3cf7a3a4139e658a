"""AsyncEngine (sync twin generated): registration, enqueue, validation, admin operations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncEngine,
    Enqueue,
    InvalidTransitionError,
    JobContext,
    JobNotFoundError,
    JobState,
    PolicyOverrides,
    Processor,
    RateLimit,
    Settings,
    UnknownKindError,
    ValidationError,
)
from skiplock._compat_async import IS_ASYNC, skip_sync
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.core import ClaimRequest

from .support import Email, RecordingTracer

if TYPE_CHECKING:
    from skiplock.core import Event, Job, JobFilter
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> AsyncInMemoryJobStore:
    return AsyncInMemoryJobStore(clock=clock)


@pytest.fixture
def engine(store: AsyncInMemoryJobStore, clock: FakeClock) -> AsyncEngine:
    engine = AsyncEngine(store, clock=clock)

    @engine.processor("email.send", max_attempts=3)
    async def send(payload: Email, ctx: JobContext) -> None:
        pass

    return engine


# ---- registration -------------------------------------------------------------------


async def test_engine_decorator_registers_with_resolved_policy(clock: FakeClock) -> None:
    settings = Settings(max_attempts=4, kinds={"report": PolicyOverrides(node_limit=1)})
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), settings, clock=clock)

    @engine.processor(
        "report",
        timeout=timedelta(seconds=2),
        node_limit=3,
        rate_limit=RateLimit(rps=1, burst=2),
        backoff_base=5,
        stale_ttl=60,
    )
    async def report(payload: dict[str, Any], ctx: JobContext) -> None:
        pass

    spec = engine.processors["report"]
    assert spec.fn is report
    assert spec.is_async is IS_ASYNC
    assert spec.takes_context
    policy = engine.policy("report")
    assert policy.timeout == 2.0
    assert policy.node_limit == 1  # Settings.kinds wins over the processor
    assert policy.rate_limit == RateLimit(rps=1, burst=2)
    assert policy.retry.base == timedelta(seconds=5)
    assert policy.retry.max_attempts == 4  # the global value
    assert policy.stale_ttl == timedelta(seconds=60)
    assert engine.kinds == {"report"}


async def test_engine_rejects_stale_ttl_below_twice_the_heartbeat(clock: FakeClock) -> None:
    settings = Settings(heartbeat_interval=10.0)
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), settings, clock=clock)
    with pytest.raises(ValidationError, match=r"'report'.*19\.0 s.*10\.0 s"):

        @engine.processor("report", stale_ttl=19)
        async def report(payload: dict[str, Any], ctx: JobContext) -> None:
            pass

    assert "report" not in engine.kinds

    @engine.processor("report", stale_ttl=20)  # exactly twice is enough
    async def report_ok(payload: dict[str, Any], ctx: JobContext) -> None:
        pass

    assert engine.policy("report").stale_ttl == timedelta(seconds=20)


async def test_engine_registers_class_style_processors(clock: FakeClock) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), clock=clock)
    seen: list[Email] = []

    class SendEmail(Processor):
        kind = "email.send"
        max_attempts = 9
        node_limit = 2

        async def process(self, payload: Email, ctx: JobContext) -> None:
            seen.append(payload)

    instance = engine.register(SendEmail())
    assert isinstance(instance, SendEmail)
    spec = engine.processors["email.send"]
    assert spec.payload_type is Email
    assert engine.policy("email.send").retry.max_attempts == 9
    assert engine.policy("email.send").node_limit == 2

    await engine.enqueue("email.send", Email("a@b.c"))
    assert await engine.worker().run_until_idle() == 1
    assert seen == [Email("a@b.c")]


async def test_engine_rejects_duplicate_and_invalid_registrations(engine: AsyncEngine) -> None:
    with pytest.raises(ValueError, match="already registered"):

        @engine.processor("email.send")
        async def again(payload: Email, ctx: JobContext) -> None: ...

    with pytest.raises(ValidationError, match="invalid kind"):
        engine.processor("bad kind!")

    with pytest.raises(ValidationError, match="node_limit"):
        engine.processor("x", node_limit=0)

    class NoKind(Processor):
        async def process(self, payload: Any, ctx: JobContext) -> None: ...

    with pytest.raises(TypeError, match="kind"):
        engine.register(NoKind())


@skip_sync
async def test_engine_async_runs_plain_functions_only_without_a_connection(
    clock: FakeClock,
) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), clock=clock)

    @engine.processor("plain")
    def plain(payload: Any, ctx: JobContext) -> None: ...

    assert not engine.processors["plain"].is_async
    # An AsyncEngine cannot hand a sync processor its (async) connections.
    with pytest.raises(TypeError, match="without transactional=True"):

        @engine.processor("plain.tx", transactional=True)
        def plain_tx(payload: Any, ctx: JobContext) -> None: ...

    with pytest.raises(TypeError, match="without autocommit=True"):

        @engine.processor("plain.ac", autocommit=True)
        def plain_ac(payload: Any, ctx: JobContext) -> None: ...

    assert engine.kinds == {"plain"}


async def test_engine_connection_mode_defaults_to_none(clock: FakeClock) -> None:
    settings = Settings(kinds={"index.build": PolicyOverrides(autocommit=True)})
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), settings, clock=clock)

    @engine.processor("plain")
    async def plain(payload: Any, ctx: JobContext) -> None: ...

    @engine.processor("book", transactional=True)
    async def book(payload: Any, ctx: JobContext) -> None: ...

    @engine.processor("index.build")  # the mode comes from Settings.kinds
    async def build(payload: Any, ctx: JobContext) -> None: ...

    modes = {
        kind: (engine.policy(kind).transactional, engine.policy(kind).autocommit)
        for kind in ("plain", "book", "index.build")
    }
    assert modes == {
        "plain": (False, False),
        "book": (True, False),
        "index.build": (False, True),
    }


# ---- enqueue --------------------------------------------------------------------------


async def test_engine_enqueue_variants(
    engine: AsyncEngine, store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    now = clock.now()
    a = await engine.enqueue("email.send", Email("a"), priority=5, tenant="t1")
    b = await engine.enqueue_at(now + timedelta(hours=1), "email.send", {"to": "b"})
    c = await engine.enqueue_after(30, "email.send", Email("c"))
    d = await engine.enqueue_after(timedelta(minutes=2), "email.send", Email("d"))
    # The same schedules as keywords of enqueue.
    e = await engine.enqueue("email.send", Email("e"), available_at=now + timedelta(hours=1))
    f = await engine.enqueue("email.send", Email("f"), delay=30)
    assert [r.created for r in (a, b, c, d, e, f)] == [True] * 6

    job_a = await engine.get_job(a.id)
    assert job_a.payload == {"to": "a", "subject": ""}
    assert (job_a.priority, job_a.tenant, job_a.state) == (5, "t1", JobState.PENDING)
    assert job_a.max_attempts == 3  # the kind's resolved policy
    assert job_a.available_at == now
    assert (await engine.get_job(b.id)).available_at == now + timedelta(hours=1)
    assert (await engine.get_job(c.id)).available_at == now + timedelta(seconds=30)
    assert (await engine.get_job(d.id)).available_at == now + timedelta(minutes=2)
    assert (await engine.get_job(e.id)).available_at == now + timedelta(hours=1)
    assert (await engine.get_job(f.id)).available_at == now + timedelta(seconds=30)

    # Only the job that is due runs.
    assert await engine.worker().run_until_idle() == 1
    assert (await engine.get_job(a.id)).state is JobState.SUCCEEDED
    clock.advance(timedelta(hours=1))
    assert await engine.worker().run_until_idle() == 5


async def test_engine_enqueue_delegations_keep_their_keywords(engine: AsyncEngine) -> None:
    at = await engine.enqueue_at(
        datetime(2030, 1, 1, tzinfo=UTC),
        "email.send",
        Email("a"),
        priority=3,
        tenant="t",
        idempotency_key="k-at",
        max_attempts=7,
    )
    after = await engine.enqueue_after(
        5, "email.send", Email("b"), priority=-2, tenant="u", idempotency_key="k-after"
    )
    job_at, job_after = await engine.get_job(at.id), await engine.get_job(after.id)
    assert (job_at.priority, job_at.tenant, job_at.idempotency_key, job_at.max_attempts) == (
        3,
        "t",
        "k-at",
        7,
    )
    assert (job_after.priority, job_after.tenant, job_after.max_attempts) == (-2, "u", 3)
    assert job_after.idempotency_key == "k-after"


async def test_engine_enqueue_rejects_available_at_with_delay(engine: AsyncEngine) -> None:
    with pytest.raises(ValidationError, match="mutually exclusive"):
        await engine.enqueue(
            "email.send", Email("a"), available_at=datetime(2030, 1, 1, tzinfo=UTC), delay=5
        )
    with pytest.raises(ValidationError, match="delay"):
        await engine.enqueue("email.send", Email("a"), delay=-1)
    assert await engine.counts() == []


async def test_engine_enqueue_max_attempts_and_idempotency(engine: AsyncEngine) -> None:
    first = await engine.enqueue("email.send", Email("a"), idempotency_key="k1", max_attempts=8)
    second = await engine.enqueue("email.send", Email("other"), idempotency_key="k1")
    assert first.created
    assert not second.created
    assert second.id == first.id
    assert (await engine.get_job(first.id)).max_attempts == 8


async def test_engine_enqueue_many_in_one_call(engine: AsyncEngine) -> None:
    results = await engine.enqueue_many(
        [
            Enqueue("email.send", Email(f"u{i}"), priority=i, idempotency_key=f"k{i % 3}")
            for i in range(6)
        ]
    )
    assert [r.created for r in results] == [True, True, True, False, False, False]
    assert [r.id for r in results[3:]] == [r.id for r in results[:3]]
    assert await engine.enqueue_many([]) == []


async def test_engine_enqueue_stores_the_trace_context(clock: FakeClock) -> None:
    tracer = RecordingTracer()
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), clock=clock, tracer=tracer)
    engine.declare_kind("traced")
    result = await engine.enqueue("traced", {"x": 1})
    assert (await engine.get_job(result.id)).trace_context == RecordingTracer.CONTEXT


async def test_engine_enqueue_joins_the_callers_transaction(
    engine: AsyncEngine, store: AsyncInMemoryJobStore
) -> None:
    async def enqueue_then_fail() -> None:
        async with store.transaction() as tx:
            await engine.enqueue("email.send", Email("a"), connection=tx)
            await engine.enqueue_many([Enqueue("email.send", Email("b"))], connection=tx)
            raise RuntimeError("rollback")

    with pytest.raises(RuntimeError, match="rollback"):
        await enqueue_then_fail()
    assert await engine.counts() == []

    async with store.transaction() as tx:
        result = await engine.enqueue("email.send", Email("a"), connection=tx)
    assert (await engine.get_job(result.id)).state is JobState.PENDING


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"kind": "nobody.handles.this"}, UnknownKindError, "unknown kind"),
        ({"kind": "bad kind"}, ValidationError, "invalid kind"),
        ({"payload": {"when": object()}}, ValidationError, "not JSON-serialisable"),
        ({"payload": {"x": float("nan")}}, ValidationError, "not valid JSON"),
        ({"payload": "x" * 300}, ValidationError, "too large"),
        ({"priority": 10**6}, ValidationError, "priority"),
        ({"priority": "high"}, ValidationError, "priority"),
        ({"tenant": ""}, ValidationError, "tenant"),
        ({"tenant": 5}, ValidationError, "tenant"),
        ({"idempotency_key": ""}, ValidationError, "idempotency_key"),
        ({"max_attempts": 0}, ValidationError, "max_attempts"),
        ({"available_at": datetime(2030, 1, 1)}, ValidationError, "timezone-aware"),
        ({"delay": -5}, ValidationError, "delay"),
        ({"delay": "soon"}, ValidationError, "delay"),
        (
            {"delay": 5, "available_at": datetime(2030, 1, 1, tzinfo=UTC)},
            ValidationError,
            "mutually exclusive",
        ),
    ],
)
async def test_engine_enqueue_rejects_bad_input_and_writes_nothing(
    clock: FakeClock, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    store = AsyncInMemoryJobStore(clock=clock)
    engine = AsyncEngine(store, Settings(max_payload_bytes=256), clock=clock)
    engine.declare_kind("email.send")
    item = Enqueue(**{"kind": "email.send", "payload": {"to": "a"}, **kwargs})
    with pytest.raises(error, match=match):
        await engine.enqueue_many([item])
    with pytest.raises(error, match=match):
        await engine.enqueue_many([Enqueue("email.send", {"ok": True}), item])
    assert await engine.counts() == []


async def test_engine_enqueue_bad_input_in_a_batch_names_the_item(engine: AsyncEngine) -> None:
    with pytest.raises(UnknownKindError, match="item 1"):
        await engine.enqueue_many([Enqueue("email.send", Email("a")), Enqueue("nope")])
    assert await engine.counts() == []


async def test_engine_enqueue_only_engine_accepts_any_valid_kind(clock: FakeClock) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), clock=clock)
    assert (await engine.enqueue("any.kind", {"x": 1})).created
    with pytest.raises(ValidationError, match="invalid kind"):
        await engine.enqueue("not a kind", {})


async def test_engine_allowing_unknown_kinds_accepts_them(clock: FakeClock) -> None:
    engine = AsyncEngine(
        AsyncInMemoryJobStore(clock=clock), Settings(unknown_kinds="allow"), clock=clock
    )
    engine.declare_kind("known")
    assert (await engine.enqueue("elsewhere", {})).created


# ---- admin ----------------------------------------------------------------------------


async def _bury(engine: AsyncEngine, store: AsyncInMemoryJobStore, job_id: int) -> None:
    """Move a pending job to dead through the store, as a failing worker would."""
    from skiplock.core import Bury, Completion

    jobs = await store.claim(ClaimRequest(worker_id="w", limit=1))
    assert [j.id for j in jobs] == [job_id]
    await store.complete([Completion(jobs[0].lease, Bury(error="boom"))])


async def test_engine_admin_get_list_and_counts(engine: AsyncEngine) -> None:
    ids = [
        (await engine.enqueue("email.send", Email(f"{i}"), priority=i, tenant=f"t{i % 2}")).id
        for i in range(5)
    ]
    with pytest.raises(JobNotFoundError):
        await engine.get_job(999)
    page1 = await engine.list_jobs(limit=2)
    page2 = await engine.list_jobs(limit=2, after_id=page1[-1].id)
    assert [j.id for j in page1 + page2] == ids[:4]
    assert [j.id for j in await engine.list_jobs(descending=True, limit=1)] == [ids[-1]]
    assert [j.id for j in await engine.list_jobs(tenant="t1")] == [ids[1], ids[3]]
    assert [j.id for j in await engine.list_jobs(priority_min=3)] == ids[3:]
    assert [j.id for j in await engine.list_jobs(priority_max=0, kind="email.send")] == ids[:1]
    assert await engine.list_jobs(state="dead") == []
    assert len(await engine.list_jobs(state=[JobState.PENDING, "running"])) == 5
    with pytest.raises(ValidationError, match="limit"):
        await engine.list_jobs(limit=0)
    with pytest.raises(ValidationError, match="state"):
        await engine.list_jobs(state="nonsense")
    created = (await engine.get_job(ids[0])).created_at
    assert await engine.list_jobs(created_before=created) == []
    assert len(await engine.list_jobs(created_since=created)) == 5
    due = (await engine.get_job(ids[0])).available_at
    assert await engine.list_jobs(available_since=due + timedelta(seconds=1)) == []
    counts = await engine.counts()
    assert sorted((c.tenant, c.count) for c in counts) == [("t0", 3), ("t1", 2)]


async def test_engine_admin_dead_letter_view_and_replay(
    engine: AsyncEngine, store: AsyncInMemoryJobStore
) -> None:
    a = (await engine.enqueue("email.send", Email("a"), priority=9)).id
    await _bury(engine, store, a)
    b = (await engine.enqueue("email.send", Email("b"), priority=9, tenant="t")).id
    await _bury(engine, store, b)
    dead = await engine.dead_jobs()
    assert [(j.id, j.last_error) for j in dead] == [(a, "boom"), (b, "boom")]
    assert [j.id for j in await engine.dead_jobs(tenant="t")] == [b]

    # A replay starts over: attempts 0, for one job as for the bulk replay.
    replayed = await engine.retry_job(a)
    assert (replayed.state, replayed.attempts) == (JobState.PENDING, 0)
    refused = "is pending: only failed, dead or cancelled jobs can be retried"
    with pytest.raises(InvalidTransitionError, match=f"job {a} {refused}"):
        await engine.retry_job(a)
    await _bury(engine, store, a)
    kept = await engine.retry_job(a, reset_attempts=False)
    assert (kept.state, kept.attempts) == (JobState.PENDING, 1)
    with pytest.raises(JobNotFoundError):
        await engine.retry_job(12345)

    assert await engine.retry_dead() == [b]
    assert (await engine.get_job(b)).attempts == 0  # J8: replay resets attempts
    assert await engine.dead_jobs() == []
    assert await engine.worker().run_until_idle() == 2


async def test_engine_admin_cancel_fail_and_delete(
    engine: AsyncEngine, store: AsyncInMemoryJobStore
) -> None:
    a = (await engine.enqueue("email.send", Email("a"))).id
    b = (await engine.enqueue("email.send", Email("b"))).id
    assert (await engine.cancel_job(a)).state is JobState.CANCELLED
    with pytest.raises(
        InvalidTransitionError, match="only pending or running jobs can be cancelled"
    ):
        await engine.cancel_job(a)
    assert (await engine.fail_job(a)).state is JobState.FAILED
    assert (await engine.retry_job(a, reset_attempts=True)).state is JobState.PENDING

    deleted = await engine.delete_job(a)
    assert deleted.id == a
    with pytest.raises(JobNotFoundError):
        await engine.delete_job(a)

    running = await store.claim(ClaimRequest(worker_id="w", limit=1))
    assert [j.id for j in running] == [b]
    with pytest.raises(InvalidTransitionError, match="running"):
        await engine.delete_job(b)
    assert (await engine.get_job(b)).state is JobState.RUNNING


async def test_act_on_jobs_changes_only_jobs_in_the_states_given(
    engine: AsyncEngine, store: AsyncInMemoryJobStore
) -> None:
    a, b, c = [(await engine.enqueue("email.send", {"to": f"{n}@x"})).id for n in range(3)]
    assert await engine.act_on_jobs("cancel", [a, b]) == [a, b]
    # A job replayed since the caller saw it cancelled is left alone by a discard for
    # cancelled jobs; the one still cancelled is deleted.
    await engine.retry_job(a)
    assert await engine.act_on_jobs("discard", [a, b, 999], states="cancelled") == [b]
    assert (await engine.get_job(a)).state is JobState.PENDING
    assert await engine.act_on_jobs("retry", [a, c]) == []  # pending: nothing to replay
    assert await engine.act_on_jobs("fail", [a, c], states=["dead"]) == []
    assert await engine.act_on_jobs("fail", [a, c], states=["pending", "dead"]) == [a, c]
    assert await engine.act_on_jobs("retry", [a], reset_attempts=False) == [a]
    running = await store.claim(ClaimRequest(worker_id="w", limit=1))
    assert await engine.act_on_jobs("discard", [j.id for j in running]) == []
    with pytest.raises(ValidationError, match="not an operator action"):
        await engine.act_on_jobs("purge", [a])
    with pytest.raises(ValidationError, match="at most 1000 ids"):
        await engine.act_on_jobs("retry", range(1, 1002))


class _OperatorCalls(AsyncInMemoryJobStore):
    """The in-memory store, naming each read of a job and each operator transition."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.calls: list[str] = []

    async def get(self, job_id: int, *, connection: Any = None) -> Job | None:
        self.calls.append("get")
        return await super().get(job_id, connection=connection)

    async def apply(self, filter: JobFilter, event: Event, **options: Any) -> list[int]:
        self.calls.append("apply")
        return await super().apply(filter, event, **options)

    async def apply_job(self, job_id: int, event: Event, **options: Any) -> Job | None:
        self.calls.append("apply_job")
        return await super().apply_job(job_id, event, **options)


async def test_engine_operator_calls_change_and_return_a_job_in_one_store_call(
    clock: FakeClock,
) -> None:
    store = _OperatorCalls(clock)
    engine = AsyncEngine(store, Settings(audit=True), clock=clock)
    job_id = (await engine.enqueue("email.send", {"to": "a"})).id
    cancelled = await engine.operator("alice").cancel_job(job_id)
    failed = await engine.fail_job(job_id)
    replayed = await engine.retry_job(job_id)
    assert store.calls == ["apply_job"] * 3
    assert [j.state for j in (cancelled, failed, replayed)] == [
        JobState.CANCELLED,
        JobState.FAILED,
        JobState.PENDING,
    ]
    assert replayed == await engine.get_job(job_id)
    assert [(e.action.value, e.actor) for e in await engine.audit_trail(job_id)][1:] == [
        ("job_cancelled", "alice"),
        ("job_failed_manually", None),
        ("job_replay", None),
    ]

    # Refused or unknown: read to say why, nothing changed.
    store.calls.clear()
    with pytest.raises(InvalidTransitionError, match=r"is pending: only .* can be retried"):
        await engine.retry_job(job_id)
    with pytest.raises(JobNotFoundError):
        await engine.cancel_job(job_id + 1000)
    assert store.calls == ["apply_job", "get"] * 2
    assert await engine.get_job(job_id) == replayed


async def test_engine_maintain_recovers_stale_claims_and_purges(
    clock: FakeClock, store: AsyncInMemoryJobStore
) -> None:
    engine = AsyncEngine(store, Settings(retention=timedelta(days=1)), clock=clock)

    @engine.processor("quick")
    async def quick(payload: Any, ctx: JobContext) -> None: ...

    done = (await engine.enqueue("quick", {})).id
    assert await engine.worker().run_until_idle() == 1
    stuck = (await engine.enqueue("quick", {})).id
    await store.claim(ClaimRequest(worker_id="crashed-worker", limit=1))

    clock.advance(timedelta(days=2))
    recovered, purged = await engine.maintain()
    assert recovered == [stuck]
    assert purged == 1
    with pytest.raises(JobNotFoundError):
        await engine.get_job(done)
    job = await engine.get_job(stuck)
    assert job.state is JobState.PENDING
    assert "stale-claim recovered" in (job.last_error or "")
