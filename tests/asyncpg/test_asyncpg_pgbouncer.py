"""``pgbouncer=True``: what transaction pooling needs (no statement cache, no session
state, no LISTEN), checked against PostgreSQL directly."""

from __future__ import annotations

from typing import Any

import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings
from skiplock.adapters._pg import queries
from skiplock.adapters.asyncpg import AsyncpgJobStore
from skiplock.core import ClaimRequest, Completion, EnqueueRequest, Succeeded, ValidationError

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def _named_statements(store: AsyncpgJobStore) -> int:
    # One pooled connection: this is the connection every operation above used.
    async with store.autocommit() as conn:
        count: int = await conn.fetchval("SELECT count(*) FROM pg_prepared_statements")
    return count


async def _enqueue_claim_complete(store: AsyncpgJobStore) -> None:
    [result] = await store.enqueue([EnqueueRequest(kind="bouncer", idempotency_key="k")])
    [job] = await store.claim(ClaimRequest(worker_id="w", limit=5, cluster_limits={"bouncer": 1}))
    assert job.id == result.id
    assert await store.complete([Completion(lease=job.lease, outcome=Succeeded())]) == [True]


async def test_pgbouncer_mode_runs_without_prepared_statement_cache(apg_dsn: str, db: Any) -> None:
    store = AsyncpgJobStore(apg_dsn, pgbouncer=True, min_size=1, max_size=1)
    try:
        assert store.pgbouncer
        await _enqueue_claim_complete(store)
        assert await _named_statements(store) == 0
        assert await db.fetch("SELECT status FROM skiplock.jobs") == [("succeeded",)]
    finally:
        await store.close()


async def test_default_mode_caches_prepared_statements(apg_dsn: str) -> None:
    # The control for the test above: the count is a real signal.
    store = AsyncpgJobStore(apg_dsn, min_size=1, max_size=1)
    try:
        await _enqueue_claim_complete(store)
        assert await _named_statements(store) > 0
    finally:
        await store.close()


async def test_pgbouncer_mode_has_no_notifier_and_a_worker_polls(apg_dsn: str, db: Any) -> None:
    store = AsyncpgJobStore(apg_dsn, pgbouncer=True)
    try:
        assert store.notifier() is None
        engine = AsyncEngine(store, Settings(poll_interval=0.05))
        seen: list[Any] = []

        @engine.processor("bouncer.tx", transactional=True)
        async def tx(payload: Any, ctx: JobContext) -> None:
            await ctx.connection.execute("INSERT INTO public.effects VALUES ($1, 'b')", ctx.job_id)
            seen.append(payload)

        result = await engine.enqueue("bouncer.tx", {"n": 1})
        assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
        assert seen == [{"n": 1}]
        job = await store.get(result.id)
        assert job is not None
        assert job.state is JobState.SUCCEEDED
        assert await db.fetch("SELECT job_id FROM public.effects") == [(result.id,)]
    finally:
        await store.close()


async def test_pgbouncer_mode_refuses_a_per_connection_statement_timeout(apg_dsn: str) -> None:
    with pytest.raises(ValidationError, match="ALTER ROLE"):
        AsyncpgJobStore(apg_dsn, pgbouncer=True, statement_timeout=5)


def test_shared_queries_take_only_transaction_level_advisory_locks() -> None:
    # Session-level locks would stay on whichever server connection PgBouncer picked.
    texts = " ".join(q.text for q in queries("skiplock", "numeric").values())
    assert "pg_advisory_xact_lock" in texts
    assert "pg_try_advisory_xact_lock" in texts
    for session_level in ("pg_advisory_lock(", "pg_try_advisory_lock(", "pg_advisory_unlock"):
        assert session_level not in texts
