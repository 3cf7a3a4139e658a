"""The SQLAlchemy store: heartbeats and maintenance once per period (J13).

Statement timeouts are contract tests (``skiplock.testing.contract``).

The async store runs on asyncpg and psycopg; the generated sync twin on psycopg.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock.adapters.sqlalchemy import AsyncSessionJobStore
from skiplock.core import ClaimRequest, EnqueueRequest, Event, JobFilter, WorkerInfo

if True:  # ASYNC
    from sqlalchemy.ext.asyncio import create_async_engine as create_engine

    DRIVERS = ["asyncpg", "psycopg"]
else:
    from sqlalchemy import create_engine

    DRIVERS = ["psycopg"]

if TYPE_CHECKING:
    from sqlalchemy.engine import URL


pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def test_heartbeat_and_maintenance(sa_url: URL) -> None:
    # Heartbeats hold a connection of their own: a pool larger than one.
    engine = create_engine(sa_url.set(drivername=f"postgresql+{DRIVERS[-1]}"))
    try:
        async with AsyncSessionJobStore(engine) as store:
            await _heartbeat_and_maintenance(store)
    finally:
        await engine.dispose()


async def _heartbeat_and_maintenance(store: AsyncSessionJobStore) -> None:
    await store.register_worker(WorkerInfo(id="w1", host="h", pid=1))
    await store.enqueue([EnqueueRequest(kind="sa.hb")])
    [job] = await store.claim(ClaimRequest(worker_id="w1", limit=1))
    assert await store.heartbeat("w1", [job.id]) == []
    await store.apply(JobFilter(ids=frozenset({job.id})), Event.CANCEL)
    assert await store.heartbeat("w1", [job.id, job.id]) == [job.id]
    assert await store.heartbeat("nobody") is None
    assert await store.try_maintenance("sa.m", timedelta(hours=1))
    assert not await store.try_maintenance("sa.m", timedelta(hours=1))
