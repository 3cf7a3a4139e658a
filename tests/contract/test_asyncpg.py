"""The asyncpg store against the contract kit, on a scratch PostgreSQL database.

Only asyncpg is used here (tox's asyncpg env installs no psycopg).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock.adapters.asyncpg import AsyncpgJobStore
from skiplock.testing import Capabilities
from skiplock.testing.contract import AsyncJobStoreContract
from tests.contract.pgfaults import PgFaults

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.postgres


class _Sql(PgFaults):
    async def fetch_value(self, handle: Any, query: str) -> object:
        return await handle.fetchval(query)


class TestAsyncpgJobStore(_Sql, AsyncJobStoreContract):
    capabilities = Capabilities(listen_notify=True, controllable_clock=False)

    @pytest.fixture
    async def store(self, pg_dsn: str) -> AsyncIterator[AsyncpgJobStore]:
        store = AsyncpgJobStore(pg_dsn, max_size=12)
        yield store
        await store.close()


class TestAsyncpgJobStorePgBouncerMode(_Sql, AsyncJobStoreContract):
    """The same contract with ``pgbouncer=True``: no statement cache, no LISTEN, and
    ``autocommit(statement_timeout=...)`` validated but not applied (a session setting
    would outlive the block on a PgBouncer server connection)."""

    capabilities = Capabilities(
        listen_notify=False, controllable_clock=False, statement_timeouts=False
    )

    @pytest.fixture
    async def store(self, pg_dsn: str) -> AsyncIterator[AsyncpgJobStore]:
        store = AsyncpgJobStore(pg_dsn, max_size=12, pgbouncer=True)
        yield store
        await store.close()
