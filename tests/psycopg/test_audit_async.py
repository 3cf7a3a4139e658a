"""The audit trail (J10) on PostgreSQL through psycopg (async source; twin generated): a
real worker's transitions, the statements a store runs with the audit off and on, and a
callback writing the platform's own audit table in the change's transaction."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from psycopg import AsyncConnection

from skiplock import AsyncEngine, AuditAction, AuditEvent, JobState, Settings
from skiplock.adapters._pg._sql import query_names
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.adapters.psycopg._store_async import COPY_THRESHOLD
from skiplock.core import (
    Bury,
    ClaimRequest,
    Completion,
    EnqueueRequest,
    Event,
    JobFilter,
    Outcome,
    Retry,
    Succeeded,
)
from skiplock.ports import AsyncAudit, AsyncCallbackAuditSink
from tests import audit_trail_async as scenarios
from tests.pgfixtures import store_fixture
from tests.pghelpers import sql

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.adapters._pg._sql import Query

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

store = store_fixture(AsyncPsycopgJobStore, max_size=6)


# ---- the scenarios every store runs, with a real worker ------------------------------------


async def test_audit_is_off_by_default(store: AsyncPsycopgJobStore, pg_dsn: str) -> None:
    await scenarios.audit_is_off_by_default(store)
    assert sql(pg_dsn, "SELECT count(*) FROM skiplock.audit") == [(0,)]


async def test_worker_and_admin_changes_are_audited(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    await scenarios.worker_and_admin_changes_are_audited(store)
    # The table holds what the trail said, kind and tenant included.
    rows = sql(
        pg_dsn,
        "SELECT action, actor, kind, tenant_id FROM skiplock.audit"
        " WHERE action = 'job_done' ORDER BY kind",
    )
    assert rows == [
        ("job_done", scenarios.WORKER, "audit.ok", "t1"),
        ("job_done", scenarios.WORKER, "audit.tx", None),
    ]


async def test_a_rolled_back_enqueue_leaves_no_event(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    await scenarios.a_rolled_back_enqueue_leaves_no_event(store)
    assert sql(pg_dsn, "SELECT count(*) FROM skiplock.audit") == [(0,)]


async def test_a_callback_gets_the_events_instead_of_the_table(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    await scenarios.a_callback_gets_the_events_instead_of_the_table(store)
    assert sql(pg_dsn, "SELECT count(*) FROM skiplock.audit") == [(0,)]


async def test_a_raising_callback_keeps_the_workers_outcomes(
    store: AsyncPsycopgJobStore, caplog: pytest.LogCaptureFixture
) -> None:
    await scenarios.a_raising_callback_keeps_the_workers_outcomes(store, caplog)


# ---- a platform's own audit table --------------------------------------------------------


async def test_a_callback_writes_the_platforms_table_in_the_changes_transaction(
    store: AsyncPsycopgJobStore, effects: str, pg_dsn: str
) -> None:
    """The callback gets the psycopg connection of the change, inside its transaction:
    its rows commit with the change, and vanish with it."""

    async def record(events: Sequence[AuditEvent], connection: Any) -> None:
        assert isinstance(connection, AsyncConnection)
        for event in events:
            await connection.execute(
                f"INSERT INTO {effects} (job_id, note) VALUES (%s, %s)",
                [event.job_id, f"{event.action.value} by {event.actor}"],
            )

    engine = AsyncEngine(store, Settings(audit_actor="api", poll_interval=0.05), audit_sink=record)

    @engine.processor("platform.job")
    async def process(payload: Any) -> None:
        pass

    kept = (await engine.enqueue("platform.job", {})).id

    async def enqueue_then_fail() -> None:
        async with store.transaction() as tx:
            await engine.enqueue("platform.job", {}, connection=tx)
            raise scenarios._Rollback

    with pytest.raises(scenarios._Rollback):
        await enqueue_then_fail()
    worker = engine.worker(worker_id="w-9", install_signal_handlers=False)
    assert await worker.run_until_idle() == 1
    rows = sql(pg_dsn, f"SELECT job_id, note FROM {effects} ORDER BY note")
    assert rows == [(kept, "job_done by w-9"), (kept, "job_enqueued by api")]


# ---- statements -------------------------------------------------------------------------


class _Statements:
    """Records the text of every statement the store sends (through the driver)."""

    def __init__(self, store: AsyncPsycopgJobStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        driver = store._driver
        fetch, script = driver.fetch, driver.script

        async def recorded_fetch(conn: Any, query: Query, params: Any) -> Any:
            self.texts.append(query.text)
            return await fetch(conn, query, params)

        async def recorded_script(conn: Any, text: str) -> None:
            self.texts.append(text)
            await script(conn, text)

        monkeypatch.setattr(driver, "fetch", recorded_fetch)
        monkeypatch.setattr(driver, "script", recorded_script)

    def take(self) -> list[str]:
        texts, self.texts = self.texts, []
        return texts


async def _changes(store: AsyncPsycopgJobStore, audit: AsyncAudit | None) -> None:
    """One of each change a store audits, with ``audit`` (or without, if None)."""
    extra: dict[str, Any] = {} if audit is None else {"audit": audit}
    kind = "stmt.job"
    keys = [f"{audit is None}-{i}" for i in range(3)]  # new keys: no lookup of existing ones
    await store.enqueue([EnqueueRequest(kind)], **extra)
    await store.enqueue([EnqueueRequest(kind, idempotency_key=key) for key in keys], **extra)
    await store.enqueue([EnqueueRequest(kind) for _ in range(3)], **extra)  # one INSERT
    await store.enqueue([EnqueueRequest(kind) for _ in range(COPY_THRESHOLD)], **extra)  # COPY
    jobs = await store.claim(ClaimRequest(worker_id="w", limit=4), **extra)
    outcomes: list[Outcome] = [
        Succeeded(),
        Bury(error="no"),
        Retry(delay=timedelta(0), error="again"),
    ]
    completions = [
        Completion(job.lease, outcome) for job, outcome in zip(jobs[:3], outcomes, strict=True)
    ]
    await store.complete(completions, **extra)
    await store.complete([Completion(jobs[3].lease, Succeeded())], **extra)
    dead = JobFilter(ids=frozenset({jobs[1].id}))
    await store.apply(dead, Event.REPLAY, **extra)
    assert await store.apply_job(jobs[1].id, Event.CANCEL, **extra) is not None
    await store.delete(dead, **extra)
    await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}, **extra)


async def test_with_the_audit_off_a_store_runs_only_the_plain_statements(
    store: AsyncPsycopgJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.open()
    statements = _Statements(store, monkeypatch)
    await _changes(store, None)
    off = statements.take()
    assert off
    assert not [text for text in off if "audit" in text.lower()]
    # The audited variants are separate queries; the plain ones never mention the table.
    assert {name for name in query_names() if "audit" in name} == {
        "enqueue_audited",
        "enqueue_new_audited",
        "enqueue_one_audited",
        "audit_enqueued",
        "complete_audited",
        "apply_audited",
        "apply_job_audited",
        "delete_audited",
        "recover_stale_audited",
        "replace_pending_audited",
        "audit_trail",
        "purge_audit",
    }

    # The table sink adds no round trip: each change writes its events in its own
    # statement (the COPY path in one more, in its transaction); a worker's batch of
    # completions is one statement with one insert.
    await _changes(store, AsyncAudit(actor="a"))
    on = statements.take()
    assert len(on) == len(off) + 1
    assert len([text for text in on if "audit" in text.lower()]) == 10
    assert sum(text.count('INSERT INTO "skiplock".audit') for text in on) == 10


async def test_a_sink_runs_changes_in_a_transaction_with_a_savepoint_for_the_sink(
    store: AsyncPsycopgJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.open()
    statements = _Statements(store, monkeypatch)
    seen: list[AuditEvent] = []

    async def record(events: Sequence[AuditEvent], connection: Any) -> None:
        seen.extend(events)

    sink = AsyncAudit(actor="w", sink=AsyncCallbackAuditSink(record))
    await store.enqueue([EnqueueRequest("stmt.job")], audit=sink)
    [job] = await store.claim(ClaimRequest(worker_id="w", limit=1), audit=sink)
    statements.take()
    await store.complete([Completion(job.lease, Succeeded())], audit=sink)
    texts = statements.take()
    assert texts[-2:] == ["SAVEPOINT skiplock_audit", "RELEASE SAVEPOINT skiplock_audit"]
    assert [(e.action, e.job_id) for e in seen] == [
        (AuditAction.ENQUEUED, job.id),
        (AuditAction.DONE, job.id),
    ]
    done = await store.get(job.id)
    assert done is not None
    assert done.state is JobState.SUCCEEDED
