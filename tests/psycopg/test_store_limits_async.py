"""The psycopg store on a real server: the pool's own statement timeout beside a block's
(R22; the rest is in the contract kit), maintenance once per period across nodes (J13),
heartbeats that report lost jobs, and the claim counter (fencing, archive)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from skiplock._compat_async import join, spawn
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.core import (
    ClaimRequest,
    Completion,
    EnqueueRequest,
    Event,
    JobFilter,
    Succeeded,
    WorkerInfo,
)
from tests.pgfixtures import store_fixture

if TYPE_CHECKING:
    from psycopg import AsyncConnection

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: Far longer than any timeout below: a statement that ends early was cancelled.
_SLEEP = "SELECT pg_sleep(10)"


# One connection: the next user of the pool gets the very connection a test used.
store = store_fixture(AsyncPsycopgJobStore, min_size=1, max_size=1)


async def _setting(conn: AsyncConnection[Any]) -> str:
    cur = await conn.execute("SELECT current_setting('statement_timeout')")
    row = await cur.fetchone()
    assert row is not None
    return str(row[0])


async def _sleep_in_autocommit(store: AsyncPsycopgJobStore, timeout: float) -> None:
    async with store.autocommit(statement_timeout=timeout) as conn:
        assert await _setting(conn) == f"{round(timeout * 1000)}ms"
        await conn.execute(_SLEEP)


# ---- statement_timeout (R22) ---------------------------------------------------------------


async def test_autocommit_restores_the_pool_statement_timeout(pg_dsn: str) -> None:
    # The store's own per-connection setting survives a block with another timeout.
    async with AsyncPsycopgJobStore(pg_dsn, max_size=1, statement_timeout=30) as store:
        async with store.autocommit() as conn:
            assert await _setting(conn) == "30s"
        with pytest.raises(psycopg.errors.QueryCanceled):
            await _sleep_in_autocommit(store, 0.1)
        async with store.autocommit() as conn:
            assert await _setting(conn) == "30s"
        async with store.transaction(statement_timeout=1) as tx:
            assert await _setting(tx) == "1s"
        async with store.transaction() as tx:
            assert await _setting(tx) == "30s"


# ---- maintenance once per period across nodes (J13) -----------------------------------------


async def test_try_maintenance_one_winner_between_two_nodes(pg_dsn: str) -> None:
    hour = timedelta(hours=1)
    async with (
        AsyncPsycopgJobStore(pg_dsn, max_size=4) as first,
        AsyncPsycopgJobStore(pg_dsn, max_size=4) as second,
    ):
        assert first.pool is not second.pool
        tasks = [spawn(s.try_maintenance, "pg.recover", hour) for s in (first, second) * 4]
        results = [await join(task) for task in tasks]
        assert sorted(results) == [False] * 7 + [True]
        assert not await second.try_maintenance("pg.recover", hour)
        assert await second.try_maintenance("pg.purge", hour)  # names are independent
        assert not await first.try_maintenance("pg.purge", hour)
        # Once the period has passed (moved back on the database clock): one winner again.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE skiplock.maintenance SET last_run_at = now() - interval '61 minutes'"
                " WHERE name = 'pg.recover'"
            )
        tasks = [spawn(s.try_maintenance, "pg.recover", hour) for s in (first, second) * 4]
        assert sorted([await join(task) for task in tasks]) == [False] * 7 + [True]
        assert await first.try_maintenance("pg.recover", timedelta(0))
        assert await second.try_maintenance("pg.recover", timedelta(0))


# ---- heartbeats and recovery ------------------------------------------------------------------


async def test_heartbeat_reports_a_cancelled_job(store: AsyncPsycopgJobStore) -> None:
    await store.register_worker(WorkerInfo(id="w1", host="h", pid=1))
    await store.enqueue([EnqueueRequest(kind="pg.hb"), EnqueueRequest(kind="pg.hb")])
    kept, cancelled = await store.claim(ClaimRequest(worker_id="w1", limit=2))
    assert await store.heartbeat("w1", [kept.id, cancelled.id]) == []
    assert await store.apply(JobFilter(ids=frozenset({cancelled.id})), Event.CANCEL) == [
        cancelled.id
    ]
    assert await store.heartbeat("w1", [cancelled.id, kept.id, cancelled.id]) == [cancelled.id]
    assert await store.complete([Completion(cancelled.lease, Succeeded())]) == [False]
    await store.unregister_worker("w1")
    assert await store.heartbeat("w1", [kept.id]) is None


async def test_recover_stale_deletes_silent_worker_rows(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    for worker_id in ("silent", "fresh"):
        await store.register_worker(WorkerInfo(id=worker_id, host="h", pid=1))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE skiplock.workers SET heartbeat_at = now() - interval '3 hours'"
            " WHERE id = 'silent'"
        )
    hour = timedelta(hours=1)
    await store.recover_stale(default_ttl=hour, ttls={"pg.slow": 4 * hour})
    assert await store.heartbeat("silent") == []  # younger than the longest TTL
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE skiplock.workers SET heartbeat_at = now() - interval '3 hours'"
            " WHERE id = 'silent'"
        )
    await store.recover_stale(default_ttl=hour, ttls={"pg.fast": hour / 2})
    assert await store.heartbeat("silent") is None
    assert await store.heartbeat("fresh") == []


async def test_purge_archives_the_claim_count(store: AsyncPsycopgJobStore, pg_dsn: str) -> None:
    [result] = await store.enqueue([EnqueueRequest(kind="pg.arch")])
    [job] = await store.claim(ClaimRequest(worker_id="w1", limit=1))
    assert job.claims == 1
    assert await store.complete([Completion(job.lease, Succeeded())]) == [True]
    assert await store.purge(older_than=timedelta(0), archive=True, batch_size=10) == 1
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, claims FROM skiplock.jobs_archive WHERE id = %s", [result.id]
        ).fetchall()
    assert rows == [(result.id, 1)]
