"""The SQLAlchemy store: statement timeouts of transaction() and autocommit() (R22).

The async store runs on asyncpg and psycopg; the generated sync twin on psycopg.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from skiplock.adapters.sqlalchemy import AsyncSessionJobStore
from skiplock.core import ClaimRequest, EnqueueRequest, Event, JobFilter, WorkerInfo

if True:  # ASYNC
    from sqlalchemy.ext.asyncio import create_async_engine as create_engine

    DRIVERS = ["asyncpg", "psycopg"]
else:
    from sqlalchemy import create_engine

    DRIVERS = ["psycopg"]

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sqlalchemy.engine import URL

    from skiplock.adapters.sqlalchemy._classes import AsyncEngine

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

_SLEEP = sa.text("SELECT pg_sleep(10)")
_SETTING = sa.text("SELECT current_setting('statement_timeout')")


@pytest.fixture(params=DRIVERS)
async def engine(sa_url: URL, request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    # One pooled connection: the next user gets the very connection a test used.
    engine = create_engine(
        sa_url.set(drivername=f"postgresql+{request.param}"), pool_size=1, max_overflow=0
    )
    yield engine
    await engine.dispose()


@pytest.fixture
async def store(engine: AsyncEngine) -> AsyncIterator[AsyncSessionJobStore]:
    store = AsyncSessionJobStore(engine)
    yield store
    await store.close()


def _is_cancel(exc: BaseException) -> bool:
    return "statement timeout" in str(exc)


async def _sleep_in_transaction(store: AsyncSessionJobStore, timeout: float) -> None:
    async with store.transaction(statement_timeout=timeout) as session:
        assert await session.scalar(_SETTING) == f"{round(timeout * 1000)}ms"
        await session.execute(_SLEEP)


async def _sleep_in_autocommit(store: AsyncSessionJobStore, timeout: float) -> None:
    async with store.autocommit(statement_timeout=timeout) as conn:
        assert await conn.scalar(_SETTING) == f"{round(timeout * 1000)}ms"
        await conn.execute(_SLEEP)


async def test_transaction_statement_timeout_cancels_and_ends_with_it(
    store: AsyncSessionJobStore,
) -> None:
    async with store.autocommit() as conn:
        default: Any = await conn.scalar(_SETTING)
    started = time.monotonic()
    with pytest.raises(DBAPIError) as raised:
        await _sleep_in_transaction(store, 0.2)
    assert _is_cancel(raised.value)
    assert time.monotonic() - started < 5
    async with store.transaction() as session:
        assert await session.scalar(_SETTING) == default


async def test_autocommit_statement_timeout_cancels_and_is_restored(
    store: AsyncSessionJobStore,
) -> None:
    async with store.autocommit() as conn:
        default: Any = await conn.scalar(_SETTING)
    with pytest.raises(DBAPIError) as raised:
        await _sleep_in_autocommit(store, 0.2)
    assert _is_cancel(raised.value)
    async with store.autocommit() as conn:
        assert await conn.scalar(_SETTING) == default
    async with store.transaction() as session:
        assert await session.scalar(_SETTING) == default


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
