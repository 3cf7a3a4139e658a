"""LISTEN/NOTIFY on a real server (R11): trigger, channel, reconnects."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import psycopg
import pytest

from skiplock.adapters.psycopg import AsyncPsycopgJobStore, AsyncPsycopgNotifier, apply_schema
from skiplock.core import EnqueueRequest
from tests.pgfixtures import store_fixture
from tests.pghelpers import sql

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


store = store_fixture(AsyncPsycopgJobStore, max_size=4)


@pytest.fixture
async def notifier(store: AsyncPsycopgJobStore) -> AsyncIterator[AsyncPsycopgNotifier]:
    notifier = store.notifier()
    assert notifier is not None
    await notifier.start()
    yield notifier
    await notifier.close()


async def test_plain_sql_insert_wakes_the_notifier_within_a_second(
    notifier: AsyncPsycopgNotifier, pg_dsn: str
) -> None:
    assert not await notifier.wait(0.05)
    started = time.monotonic()
    sql(pg_dsn, "INSERT INTO skiplock.jobs (kind) VALUES ('sql.inserted')")
    assert await notifier.wait(1.0)
    assert time.monotonic() - started < 1.0


async def test_trigger_notifies_once_per_kind_with_the_kind_as_payload(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute("LISTEN skiplock_jobs")
        with psycopg.connect(pg_dsn) as writer:
            writer.execute(
                "INSERT INTO skiplock.jobs (kind) SELECT k FROM unnest(%s::text[]) AS k",
                [["a", "b", "a", "a", "b"]],
            )
            writer.execute("INSERT INTO skiplock.jobs (kind) VALUES ('a')")
            writer.commit()
        received = [n.payload for n in listener.notifies(timeout=5.0, stop_after=2)]
        received += [n.payload for n in listener.notifies(timeout=0.2)]
    assert sorted(received) == ["a", "b"]


async def test_each_schema_has_its_own_channel(notifier: AsyncPsycopgNotifier, pg_dsn: str) -> None:
    apply_schema(pg_dsn, schema="notify_other")
    other = AsyncPsycopgJobStore(pg_dsn, schema="notify_other")
    try:
        await other.enqueue([EnqueueRequest(kind="elsewhere")])
        assert not await notifier.wait(0.3)
        assert other.channel == "notify_other_jobs"
    finally:
        await other.close()


async def test_listener_reconnects_after_its_backend_is_terminated(
    notifier: AsyncPsycopgNotifier, pg_dsn: str
) -> None:
    pid = notifier.backend_pid
    assert pid is not None
    assert sql(pg_dsn, "SELECT pg_terminate_backend(%s)", pid) == [(True,)]
    # The loss is noticed, the listener reconnects and reports one catch-up wakeup.
    assert await notifier.wait(5.0)
    assert notifier.connected
    assert notifier.backend_pid not in (None, pid)
    sql(pg_dsn, "INSERT INTO skiplock.jobs (kind) VALUES ('after.reconnect')")
    assert await notifier.wait(1.0)


async def test_unreachable_server_makes_wait_time_out_quietly() -> None:
    notifier = AsyncPsycopgNotifier(
        "postgresql://postgres@127.0.0.1:1/nowhere", channel="skiplock_jobs", backoff_base=0.05
    )
    await notifier.start()  # does not raise: the worker keeps polling meanwhile
    started = time.monotonic()
    assert not await notifier.wait(0.3)
    assert not await notifier.wait(0.3)
    assert time.monotonic() - started < 3.0
    assert not notifier.connected
    await notifier.close()
