"""Contract tests of the audit trail (J10): transactions, sinks and retention (async
source; ``_audit_sinks.py`` is its generated twin).

The events are written in the change's transaction. An audit sink gets them inside that
transaction; a sink that raises undoes a caller's change and leaves a worker's change
standing. Retention purges old events. Part of :class:`~._audit_async.AsyncAuditContract`.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock import core

from . import _support_async as kit
from ._audit_events_async import _ACTOR, _audit, _facts, _one, _Sink, _SinkError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock


class AsyncAuditSinksContract(kit.AsyncContractBase):
    """The audit trail in the change's transaction, through a sink, and its retention."""

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
