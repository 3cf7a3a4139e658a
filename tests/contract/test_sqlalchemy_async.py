"""The SQLAlchemy store against the contract kit, on a scratch PostgreSQL database.

The async store runs once per driver (asyncpg and psycopg); its sync twin on psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from skiplock.adapters.sqlalchemy import AsyncSessionJobStore
from skiplock.testing import Capabilities
from skiplock.testing.contract import AsyncJobStoreContract
from tests.contract.pgfaults import PgFaults

if True:  # ASYNC
    from sqlalchemy.ext.asyncio import create_async_engine as create_engine

    DRIVERS = ["asyncpg", "psycopg"]
else:
    from sqlalchemy import create_engine

    DRIVERS = ["psycopg"]

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.postgres


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    """The DBAPI driver under SQLAlchemy."""
    driver: str = request.param
    return driver


class TestAsyncSessionJobStore(PgFaults, AsyncJobStoreContract):
    capabilities = Capabilities(listen_notify=True, controllable_clock=False)

    @pytest.fixture
    async def store(self, pg_dsn: str, driver: str) -> AsyncIterator[AsyncSessionJobStore]:
        engine = create_engine(make_url(pg_dsn).set(drivername=f"postgresql+{driver}"))
        store = AsyncSessionJobStore(engine)
        yield store
        await store.close()
        await engine.dispose()

    async def fetch_value(self, handle: Any, query: str) -> object:
        return await handle.scalar(sa.text(query))
