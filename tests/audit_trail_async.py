"""The audit trail through the engine and a real worker (J10) (async source; twin
generated).

Every scenario takes a store, so the in-memory store (``tests/engine/test_audit*.py``)
and PostgreSQL (``tests/psycopg/test_audit*.py``) run the same ones.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncEngine,
    AuditAction,
    AuditEvent,
    JobContext,
    JobState,
    Settings,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.ports import AsyncJobStore

WORKER = "worker-7"
SERVICE = "billing-api"
#: Poll often and retry at once, so a worker run ends quickly.
FAST: dict[str, Any] = {"poll_interval": 0.05, "backoff_base": 0}


class _Rollback(Exception):
    """Raised inside a transaction to roll it back."""


def _engine(store: AsyncJobStore, settings: Settings, **options: Any) -> AsyncEngine:
    engine = AsyncEngine(store, settings, **options)

    @engine.processor("audit.ok")
    async def ok(payload: Any) -> None:
        pass

    @engine.processor("audit.bad", max_attempts=2)
    async def bad(payload: Any) -> None:
        raise ValueError("nope")

    @engine.processor("audit.tx", transactional=True)
    async def tx(payload: Any, ctx: JobContext) -> None:
        assert ctx.connection is not None

    return engine


async def _run(engine: AsyncEngine) -> int:
    worker = engine.worker(worker_id=WORKER, install_signal_handlers=False)
    return await worker.run_until_idle()


def _facts(events: Sequence[AuditEvent]) -> list[tuple[Any, ...]]:
    return [(e.action, e.actor) for e in events]


async def audit_is_off_by_default(store: AsyncJobStore) -> None:
    """Without ``Settings.audit`` or a sink nothing is recorded, whatever happens."""
    engine = _engine(store, Settings(**FAST))
    assert engine.audit is None
    ids = [(await engine.enqueue(kind, {})).id for kind in ("audit.ok", "audit.bad", "audit.tx")]
    assert await _run(engine) == 4  # the bad one runs twice
    ok, bad, tx = ids
    alice = engine.operator("alice")
    await alice.retry_job(bad)
    await alice.cancel_job(bad)
    await alice.fail_job(bad)
    await alice.delete_job(bad)
    for job_id in ids:
        assert await engine.audit_trail(job_id) == []
    assert (await engine.get_job(ok)).state is JobState.SUCCEEDED
    assert (await engine.get_job(tx)).state is JobState.SUCCEEDED


async def worker_and_admin_changes_are_audited(store: AsyncJobStore) -> None:
    """With ``Settings.audit``: enqueues and the engine's admin calls name
    ``audit_actor``, an operator handle's name its actor; a worker names itself; retries
    are not audited."""
    engine = _engine(store, Settings(audit=True, audit_actor=SERVICE, **FAST))
    ok = (await engine.enqueue("audit.ok", {}, tenant="t1")).id
    bad = (await engine.enqueue("audit.bad", {"n": 1})).id
    tx = (await engine.enqueue("audit.tx", {})).id
    assert await _run(engine) == 4
    enqueued = (AuditAction.ENQUEUED, SERVICE)
    [first, done] = await engine.audit_trail(ok)
    assert _facts([first, done]) == [enqueued, (AuditAction.DONE, WORKER)]
    assert (done.job_id, done.kind, done.tenant, done.details) == (ok, "audit.ok", "t1", None)
    assert _facts(await engine.audit_trail(tx)) == [enqueued, (AuditAction.DONE, WORKER)]
    trail = await engine.audit_trail(bad)
    assert _facts(trail) == [enqueued, (AuditAction.DLQ, WORKER)]
    details = trail[1].details
    assert details is not None
    assert details["attempts"] == 2
    assert details["error"].startswith("ValueError: nope")
    assert details["error"] == (await engine.get_job(bad)).last_error

    alice = engine.operator("alice")
    assert (await alice.retry_job(bad)).state is JobState.PENDING
    await engine.cancel_job(bad)
    await alice.retry_job(bad, reset_attempts=False)
    await engine.operator("carol").fail_job(bad)
    await engine.operator("bob").delete_job(bad)
    trail = await engine.audit_trail(bad)
    assert _facts(trail[2:]) == [
        (AuditAction.REPLAY, "alice"),
        (AuditAction.CANCELLED, SERVICE),
        (AuditAction.REPLAY, "alice"),
        (AuditAction.FAILED_MANUALLY, "carol"),
        (AuditAction.DISCARD, "bob"),
    ]
    assert [e.details for e in trail[2:]] == [
        {"from": "dead", "reset_attempts": True},
        {"from": "pending"},
        {"from": "cancelled", "reset_attempts": False},
        {"from": "pending"},
        {"from": "failed", "payload": {"n": 1}},
    ]

    # The bulk replay of dead jobs: one event per job.
    again = [(await engine.enqueue("audit.bad", {})).id for _ in range(2)]
    assert await _run(engine) == 4
    assert sorted(await alice.retry_dead(kind="audit.bad")) == sorted(again)
    for job_id in again:
        assert _facts((await engine.audit_trail(job_id))[-1:]) == [(AuditAction.REPLAY, "alice")]


async def a_rolled_back_enqueue_leaves_no_event(store: AsyncJobStore) -> None:
    """An enqueue in the caller's transaction records its event in that transaction."""
    engine = _engine(store, Settings(audit=True))

    async def enqueue_then_fail() -> int:
        async with store.transaction() as tx:
            result = await engine.enqueue("audit.ok", {}, connection=tx)
            raise _Rollback(result.id)

    with pytest.raises(_Rollback) as rolled_back:
        await enqueue_then_fail()
    job_id = rolled_back.value.args[0]
    assert await engine.list_jobs() == []
    assert await engine.audit_trail(job_id) == []


