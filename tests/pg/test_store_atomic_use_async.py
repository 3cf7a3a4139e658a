"""The caller's autocommit connection: atomic operations open a short transaction of
their own (the same rule on every driver; see ``AsyncPgJobStoreBase._use``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from psycopg.pq import TransactionStatus

from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.core import EnqueueRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from psycopg import AsyncConnection

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def _status(conn: AsyncConnection[Any]) -> TransactionStatus:
    # A call, not an attribute: the status changes between reads (for the type checker).
    return conn.info.transaction_status


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[AsyncPsycopgJobStore]:
    store = AsyncPsycopgJobStore(pg_dsn, max_size=4)
    yield store
    await store.close()


async def test_atomic_use_of_an_autocommit_connection_opens_a_transaction(
    store: AsyncPsycopgJobStore,
) -> None:
    async with store.autocommit() as conn:
        async with store._use(conn, atomic=True) as used:
            assert used is conn
            assert _status(conn) == TransactionStatus.INTRANS
        assert _status(conn) == TransactionStatus.IDLE
        async with store._use(conn) as used:
            assert _status(conn) == TransactionStatus.IDLE


async def test_atomic_use_keeps_the_callers_transaction(store: AsyncPsycopgJobStore) -> None:
    async with store.transaction() as conn:
        async with store._use(conn, atomic=True):
            pass
        # Still the caller's transaction: nothing was committed or closed here (R0).
        assert _status(conn) == TransactionStatus.INTRANS


async def test_keyed_enqueue_many_on_an_autocommit_connection(
    store: AsyncPsycopgJobStore,
) -> None:
    requests = [
        EnqueueRequest(kind="atomic.job", payload={"n": n}, idempotency_key=f"k{n}")
        for n in range(3)
    ]
    async with store.autocommit() as conn:
        first = await store.enqueue(requests, connection=conn)
        again = await store.enqueue(requests, connection=conn)
        assert _status(conn) == TransactionStatus.IDLE
    assert [r.created for r in first] == [True, True, True]
    assert [r.id for r in again] == [r.id for r in first]
    assert not any(r.created for r in again)
