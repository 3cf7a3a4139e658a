"""Contract tests of a job's start (async source; ``_lifecycle.py`` is its generated twin).

Exactly-once starts: a claim starts only the first ``start_now`` jobs, the others are
held until ``start``; a held job that never starts costs no attempt. Also what a claim
writes besides the state (the worker's ``max_attempts`` policy, the heartbeat), per
``(kind, tenant)`` pair limits, a worker's re-registration, and the time a completion
records. Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import core

from . import _support_async as kit

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.core.store import ClaimedJobs
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock

_WORKER = "contract-starter"
_HOUR = timedelta(hours=1)


async def _add(store: AsyncJobStore, kind: str, n: int = 1, **fields: Any) -> list[int]:
    results = await store.enqueue([core.EnqueueRequest(kind=kind, **fields) for _ in range(n)])
    return [r.id for r in results]


async def _claim(
    store: AsyncJobStore, kind: str | None = None, worker_id: str = _WORKER, **fields: Any
) -> ClaimedJobs:
    kinds = None if kind is None else frozenset({kind})
    fields.setdefault("limit", 100)
    return await store.claim(core.ClaimRequest(worker_id=worker_id, kinds=kinds, **fields))


async def _held(store: AsyncJobStore, worker_id: str = _WORKER, **fields: Any) -> core.Job:
    """A fresh job claimed by ``worker_id`` without starting it."""
    kind = kit.fresh_kind()
    await _add(store, kind, **fields)
    [job] = await _claim(store, kind, worker_id, start_now=0)
    return job


async def _suspect(store: AsyncJobStore, kind: str, **fields: Any) -> int:
    """A new job of ``kind`` whose worker vanished after starting it (it must be the
    first of its kind in claim order)."""
    [job_id] = await _add(store, kind, **fields)
    [job] = await _claim(store, kind, "vanished-worker", limit=1)
    assert job.id == job_id
    await store.recover_stale(default_ttl=_HOUR, ttls={})
    assert (await kit.get(store, job_id)).suspect
    return job_id


async def _all(store: AsyncJobStore, *ids: int) -> list[core.Job]:
    return [await kit.get(store, job_id) for job_id in ids]


def _counters(jobs: Sequence[core.Job]) -> list[tuple[int, int]]:
    return [(job.attempts, job.claims) for job in jobs]


def _worker(worker_id: str = _WORKER) -> core.WorkerInfo:
    return core.WorkerInfo(id=worker_id, host="contract-host", pid=42)


def _one(job_id: int) -> core.JobFilter:
    return core.JobFilter(ids=frozenset({job_id}))


class AsyncLifecycleContract:
    """Starts, held jobs, claim policies and pair limits, re-registration, completion
    times. A mixin of :class:`~.store_async.AsyncJobStoreContract` (which supplies the
    ``store`` fixture and the capability skips)."""

    # ---- start_now and start ------------------------------------------------------------

    async def test_claim_start_now_charges_only_the_first_in_claim_order(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        # Enqueued out of claim order: priority decides which jobs start.
        ids = {p: (await _add(store, kind, priority=p))[0] for p in (1, 3, 0, 2)}
        jobs = await _claim(store, kind, start_now=2)
        assert [job.id for job in jobs] == [ids[3], ids[2], ids[1], ids[0]]
        assert _counters(jobs) == [(1, 1), (1, 1), (0, 1), (0, 1)]
        assert jobs.charged == {ids[3], ids[2]}
        assert jobs.held() == jobs[2:]
        assert {job.state for job in jobs} == {core.JobState.RUNNING}
        stored = [await kit.get(store, job.id) for job in jobs]
        assert _counters(stored) == _counters(jobs)
        assert {job.claimed_by for job in stored} == {_WORKER}

    async def test_claim_start_now_zero_holds_every_job_and_none_starts_all(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        await _add(store, kind, 3)
        held = await _claim(store, kind, start_now=0)
        assert _counters(held) == [(0, 1)] * 3
        assert held.charged == frozenset()
        assert [job.lease.attempt for job in held] == [0, 0, 0]
        other = kit.fresh_kind()
        await _add(store, other, 2)
        every = await _claim(store, other, start_now=None)
        assert _counters(every) == [(1, 1)] * 2
        assert every.charged == {job.id for job in every}
        beyond = kit.fresh_kind()
        await _add(store, beyond, 2)
        all_of_them = await _claim(store, beyond, start_now=5)
        assert _counters(all_of_them) == [(1, 1)] * 2
        assert all_of_them.charged == {job.id for job in all_of_them}

    async def test_start_charges_a_held_job_once(self, store: AsyncJobStore) -> None:
        job = await _held(store)
        assert (await kit.get(store, job.id)).attempts == 0
        assert await store.start([job.lease]) == [True]
        started = await kit.get(store, job.id)
        assert (started.state, started.attempts, started.claims) == (core.JobState.RUNNING, 1, 1)
        assert started.claimed_by == _WORKER
        assert started.lease.claim == job.lease.claim  # still the same claim
        await kit.finish(store, job, core.Succeeded())
        assert (await kit.get(store, job.id)).attempts == 1

    async def test_start_reports_each_lease_in_order(self, store: AsyncJobStore) -> None:
        first, second = await _held(store), await _held(store)
        missing = core.Lease(job_id=987_654_321, worker_id=_WORKER, attempt=0, claim=1)
        other_claim = core.Lease(job_id=second.id, worker_id=_WORKER, attempt=0, claim=99)
        leases = [first.lease, missing, other_claim, second.lease, first.lease]
        # A lease given twice in one call starts its job once.
        assert await store.start(leases) == [True, False, False, True, False]
        assert (await kit.get(store, first.id)).attempts == 1
        assert (await kit.get(store, second.id)).attempts == 1
        assert await store.start([]) == []

    async def test_start_of_a_lost_lease_is_false_and_changes_nothing(
        self, store: AsyncJobStore
    ) -> None:
        recovered = await _held(store, "vanished-worker")
        assert await store.recover_stale(default_ttl=_HOUR, ttls={}) == [recovered.id]
        cancelled = await _held(store)
        assert await store.apply(_one(cancelled.id), core.Event.CANCEL) == [cancelled.id]
        deleted = await _held(store)
        await store.apply(_one(deleted.id), core.Event.CANCEL)
        assert [job.id for job in await store.delete(_one(deleted.id))] == [deleted.id]
        reclaimed = await _held(store)
        await kit.finish(store, reclaimed, core.Release(refund=False))
        [again] = await _claim(store, reclaimed.kind, start_now=0)
        other_worker = core.Lease(
            job_id=again.id, worker_id="intruder", attempt=again.attempts, claim=again.claims
        )
        lost = [recovered.lease, cancelled.lease, deleted.lease, reclaimed.lease, other_worker]
        assert await store.start(lost) == [False] * 5
        after = await kit.get(store, recovered.id)
        assert (after.state, after.attempts, after.claimed_by) == (core.JobState.PENDING, 0, None)
        after = await kit.get(store, cancelled.id)
        assert (after.state, after.attempts) == (core.JobState.CANCELLED, 0)
        assert await store.get(deleted.id) is None
        after = await kit.get(store, again.id)
        assert (after.state, after.attempts, after.claims) == (core.JobState.RUNNING, 0, 2)
        assert await store.start([again.lease]) == [True]  # the new claim still starts

    async def test_recover_stale_of_a_held_job_costs_no_attempt(self, store: AsyncJobStore) -> None:
        # A worker that dies with a full prefetch buffer: its held jobs lose nothing.
        kind = kit.fresh_kind()
        await _add(store, kind, 3, max_attempts=1)
        jobs = await _claim(store, kind, "crashed-worker", start_now=1)
        started, held = jobs[0], jobs[1:]
        recovered = await store.recover_stale(default_ttl=_HOUR, ttls={})
        assert sorted(recovered) == sorted(job.id for job in jobs)
        dead = await kit.get(store, started.id)
        assert (dead.state, dead.attempts) == (core.JobState.DEAD, 1)
        for job in held:
            after = await kit.get(store, job.id)
            assert (after.state, after.attempts, after.claims) == (core.JobState.PENDING, 0, 1)
        rescued = await _claim(store, kind, "rescuer")
        assert sorted(job.id for job in rescued) == sorted(job.id for job in held)
        assert _counters(rescued) == [(1, 2)] * 2

    # ---- suspects: jobs whose worker vanished after starting them ------------------------

    async def test_recover_stale_of_a_started_job_makes_it_a_suspect(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        await _add(store, kind, 3)
        direct, held, started = await _claim(store, kind, "crashed-worker", start_now=1)
        assert await store.start([started.lease]) == [True]
        assert [job.suspect for job in (direct, held, started)] == [False] * 3
        await store.recover_stale(default_ttl=_HOUR, ttls={})
        after = await _all(store, direct.id, held.id, started.id)
        assert [job.state for job in after] == [core.JobState.PENDING] * 3
        assert [job.suspect for job in after] == [True, False, True]

    async def test_claim_starts_a_suspect_alone(self, store: AsyncJobStore) -> None:
        kind = kit.fresh_kind()
        suspect_id = await _suspect(store, kind, priority=1)
        first = (await _add(store, kind, priority=2))[0]
        last = (await _add(store, kind, priority=0))[0]
        jobs = await _claim(store, kind, start_now=3)
        assert [job.id for job in jobs] == [first, suspect_id, last]
        assert [job.suspect for job in jobs] == [False, True, False]
        # Only the suspect pays; its neighbours are held (not charged), and the claim
        # says so.
        assert [job.attempts for job in jobs] == [0, 2, 0]
        assert jobs.charged == {suspect_id}
        assert [job.attempts for job in await _all(store, first, suspect_id, last)] == [0, 2, 0]

    async def test_claim_holds_a_suspect_beyond_start_now_like_any_job(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        suspect_id = await _suspect(store, kind, priority=0)
        [first] = await _add(store, kind, priority=1)
        jobs = await _claim(store, kind, start_now=1)
        assert [(job.id, job.suspect, job.attempts) for job in jobs] == [
            (first, False, 1),
            (suspect_id, True, 1),  # held: still the attempt of its last run
        ]
        assert jobs.charged == {first}

    async def test_any_outcome_or_operator_event_clears_the_started_mark(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        # Made in this order so each claim takes the newest (the best in claim order).
        cancelled = await _suspect(store, kind, priority=0)
        retried = await _suspect(store, kind, priority=1)
        [job] = await _claim(store, kind, limit=1)
        assert (job.id, job.suspect) == (retried, True)
        await kit.finish(store, job, core.Retry(delay=timedelta(0), error="boom"))
        await store.apply(_one(cancelled), core.Event.CANCEL)
        await store.apply(_one(cancelled), core.Event.REPLAY)
        assert [job.suspect for job in await _all(store, retried, cancelled)] == [False, False]
        again = await _claim(store, kind, start_now=2)
        assert [(job.id, job.suspect) for job in again] == [(retried, False), (cancelled, False)]
        assert [job.attempts for job in again] == [3, 2]

    async def test_an_outcome_pays_for_a_start_that_was_not_paid(
        self, store: AsyncJobStore
    ) -> None:
        # A worker starts a held job without a round trip; its outcome pays the attempt,
        # once, whether or not a start() paid already.
        kind = kit.fresh_kind()
        await _add(store, kind, 4)
        unpaid, paid, released, interrupted = await _claim(store, kind, start_now=0)
        assert await store.start([paid.lease]) == [True]
        assert await store.start([paid.lease]) == [True]  # paid once per claim
        assert (await kit.get(store, paid.id)).attempts == 1
        await store.complete(
            [
                core.Completion(unpaid.lease, core.Retry(timedelta(0), "boom")),
                core.Completion(paid.lease, core.Succeeded()),
                core.Completion(released.lease, core.Release(refund=False)),
                core.Completion(interrupted.lease, core.Release(refund=True)),
            ]
        )
        after = await _all(store, unpaid.id, paid.id, released.id, interrupted.id)
        assert [job.attempts for job in after] == [1, 1, 0, 0]

    async def test_recovered_is_set_by_recovery_and_cleared_by_an_outcome(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        await _add(store, kind, 2)
        first, second = await _claim(store, kind, "vanished-worker", start_now=0)
        await store.recover_stale(default_ttl=_HOUR, ttls={})
        assert [job.recovered for job in await _all(store, first.id, second.id)] == [True] * 2
        again = await _claim(store, kind, start_now=0)
        assert [job.recovered for job in again] == [True, True]  # the claim keeps it
        await store.complete([core.Completion(again[0].lease, core.Succeeded())])
        await store.apply(_one(second.id), core.Event.CANCEL)
        assert [job.recovered for job in await _all(store, first.id, second.id)] == [False] * 2

    async def test_release_without_refund_of_a_held_job(self, store: AsyncJobStore) -> None:
        job = await _held(store)
        await kit.finish(store, job, core.Release(refund=False))
        released = await kit.get(store, job.id)
        assert (released.state, released.attempts, released.claims) == (core.JobState.PENDING, 0, 1)
        [again] = await _claim(store, job.kind)
        assert _counters([again]) == [(1, 2)]

    # ---- max_attempts policy ---------------------------------------------------------------

    async def test_enqueue_keeps_whether_max_attempts_was_explicit(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        requests = [
            core.EnqueueRequest(
                kind, max_attempts=2, explicit_max_attempts=True, idempotency_key="e1"
            ),
            core.EnqueueRequest(kind, max_attempts=7, idempotency_key="e2"),
            core.EnqueueRequest(kind, max_attempts=3, explicit_max_attempts=True),
        ]
        keyed = await store.enqueue(requests)
        [single] = await store.enqueue([core.EnqueueRequest(kind, explicit_max_attempts=True)])
        [plain] = await store.enqueue([core.EnqueueRequest(kind, max_attempts=4)])
        stored = [await kit.get(store, r.id) for r in [*keyed, single, plain]]
        assert [(j.max_attempts, j.explicit_max_attempts) for j in stored] == [
            (2, True),
            (7, False),
            (3, True),
            (5, True),
            (4, False),
        ]

    async def test_claim_max_attempts_applies_to_jobs_without_an_explicit_value(
        self, store: AsyncJobStore
    ) -> None:
        kind, other = kit.fresh_kind(), kit.fresh_kind()
        [explicit] = await _add(store, kind, max_attempts=3, explicit_max_attempts=True)
        [default] = await _add(store, kind, max_attempts=5)
        [elsewhere] = await _add(store, other, max_attempts=5)
        jobs = await _claim(store, max_attempts={kind: 9, "contract.unused": 2})
        claimed = {job.id: (job.max_attempts, job.explicit_max_attempts) for job in jobs}
        assert claimed == {explicit: (3, True), default: (9, False), elsewhere: (5, False)}
        for job_id, expected in claimed.items():
            job = await kit.get(store, job_id)
            assert (job.max_attempts, job.explicit_max_attempts) == expected

    # ---- pair limits -------------------------------------------------------------------------

    async def test_claim_pair_limits_cap_a_pair_and_keep_other_tenants_claimable(
        self, store: AsyncJobStore
    ) -> None:
        kind, other = kit.fresh_kind(), kit.fresh_kind()
        # The throttled pair comes first in claim order: it must not hide the others.
        await _add(store, kind, 3, tenant="a", priority=9)
        await _add(store, kind, 2, tenant="b")
        await _add(store, kind, 2)
        await _add(store, other, 2, tenant="a")
        limits = {(kind, "a"): 1, (kind, None): 0, (other, "b"): 0}
        jobs = await _claim(store, pair_limits=limits, limit=4)
        assert [(job.kind, job.tenant) for job in jobs] == [
            (kind, "a"),
            (kind, "b"),
            (kind, "b"),
            (other, "a"),
        ]
        rest = await _claim(store, pair_limits=limits)
        assert [(job.kind, job.tenant) for job in rest] == [(kind, "a"), (other, "a")]
        rest = await _claim(store, pair_limits={(kind, "a"): 5, (kind, None): 0})
        assert [(job.kind, job.tenant) for job in rest] == [(kind, "a")]
        rest = await _claim(store, pair_limits={(kind, "a"): 5})
        assert [(job.kind, job.tenant) for job in rest] == [(kind, None), (kind, None)]

    async def test_claim_pair_limits_and_kind_limits_hold_together(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        await _add(store, kind, 3, tenant="a", priority=9)
        await _add(store, kind, 3, tenant="b", priority=5)
        await _add(store, kind, 3, tenant="c")
        jobs = await _claim(store, pair_limits={(kind, "a"): 1}, kind_limits={kind: 3})
        assert [job.tenant for job in jobs] == ["a", "b", "b"]
        limits = {(kind, "a"): 1, (kind, "b"): 2}
        jobs = await _claim(store, worker_id="w2", pair_limits=limits, cluster_limits={kind: 6})
        # 3 run already: 3 more at most, a and b within their pair limits.
        assert [job.tenant for job in jobs] == ["a", "b", "c"]
        assert await _claim(store, worker_id="w3", cluster_limits={kind: 6}) == []

    # ---- the claim's heartbeat and re-registration ------------------------------------------

    @pytest.mark.skiplock_requires("controllable_clock")
    async def test_claim_refreshes_the_heartbeat_of_its_worker(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        await store.register_worker(_worker())
        kind = kit.fresh_kind()
        await _add(store, kind, 2)
        [earlier] = await _claim(store, kind, limit=1)
        clock.advance(2 * _HOUR)  # silent for longer than the TTL...
        [now] = await _claim(store, kind, limit=1)  # ...until this claim
        assert await store.recover_stale(default_ttl=_HOUR, ttls={}) == []
        for job in (earlier, now):
            assert (await kit.get(store, job.id)).claimed_by == _WORKER
        clock.advance(2 * _HOUR)
        assert await _claim(store, kind) == []  # took nothing
        recovered = await store.recover_stale(default_ttl=_HOUR, ttls={})
        assert sorted(recovered) == sorted([earlier.id, now.id])

    async def test_claim_by_an_unregistered_worker_does_not_register_it(
        self, store: AsyncJobStore
    ) -> None:
        kind = kit.fresh_kind()
        await _add(store, kind)
        [job] = await _claim(store, kind, "unregistered")
        assert job.claimed_by == "unregistered"
        assert await store.heartbeat("unregistered") is None

    async def test_register_worker_releases_the_jobs_of_an_earlier_life(
        self, store: AsyncJobStore
    ) -> None:
        await store.register_worker(_worker())
        kind = kit.fresh_kind()
        await _add(store, kind, 2, priority=1)
        started, held = await _claim(store, kind, start_now=1)
        before = {job.id: await kit.get(store, job.id) for job in (started, held)}
        others = await _held(store, "another-worker")
        await store.register_worker(_worker())  # restarted under the same id
        for job in (started, held):
            after = await kit.get(store, job.id)
            assert after.state is core.JobState.PENDING
            assert (after.claimed_by, after.claimed_at) == (None, None)
            assert (after.attempts, after.claims) == (job.attempts, job.claims)
            assert after.available_at == before[job.id].available_at
        assert (await kit.get(store, others.id)).claimed_by == "another-worker"
        assert await store.start([held.lease]) == [False]
        assert await store.complete([core.Completion(started.lease, core.Succeeded())]) == [False]
        # The released started job may have ended its worker's life: it is a suspect,
        # and a claim starts it alone.
        assert [job.suspect for job in await _all(store, started.id, held.id)] == [True, False]
        assert [job.recovered for job in await _all(store, started.id, held.id)] == [True] * 2
        again = await _claim(store, kind)
        assert [job.suspect for job in again] == [True, False]
        assert _counters(again) == [(2, 2), (0, 2)]
        assert await store.heartbeat(_WORKER, [job.id for job in again]) == []

    # ---- completion times ----------------------------------------------------------------

    @pytest.mark.skiplock_requires("controllable_clock", "transactions")
    async def test_completion_in_a_transaction_records_when_it_was_written(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        kind = kit.fresh_kind()
        await _add(store, kind, 2)
        done, retried = await _claim(store, kind)
        assert done.claimed_at is not None
        async with store.transaction() as tx:
            clock.advance(30)
            written = await store.now()
            applied = await store.complete(
                [
                    core.Completion(done.lease, core.Succeeded()),
                    core.Completion(
                        retried.lease, core.Retry(delay=timedelta(minutes=1), error="x")
                    ),
                ],
                connection=tx,
            )
            assert applied == [True, True]
            clock.advance(30)
        assert (await kit.get(store, done.id)).completed_at == written
        assert written == done.claimed_at + timedelta(seconds=30)
        later = await kit.get(store, retried.id)
        assert later.available_at == written + timedelta(minutes=1)
