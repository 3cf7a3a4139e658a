"""The worker's next-due timer on PostgreSQL (docs/worker-internals.md, "The worker"): an idle
worker arms its wake-up for the next job of its kinds, learned from the bounded
``next_due`` read and re-armed by the NOTIFY of a job enqueued for later; the read stays
bounded on a large cold table. The tests read the armed wake-up (``worker.next_wakeup``),
never the machine's timing."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from skiplock import AsyncEngine, Settings
from skiplock.adapters._pg._sql import neutral_query
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from tests.engine.helpers_async import armed_for, eventually
from tests.pgfixtures import store_fixture

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: Far longer than any due time here: a wait that ends sooner was armed by the timer.
POLL = 600.0

store = store_fixture(AsyncPsycopgJobStore, max_size=4)


def make_engine(store: AsyncPsycopgJobStore) -> AsyncEngine:
    engine = AsyncEngine(store, Settings(poll_interval=POLL))
    engine.declare_kind("other")

    @engine.processor("report")
    async def report(payload: Any) -> None:
        pass

    return engine


async def test_an_idle_worker_sleeps_until_the_next_due_job_and_not_longer(
    store: AsyncPsycopgJobStore,
) -> None:
    engine = make_engine(store)
    first = await engine.enqueue_after(30, "report")
    await engine.enqueue_after(5, "other")  # sooner, not this worker's kind
    due_at = (await engine.get_job(first.id)).available_at
    worker = engine.worker(kinds=["report"])
    async with worker.in_background():
        await eventually(lambda: armed_for(worker, due_at))
        wakeup = worker.next_wakeup
        assert wakeup is not None
        assert wakeup.due is not None
        now = time.monotonic()
        # Due in 30 s less what passed since the enqueue: it sleeps until then (plus
        # the timer's 1 ms slack), not until its 600 s poll.
        assert now + 28.0 < wakeup.due <= now + 30.0 + 0.002
        assert wakeup.at == pytest.approx(wakeup.due, abs=1e-6)


async def test_the_notify_of_a_job_enqueued_for_later_rearms_the_timer(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    engine = make_engine(store)
    worker = engine.worker()
    async with worker.in_background():
        await eventually(lambda: worker.next_wakeup is not None)
        wakeup = worker.next_wakeup
        assert wakeup is not None
        assert (wakeup.due, wakeup.due_at) == (None, None)
        # Plain SQL, as an application may enqueue (docs/sql-enqueue.md): the trigger's
        # NOTIFY wakes the worker, which asks when the job falls due.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute(
                "INSERT INTO skiplock.jobs (kind, available_at)"
                " VALUES ('report', now() + interval '20 seconds') RETURNING available_at"
            ).fetchone()
        assert row is not None
        await eventually(lambda: armed_for(worker, row[0]))
        wakeup = worker.next_wakeup
        assert wakeup is not None
        assert wakeup.due is not None
        now = time.monotonic()
        assert now + 18.0 < wakeup.at <= now + 20.0 + 0.002


async def test_next_due_reads_a_bounded_number_of_rows_on_a_large_cold_table(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO skiplock.jobs (kind, priority, available_at)"
            " SELECT 'other', i % 3, now() + i * interval '1 second'"
            " FROM generate_series(1, 30000) AS i"
        )
        conn.execute(
            "INSERT INTO skiplock.jobs (kind, available_at)"
            " VALUES ('report', now() + interval '10 hours')"
        )
    due = await store.next_due(frozenset({"report"}), None)
    # 64 rows per priority hold no 'report' job: the answer is a bound, before the job.
    assert due is not None
    assert 60 < due.seconds < 36000
    with psycopg.connect(pg_dsn) as conn:
        query = next_due_query()
        plan = conn.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {query}",
            {"kinds": ["report"], "tenants": None},
        ).fetchone()
    assert plan is not None
    rows = sum(_rows_read(plan[0][0]["Plan"]))
    assert rows < 1000, plan


def next_due_query() -> str:
    return (
        neutral_query("next_due", "skiplock")
        .replace(":kinds", "%(kinds)s")
        .replace(":tenants", "%(tenants)s")
    )


def _rows_read(node: dict[str, Any]) -> list[int]:
    """Rows each scan of ``jobs`` returned, over all loops."""
    read = []
    if node.get("Relation Name") == "jobs":
        read.append(int(node["Actual Rows"]) * int(node["Actual Loops"]))
    for child in node.get("Plans", []):
        read += _rows_read(child)
    return read
