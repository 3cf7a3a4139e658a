"""Why is this job waiting? (issue 45) on every store: for each obstacle, ``why()`` and a
worker's claim agree. With the obstacle in place ``why()`` names it and a worker claims
nothing; with it lifted ``why()`` says ``ready`` and a worker runs the job.

A store whose driver extra is not installed is skipped; a PostgreSQL store fails when
the server is unreachable (``pg_dsn``)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock import JobState, Settings
from skiplock.core import ClaimRequest, WorkerInfo
from skiplock.engine import AsyncReader
from tests.contract.pgstores_async import PG_STORES, close_store, open_store

if True:  # ASYNC
    from skiplock import AsyncEngine as Engine
else:
    from skiplock import Engine

STORES = ["memory", *PG_STORES]

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.anyio

_PG = pytest.mark.postgres


@pytest.fixture(params=[s if s == "memory" else pytest.param(s, marks=_PG) for s in STORES])
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[Engine]:
    """An engine on a fresh store with a processor for ``mail`` and one live worker row
    (so no job waits for want of a worker)."""
    if request.param == "memory":
        if True:  # ASYNC
            from skiplock.adapters.memory import AsyncInMemoryJobStore as MemoryStore
        else:
            from skiplock.adapters.memory import InMemoryJobStore as MemoryStore
        store, sa_engine = MemoryStore(), None
    else:
        store, sa_engine = open_store(request, request.param)
    engine = Engine(store, Settings())
    engine.processor("mail")(lambda payload: None)
    await store.register_worker(WorkerInfo(id="w1", host="h", pid=1))
    yield engine
    await close_store(store, sa_engine)


async def _blocked(engine: Engine, job_id: int, code: str) -> None:
    """``why()`` names ``code`` alone and a worker's claim leaves the job pending."""
    assert (await engine.why(job_id)).codes == [code]
    assert await engine.worker().run_until_idle() == 0
    assert (await engine.get_job(job_id)).state is JobState.PENDING


async def _free(engine: Engine, job_id: int) -> None:
    """``why()`` says ``ready`` and a worker's claim takes and runs the job."""
    assert (await engine.why(job_id)).codes == ["ready"]
    assert await engine.worker().run_until_idle() == 1
    assert (await engine.get_job(job_id)).state is JobState.SUCCEEDED


async def test_due_later(engine: Engine) -> None:
    later = await engine.enqueue("mail", {}, delay=timedelta(hours=1))
    await _blocked(engine, later.id, "due_later")
    now = await engine.enqueue("mail", {})
    await _free(engine, now.id)
    assert (await engine.why(later.id)).codes == ["due_later"]


@pytest.mark.parametrize(("kind", "tenant"), [("mail", None), (None, "acme")])
async def test_paused(engine: Engine, kind: str | None, tenant: str | None) -> None:
    job = await engine.enqueue("mail", {}, tenant="acme")
    await engine.operator("alice").pause(kind=kind, tenant=tenant)
    await _blocked(engine, job.id, "paused")
    await engine.operator("alice").resume(kind=kind, tenant=tenant)
    await _free(engine, job.id)


async def test_kind_at_its_cluster_limit(engine: Engine) -> None:
    holder, job = await engine.enqueue("mail", {}), await engine.enqueue("mail", {})
    await engine.set_concurrency(kind="mail", limit=1, scope="cluster")
    [held] = await engine.store.claim(ClaimRequest(worker_id="w1", limit=1))
    assert held.id == holder.id
    await _blocked(engine, job.id, "concurrency_full")
    await engine.set_concurrency(kind="mail", limit=2, scope="cluster")
    await _free(engine, job.id)


async def test_concurrency_key_full(engine: Engine) -> None:
    holder = await engine.enqueue("mail", {}, concurrency_key="db", concurrency_limit=1)
    job = await engine.enqueue("mail", {}, concurrency_key="db", concurrency_limit=1)
    [held] = await engine.store.claim(ClaimRequest(worker_id="w1", limit=1))
    assert held.id == holder.id
    await _blocked(engine, job.id, "concurrency_full")
    await engine.set_concurrency(key="db", limit=2)
    await _free(engine, job.id)


