"""Idempotency keys through the engine on the in-memory store (async source; twin
generated): where the scope and conflict policy come from (settings, the kind's policy,
the call), and keys remembered by maintenance after retention purged their job."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, AuditAction, Enqueue, Settings, ValidationError
from skiplock.adapters.memory import AsyncInMemoryJobStore

if TYPE_CHECKING:
    from skiplock import JobContext
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> AsyncInMemoryJobStore:
    return AsyncInMemoryJobStore(clock=clock)


def _engine(store: AsyncInMemoryJobStore, clock: FakeClock, **settings: Any) -> AsyncEngine:
    engine = AsyncEngine(store, Settings(**settings), clock=clock)

    @engine.processor(
        "order.sync", idempotency_scope="tenant", idempotency_conflict="replace_pending"
    )
    async def sync(payload: Any, ctx: JobContext) -> None: ...

    @engine.processor("email.send")
    async def send(payload: Any, ctx: JobContext) -> None: ...

    return engine


async def test_the_kinds_policy_scopes_keys_and_replaces_pending_jobs(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    a = await engine.enqueue("order.sync", 1, tenant="acme", idempotency_key="order-7")
    b = await engine.enqueue("order.sync", 1, tenant="globex", idempotency_key="order-7")
    assert a.created
    assert b.created
    again = await engine.enqueue("order.sync", 2, tenant="acme", idempotency_key="order-7")
    assert (again.id, again.created, again.replaced) == (a.id, False, True)
    assert (await engine.get_job(a.id)).payload == 2
    assert (await engine.get_job(b.id)).payload == 1
    # Another kind keeps the defaults: one global key, an existing job left as it is.
    c = await engine.enqueue("email.send", 1, tenant="acme", idempotency_key="mail-1")
    d = await engine.enqueue("email.send", 2, tenant="globex", idempotency_key="mail-1")
    assert (d.id, d.created, d.replaced) == (c.id, False, False)
    assert (await engine.get_job(c.id)).payload == 1


async def test_the_calls_options_win_over_the_kinds_policy(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    first = await engine.enqueue("order.sync", 1, tenant="acme", idempotency_key="k")
    kept = await engine.enqueue(
        "order.sync", 2, tenant="acme", idempotency_key="k", idempotency_conflict="ignore"
    )
    assert (kept.id, kept.replaced) == (first.id, False)
    [glob, other] = await engine.enqueue_many(
        [
            Enqueue(
                "order.sync", 3, tenant="acme", idempotency_key="k", idempotency_scope="global"
            ),
            Enqueue("email.send", 4, tenant="globex", idempotency_key="k"),
        ]
    )
    assert glob.created  # the global scope is apart from acme's
    assert (other.id, other.created) == (glob.id, False)
    assert (await engine.get_job(first.id)).payload == 1


async def test_settings_give_the_default_for_every_kind(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock, idempotency_scope="tenant")
    a = await engine.enqueue("email.send", tenant="acme", idempotency_key="welcome")
    b = await engine.enqueue("email.send", tenant="globex", idempotency_key="welcome")
    assert a.created
    assert b.created
    assert engine.policy("email.send").idempotency_scope == "tenant"


async def test_bad_options_are_refused_before_anything_is_written(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    with pytest.raises(ValidationError, match="idempotency_scope"):
        await engine.enqueue("email.send", idempotency_key="x", idempotency_scope="world")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="idempotency_conflict"):
        await engine.enqueue_many(
            [Enqueue("email.send", idempotency_conflict="replace")]  # type: ignore[arg-type]
        )
    assert await engine.list_jobs() == []


async def test_a_replacement_is_audited_with_the_operators_actor(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock, audit=True)
    ops = engine.operator("ops@example.com")
    first = await ops.enqueue("order.sync", {"v": 1}, tenant="acme", idempotency_key="o")
    await ops.enqueue("order.sync", {"v": 2}, tenant="acme", idempotency_key="o")
    events = await engine.audit_trail(first.id)
    assert [(e.action, e.actor) for e in events] == [
        (AuditAction.ENQUEUED, "ops@example.com"),
        (AuditAction.REPLACED, "ops@example.com"),
    ]
    assert events[1].details == {"payload": {"v": 1}, "priority": 0}


async def test_maintenance_remembers_purged_keys_for_the_window(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(
        store, clock, retention=timedelta(days=1), idempotency_retention=timedelta(days=7)
    )
    done = await engine.enqueue("email.send", idempotency_key="invoice-1")
    assert await engine.worker().run_until_idle() == 1
    clock.advance(timedelta(days=2))
    assert (await engine.maintain())[1] == 1
    again = await engine.enqueue("email.send", idempotency_key="invoice-1")
    assert (again.id, again.created, again.purged) == (done.id, False, True)
    clock.advance(timedelta(days=8))
    await engine.maintain()  # the window is over: the key is forgotten
    fresh = await engine.enqueue("email.send", idempotency_key="invoice-1")
    assert fresh.created


async def test_without_a_window_a_purged_key_is_free_again(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock, retention=timedelta(days=1))
    await engine.enqueue("email.send", idempotency_key="invoice-2")
    assert await engine.worker().run_until_idle() == 1
    clock.advance(timedelta(days=2))
    await engine.maintain()
    assert (await engine.enqueue("email.send", idempotency_key="invoice-2")).created