class Recorder:
    """An audit callback that keeps what it was given (a plain function's stand-in)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[list[AuditEvent], Any]] = []

    def __call__(self, events: Sequence[AuditEvent], connection: Any) -> None:
        self.calls.append((list(events), connection))
        if self.fail:
            raise RuntimeError("the audit log is down")

    def events(self) -> list[AuditEvent]:
        return [event for events, _ in self.calls for event in events]


async def a_callback_gets_the_events_instead_of_the_table(store: AsyncJobStore) -> None:
    """``audit_sink=`` a function: it gets every event (one call per change, a worker's
    completion batch at once) and the table gets none."""
    recorder = Recorder()
    engine = _engine(store, Settings(**FAST), audit_sink=recorder)
    assert engine.audit is not None
    ids = [(await engine.enqueue("audit.ok", {})).id for _ in range(3)]
    assert await _run(engine) == 3
    events = recorder.events()
    assert sorted((e.action, e.job_id) for e in events) == sorted(
        [(AuditAction.ENQUEUED, job_id) for job_id in ids]
        + [(AuditAction.DONE, job_id) for job_id in ids]
    )
    assert all(e.actor == WORKER for e in events if e.action is AuditAction.DONE)
    assert all(connection is not None for _, connection in recorder.calls[:3])
    for job_id in ids:
        assert await engine.audit_trail(job_id) == []


async def a_raising_callback_keeps_the_workers_outcomes(
    store: AsyncJobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A callback that raises during a worker's completion: the outcome is written all the
    same (the job is not run again) and the lost events are logged."""
    recorder = Recorder()
    engine = _engine(store, Settings(**FAST), audit_sink=recorder)
    ok = (await engine.enqueue("audit.ok", {})).id
    recorder.fail = True
    with caplog.at_level(logging.ERROR, logger="skiplock.audit"):
        assert await _run(engine) == 1
    assert (await engine.get_job(ok)).state is JobState.SUCCEEDED
    assert [(e.action, e.job_id) for e in recorder.events()] == [
        (AuditAction.ENQUEUED, ok),
        (AuditAction.DONE, ok),
    ]
    assert [r for r in caplog.records if r.name == "skiplock.audit"]
    # A change an admin asks for is refused instead: the error reaches the caller.
    with pytest.raises(RuntimeError, match="audit log is down"):
        await engine.operator("bob").delete_job(ok)
    assert (await engine.get_job(ok)).state is JobState.SUCCEEDED
