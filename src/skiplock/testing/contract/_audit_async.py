"""Contract tests of the audit trail (J10) (async source; ``_audit.py`` is its generated
twin).

With ``audit=`` every audited change records exactly one event per job, with its action,
job, kind, tenant and actor, in the change's transaction; without it nothing is
recorded. An audit sink gets the events inside that transaction; a sink that raises undoes
a caller's change and leaves a worker's change standing. Retention purges old events.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import core
from skiplock.ports import AsyncAudit

from . import _support_async as kit

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock

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


class AsyncAuditContract(kit.AsyncContractBase):
    """The audit trail: one event per audited change, in the change's transaction."""

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

    # ---- in the change's transaction --------------------------------------------------------

    @kit.requires("transactions")
    async def test_a_rolled_back_enqueue_leaves_no_event(self, store: AsyncJobStore) -> None:
        async def enqueue_then_fail() -> int:
            async with store.transaction() as tx:
                [result] = await store.enqueue([kit.request()], connection=tx, audit=_audit())
                assert len(await store.audit_trail(result.id, connection=tx)) == 1
                raise kit.Rollback(result.id)

        with pytest.raises(kit.Rollback) as rolled_back:
            await enqueue_then_fail()
        job_id = rolled_back.value.args[0]
        assert await store.get(job_id) is None
        assert await store.audit_trail(job_id) == []
        async with store.transaction() as tx:
            [kept] = await store.enqueue([kit.request()], connection=tx, audit=_audit())
        assert len(await store.audit_trail(kept.id)) == 1

    @kit.requires("transactions")
    async def test_a_rolled_back_completion_leaves_no_event(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)

        async def complete_then_fail() -> None:
            async with store.transaction() as tx:
                done = await store.complete(
                    [core.Completion(job.lease, core.Succeeded())],
                    connection=tx,
                    audit=_audit(kit.WORKER),
                )
                assert done == [True]
                raise kit.Rollback

        with pytest.raises(kit.Rollback):
            await complete_then_fail()
        assert (await kit.get(store, job.id)).state is core.JobState.RUNNING
        assert await store.audit_trail(job.id) == []

    @kit.requires("transactions")
    async def test_a_rolled_back_apply_job_leaves_no_event(self, store: AsyncJobStore) -> None:
        job_id = await kit.enqueue(store)
        before = await kit.get(store, job_id)

        async def cancel_then_fail() -> None:
            async with store.transaction() as tx:
                cancelled = await store.apply_job(
                    job_id, core.Event.CANCEL, connection=tx, audit=_audit()
                )
                assert cancelled is not None
                assert cancelled.state is core.JobState.CANCELLED
                assert len(await store.audit_trail(job_id, connection=tx)) == 1
                raise kit.Rollback

        with pytest.raises(kit.Rollback):
            await cancel_then_fail()
        assert await kit.get(store, job_id) == before
        assert await store.audit_trail(job_id) == []

    # ---- audit sinks ------------------------------------------------------------------------

    async def test_a_sink_gets_the_events_instead_of_the_table(self, store: AsyncJobStore) -> None:
        sink = _Sink(store)
        kind = kit.fresh_kind()
        results = await store.enqueue(
            [kit.request(kind), kit.request(kind, tenant="t")], audit=_audit(sink=sink)
        )
        job = await kit.claim_one(store, kind)
        done_ = await store.complete(
            [core.Completion(job.lease, core.Succeeded())], audit=_audit(sink=sink)
        )
        assert done_ == [True]
        [(enqueued, _), (done, _)] = sink.calls
        assert _facts(enqueued) == [
            (core.AuditAction.ENQUEUED, results[0].id, kind, None, _ACTOR, None),
            (core.AuditAction.ENQUEUED, results[1].id, kind, "t", _ACTOR, None),
        ]
        assert _facts(done) == [(core.AuditAction.DONE, job.id, kind, None, _ACTOR, None)]
        assert await store.audit_trail(job.id) == []
        # A change with nothing to record does not call the sink.
        assert await store.apply(_one(job.id), core.Event.CANCEL, audit=_audit(sink=sink)) == []
        assert len(sink.calls) == 2

    async def test_a_sink_writes_in_the_transaction_of_a_callers_change(
        self, store: AsyncJobStore
    ) -> None:
        side = kit.fresh_kind()
        sink = _Sink(store, side=side)
        [result] = await store.enqueue([kit.request()], audit=_audit(sink=sink))
        jobs = await kit.all_jobs(store)
        assert sorted(job.kind for job in jobs) == sorted([side, _get_kind(jobs, result.id)])
        failing = _Sink(store, side=kit.fresh_kind(), fail=True)
        with pytest.raises(_SinkError):
            await store.enqueue([kit.request()], audit=_audit(sink=failing))
        # The change and what the sink wrote in its transaction are undone together.
        assert await kit.all_jobs(store) == jobs
        assert len(failing.calls) == 1

    @pytest.mark.parametrize("change", ["apply", "apply_job", "delete"])
    async def test_a_raising_sink_undoes_an_operator_change(
        self, store: AsyncJobStore, change: str
    ) -> None:
        job_id = await kit.enqueue(store)
        failing = _Sink(store, fail=True)

        async def change_it() -> None:
            if change == "apply":
                await store.apply(_one(job_id), core.Event.CANCEL, audit=_audit(sink=failing))
            elif change == "apply_job":
                await store.apply_job(job_id, core.Event.CANCEL, audit=_audit(sink=failing))
            else:
                await store.delete(_one(job_id), audit=_audit(sink=failing))

        with pytest.raises(_SinkError):
            await change_it()
        assert (await kit.get(store, job_id)).state is core.JobState.PENDING
        [(events, _)] = failing.calls
        expected = core.AuditAction.DISCARD if change == "delete" else core.AuditAction.CANCELLED
        assert [(e.action, e.job_id) for e in events] == [(expected, job_id)]

    @kit.requires("transactions")
    async def test_a_raising_sink_undoes_only_its_change_in_the_callers_transaction(
        self, store: AsyncJobStore
    ) -> None:
        failing = _Sink(store, side=kit.fresh_kind(), fail=True)
        async with store.transaction() as tx:
            [before] = await store.enqueue([kit.request(payload="before")], connection=tx)
            with pytest.raises(_SinkError):
                await store.enqueue(
                    [kit.request(payload="undone")], connection=tx, audit=_audit(sink=failing)
                )
            [after] = await store.enqueue([kit.request(payload="after")], connection=tx)
        assert sorted(job.payload for job in await kit.all_jobs(store)) == ["after", "before"]
        assert {before.id, after.id} == {job.id for job in await kit.all_jobs(store)}

    @kit.requires("transactions")
    async def test_a_callers_rollback_undoes_what_the_sink_wrote(
        self, store: AsyncJobStore
    ) -> None:
        sink = _Sink(store, side=kit.fresh_kind())

        async def enqueue_then_fail() -> None:
            async with store.transaction() as tx:
                await store.enqueue([kit.request()], connection=tx, audit=_audit(sink=sink))
                raise kit.Rollback

        with pytest.raises(kit.Rollback):
            await enqueue_then_fail()
        assert len(sink.calls) == 1
        assert await kit.all_jobs(store) == []

    async def test_a_raising_sink_keeps_a_workers_change(
        self, store: AsyncJobStore, caplog: pytest.LogCaptureFixture
    ) -> None:
        failing = _Sink(store, fail=True)
        done, dead = await kit.running(store), await kit.running(store)
        completions = [
            core.Completion(done.lease, core.Succeeded()),
            core.Completion(dead.lease, core.Bury("x")),
        ]
        with caplog.at_level(logging.ERROR, logger="skiplock.audit"):
            applied = await store.complete(completions, audit=_audit(kit.WORKER, sink=failing))
        assert applied == [True, True]
        assert (await kit.get(store, done.id)).state is core.JobState.SUCCEEDED
        assert (await kit.get(store, dead.id)).state is core.JobState.DEAD
        [(events, _)] = failing.calls
        assert [(e.action, e.job_id) for e in events] == [
            (core.AuditAction.DONE, done.id),
            (core.AuditAction.DLQ, dead.id),
        ]
        [record] = [r for r in caplog.records if r.name == "skiplock.audit"]
        assert f"job_done job {done.id} by {kit.WORKER}" in record.getMessage()
        assert record.exc_info is not None

    @kit.requires("transactions")
    async def test_a_raising_sink_in_a_jobs_transaction_keeps_the_completion(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store)
        side = kit.fresh_kind()
        failing = _Sink(store, side=side, fail=True)
        async with store.transaction() as tx:
            completion = [core.Completion(job.lease, core.Succeeded())]
            assert await store.complete(completion, connection=tx, audit=_audit(sink=failing)) == [
                True
            ]
        assert (await kit.get(store, job.id)).state is core.JobState.SUCCEEDED
        # What the sink wrote in the job's transaction before it raised is undone.
        assert [j.kind for j in await kit.all_jobs(store)] == [job.kind]
        assert len(failing.calls) == 1

    async def test_a_raising_sink_keeps_a_stale_recovery(
        self, store: AsyncJobStore, caplog: pytest.LogCaptureFixture
    ) -> None:
        failing = _Sink(store, fail=True)
        job = await kit.running(store, "crashed", max_attempts=1)
        with caplog.at_level(logging.ERROR, logger="skiplock.audit"):
            recovered = await store.recover_stale(
                default_ttl=timedelta(hours=1), ttls={}, audit=_audit(sink=failing)
            )
        assert recovered == [job.id]
        assert (await kit.get(store, job.id)).state is core.JobState.DEAD
        assert [e.action for e in failing.events()] == [core.AuditAction.DLQ]
        assert any(r.name == "skiplock.audit" for r in caplog.records)

    # ---- retention (R26) ----------------------------------------------------------------

    async def test_purge_audit_removes_old_events_in_batches(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        old = [await kit.enqueue(store) for _ in range(3)]
        for job_id in old:
            await store.apply(_one(job_id), core.Event.CANCEL, audit=_audit())
        if self.capabilities.controllable_clock:
            clock.advance(timedelta(hours=2))
            cutoff = timedelta(hours=1)
        else:
            cutoff = timedelta(0)  # the store's own clock moves on by itself
        # Three events, batches of two: a full batch, then a short one.
        assert await store.purge_audit(older_than=cutoff, batch_size=2) == 3
        for job_id in old:
            assert await store.audit_trail(job_id) == []
            assert (await kit.get(store, job_id)).state is core.JobState.CANCELLED
        assert await store.purge_audit(older_than=cutoff, batch_size=2) == 0

    async def test_purge_audit_keeps_recent_events(self, store: AsyncJobStore) -> None:
        job_id = await kit.in_state(store, core.JobState.PENDING)
        await store.apply(_one(job_id), core.Event.CANCEL, audit=_audit())
        assert await store.purge_audit(older_than=timedelta(days=7), batch_size=10) == 0
        assert len(await store.audit_trail(job_id)) == 1

    async def test_purging_jobs_keeps_their_events(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        # The audit trail has its own retention: a purged job's events stay.
        kind = kit.fresh_kind()
        await store.enqueue([kit.request(kind)], audit=_audit())
        job = await kit.claim_one(store, kind)
        assert await store.complete(
            [core.Completion(job.lease, core.Succeeded())], audit=_audit()
        ) == [True]
        before = await store.audit_trail(job.id)
        assert [e.action for e in before] == [core.AuditAction.ENQUEUED, core.AuditAction.DONE]
        if self.capabilities.controllable_clock:
            clock.advance(timedelta(hours=2))
        assert await store.purge(older_than=timedelta(0), archive=False, batch_size=10) >= 1
        assert await store.get(job.id) is None
        assert await store.audit_trail(job.id) == before

    async def test_purge_audit_checks_its_batch_size(self, store: AsyncJobStore) -> None:
        with pytest.raises(core.ValidationError, match="batch_size"):
            await store.purge_audit(older_than=timedelta(0), batch_size=0)


def _get_kind(jobs: Sequence[core.Job], job_id: int) -> str:
    return next(job.kind for job in jobs if job.id == job_id)
