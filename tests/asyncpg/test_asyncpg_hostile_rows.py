"""Hostile rows on the asyncpg store (issue 9): rows written by plain SQL that cannot
become a job are buried by the claim that took them; the rest of the batch runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock.adapters.asyncpg import AsyncpgJobStore
from tests import hostile_rows_async as scenarios
from tests.pgfixtures import apply_schema

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def test_a_worker_buries_hostile_rows_and_runs_the_rest(
    store: AsyncpgJobStore, apg_dsn: str
) -> None:
    await scenarios.worker_buries_hostile_rows_and_runs_the_rest(
        scenarios.engine_for(store), apg_dsn
    )


async def test_a_claim_returns_the_good_rows_of_a_batch(
    store: AsyncpgJobStore, apg_dsn: str
) -> None:
    await scenarios.claim_returns_the_good_rows_of_a_batch(store, apg_dsn)


async def test_counters_saturate_in_start_and_complete(
    store: AsyncpgJobStore, apg_dsn: str
) -> None:
    await scenarios.counters_saturate_in_start_and_complete(store, apg_dsn)


async def test_recorded_errors_survive_hostile_values(store: AsyncpgJobStore, apg_dsn: str) -> None:
    await scenarios.recorded_errors_survive_hostile_values(store, apg_dsn)


async def test_a_claim_audits_the_rows_it_buries(store: AsyncpgJobStore, apg_dsn: str) -> None:
    await scenarios.claim_audits_the_rows_it_buries(store, apg_dsn)


async def test_admin_reads_name_the_bad_row(store: AsyncpgJobStore, apg_dsn: str) -> None:
    await scenarios.admin_reads_name_the_bad_row(store, apg_dsn)


async def test_a_due_time_out_of_range_is_buried(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    apply_schema(dsn)
    store = AsyncpgJobStore(dsn, max_size=2)
    try:
        await scenarios.due_time_out_of_range_is_buried(store, dsn)
    finally:
        await store.close()
