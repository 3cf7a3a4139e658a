"""The psycopg store against the contract kit, on a scratch PostgreSQL database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.testing import Capabilities
from skiplock.testing.contract import AsyncJobStoreContract
from tests.contract.pgfaults import PgFaults

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.postgres


class TestAsyncPsycopgJobStore(PgFaults, AsyncJobStoreContract):
    capabilities = Capabilities(listen_notify=True, controllable_clock=False)

    @pytest.fixture
    async def store(self, pg_dsn: str) -> AsyncIterator[AsyncPsycopgJobStore]:
        store = AsyncPsycopgJobStore(pg_dsn, max_size=12)
        yield store
        await store.close()

    async def fetch_value(self, handle: Any, query: str) -> object:
        cur = await handle.execute(query)
        row = await cur.fetchone()
        assert row is not None
        return row[0]
