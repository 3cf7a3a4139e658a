"""The caller's autocommit connection: atomic operations open a short transaction of
their own (the same rule on every driver; see ``AsyncPgJobStoreBase._use``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from skiplock.adapters.asyncpg import AsyncpgJobStore

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def test_atomic_use_of_an_autocommit_connection_opens_a_transaction(
    store: AsyncpgJobStore,
) -> None:
    async with store.autocommit() as conn:
        async with store._use(conn, atomic=True) as used:
            assert used is conn
            assert conn.is_in_transaction()
        assert not conn.is_in_transaction()


async def test_atomic_use_keeps_the_callers_transaction(store: AsyncpgJobStore) -> None:
    async with store.transaction() as conn:
        async with store._use(conn, atomic=True):
            pass
        assert conn.is_in_transaction()
