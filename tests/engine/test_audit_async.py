"""The audit trail (J10) through the engine on the in-memory store (async source; twin
generated): the shared scenarios, plus actor checks, sinks given to the engine and
maintenance."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncCallbackAuditSink,
    AsyncEngine,
    AuditAction,
    AuditEvent,
    Enqueue,
    JobState,
    Settings,
    ValidationError,
)
from skiplock._compat_async import skip_sync
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.core import ClaimRequest
from tests import audit_trail_async as scenarios

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> AsyncInMemoryJobStore:
    return AsyncInMemoryJobStore(clock=clock)


# ---- the scenarios every store runs -------------------------------------------------------


async def test_audit_is_off_by_default(store: AsyncInMemoryJobStore) -> None:
    await scenarios.audit_is_off_by_default(store)


async def test_worker_and_admin_changes_are_audited(store: AsyncInMemoryJobStore) -> None:
    await scenarios.worker_and_admin_changes_are_audited(store)


async def test_a_rolled_back_enqueue_leaves_no_event(store: AsyncInMemoryJobStore) -> None:
    await scenarios.a_rolled_back_enqueue_leaves_no_event(store)


async def test_a_callback_gets_the_events_instead_of_the_table(
    store: AsyncInMemoryJobStore,
) -> None:
    await scenarios.a_callback_gets_the_events_instead_of_the_table(store)


async def test_a_raising_callback_keeps_the_workers_outcomes(
    store: AsyncInMemoryJobStore, caplog: pytest.LogCaptureFixture
) -> None:
    await scenarios.a_raising_callback_keeps_the_workers_outcomes(store, caplog)


# ---- the engine's own rules ------------------------------------------------------------


@pytest.mark.parametrize("actor", ["", "  ", "a\nb", "x" * 256, 42, b"bytes"])
async def test_a_bad_actor_is_refused_before_anything_changes(
    store: AsyncInMemoryJobStore, actor: Any
) -> None:
    for settings in (Settings(), Settings(audit=True)):
        engine = AsyncEngine(store, settings)
        engine.declare_kind("audit.k")
        job_id = (await engine.enqueue("audit.k", {})).id
        with pytest.raises(ValidationError, match="actor"):
            await engine.operator(actor).cancel_job(job_id)
        with pytest.raises(ValidationError, match="actor"):
            await engine.operator(actor).delete_job(job_id)
        with pytest.raises(ValidationError, match="actor"):
            await engine.operator(actor).retry_dead()
        assert (await engine.get_job(job_id)).state is JobState.PENDING
    with pytest.raises(ValidationError, match="audit_actor"):
        Settings(audit_actor=actor)


async def test_audit_trail_checks_the_job_id(store: AsyncInMemoryJobStore) -> None:
    engine = AsyncEngine(store, Settings(audit=True))
    with pytest.raises(ValidationError, match="job_id"):
        await engine.audit_trail("1")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="job_id"):
        await engine.audit_trail(2**63)
    assert await engine.audit_trail(12345) == []


async def test_audit_sink_must_be_a_sink_or_a_function(store: AsyncInMemoryJobStore) -> None:
    with pytest.raises(TypeError, match="audit_sink"):
        AsyncEngine(store, audit_sink=42)  # type: ignore[arg-type]
    sink = AsyncCallbackAuditSink(lambda events, connection: None)
    engine = AsyncEngine(store, audit_sink=sink)
    assert engine.audit is not None
    assert engine.audit.sink is sink
    assert engine.audit.actor is None
    with pytest.raises(TypeError, match="callable"):
        AsyncCallbackAuditSink(42)  # type: ignore[arg-type]


@skip_sync
async def test_an_async_engine_awaits_an_async_callback(store: AsyncInMemoryJobStore) -> None:
    seen: list[AuditEvent] = []

    async def record(events: Sequence[AuditEvent], connection: Any) -> None:
        seen.extend(events)

    engine = AsyncEngine(store, Settings(audit_actor="api"), audit_sink=record)
    engine.declare_kind("audit.k")
    job_id = (await engine.enqueue("audit.k", {})).id
    assert [(e.action, e.job_id, e.actor) for e in seen] == [(AuditAction.ENQUEUED, job_id, "api")]


async def test_maintenance_audits_stale_jobs_it_buries_and_purges_old_events(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    settings = Settings(audit=True, audit_actor="ops-cron", audit_retention=timedelta(days=1))
    engine = AsyncEngine(store, settings, clock=clock)
    engine.declare_kind("audit.k")
    stuck = (await engine.enqueue("audit.k", {}, max_attempts=1)).id
    [job] = await store.claim(ClaimRequest(worker_id="crashed", limit=1))
    assert job.id == stuck
    clock.advance(timedelta(hours=1))
    recovered, _ = await engine.maintain()
    assert recovered == [stuck]
    trail = await engine.audit_trail(stuck)
    assert [(e.action, e.actor) for e in trail] == [
        (AuditAction.ENQUEUED, "ops-cron"),
        (AuditAction.DLQ, "ops-cron"),
    ]
    assert trail[1].details == {
        "error": (await engine.get_job(stuck)).last_error,
        "attempts": 1,
    }
    # Retention: events older than Settings.audit_retention go, whatever their job's state.
    clock.advance(timedelta(hours=23, minutes=30))
    await engine.maintain()
    assert [e.action for e in await engine.audit_trail(stuck)] == [AuditAction.DLQ]
    clock.advance(timedelta(hours=1))
    await engine.maintain()
    assert await engine.audit_trail(stuck) == []
    assert (await engine.get_job(stuck)).state is JobState.DEAD


async def test_the_audit_trail_has_its_own_retention(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    # Jobs purged after a day; their events kept for ten, then purged without their jobs.
    settings = Settings(audit=True, retention=timedelta(days=1), audit_retention=timedelta(days=10))
    engine = AsyncEngine(store, settings, clock=clock)

    @engine.processor("audit.k")
    async def done(payload: object, ctx: object) -> None:
        pass

    finished = (await engine.enqueue("audit.k", {})).id
    assert await engine.worker().run_until_idle() == 1
    waiting = (await engine.enqueue("audit.k", {}, delay=timedelta(days=30))).id
    clock.advance(timedelta(days=2))
    _, purged = await engine.maintain()
    assert purged == 1
    assert [e.action for e in await engine.audit_trail(finished)] == [
        AuditAction.ENQUEUED,
        AuditAction.DONE,
    ]
    clock.advance(timedelta(days=9))
    await engine.maintain()
    assert await engine.audit_trail(finished) == []
    assert await engine.audit_trail(waiting) == []  # its job is still there
    assert (await engine.get_job(waiting)).state is JobState.PENDING


async def test_without_audit_retention_events_are_kept(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    settings = Settings(audit=True, retention=timedelta(days=1), audit_retention=None)
    engine = AsyncEngine(store, settings, clock=clock)
    engine.declare_kind("audit.k")
    job_id = (await engine.enqueue("audit.k", {})).id
    clock.advance(timedelta(days=3650))
    await engine.maintain()
    assert [e.action for e in await engine.audit_trail(job_id)] == [AuditAction.ENQUEUED]


async def test_configure_turns_the_audit_trail_on_for_what_comes_after(
    store: AsyncInMemoryJobStore,
) -> None:
    engine = AsyncEngine(store)
    engine.declare_kind("audit.k")
    before = (await engine.enqueue("audit.k", {})).id
    engine.configure(Settings(audit=True, audit_actor="api"))
    assert engine.audit is not None
    after = (await engine.enqueue("audit.k", {})).id
    assert await engine.audit_trail(before) == []
    assert [(e.action, e.actor) for e in await engine.audit_trail(after)] == [
        (AuditAction.ENQUEUED, "api")
    ]
    engine.configure(Settings())
    assert engine.audit is None


async def test_periodic_ticks_are_audited_as_enqueues(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = AsyncEngine(store, Settings(audit=True, audit_actor="scheduler"), clock=clock)
    engine.declare_kind("audit.tick")
    engine.periodic("audit.tick", every=timedelta(minutes=1))
    [first] = await engine.enqueue_due_ticks()
    assert await engine.enqueue_due_ticks() == []  # the same tick again: nothing created
    trail = await engine.audit_trail(first.job_id)
    assert [(e.action, e.kind, e.actor) for e in trail] == [
        (AuditAction.ENQUEUED, "audit.tick", "scheduler")
    ]


# ---- the operator handle ---------------------------------------------------------------


async def test_an_operator_is_named_for_every_change_it_makes(
    store: AsyncInMemoryJobStore,
) -> None:
    engine = AsyncEngine(store, Settings(audit=True, audit_actor="system"))
    engine.declare_kind("audit.k")
    alice = engine.operator("alice")
    assert alice.actor == "alice"
    assert engine.operator().actor == "system"
    job_id = (await alice.enqueue("audit.k", {})).id
    [other] = [r.id for r in await alice.enqueue_many([Enqueue("audit.k", {})])]
    await alice.cancel_job(job_id)
    await alice.retry_job(job_id)
    await alice.fail_job(job_id)
    assert await alice.retry_dead() == []
    await engine.operator("bob").delete_job(other)
    system = (await engine.enqueue("audit.k", {})).id  # the engine itself stays the system's
    assert [(e.action, e.actor) for e in await alice.audit_trail(job_id)] == [
        (AuditAction.ENQUEUED, "alice"),
        (AuditAction.CANCELLED, "alice"),
        (AuditAction.REPLAY, "alice"),
        (AuditAction.FAILED_MANUALLY, "alice"),
    ]
    assert [(e.action, e.actor) for e in await engine.audit_trail(other)] == [
        (AuditAction.ENQUEUED, "alice"),
        (AuditAction.DISCARD, "bob"),
    ]
    assert [(e.action, e.actor) for e in await engine.audit_trail(system)] == [
        (AuditAction.ENQUEUED, "system")
    ]


async def test_an_operator_reads_like_the_engine_and_checks_its_actor(
    store: AsyncInMemoryJobStore,
) -> None:
    engine = AsyncEngine(store)  # audit trail off: the actor is carried, nothing recorded
    engine.declare_kind("audit.k")
    operator = engine.operator("carol")
    job_id = (await operator.enqueue("audit.k", {"n": 1})).id
    assert (await operator.get_job(job_id)).payload == {"n": 1}
    assert [job.id for job in await operator.list_jobs()] == [job_id]
    assert (await operator.health()).healthy is not None
    assert await operator.audit_trail(job_id) == []
    assert repr(operator) == f"{type(operator).__name__}(actor='carol')"
    for bad in ("", "a\nb", "x" * 256):
        with pytest.raises(ValidationError, match="actor"):
            engine.operator(bad)


async def test_only_an_operator_names_an_actor(store: AsyncInMemoryJobStore) -> None:
    """The engine's admin calls take no ``actor=`` (issue 42): passing one is a
    TypeError and changes nothing; ``engine.operator(actor)`` is how one is named."""
    engine = AsyncEngine(store, Settings(audit=True, audit_actor="system"))
    engine.declare_kind("audit.k")
    job_id = (await engine.enqueue("audit.k", {})).id
    calls: list[tuple[Any, dict[str, Any]]] = [
        (engine.retry_job, {"job_id": job_id}),
        (engine.cancel_job, {"job_id": job_id}),
        (engine.fail_job, {"job_id": job_id}),
        (engine.delete_job, {"job_id": job_id}),
        (engine.retry_dead, {}),
        (engine.purge_dead, {}),
        (engine.act_on_jobs, {"action": "cancel", "ids": [job_id]}),
        (engine.act_as_confirmed, {"action": "cancel", "jobs": {job_id: "pending"}}),
        (engine.pause, {"kind": "audit.k"}),
        (engine.resume, {"kind": "audit.k"}),
        (engine.set_limit, {"kind": "audit.k", "rps": 1, "burst": 1}),
        (engine.clear_limit, {"kind": "audit.k"}),
    ]
    for method, arguments in calls:
        with pytest.raises(TypeError, match="actor"):
            await method(**arguments, actor="alice")
    assert (await engine.get_job(job_id)).state is JobState.PENDING
    assert (await engine.paused(), await engine.limits()) == ([], [])
    await engine.operator("alice").cancel_job(job_id)
    await engine.fail_job(job_id)
    assert [(e.action, e.actor) for e in await engine.audit_trail(job_id)] == [
        (AuditAction.ENQUEUED, "system"),
        (AuditAction.CANCELLED, "alice"),
        (AuditAction.FAILED_MANUALLY, "system"),
    ]
