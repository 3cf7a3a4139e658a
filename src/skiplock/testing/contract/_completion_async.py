"""Contract tests of completions (async source; ``_completion.py`` is its generated twin).

Every outcome of a claimed job and the fencing of stale leases.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from skiplock import core

from . import _support_async as kit

if TYPE_CHECKING:
    from datetime import datetime

    from skiplock.ports import AsyncJobStore


async def _finish_timed(
    store: AsyncJobStore, job: core.Job, outcome: core.Outcome
) -> tuple[core.Job, datetime, datetime]:
    """Finish ``job`` with ``outcome``: the job as stored then, and the store's clock read
    just before and just after the call."""
    before = await store.now()
    await kit.finish(store, job, outcome)
    after = await store.now()
    return await kit.get(store, job.id), before, after


async def _back_later(store: AsyncJobStore, outcome: core.Retry | core.Release) -> core.Job:
    """Finish a running job with ``outcome``: it is pending again, claimed by nobody and
    not completed, due ``outcome.delay`` after the call. Returns it as stored."""
    back, before, after = await _finish_timed(store, await kit.running(store), outcome)
    assert back.state is core.JobState.PENDING
    assert back.claimed_by is None
    assert back.completed_at is None
    assert before + outcome.delay <= back.available_at <= after + outcome.delay
    return back


class AsyncCompletionContract(kit.AsyncContractBase):
    """Outcomes of claimed jobs and the fencing of stale leases."""

    # ---- complete and fencing (R6, R10, R12) ---------------------------------------------

    async def test_complete_succeeded(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        done, before, after = await _finish_timed(store, job, core.Succeeded())
        assert done.state is core.JobState.SUCCEEDED
        assert done.completed_at is not None
        assert before <= done.completed_at <= after
        assert done.attempts == 1
        assert done.last_error is None

    async def test_complete_succeeded_clears_the_previous_error(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        await kit.finish(store, job, core.Retry(delay=timedelta(0), error="first try failed"))
        again = await kit.claim_one(store, job.kind)
        assert again.attempts == 2
        assert again.last_error == "first try failed"
        await kit.finish(store, again, core.Succeeded())
        done = await kit.get(store, job.id)
        assert (done.state, done.attempts, done.last_error) == (core.JobState.SUCCEEDED, 2, None)

    async def test_complete_retry_returns_to_pending_later(self, store: AsyncJobStore) -> None:
        retried = await _back_later(store, core.Retry(delay=timedelta(minutes=5), error="boom"))
        assert retried.attempts == 1
        assert retried.last_error == "boom"
        assert await store.claim(kit.claim_request(kinds=frozenset({retried.kind}))) == []

    async def test_complete_retry_with_zero_delay_is_claimable_again(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store)
        await kit.finish(store, job, core.Retry(delay=timedelta(0), error="again"))
        again = await kit.claim_one(store, job.kind, "other-worker")
        assert (again.attempts, again.claimed_by) == (2, "other-worker")

    async def test_complete_retry_truncates_a_long_error(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        error = "E" * 100 + "x" * (3 * core.MAX_ERROR_LENGTH)
        await kit.finish(store, job, core.Retry(delay=timedelta(0), error=error))
        stored = (await kit.get(store, job.id)).last_error
        assert stored is not None
        assert len(stored) <= core.MAX_ERROR_LENGTH
        assert stored.startswith("E" * 100)

    async def test_complete_bury_moves_to_dead(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        dead, before, after = await _finish_timed(store, job, core.Bury(error="no hope"))
        assert dead.state is core.JobState.DEAD
        assert dead.last_error == "no hope"
        assert dead.completed_at is not None
        assert before <= dead.completed_at <= after
        assert dead.attempts == 1
        assert await store.claim(kit.claim_request()) == []

    async def test_complete_release_gives_the_attempt_back(self, store: AsyncJobStore) -> None:
        released = await _back_later(
            store, core.Release(delay=timedelta(seconds=30), error="throttled")
        )
        assert released.attempts == 0
        assert released.last_error == "throttled"

    async def test_complete_release_without_error_keeps_the_last_error(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store)
        await kit.finish(store, job, core.Retry(delay=timedelta(0), error="real failure"))
        again = await kit.claim_one(store, job.kind)
        await kit.finish(store, again, core.Release())
        released = await kit.get(store, job.id)
        assert (released.state, released.attempts) == (core.JobState.PENDING, 1)
        assert released.last_error == "real failure"
        assert (await kit.claim_one(store, job.kind)).attempts == 2

    async def test_complete_with_another_worker_is_fenced(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        wrong = core.Lease(
            job_id=job.id, worker_id="intruder", attempt=job.attempts, claim=job.claims
        )
        assert await store.complete([core.Completion(lease=wrong, outcome=core.Succeeded())]) == [
            False
        ]
        after = await kit.get(store, job.id)
        assert (after.state, after.claimed_by, after.attempts) == (
            core.JobState.RUNNING,
            kit.WORKER,
            1,
        )

    async def test_complete_with_another_claim_is_fenced(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        wrong = core.Lease(
            job_id=job.id, worker_id=kit.WORKER, attempt=job.attempts, claim=job.claims + 1
        )
        outcome = core.Bury(error="should not land")
        assert await store.complete([core.Completion(lease=wrong, outcome=outcome)]) == [False]
        after = await kit.get(store, job.id)
        assert (after.state, after.last_error) == (core.JobState.RUNNING, None)

    async def test_complete_twice_applies_once(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        completion = core.Completion(lease=job.lease, outcome=core.Succeeded())
        assert await store.complete([completion]) == [True]
        assert await store.complete([completion]) == [False]
        retry = core.Completion(
            lease=job.lease, outcome=core.Retry(delay=timedelta(0), error="late")
        )
        assert await store.complete([retry]) == [False]
        assert (await kit.get(store, job.id)).state is core.JobState.SUCCEEDED

    async def test_complete_batch_reports_each_completion(self, store: AsyncJobStore) -> None:
        first = await kit.running(store)
        second = await kit.running(store)
        stale = core.Lease(job_id=second.id, worker_id=kit.WORKER, attempt=1, claim=99)
        missing = core.Lease(job_id=987_654_321, worker_id=kit.WORKER, attempt=1, claim=1)
        applied = await store.complete(
            [
                core.Completion(lease=first.lease, outcome=core.Succeeded()),
                core.Completion(lease=stale, outcome=core.Succeeded()),
                core.Completion(lease=missing, outcome=core.Succeeded()),
            ]
        )
        assert applied == [True, False, False]
        assert (await kit.get(store, first.id)).state is core.JobState.SUCCEEDED
        assert (await kit.get(store, second.id)).state is core.JobState.RUNNING

    async def test_complete_after_the_claim_was_recovered_is_fenced(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store, "vanished-worker")
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]
        assert await store.complete(
            [core.Completion(lease=job.lease, outcome=core.Succeeded())]
        ) == [False]
        again = await kit.claim_one(store, job.kind, "new-worker")
        assert again.attempts == 2
        assert await store.complete(
            [core.Completion(lease=job.lease, outcome=core.Succeeded())]
        ) == [False]
        await kit.finish(store, again, core.Succeeded())

    async def test_complete_of_a_cancelled_running_job_is_fenced(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store)
        assert await store.apply(core.JobFilter(ids=frozenset({job.id})), core.Event.CANCEL) == [
            job.id
        ]
        assert await store.complete(
            [core.Completion(lease=job.lease, outcome=core.Succeeded())]
        ) == [False]
        assert (await kit.get(store, job.id)).state is core.JobState.CANCELLED

    async def test_complete_of_a_replayed_and_reclaimed_job_is_fenced(
        self, store: AsyncJobStore
    ) -> None:
        # ABA: the same worker claims the job again with the same attempt number.
        first = await kit.running(store)
        one = core.JobFilter(ids=frozenset({first.id}))
        assert await store.apply(one, core.Event.CANCEL) == [first.id]
        assert await store.apply(one, core.Event.REPLAY, reset_attempts=True) == [first.id]
        second = await kit.claim_one(store, first.kind)
        assert (second.claimed_by, second.attempts) == (first.claimed_by, first.attempts)
        assert second.claims == first.claims + 1
        assert second.lease != first.lease
        late = core.Completion(lease=first.lease, outcome=core.Bury(error="stale run"))
        assert await store.complete([late]) == [False]
        after = await kit.get(store, first.id)
        assert (after.state, after.claims, after.last_error) == (
            core.JobState.RUNNING,
            second.claims,
            None,
        )
        assert after.lease == second.lease
        await kit.finish(store, second, core.Succeeded())

    async def test_complete_of_a_released_and_reclaimed_job_is_fenced(
        self, store: AsyncJobStore
    ) -> None:
        first = await kit.running(store)
        await kit.finish(store, first, core.Release())
        second = await kit.claim_one(store, first.kind)
        assert (second.claimed_by, second.attempts) == (first.claimed_by, first.attempts)
        assert await store.complete([core.Completion(first.lease, core.Succeeded())]) == [False]
        assert (await kit.get(store, first.id)).state is core.JobState.RUNNING
        await kit.finish(store, second, core.Succeeded())
