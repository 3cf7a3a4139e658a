"""Contract tests of what a job's runs leave behind, through the port (async source;
``_results_port.py`` is its generated twin).

A success's result, every failed attempt (bounded), when the job first started (X5), as
the store's calls record them. Part of :class:`~._results_async.AsyncResultsContract`;
the helpers and the ``audit`` fixture here serve its other part too
(:mod:`._results_engine_async`).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import core
from skiplock.ports import AsyncAudit

from . import _support_async as kit

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from skiplock.ports import AsyncJobStore

_RESULT = {"total": 3, "items": [1, "two", None, True, 2.5], "nested": {"ok": "grüße ✓"}}
_ENGINE_WORKER = "contract-results-worker"
_NOW = timedelta(0)


def _retry(error: str) -> core.Retry:
    return core.Retry(delay=_NOW, error=error)


def _between(moment: datetime | None, before: datetime, after: datetime) -> bool:
    return moment is not None and before <= moment <= after


def _numbers(errors: tuple[core.AttemptError, ...]) -> list[int]:
    return [e.attempt for e in errors]


class _Recorder:
    """An audit sink keeping the events it is given."""

    def __init__(self) -> None:
        self.events: list[core.AuditEvent] = []

    async def record(self, events: Sequence[core.AuditEvent], connection: Any) -> None:
        self.events.extend(events)


async def _finish(
    store: AsyncJobStore, job: core.Job, outcome: core.Outcome, audit: AsyncAudit | None
) -> None:
    completion = core.Completion(lease=job.lease, outcome=outcome)
    assert await store.complete([completion], audit=audit) == [True]


async def _actions(store: AsyncJobStore, audit: AsyncAudit | None, job_id: int) -> list[str]:
    """The audit actions recorded for ``job_id``, oldest first (none with the trail off)."""
    if audit is None:
        return []
    if audit.sink is None:
        events = await store.audit_trail(job_id)
    else:
        assert isinstance(audit.sink, _Recorder)
        events = audit.sink.events
    return [e.action.value for e in events if e.job_id == job_id]


def _expected(audit: AsyncAudit | None, *actions: core.AuditAction) -> list[str]:
    """What :func:`_actions` gives when the audit records ``actions``."""
    return [] if audit is None else [a.value for a in actions]


async def _complete_and_roll_back(
    store: AsyncJobStore, completion: core.Completion, audit: AsyncAudit | None
) -> None:
    async with store.transaction() as tx:
        assert await store.complete([completion], connection=tx, audit=audit) == [True]
        raise kit.Rollback


class AsyncResultsAudits(kit.AsyncContractBase):
    """The ``audit`` fixture of the results tests: each runs with the audit trail off,
    writing the store's audit table, and calling an audit sink (J10)."""

    @pytest.fixture(params=["audit-off", "audit-table", "audit-sink"])
    def audit(self, request: pytest.FixtureRequest) -> AsyncAudit | None:
        """How the store calls (and engines) of a test audit (J10)."""
        if request.param == "audit-off":
            return None
        return AsyncAudit(
            actor=_ENGINE_WORKER, sink=_Recorder() if request.param == "audit-sink" else None
        )


