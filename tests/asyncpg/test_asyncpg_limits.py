"""The asyncpg store: the pool's own statement timeout beside a block's (R22; the rest is
in the contract kit) and
maintenance once per period across two pools (J13)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from skiplock._compat_async import join, spawn
from skiplock.adapters.asyncpg import AsyncpgJobStore
from skiplock.core import ClaimRequest, EnqueueRequest, Event, JobFilter, WorkerInfo

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

_SLEEP = "SELECT pg_sleep(10)"


@pytest.fixture
async def one(apg_dsn: str) -> AsyncIterator[AsyncpgJobStore]:
    """A store with a single pooled connection (the next user gets the same one)."""
    store = AsyncpgJobStore(apg_dsn, min_size=1, max_size=1)
    yield store
    await store.close()


async def _setting(conn: Any) -> str:
    value: str = await conn.fetchval("SELECT current_setting('statement_timeout')")
    return value


async def _sleep_in_autocommit(store: AsyncpgJobStore, timeout: float) -> None:
    async with store.autocommit(statement_timeout=timeout) as conn:
        assert await _setting(conn) == f"{round(timeout * 1000)}ms"
        await conn.execute(_SLEEP)


async def test_autocommit_statement_timeout_cancels_and_is_restored(apg_dsn: str) -> None:
    async with AsyncpgJobStore(apg_dsn, max_size=1, statement_timeout=30) as store:
        with pytest.raises(asyncpg.exceptions.QueryCanceledError):
            await _sleep_in_autocommit(store, 0.2)
        async with store.autocommit() as conn:
            assert await _setting(conn) == "30s"
        async with store.autocommit(statement_timeout=2) as conn:
            await conn.execute("SELECT pg_sleep(0.05)")
        async with store.transaction() as tx:
            assert await _setting(tx) == "30s"


async def test_try_maintenance_one_winner_between_two_pools(apg_dsn: str) -> None:
    hour = timedelta(hours=1)
    async with AsyncpgJobStore(apg_dsn) as first, AsyncpgJobStore(apg_dsn) as second:
        tasks = [spawn(s.try_maintenance, "apg.m", hour) for s in (first, second) * 4]
        assert sorted([await join(task) for task in tasks]) == [False] * 7 + [True]
        assert await first.try_maintenance("apg.m", timedelta(0))


async def test_heartbeat_reports_a_cancelled_job(one: AsyncpgJobStore) -> None:
    await one.register_worker(WorkerInfo(id="w1", host="h", pid=1))
    await one.enqueue([EnqueueRequest(kind="apg.hb")])
    [job] = await one.claim(ClaimRequest(worker_id="w1", limit=1))
    assert job.claims == 1
    assert await one.heartbeat("w1", [job.id]) == []
    await one.apply(JobFilter(ids=frozenset({job.id})), Event.CANCEL)
    assert await one.heartbeat("w1", [job.id]) == [job.id]
    assert await one.heartbeat("nobody", [job.id]) is None
