"""Contract tests of claims (async source; ``_claim.py`` is its generated twin).

Claim order, limits, filters, kind and cluster caps, exclusivity under concurrency.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING
from unittest.mock import ANY

import attrs

from skiplock._compat_async import join, spawn
from skiplock.core import (
    JobFilter,
    JobState,
    Lease,
    Page,
    Succeeded,
)

from ._support_async import (
    _PAYLOAD,
    _WORKER,
    AsyncContractBase,
    _claim_request,
    _enqueue,
    _finish,
    _get,
    _ids,
    _request,
    requires,
)

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock


class AsyncClaimContract(AsyncContractBase):
    """What a claim takes, in which order, and that claimers never share a job."""

    # ---- claim (R4, R14, R18, J2, R15) -------------------------------------------------

    async def test_claim_marks_running_and_counts_the_attempt(self, store: AsyncJobStore) -> None:
        job_id = await _enqueue(store, payload=_PAYLOAD, max_attempts=4)
        before = await store.now()
        [job] = await store.claim(_claim_request())
        after = await store.now()
        assert job.id == job_id
        assert job.state is JobState.RUNNING
        assert job.attempts == 1
        assert job.claims == 1
        assert job.claimed_by == _WORKER
        assert job.claimed_at is not None
        assert before <= job.claimed_at <= after
        assert job.payload == _PAYLOAD
        assert job.lease == Lease(job_id=job_id, worker_id=_WORKER, attempt=1, claim=1)
        stored = await _get(store, job_id)
        assert (stored.state, stored.attempts, stored.claims, stored.claimed_by) == (
            JobState.RUNNING,
            1,
            1,
            _WORKER,
        )

    async def test_next_due_is_the_earliest_job_due_later_of_the_kinds_and_tenants(
        self, store: AsyncJobStore
    ) -> None:
        assert await store.next_due(None, None) is None
        await _enqueue(store, "contract.now")  # due already: the claim's, not the timer's
        assert await store.next_due(None, None) is None
        before = await store.now()
        later = await _enqueue(store, "contract.later", delay=timedelta(hours=2), priority=5)
        soon = await _enqueue(store, "contract.soon", delay=timedelta(hours=1), tenant="t1")
        sooner = await _enqueue(store, "contract.sooner", delay=timedelta(minutes=30))
        at = {i: (await _get(store, i)).available_at for i in (later, soon, sooner)}
        due = await store.next_due(None, None)
        assert due is not None
        assert due.at == at[sooner]
        assert before <= due.now <= await store.now()
        assert 1700 < due.seconds <= 1800
        mine = frozenset({"contract.soon", "contract.later"})
        assert (await store.next_due(mine, None)) == attrs.evolve(due, at=at[soon], now=ANY)
        assert (await store.next_due(None, frozenset({"t1"}))) == attrs.evolve(
            due, at=at[soon], now=ANY
        )
        assert (await store.next_due(frozenset({"contract.later"}), None)) == attrs.evolve(
            due, at=at[later], now=ANY
        )
        assert await store.next_due(frozenset({"contract.later"}), frozenset({"t1"})) is None
        assert await store.next_due(frozenset({"contract.none"}), None) is None

    async def test_next_due_never_later_than_the_job_behind_many_others(
        self, store: AsyncJobStore
    ) -> None:
        # 100 jobs of another kind due before ours, at the same priority: a store may
        # answer with an earlier time (its read is bounded), never a later one.
        await store.enqueue(
            [_request("contract.other", delay=timedelta(seconds=60 + i)) for i in range(100)]
        )
        mine = await _enqueue(store, "contract.mine", delay=timedelta(seconds=600))
        available_at = (await _get(store, mine)).available_at
        due = await store.next_due(frozenset({"contract.mine"}), None)
        assert due is not None
        assert due.now + timedelta(seconds=59) < due.at <= available_at

    async def test_claim_order_priority_then_available_at_then_id(
        self, store: AsyncJobStore
    ) -> None:
        now = await store.now()

        async def job(priority: int, seconds_ago: int) -> int:
            return await _enqueue(
                store, priority=priority, available_at=now - timedelta(seconds=seconds_ago)
            )

        a = await job(0, 30)
        b = await job(5, 10)
        c = await job(5, 20)
        d = await job(0, 30)  # same as a, later id
        e = await job(-1, 60)
        claimed = []
        for _ in range(5):
            jobs = await store.claim(_claim_request(limit=1))
            claimed += _ids(jobs)
        assert claimed == [c, b, a, d, e]
        assert await store.claim(_claim_request()) == []

    async def test_claim_batch_takes_the_first_in_order(self, store: AsyncJobStore) -> None:
        low = await _enqueue(store, priority=-5)
        high = [await _enqueue(store, priority=p) for p in (3, 2, 1)]
        jobs = await store.claim(_claim_request(limit=3))
        assert sorted(_ids(jobs)) == sorted(high)
        assert (await _get(store, low)).state is JobState.PENDING

    async def test_claim_not_before_available_at(self, store: AsyncJobStore) -> None:
        now = await store.now()
        due = await _enqueue(store, available_at=now - timedelta(seconds=1))
        later = await _enqueue(store, available_at=now + timedelta(hours=1))
        delayed = await _enqueue(store, delay=timedelta(hours=1))
        assert _ids(await store.claim(_claim_request())) == [due]
        assert await store.claim(_claim_request()) == []
        for job_id in (later, delayed):
            assert (await _get(store, job_id)).state is JobState.PENDING

    @requires("controllable_clock")
    async def test_claim_once_the_clock_reaches_available_at(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        job_id = await _enqueue(store, delay=timedelta(seconds=10))
        assert await store.claim(_claim_request()) == []
        clock.advance(9.999)
        assert await store.claim(_claim_request()) == []
        clock.advance(0.001)
        assert _ids(await store.claim(_claim_request())) == [job_id]

    async def test_claim_respects_limit(self, store: AsyncJobStore) -> None:
        ids = [await _enqueue(store) for _ in range(5)]
        first = await store.claim(_claim_request(limit=2))
        second = await store.claim(_claim_request(limit=2))
        third = await store.claim(_claim_request(limit=2))
        assert [len(first), len(second), len(third)] == [2, 2, 1]
        assert sorted(_ids(first) + _ids(second) + _ids(third)) == ids
        assert await store.claim(_claim_request(limit=2)) == []

    async def test_claim_restricted_to_kinds(self, store: AsyncJobStore) -> None:
        a = await _enqueue(store, "contract.a")
        await _enqueue(store, "contract.b")
        jobs = await store.claim(_claim_request(kinds=frozenset({"contract.a", "contract.x"})))
        assert _ids(jobs) == [a]

    async def test_claim_restricted_to_tenants(self, store: AsyncJobStore) -> None:
        t1 = await _enqueue(store, tenant="t1")
        await _enqueue(store, tenant="t2")
        no_tenant = await _enqueue(store)
        jobs = await store.claim(_claim_request(tenants=frozenset({"t1"})))
        assert _ids(jobs) == [t1]
        rest = await store.claim(_claim_request())
        assert no_tenant in _ids(rest)

    async def test_claim_kind_limits_cap_a_kind_in_one_claim(self, store: AsyncJobStore) -> None:
        for _ in range(3):
            await _enqueue(store, "contract.x")
            await _enqueue(store, "contract.y")
        jobs = await store.claim(_claim_request(kind_limits={"contract.x": 1}))
        kinds = sorted(job.kind for job in jobs)
        assert kinds == ["contract.x"] + ["contract.y"] * 3

    async def test_claim_skips_excluded_kind_tenant_pairs(self, store: AsyncJobStore) -> None:
        await _enqueue(store, "contract.x", tenant="a")
        xb = await _enqueue(store, "contract.x", tenant="b")
        await _enqueue(store, "contract.x")
        ya = await _enqueue(store, "contract.y", tenant="a")
        excluded = frozenset({("contract.x", "a"), ("contract.x", None)})
        jobs = await store.claim(_claim_request(excluded=excluded))
        assert sorted(_ids(jobs)) == sorted([xb, ya])

    async def test_claim_skips_excluded_kinds(self, store: AsyncJobStore) -> None:
        await _enqueue(store, "contract.x")
        y = await _enqueue(store, "contract.y")
        jobs = await store.claim(_claim_request(excluded_kinds=frozenset({"contract.x"})))
        assert _ids(jobs) == [y]

    async def test_claim_cluster_limits_count_running_jobs_of_every_worker(
        self, store: AsyncJobStore
    ) -> None:
        for _ in range(5):
            await _enqueue(store, "contract.limited")
        free = await _enqueue(store, "contract.free")
        limits = {"contract.limited": 2}
        first = await store.claim(_claim_request("w1", cluster_limits=limits))
        assert sorted(job.kind for job in first) == ["contract.free"] + ["contract.limited"] * 2
        assert free in _ids(first)
        assert await store.claim(_claim_request("w2", cluster_limits=limits)) == []
        done = next(job for job in first if job.kind == "contract.limited")
        await _finish(store, done, Succeeded())
        second = await store.claim(_claim_request("w2", cluster_limits=limits))
        assert [job.kind for job in second] == ["contract.limited"]

    @requires("concurrent")
    async def test_claim_cluster_limit_is_strict_under_concurrency(
        self, store: AsyncJobStore
    ) -> None:
        await store.enqueue([_request("contract.limited") for _ in range(20)])
        limits = {"contract.limited": 3}

        async def claimer(worker_id: str) -> list[int]:
            return _ids(await store.claim(_claim_request(worker_id, 5, cluster_limits=limits)))

        tasks = [spawn(claimer, f"w{i}") for i in range(8)]
        claimed = [job_id for task in tasks for job_id in await join(task)]
        assert len(claimed) <= 3
        assert len(set(claimed)) == len(claimed)
        await store.claim(_claim_request("late", 5, cluster_limits=limits))
        running = await store.list_jobs(
            JobFilter(states=frozenset({JobState.RUNNING})), Page(limit=100)
        )
        assert len(running) == 3

    @requires("concurrent")
    async def test_claim_concurrent_claimers_never_share_a_job(self, store: AsyncJobStore) -> None:
        results = await store.enqueue([_request(payload=i) for i in range(60)])

        async def claimer(worker_id: str) -> list[int]:
            got: list[int] = []
            while jobs := await store.claim(_claim_request(worker_id, 3)):
                assert all(job.claimed_by == worker_id for job in jobs)
                got += _ids(jobs)
            return got

        tasks = [spawn(claimer, f"w{i}") for i in range(8)]
        claimed = [job_id for task in tasks for job_id in await join(task)]
        claimed += _ids(await store.claim(_claim_request("sweeper", 100)))
        assert len(claimed) == len(set(claimed))
        assert sorted(claimed) == sorted(r.id for r in results)