async def test_rate_limit_used_up(engine: Engine) -> None:
    first, job = await engine.enqueue("mail", {}), await engine.enqueue("mail", {})
    await engine.set_limit(kind="mail", rps=0.001, burst=1)
    assert await engine.worker().run_until_idle() == 1  # the one token goes to the first
    assert (await engine.get_job(first.id)).state is JobState.SUCCEEDED
    await _blocked(engine, job.id, "rate_limited")


async def test_rate_limit_cleared(engine: Engine) -> None:
    _, job = await engine.enqueue("mail", {}), await engine.enqueue("mail", {})
    await engine.set_limit(kind="mail", rps=0.001, burst=1)
    assert await engine.worker().run_until_idle() == 1
    await engine.clear_limit(kind="mail")
    # The bucket counted under the cleared limit goes with it: nothing is left to read.
    assert not (await engine.store.health_snapshot()).buckets
    await _free(engine, job.id)


async def test_rate_limit_changed(engine: Engine) -> None:
    _, job = await engine.enqueue("mail", {}), await engine.enqueue("mail", {})
    await engine.set_limit(kind="mail", rps=0.001, burst=1)
    assert await engine.worker().run_until_idle() == 1
    # A new limit starts a full bucket for the claim; why() reads the old one as stale.
    await engine.set_limit(kind="mail", rps=0.001, burst=2)
    await _free(engine, job.id)


async def test_declared_rate_after_clear(engine: Engine) -> None:
    """A rate the workers' code declares draws from a bucket of its own after an
    operator's limit is cleared, and why() reports it, also to a reader without the
    code (only the store's bucket tells it of the rate)."""
    engine.processor("sms", rate_limit=(0.001, 1))(lambda payload: None)
    jobs = [await engine.enqueue("sms", {}) for _ in range(3)]
    await engine.set_limit(kind="sms", rps=0.001, burst=2)
    assert await engine.worker().run_until_idle() == 2
    await engine.clear_limit(kind="sms")
    await _free(engine, jobs[2].id)  # the code's rate: a full bucket of burst 1
    job = await engine.enqueue("sms", {})
    await _blocked(engine, job.id, "rate_limited")
    assert (await AsyncReader(engine.store, Settings()).why(job.id)).codes == ["rate_limited"]


async def test_kind_limit_cleared_keeps_a_tenants_own(engine: Engine) -> None:
    """Clearing a kind's default drops its tenants' buckets but the bucket of a tenant
    with a limit of its own (the same rate) stays and holds that tenant back."""
    await engine.set_limit(kind="mail", rps=0.001, burst=1)
    await engine.set_limit(kind="mail", tenant="acme", rps=0.001, burst=1)
    for tenant in (None, "acme"):
        await engine.enqueue("mail", {}, tenant=tenant)
    assert await engine.worker().run_until_idle() == 2
    other, own = await engine.enqueue("mail", {}), await engine.enqueue("mail", {}, tenant="acme")
    await engine.clear_limit(kind="mail")
    await _free(engine, other.id)
    await _blocked(engine, own.id, "rate_limited")


@pytest.mark.parametrize("clear", [True, False])
async def test_provider_cap_lifted(engine: Engine, clear: bool) -> None:
    """A provider's used-up cap, then cleared (its bucket goes) or changed (the old
    bucket is stale): why() and the claim agree the job is free."""
    engine.processor("sms", provider="smtp")(lambda payload: None)
    _, job = await engine.enqueue("sms", {}), await engine.enqueue("sms", {})
    await engine.set_limit(provider="smtp", rps=0.001, burst=1)
    assert await engine.worker().run_until_idle() == 1
    await _blocked(engine, job.id, "rate_limited")
    if clear:
        await engine.clear_limit(provider="smtp")
        assert not (await engine.store.health_snapshot()).buckets
    else:
        await engine.set_limit(provider="smtp", rps=0.001, burst=2)
    await _free(engine, job.id)
