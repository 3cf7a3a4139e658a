"""Hostile rows on the SQLAlchemy store (issue 9, X4): rows written by plain SQL that
cannot become a job are buried by the claim that took them; the rest of the batch runs.

The async store runs on asyncpg and psycopg; the generated sync twin on psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock.adapters.sqlalchemy import AsyncSessionJobStore
from tests import hostile_rows_async as scenarios

if True:  # ASYNC
    from sqlalchemy.ext.asyncio import create_async_engine as create_engine

    DRIVERS = ["asyncpg", "psycopg"]
else:
    from sqlalchemy import create_engine

    DRIVERS = ["psycopg"]

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sqlalchemy.engine import URL

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture(params=DRIVERS)
async def store(sa_url: URL, request: pytest.FixtureRequest) -> AsyncIterator[AsyncSessionJobStore]:
    engine = create_engine(sa_url.set(drivername=f"postgresql+{request.param}"))
    store = AsyncSessionJobStore(engine)
    yield store
    await store.close()
    await engine.dispose()


async def test_a_worker_buries_hostile_rows_and_runs_the_rest(
    store: AsyncSessionJobStore, pg_dsn: str
) -> None:
    await scenarios.worker_buries_hostile_rows_and_runs_the_rest(
        scenarios.engine_for(store), pg_dsn
    )


async def test_a_claim_returns_the_good_rows_of_a_batch(
    store: AsyncSessionJobStore, pg_dsn: str
) -> None:
    await scenarios.claim_returns_the_good_rows_of_a_batch(store, pg_dsn)


async def test_counters_saturate_in_start_and_complete(
    store: AsyncSessionJobStore, pg_dsn: str
) -> None:
    await scenarios.counters_saturate_in_start_and_complete(store, pg_dsn)


async def test_recorded_errors_survive_hostile_values(
    store: AsyncSessionJobStore, pg_dsn: str
) -> None:
    await scenarios.recorded_errors_survive_hostile_values(store, pg_dsn)


async def test_a_claim_audits_the_rows_it_buries(store: AsyncSessionJobStore, pg_dsn: str) -> None:
    await scenarios.claim_audits_the_rows_it_buries(store, pg_dsn)


async def test_admin_reads_name_the_bad_row(store: AsyncSessionJobStore, pg_dsn: str) -> None:
    await scenarios.admin_reads_name_the_bad_row(store, pg_dsn)
