"""Contract tests of completions (async source; ``_completion.py`` is its generated twin).

Every outcome of a claimed job and the fencing of stale leases.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from skiplock.core import (
    MAX_ERROR_LENGTH,
    Bury,
    Completion,
    Event,
    JobFilter,
    JobState,
    Lease,
    Release,
    Retry,
    Succeeded,
)

from ._support_async import (
    _WORKER,
    AsyncContractBase,
    _claim_one,
    _claim_request,
    _finish,
    _get,
    _running,
)

if TYPE_CHECKING:
    from datetime import datetime

    from skiplock.core import Job, Outcome
    from skiplock.ports import AsyncJobStore


async def _finish_timed(
    store: AsyncJobStore, job: Job, outcome: Outcome
) -> tuple[Job, datetime, datetime]:
    """Finish ``job`` with ``outcome``: the job as stored then, and the store's clock read
    just before and just after the call."""
    before = await store.now()
    await _finish(store, job, outcome)
    after = await store.now()
    return await _get(store, job.id), before, after


async def _back_later(store: AsyncJobStore, outcome: Retry | Release) -> Job:
    """Finish a running job with ``outcome``: it is pending again, claimed by nobody and
    not completed, due ``outcome.delay`` after the call. Returns it as stored."""
    back, before, after = await _finish_timed(store, await _running(store), outcome)
    assert back.state is JobState.PENDING
    assert back.claimed_by is None
    assert back.completed_at is None
    assert before + outcome.delay <= back.available_at <= after + outcome.delay
    return back


class AsyncCompletionContract(AsyncContractBase):
    """Outcomes of claimed jobs and the fencing of stale leases."""

    # ---- complete and fencing (R6, R10, R12) ---------------------------------------------

    async def test_complete_succeeded(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        done, before, after = await _finish_timed(store, job, Succeeded())
        assert done.state is JobState.SUCCEEDED
        assert done.completed_at is not None
        assert before <= done.completed_at <= after
        assert done.attempts == 1
        assert done.last_error is None

    async def test_complete_succeeded_clears_the_previous_error(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        await _finish(store, job, Retry(delay=timedelta(0), error="first try failed"))
        again = await _claim_one(store, job.kind)
        assert again.attempts == 2
        assert again.last_error == "first try failed"
        await _finish(store, again, Succeeded())
        done = await _get(store, job.id)
        assert (done.state, done.attempts, done.last_error) == (JobState.SUCCEEDED, 2, None)

    async def test_complete_retry_returns_to_pending_later(self, store: AsyncJobStore) -> None:
        retried = await _back_later(store, Retry(delay=timedelta(minutes=5), error="boom"))
        assert retried.attempts == 1
        assert retried.last_error == "boom"
        assert await store.claim(_claim_request(kinds=frozenset({retried.kind}))) == []

    async def test_complete_retry_with_zero_delay_is_claimable_again(
        self, store: AsyncJobStore
    ) -> None:
        job = await _running(store)
        await _finish(store, job, Retry(delay=timedelta(0), error="again"))
        again = await _claim_one(store, job.kind, "other-worker")
        assert (again.attempts, again.claimed_by) == (2, "other-worker")

    async def test_complete_retry_truncates_a_long_error(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        error = "E" * 100 + "x" * (3 * MAX_ERROR_LENGTH)
        await _finish(store, job, Retry(delay=timedelta(0), error=error))
        stored = (await _get(store, job.id)).last_error
        assert stored is not None
        assert len(stored) <= MAX_ERROR_LENGTH
        assert stored.startswith("E" * 100)

    async def test_complete_bury_moves_to_dead(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        dead, before, after = await _finish_timed(store, job, Bury(error="no hope"))
        assert dead.state is JobState.DEAD
        assert dead.last_error == "no hope"
        assert dead.completed_at is not None
        assert before <= dead.completed_at <= after
        assert dead.attempts == 1
        assert await store.claim(_claim_request()) == []

    async def test_complete_release_gives_the_attempt_back(self, store: AsyncJobStore) -> None:
        released = await _back_later(store, Release(delay=timedelta(seconds=30), error="throttled"))
        assert released.attempts == 0
        assert released.last_error == "throttled"

    async def test_complete_release_without_error_keeps_the_last_error(
        self, store: AsyncJobStore
    ) -> None:
        job = await _running(store)
        await _finish(store, job, Retry(delay=timedelta(0), error="real failure"))
        again = await _claim_one(store, job.kind)
        await _finish(store, again, Release())
        released = await _get(store, job.id)
        assert (released.state, released.attempts) == (JobState.PENDING, 1)
        assert released.last_error == "real failure"
        assert (await _claim_one(store, job.kind)).attempts == 2

    async def test_complete_with_another_worker_is_fenced(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        wrong = Lease(job_id=job.id, worker_id="intruder", attempt=job.attempts, claim=job.claims)
        assert await store.complete([Completion(lease=wrong, outcome=Succeeded())]) == [False]
        after = await _get(store, job.id)
        assert (after.state, after.claimed_by, after.attempts) == (
            JobState.RUNNING,
            _WORKER,
            1,
        )

    async def test_complete_with_another_claim_is_fenced(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        wrong = Lease(job_id=job.id, worker_id=_WORKER, attempt=job.attempts, claim=job.claims + 1)
        outcome = Bury(error="should not land")
        assert await store.complete([Completion(lease=wrong, outcome=outcome)]) == [False]
        after = await _get(store, job.id)
        assert (after.state, after.last_error) == (JobState.RUNNING, None)

    async def test_complete_twice_applies_once(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        completion = Completion(lease=job.lease, outcome=Succeeded())
        assert await store.complete([completion]) == [True]
        assert await store.complete([completion]) == [False]
        retry = Completion(lease=job.lease, outcome=Retry(delay=timedelta(0), error="late"))
        assert await store.complete([retry]) == [False]
        assert (await _get(store, job.id)).state is JobState.SUCCEEDED

    async def test_complete_batch_reports_each_completion(self, store: AsyncJobStore) -> None:
        first = await _running(store)
        second = await _running(store)
        stale = Lease(job_id=second.id, worker_id=_WORKER, attempt=1, claim=99)
        missing = Lease(job_id=987_654_321, worker_id=_WORKER, attempt=1, claim=1)
        applied = await store.complete(
            [
                Completion(lease=first.lease, outcome=Succeeded()),
                Completion(lease=stale, outcome=Succeeded()),
                Completion(lease=missing, outcome=Succeeded()),
            ]
        )
        assert applied == [True, False, False]
        assert (await _get(store, first.id)).state is JobState.SUCCEEDED
        assert (await _get(store, second.id)).state is JobState.RUNNING

    async def test_complete_after_the_claim_was_recovered_is_fenced(
        self, store: AsyncJobStore
    ) -> None:
        job = await _running(store, "vanished-worker")
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]
        assert await store.complete([Completion(lease=job.lease, outcome=Succeeded())]) == [False]
        again = await _claim_one(store, job.kind, "new-worker")
        assert again.attempts == 2
        assert await store.complete([Completion(lease=job.lease, outcome=Succeeded())]) == [False]
        await _finish(store, again, Succeeded())

    async def test_complete_of_a_cancelled_running_job_is_fenced(
        self, store: AsyncJobStore
    ) -> None:
        job = await _running(store)
        assert await store.apply(JobFilter(ids=frozenset({job.id})), Event.CANCEL) == [job.id]
        assert await store.complete([Completion(lease=job.lease, outcome=Succeeded())]) == [False]
        assert (await _get(store, job.id)).state is JobState.CANCELLED

    async def test_complete_of_a_replayed_and_reclaimed_job_is_fenced(
        self, store: AsyncJobStore
    ) -> None:
        # ABA: the same worker claims the job again with the same attempt number.
        first = await _running(store)
        one = JobFilter(ids=frozenset({first.id}))
        assert await store.apply(one, Event.CANCEL) == [first.id]
        assert await store.apply(one, Event.REPLAY, reset_attempts=True) == [first.id]
        second = await _claim_one(store, first.kind)
        assert (second.claimed_by, second.attempts) == (first.claimed_by, first.attempts)
        assert second.claims == first.claims + 1
        assert second.lease != first.lease
        late = Completion(lease=first.lease, outcome=Bury(error="stale run"))
        assert await store.complete([late]) == [False]
        after = await _get(store, first.id)
        assert (after.state, after.claims, after.last_error) == (
            JobState.RUNNING,
            second.claims,
            None,
        )
        assert after.lease == second.lease
        await _finish(store, second, Succeeded())

    async def test_complete_of_a_released_and_reclaimed_job_is_fenced(
        self, store: AsyncJobStore
    ) -> None:
        first = await _running(store)
        await _finish(store, first, Release())
        second = await _claim_one(store, first.kind)
        assert (second.claimed_by, second.attempts) == (first.claimed_by, first.attempts)
        assert await store.complete([Completion(first.lease, Succeeded())]) == [False]
        assert (await _get(store, first.id)).state is JobState.RUNNING
        await _finish(store, second, Succeeded())
