"""The web/worker split on PostgreSQL through psycopg: an enqueue-only AsyncEngine that
imports declarations writes jobs in the caller's transaction with the declared defaults,
and a worker engine binding the same declarations runs them with the declared policy
(docs/tasks.md)."""

from __future__ import annotations

import psycopg
import pytest

from skiplock import AsyncEngine, JobContext, UnknownKindError, declare
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from tests.engine.support import Email, Report
from tests.pgfixtures import store_fixture
from tests.pghelpers import sql

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

store = store_fixture(AsyncPsycopgJobStore)

# What a shared "declarations" module holds: no engine, no processor.
welcome = declare("pg.welcome", Email, max_attempts=2, priority=-10, backoff_base=0)
report = declare("pg.report", Report, priority=5, timeout=60)


async def test_enqueue_only_engine_writes_declared_defaults_and_worker_applies_them(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    web = AsyncEngine(store)
    send_welcome = web.declare(welcome)
    build_report = web.declare(report)

    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        async with conn.transaction():
            await send_welcome.enqueue(Email("a@example.com"), connection=conn)
            await build_report.enqueue(Report("q3", 12), connection=conn)
            await build_report.enqueue(Report("urgent", 1), priority=9, connection=conn)
        with pytest.raises(UnknownKindError, match=r"'pg\.welcom'.*'pg\.report', 'pg\.welcome'"):
            await web.enqueue("pg.welcom", {"to": "a"}, connection=conn)
    rows = sql(
        pg_dsn,
        "SELECT kind, priority, max_attempts, explicit_max_attempts, payload "
        "FROM skiplock.jobs ORDER BY id",
    )
    assert rows == [
        ("pg.welcome", -10, 2, False, {"to": "a@example.com", "subject": ""}),
        ("pg.report", 5, 5, False, {"name": "q3", "pages": 12}),
        ("pg.report", 9, 5, False, {"name": "urgent", "pages": 1}),
    ]

    worker_store = AsyncPsycopgJobStore(pg_dsn)  # another process, in production
    try:
        worker_engine = AsyncEngine(worker_store)
        seen: list[tuple[str, object]] = []

        @worker_engine.task(welcome)
        async def deliver(payload: Email, ctx: JobContext) -> None:
            seen.append((ctx.kind, payload))
            raise RuntimeError("smtp down")

        @worker_engine.task(report)
        async def build(payload: Report) -> None:
            seen.append(("pg.report", payload))

        await worker_engine.worker(concurrency=1).run_until_idle()
    finally:
        await worker_store.close()

    # By priority; typed payloads; the declared max_attempts (2) and zero backoff.
    assert seen == [
        ("pg.report", Report("urgent", 1)),
        ("pg.report", Report("q3", 12)),
        ("pg.welcome", Email("a@example.com")),
        ("pg.welcome", Email("a@example.com")),
    ]
    states = sql(pg_dsn, "SELECT kind, status, attempts FROM skiplock.jobs ORDER BY id")
    assert states == [
        ("pg.welcome", "dead", 2),
        ("pg.report", "succeeded", 1),
        ("pg.report", "succeeded", 1),
    ]
