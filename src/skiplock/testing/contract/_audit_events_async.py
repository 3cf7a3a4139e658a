"""Contract tests of the audit trail (J10): the events each change records (async
source; ``_audit_events.py`` is its generated twin).

Without ``audit=`` nothing is recorded; with it every audited change records exactly one
event per job, with its action, job, kind, tenant and actor, and the trail lists a job's
events oldest first. Part of :class:`~._audit_async.AsyncAuditContract`, whose other part
(:mod:`._audit_sinks_async`) shares the helpers here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import core
from skiplock.ports import AsyncAudit

from . import _support_async as kit

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.ports import AsyncJobStore

_ACTOR = "alice@example.com"


class _SinkError(Exception):
    """What a failing contract sink raises."""


class _Sink:
    """An audit sink that keeps every call; with ``side`` it enqueues a job of that kind
    through the connection it is given, then raises if ``fail``."""

    def __init__(
        self, store: AsyncJobStore, *, side: str | None = None, fail: bool = False
    ) -> None:
        self.store = store
        self.side = side
        self.fail = fail
        self.calls: list[tuple[list[core.AuditEvent], Any]] = []

    async def record(self, events: Sequence[core.AuditEvent], connection: Any) -> None:
        self.calls.append((list(events), connection))
        if self.side is not None:
            await self.store.enqueue([kit.request(self.side)], connection=connection)
        if self.fail:
            raise _SinkError("the audit log is down")

    def events(self) -> list[core.AuditEvent]:
        return [event for events, _ in self.calls for event in events]


def _audit(actor: str | None = _ACTOR, sink: _Sink | None = None) -> AsyncAudit:
    return AsyncAudit(actor=actor, sink=sink)


def _one(job_id: int) -> core.JobFilter:
    return core.JobFilter(ids=frozenset({job_id}))


def _facts(events: Sequence[core.AuditEvent]) -> list[tuple[Any, ...]]:
    """The events without their times."""
    return [(e.action, e.job_id, e.kind, e.tenant, e.actor, e.details) for e in events]


class AsyncAuditEventsContract(kit.AsyncContractBase):
    """The audit trail's events: one per audited change, none without ``audit=``."""

    # ---- off by default -----------------------------------------------------------------

    async def test_audit_off_records_nothing(self, store: AsyncJobStore) -> None:
        ids = [await kit.in_state(store, state) for state in core.JobState]
        dead = await kit.in_state(store, core.JobState.DEAD)
        await store.apply(_one(dead), core.Event.REPLAY)
        await store.delete(_one(ids[0]))
        for job_id in [*ids, dead]:
            assert await store.audit_trail(job_id) == []

    # ---- one event per change -----------------------------------------------------------

    async def test_enqueue_records_each_job_created(self, store: AsyncJobStore) -> None:
        kind = kit.fresh_kind()
        before = await store.now()
        results = await store.enqueue(
            [
                kit.request(kind, tenant="t1"),
                kit.request(kind, idempotency_key="audit-key"),
                kit.request(kind, idempotency_key="audit-key"),
            ],
            audit=_audit(),
        )
        after = await store.now()
        first, keyed, same = results
        assert (first.created, keyed.created, same.created) == (True, True, False)
        [event] = await store.audit_trail(first.id)
        assert _facts([event]) == [(core.AuditAction.ENQUEUED, first.id, kind, "t1", _ACTOR, None)]
        assert before <= event.at <= after
        assert _facts(await store.audit_trail(keyed.id)) == [
            (core.AuditAction.ENQUEUED, keyed.id, kind, None, _ACTOR, None)
        ]
        # An existing key creates nothing and records nothing.
        [again] = await store.enqueue(
            [kit.request(kind, idempotency_key="audit-key")], audit=_audit()
        )
        assert (again.id, again.created) == (keyed.id, False)
        assert len(await store.audit_trail(keyed.id)) == 1

    async def test_an_audited_single_enqueue_reports_the_created_at_it_wrote(
        self, store: AsyncJobStore
    ) -> None:
        [result] = await store.enqueue([kit.request(kit.fresh_kind())], audit=_audit())
        job = await store.get(result.id)
        assert job is not None
        assert result.created_at == job.created_at

    async def test_bulk_enqueue_records_every_job(self, store: AsyncJobStore) -> None:
        results = await store.enqueue(
            [kit.request(payload=i) for i in range(600)], audit=_audit(actor=None)
        )
        for result in results[::599]:
            [event] = await store.audit_trail(result.id)
            assert (event.action, event.job_id, event.actor) == (
                core.AuditAction.ENQUEUED,
                result.id,
                None,
            )

    async def test_complete_records_success_and_dead_but_not_retries(
        self, store: AsyncJobStore
    ) -> None:
        audit = _audit(actor=kit.WORKER)
        done, dead, retried, released = [await kit.running(store, tenant="t") for _ in range(4)]
        completions = [
            core.Completion(done.lease, core.Succeeded()),
            core.Completion(dead.lease, core.Bury(error="gave up")),
            core.Completion(retried.lease, core.Retry(delay=timedelta(0), error="again")),
            core.Completion(released.lease, core.Release()),
        ]
        before = await store.now()
        assert await store.complete(completions, audit=audit) == [True] * 4
        after = await store.now()
        [success] = await store.audit_trail(done.id)
        assert _facts([success]) == [
            (core.AuditAction.DONE, done.id, done.kind, "t", kit.WORKER, None)
        ]
        assert before <= success.at <= after
        assert _facts(await store.audit_trail(dead.id)) == [
            (
                core.AuditAction.DLQ,
                dead.id,
                dead.kind,
                "t",
                kit.WORKER,
                {"error": "gave up", "attempts": 1},
            )
        ]
        assert await store.audit_trail(retried.id) == []
        assert await store.audit_trail(released.id) == []

    async def test_a_lost_completion_records_nothing(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        await store.apply(_one(job.id), core.Event.CANCEL)
        assert await store.complete(
            [core.Completion(job.lease, core.Succeeded())], audit=_audit()
        ) == [False]
        assert await store.audit_trail(job.id) == []

    @pytest.mark.parametrize(
        ("event", "state", "action"),
        [
            (core.Event.CANCEL, core.JobState.PENDING, core.AuditAction.CANCELLED),
            (core.Event.CANCEL, core.JobState.RUNNING, core.AuditAction.CANCELLED),
            (core.Event.MARK_FAILED, core.JobState.PENDING, core.AuditAction.FAILED_MANUALLY),
            (core.Event.REPLAY, core.JobState.DEAD, core.AuditAction.REPLAY),
            (core.Event.REPLAY, core.JobState.CANCELLED, core.AuditAction.REPLAY),
        ],
    )
    @pytest.mark.parametrize("via", ["apply", "apply_job"])
    async def test_operator_transitions_record_the_state_they_left(
        self,
        store: AsyncJobStore,
        event: core.Event,
        state: core.JobState,
        action: core.AuditAction,
        via: str,
    ) -> None:
        job_id = await kit.in_state(store, state)
        job = await kit.get(store, job_id)
        if via == "apply":
            changed = await store.apply(_one(job_id), event, reset_attempts=True, audit=_audit())
            assert changed == [job_id]
        else:
            after = await store.apply_job(job_id, event, reset_attempts=True, audit=_audit())
            assert after is not None
            assert after == await kit.get(store, job_id)
        details: dict[str, Any] = {"from": state.value}
        if event is core.Event.REPLAY:
            details["reset_attempts"] = True
        assert _facts(await store.audit_trail(job_id)) == [
            (action, job_id, job.kind, None, _ACTOR, details)
        ]

    async def test_operator_transitions_record_each_job_and_only_jobs_changed(
        self, store: AsyncJobStore
    ) -> None:
        dead = [await kit.in_state(store, core.JobState.DEAD) for _ in range(3)]
        succeeded = await kit.in_state(store, core.JobState.SUCCEEDED)
        selected = core.JobFilter(ids=frozenset([*dead, succeeded]))
        replayed = await store.apply(selected, core.Event.REPLAY, audit=_audit())
        assert sorted(replayed) == sorted(dead)
        for job_id in dead:
            [event] = await store.audit_trail(job_id)
            assert (event.action, event.details) == (
                core.AuditAction.REPLAY,
                {"from": "dead", "reset_attempts": False},
            )
        assert await store.audit_trail(succeeded) == []

    async def test_apply_job_records_nothing_when_nothing_changes(
        self, store: AsyncJobStore
    ) -> None:
        succeeded = await kit.in_state(store, core.JobState.SUCCEEDED)
        sink = _Sink(store)
        for audit in (_audit(), _audit(sink=sink)):
            assert await store.apply_job(succeeded, core.Event.REPLAY, audit=audit) is None
            assert (
                await store.apply_job(succeeded + 1_000_000, core.Event.CANCEL, audit=audit) is None
            )
        assert await store.audit_trail(succeeded) == []
        assert sink.calls == []

    async def test_apply_job_with_a_sink_returns_the_changed_job(
        self, store: AsyncJobStore
    ) -> None:
        job_id = await kit.enqueue(store, tenant="t")
        sink = _Sink(store)
        cancelled = await store.apply_job(job_id, core.Event.CANCEL, audit=_audit(sink=sink))
        assert cancelled is not None
        assert cancelled.state is core.JobState.CANCELLED
        assert cancelled == await kit.get(store, job_id)
        assert _facts(sink.events()) == [
            (core.AuditAction.CANCELLED, job_id, cancelled.kind, "t", _ACTOR, {"from": "pending"})
        ]
        assert await store.audit_trail(job_id) == []

    async def test_delete_records_the_payload_and_outlives_the_job(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store, tenant="t", payload=kit.PAYLOAD)
        await store.complete([core.Completion(job.lease, core.Bury(error="x"))])
        running = await kit.in_state(store, core.JobState.RUNNING)
        deleted = await store.delete(
            core.JobFilter(ids=frozenset({job.id, running})), audit=_audit()
        )
        assert [d.id for d in deleted] == [job.id]
        assert await store.get(job.id) is None
        assert _facts(await store.audit_trail(job.id)) == [
            (
                core.AuditAction.DISCARD,
                job.id,
                job.kind,
                "t",
                _ACTOR,
                {"from": "dead", "payload": kit.PAYLOAD},
            )
        ]
        assert await store.audit_trail(running) == []

    async def test_stale_recovery_records_jobs_it_buries_only(self, store: AsyncJobStore) -> None:
        buried = await kit.running(store, "crashed", max_attempts=1)
        returned = await kit.running(store, "crashed", max_attempts=5)
        hour = timedelta(hours=1)
        recovered = await store.recover_stale(default_ttl=hour, ttls={}, audit=_audit())
        assert sorted(recovered) == sorted([buried.id, returned.id])
        [event] = await store.audit_trail(buried.id)
        dead = await kit.get(store, buried.id)
        assert _facts([event]) == [
            (
                core.AuditAction.DLQ,
                buried.id,
                buried.kind,
                None,
                _ACTOR,
                {"error": dead.last_error, "attempts": 1},
            )
        ]
        assert await store.audit_trail(returned.id) == []

    async def test_audit_trail_lists_a_jobs_events_oldest_first(self, store: AsyncJobStore) -> None:
        kind = kit.fresh_kind()
        [result] = await store.enqueue([kit.request(kind)], audit=_audit(actor="api"))
        job = await kit.claim_one(store, kind)
        await store.complete(
            [core.Completion(job.lease, core.Bury(error="no"))], audit=_audit(kit.WORKER)
        )
        await store.apply(_one(job.id), core.Event.REPLAY, audit=_audit("ops"))
        await store.apply(_one(job.id), core.Event.CANCEL, audit=_audit("ops"))
        await store.delete(_one(job.id), audit=_audit("admin"))
        trail = await store.audit_trail(result.id)
        assert [(e.action, e.actor) for e in trail] == [
            (core.AuditAction.ENQUEUED, "api"),
            (core.AuditAction.DLQ, kit.WORKER),
            (core.AuditAction.REPLAY, "ops"),
            (core.AuditAction.CANCELLED, "ops"),
            (core.AuditAction.DISCARD, "admin"),
        ]
        assert [e.at for e in trail] == sorted(e.at for e in trail)
        assert await store.audit_trail(987_654_321) == []
