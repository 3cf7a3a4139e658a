"""The psycopg store on a real server: what the contract kit cannot show without a
controllable clock (the claim's heartbeat, completion times inside a transaction), the
update trigger for a retry written in a job's transaction, and max_attempts of jobs
inserted with plain SQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.core import (
    ClaimRequest,
    Completion,
    EnqueueRequest,
    Outcome,
    Retry,
    Succeeded,
    WorkerInfo,
)
from tests.pgfixtures import store_fixture
from tests.pghelpers import sql

if TYPE_CHECKING:
    from psycopg import AsyncConnection

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: How long a transaction sleeps before it completes a job.
_PAUSE = timedelta(milliseconds=200)


store = store_fixture(AsyncPsycopgJobStore, max_size=4)


def _claim(**fields: Any) -> ClaimRequest:
    return ClaimRequest(worker_id="w1", limit=10, **fields)


async def _began_then_pause(tx: AsyncConnection[Any]) -> datetime:
    """The transaction's now() (its start), after which it sleeps for ``_PAUSE``."""
    cur = await tx.execute("SELECT now()")
    row = await cur.fetchone()
    assert row is not None
    await tx.execute("SELECT pg_sleep(%s)", [_PAUSE.total_seconds()])
    began: datetime = row[0]
    return began


# ---- completion times ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2], ids=["complete_one", "batch"])
async def test_completion_in_a_transaction_is_stamped_when_written(
    store: AsyncPsycopgJobStore, size: int
) -> None:
    await store.enqueue([EnqueueRequest(kind="pg.done") for _ in range(size)])
    jobs = await store.claim(_claim())
    outcomes: list[Outcome] = [Succeeded(), Retry(delay=timedelta(minutes=1), error="x")]
    async with store.transaction() as tx:
        began = await _began_then_pause(tx)
        completions = [Completion(j.lease, o) for j, o in zip(jobs, outcomes[:size], strict=True)]
        assert await store.complete(completions, connection=tx) == [True] * size
    done = await store.get(jobs[0].id)
    assert done is not None
    assert done.completed_at is not None
    assert done.completed_at - began >= _PAUSE
    if size == 2:
        retried = await store.get(jobs[1].id)
        assert retried is not None
        assert retried.available_at - began >= _PAUSE + timedelta(minutes=1)


async def test_immediate_retry_in_a_transaction_wakes_the_listeners(
    store: AsyncPsycopgJobStore,
) -> None:
    notifier = store.notifier()
    assert notifier is not None
    await notifier.start()
    try:
        await store.enqueue([EnqueueRequest(kind="pg.retry")])
        assert await notifier.wait(10.0)
        [job] = await store.claim(_claim())
        async with store.transaction() as tx:
            # Due at the completion's time: later than the transaction's now().
            await _began_then_pause(tx)
            retry = Retry(delay=timedelta(0), error="again")
            assert await store.complete([Completion(job.lease, retry)], connection=tx) == [True]
        assert await notifier.wait(10.0)
    finally:
        await notifier.close()


# ---- the claim's heartbeat ---------------------------------------------------------------------


def _silence(dsn: str) -> None:
    sql(dsn, "UPDATE skiplock.workers SET heartbeat_at = now() - interval '3 hours'")


def _heartbeat(dsn: str) -> datetime:
    [(at,)] = sql(dsn, "SELECT heartbeat_at FROM skiplock.workers WHERE id = 'w1'")
    moment: datetime = at
    return moment


@pytest.mark.parametrize(
    "limits",
    [{}, {"kind_limits": {"pg.beat": 5}}, {"cluster_limits": {"pg.beat": 5}}],
    ids=["claim", "capped", "cluster"],
)
async def test_a_claim_that_takes_jobs_refreshes_the_heartbeat(
    store: AsyncPsycopgJobStore, pg_dsn: str, limits: dict[str, Any]
) -> None:
    await store.register_worker(WorkerInfo(id="w1", host="h", pid=1))
    await store.enqueue([EnqueueRequest(kind="pg.beat")])
    _silence(pg_dsn)
    silent = _heartbeat(pg_dsn)
    # A claim that takes nothing writes nothing (an idle poll stays read-only).
    assert await store.claim(_claim(kinds=frozenset({"pg.none"}), **limits)) == []
    assert _heartbeat(pg_dsn) == silent
    [job] = await store.claim(_claim(**limits))
    assert _heartbeat(pg_dsn) == job.claimed_at
    assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == []


# ---- max_attempts of plain-SQL inserts -----------------------------------------------------


async def test_a_plain_sql_insert_takes_the_claiming_worker_max_attempts(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    [(job_id,)] = sql(pg_dsn, "INSERT INTO skiplock.jobs (kind) VALUES ('pg.sql') RETURNING id")
    inserted = await store.get(job_id)
    assert inserted is not None
    assert (inserted.max_attempts, inserted.explicit_max_attempts) == (5, False)
    [job] = await store.claim(_claim(max_attempts={"pg.sql": 2}))
    assert (job.id, job.max_attempts) == (job_id, 2)