class AsyncResultsPortContract(AsyncResultsAudits):
    """Results, failed attempts and start times as the store's calls record them."""

    # ---- through the port ---------------------------------------------------------------

    async def test_result_is_stored_with_the_success(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        job = await kit.running(store)
        text = json.dumps(_RESULT)
        before = await store.now()
        await _finish(store, job, core.Succeeded(result=_RESULT, result_json=text), audit)
        after = await store.now()
        done = await kit.get(store, job.id)
        assert (done.state, done.result, done.errors) == (core.JobState.SUCCEEDED, _RESULT, ())
        assert _between(done.completed_at, before, after)
        assert done.started_at == job.claimed_at
        assert done.worker_ids == (kit.WORKER,)
        assert await _actions(store, audit, job.id) == _expected(audit, core.AuditAction.DONE)

    async def test_no_result_reads_back_as_none(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        job = await kit.running(store)
        await _finish(store, job, core.Succeeded(), audit)
        done = await kit.get(store, job.id)
        assert (done.state, done.result, done.errors) == (core.JobState.SUCCEEDED, None, ())

    async def test_a_result_given_as_data_is_encoded_by_the_store(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        job = await kit.running(store)
        await _finish(store, job, core.Succeeded(result={"pair": (1, "a"), "n": 2}), audit)
        assert (await kit.get(store, job.id)).result == {"pair": [1, "a"], "n": 2}

    async def test_an_unencodable_result_is_refused_and_writes_nothing(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        good, bad = await kit.running(store), await kit.running(store)
        completions = [
            core.Completion(lease=good.lease, outcome=core.Succeeded(result=1)),
            core.Completion(lease=bad.lease, outcome=core.Succeeded(result={1, 2})),
        ]
        with pytest.raises(core.ValidationError, match=r"result is not JSON-serialisable.*set"):
            await store.complete(completions, audit=audit)
        for job in (good, bad):
            after = await kit.get(store, job.id)
            assert (after.state, after.result) == (core.JobState.RUNNING, None)
            assert await _actions(store, audit, job.id) == []

    async def test_a_batch_records_each_outcome_of_its_own(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        returned, plain, retried, buried = [await kit.running(store) for _ in range(4)]
        before = await store.now()
        applied = await store.complete(
            [
                core.Completion(lease=returned.lease, outcome=core.Succeeded(result=[1, 2])),
                core.Completion(lease=plain.lease, outcome=core.Succeeded()),
                core.Completion(
                    lease=retried.lease, outcome=core.Retry(delay=_NOW, error="retry me")
                ),
                core.Completion(lease=buried.lease, outcome=core.Bury(error="bury me")),
            ],
            audit=audit,
        )
        after = await store.now()
        assert applied == [True] * 4
        jobs = [await kit.get(store, j.id) for j in (returned, plain, retried, buried)]
        assert [j.result for j in jobs] == [[1, 2], None, None, None]
        assert [j.state for j in jobs] == [
            core.JobState.SUCCEEDED,
            core.JobState.SUCCEEDED,
            core.JobState.PENDING,
            core.JobState.DEAD,
        ]
        assert [len(j.errors) for j in jobs] == [0, 0, 1, 1]
        for job, claimed, text in ((jobs[2], retried, "retry me"), (jobs[3], buried, "bury me")):
            [entry] = job.errors
            assert (entry.attempt, entry.worker_id, entry.error) == (1, kit.WORKER, text)
            assert entry.claimed_at == claimed.claimed_at
            assert _between(entry.failed_at, before, after)
        # Retries are not audited.
        assert [await _actions(store, audit, j.id) for j in jobs] == [
            _expected(audit, core.AuditAction.DONE),
            _expected(audit, core.AuditAction.DONE),
            [],
            _expected(audit, core.AuditAction.DLQ),
        ]

    async def test_a_batch_without_results_records_its_failures(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        plain, retried = await kit.running(store), await kit.running(store)
        applied = await store.complete(
            [
                core.Completion(lease=plain.lease, outcome=core.Succeeded()),
                core.Completion(lease=retried.lease, outcome=core.Retry(delay=_NOW, error="again")),
            ],
            audit=audit,
        )
        assert applied == [True, True]
        assert (await kit.get(store, plain.id)).result is None
        assert [e.error for e in (await kit.get(store, retried.id)).errors] == ["again"]

    async def test_failed_attempts_are_recorded_then_the_success(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        kind = kit.fresh_kind()
        job_id = await kit.enqueue(store, kind)
        claims: list[core.Job] = []
        for n, worker in enumerate(("w-one", "w-two"), start=1):
            job = await kit.claim_one(store, kind, worker)
            claims.append(job)
            await _finish(store, job, _retry(f"failure {n}"), audit)
        last = await kit.claim_one(store, kind, "w-three")
        await _finish(store, last, core.Succeeded(result={"done": True}), audit)
        done = await kit.get(store, job_id)
        assert (done.state, done.attempts, done.result) == (
            core.JobState.SUCCEEDED,
            3,
            {"done": True},
        )
        assert done.last_error is None
        assert [(e.attempt, e.worker_id, e.error) for e in done.errors] == [
            (1, "w-one", "failure 1"),
            (2, "w-two", "failure 2"),
        ]
        assert [e.claimed_at for e in done.errors] == [c.claimed_at for c in claims]
        assert done.errors[0].failed_at <= done.errors[1].failed_at
        assert done.worker_ids == ("w-one", "w-two", "w-three")
        # The first run's claim, kept through the retries.
        assert done.started_at == claims[0].claimed_at
        assert done.started_at is not None
        assert done.completed_at is not None
        assert done.started_at <= done.completed_at

    async def test_a_job_failing_every_attempt_keeps_its_latest_errors(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        attempts = core.MAX_RECORDED_ERRORS + 3
        kind = kit.fresh_kind()
        job_id = await kit.enqueue(store, kind, max_attempts=attempts)
        for n in range(1, attempts + 1):
            job = await kit.claim_one(store, kind)
            outcome = core.Bury(error=f"failure {n}") if n == attempts else _retry(f"failure {n}")
            await _finish(store, job, outcome, audit)
        dead = await kit.get(store, job_id)
        assert (dead.state, dead.attempts, dead.last_error) == (
            core.JobState.DEAD,
            attempts,
            f"failure {attempts}",
        )
        kept = range(attempts - core.MAX_RECORDED_ERRORS + 1, attempts + 1)
        assert _numbers(dead.errors) == list(kept)
        assert [e.error for e in dead.errors] == [f"failure {n}" for n in kept]
        assert dead.worker_ids == (kit.WORKER,) * core.MAX_RECORDED_ERRORS

    async def test_recorded_errors_are_capped_like_last_error(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        job = await kit.running(store)
        await _finish(store, job, _retry("E" * 100 + "x" * (3 * core.MAX_ERROR_LENGTH)), audit)
        [entry] = (await kit.get(store, job.id)).errors
        assert len(entry.error) <= core.MAX_ERROR_LENGTH
        assert entry.error.startswith("E" * 100)
        assert entry.error == (await kit.get(store, job.id)).last_error

    async def test_a_release_records_no_failed_attempt(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        job = await kit.running(store)
        await _finish(store, job, core.Release(error="throttled"), audit)
        released = await kit.get(store, job.id)
        assert (released.state, released.errors, released.last_error) == (
            core.JobState.PENDING,
            (),
            "throttled",
        )
        # The run was given back, its start time stays: the job did start once.
        assert released.started_at == job.claimed_at

    async def test_a_held_job_has_started_once_paid_for(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        held: list[core.Job] = []
        for _ in range(2):
            kind = kit.fresh_kind()
            await kit.enqueue(store, kind)
            [job] = await store.claim(
                core.ClaimRequest(
                    worker_id=kit.WORKER, limit=1, kinds=frozenset({kind}), start_now=0
                )
            )
            assert (await kit.get(store, job.id)).started_at is None
            held.append(job)
        paid, unpaid = held
        assert await store.start([paid.lease]) == [True]
        assert (await kit.get(store, paid.id)).started_at == paid.claimed_at
        # A held job that ran without a start() pays with its outcome, and started then.
        await _finish(store, unpaid, _retry("failed unpaid"), audit)
        failed = await kit.get(store, unpaid.id)
        assert failed.started_at == unpaid.claimed_at
        assert [(e.attempt, e.error) for e in failed.errors] == [(1, "failed unpaid")]

    async def test_a_held_job_given_back_never_started(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        kind = kit.fresh_kind()
        job_id = await kit.enqueue(store, kind)
        [job] = await store.claim(
            core.ClaimRequest(worker_id=kit.WORKER, limit=1, kinds=frozenset({kind}), start_now=0)
        )
        await _finish(store, job, core.Release(refund=False), audit)
        released = await kit.get(store, job_id)
        assert (released.attempts, released.started_at, released.errors) == (0, None, ())

    async def test_stale_recovery_records_the_run_it_ended(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        running = await kit.running(store, "vanished")
        kind = kit.fresh_kind()
        await kit.enqueue(store, kind)
        [held] = await store.claim(
            core.ClaimRequest(worker_id="vanished", limit=1, kinds=frozenset({kind}), start_now=0)
        )
        before = await store.now()
        recovered = await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}, audit=audit)
        after = await store.now()
        assert sorted(recovered) == sorted([running.id, held.id])
        [entry] = (await kit.get(store, running.id)).errors
        assert (entry.attempt, entry.worker_id, entry.error) == (1, "vanished", core.STALE_MARK)
        assert entry.claimed_at == running.claimed_at
        assert _between(entry.failed_at, before, after)
        # A held job that never started used no attempt: no failed run to record.
        assert (await kit.get(store, held.id)).errors == ()
        # Back to pending: not audited.
        assert await _actions(store, audit, running.id) == []

    async def test_a_replay_keeps_the_history(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        job = await kit.running(store)
        await _finish(store, job, core.Bury(error="gave up"), audit)
        replay = await store.apply(
            core.JobFilter(ids=frozenset({job.id})), core.Event.REPLAY, audit=audit
        )
        assert replay == [job.id]
        replayed = await kit.get(store, job.id)
        assert replayed.state is core.JobState.PENDING
        assert [(e.attempt, e.error) for e in replayed.errors] == [(1, "gave up")]
        assert (replayed.started_at, replayed.result) == (job.claimed_at, None)
        assert await _actions(store, audit, job.id) == _expected(
            audit, core.AuditAction.DLQ, core.AuditAction.REPLAY
        )

    @kit.requires("transactions")
    async def test_a_result_written_in_the_jobs_transaction_commits_with_it(
        self, store: AsyncJobStore, audit: AsyncAudit | None
    ) -> None:
        committed, rolled_back = await kit.running(store), await kit.running(store)
        async with store.transaction() as tx:
            outcome = core.Succeeded(result={"in": "tx"}, result_json='{"in": "tx"}')
            completion = core.Completion(lease=committed.lease, outcome=outcome)
            assert await store.complete([completion], connection=tx, audit=audit) == [True]
        assert (await kit.get(store, committed.id)).result == {"in": "tx"}
        assert await _actions(store, audit, committed.id) == _expected(audit, core.AuditAction.DONE)

        with pytest.raises(kit.Rollback):
            await _complete_and_roll_back(
                store, core.Completion(rolled_back.lease, core.Succeeded(5)), audit
            )
        after = await kit.get(store, rolled_back.id)
        assert (after.state, after.result) == (core.JobState.RUNNING, None)
