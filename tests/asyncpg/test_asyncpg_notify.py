"""LISTEN/NOTIFY through asyncpg (R11): wakeups, a worker woken without polling, reconnects."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from skiplock import AsyncEngine, JobState, Settings
from skiplock._compat_async import join, sleep, spawn
from skiplock.adapters.asyncpg import AsyncpgJobStore, AsyncpgNotifier
from skiplock.adapters.asyncpg._driver import Connector
from skiplock.core import EnqueueRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
async def notifier(store: AsyncpgJobStore) -> AsyncIterator[AsyncpgNotifier]:
    notifier = store.notifier()
    assert notifier is not None
    await notifier.start()
    yield notifier
    await notifier.close()


async def _until(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await sleep(0.005)


async def _drain(notifier: AsyncpgNotifier) -> int:
    """Wakeups until the notifier stays quiet for a moment."""
    wakeups = 0
    while await notifier.wait(0.3):
        wakeups += 1
    return wakeups


async def test_plain_sql_insert_wakes_the_notifier_within_a_second(
    notifier: AsyncpgNotifier, db: Any
) -> None:
    assert notifier.connected
    assert notifier.channel == "skiplock_jobs"
    assert not await notifier.wait(0.05)
    started = time.monotonic()
    await db.execute("INSERT INTO skiplock.jobs (kind) VALUES ('sql.inserted')")
    assert await notifier.wait(1.0)
    assert time.monotonic() - started < 1.0


async def test_worker_with_a_long_poll_interval_is_woken_by_plain_sql(
    store: AsyncpgJobStore, db: Any
) -> None:
    engine = AsyncEngine(store, Settings(poll_interval=60.0, shutdown_timeout=5.0))
    done: list[str] = []

    @engine.processor("apg.wake")
    async def wake(payload: str) -> None:
        done.append(payload)

    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    try:
        await db.execute("INSERT INTO skiplock.jobs (kind, payload) VALUES ('apg.wake', '\"a\"')")

        await _until(lambda: len(done) == 1, timeout=10.0)  # up, now waiting (60 s poll)
        started = time.monotonic()
        await db.execute("INSERT INTO skiplock.jobs (kind, payload) VALUES ('apg.wake', '\"b\"')")
        await _until(lambda: len(done) == 2, timeout=1.0)
        assert time.monotonic() - started < 1.0
    finally:
        worker.stop()
        await join(task)
    assert done == ["a", "b"]
    assert await db.fetch("SELECT DISTINCT status FROM skiplock.jobs") == [
        (JobState.SUCCEEDED.value,)
    ]


async def test_listener_reconnects_after_its_backend_is_terminated(
    notifier: AsyncpgNotifier, db: Any
) -> None:
    pid = notifier.backend_pid
    assert pid is not None
    assert await db.fetchval("SELECT pg_terminate_backend($1)", pid)
    # The loss is noticed, the listener reconnects and reports one catch-up wakeup.
    assert await notifier.wait(5.0)
    assert notifier.connected
    assert notifier.backend_pid not in (None, pid)
    await _drain(notifier)
    started = time.monotonic()
    await db.execute("INSERT INTO skiplock.jobs (kind) VALUES ('after.reconnect')")
    assert await notifier.wait(1.0)
    assert time.monotonic() - started < 1.0


async def test_unreachable_server_makes_wait_time_out_quietly() -> None:
    connector = Connector(
        dsn="postgresql://postgres@127.0.0.1:1/nowhere", pool=None, connect_kwargs={"timeout": 1}
    )
    notifier = AsyncpgNotifier(connector, channel="skiplock_jobs", backoff_base=0.05)
    await notifier.start()  # does not raise: the worker keeps polling meanwhile
    started = time.monotonic()
    assert not await notifier.wait(0.3)
    assert not await notifier.wait(0.3)
    assert time.monotonic() - started < 3.0
    assert not notifier.connected
    await notifier.close()


async def test_notifier_of_a_store_on_a_caller_pool_borrows_and_returns_a_connection(
    apg_dsn: str,
) -> None:
    pool = await asyncpg.create_pool(apg_dsn, min_size=1, max_size=2)
    try:
        store = AsyncpgJobStore(pool)
        notifier = store.notifier()
        assert notifier is not None
        await notifier.start()
        assert pool.get_idle_size() < pool.get_size()
        await store.enqueue([EnqueueRequest(kind="pooled")])
        assert await notifier.wait(5.0)
        await notifier.close()
        await store.close()
        assert pool.get_idle_size() == pool.get_size()
        # The pool's reset removed the LISTEN: the returned connection hears nothing.
        async with pool.acquire() as first, pool.acquire() as second:
            for conn in (first, second):
                rows: list[Any] = await conn.fetch("SELECT pg_listening_channels()")
                assert rows == []
    finally:
        await pool.close()
