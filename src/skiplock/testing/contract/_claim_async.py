"""Contract tests of claims (async source; ``_claim.py`` is its generated twin).

Claim order, limits, filters, kind and cluster caps, exclusivity under concurrency.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING
from unittest.mock import ANY

import attrs

from skiplock import core
from skiplock._compat_async import join, spawn
from skiplock.core.store import ClaimedJobs

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock


class AsyncClaimContract(kit.AsyncContractBase):
    """What a claim takes, in which order, and that claimers never share a job."""

    # ---- claim (R4, R14, R18, J2, R15) -------------------------------------------------

    async def test_claim_marks_running_and_counts_the_attempt(self, store: AsyncJobStore) -> None:
        job_id = await kit.enqueue(store, payload=kit.PAYLOAD, max_attempts=4)
        before = await store.now()
        [job] = await store.claim(kit.claim_request())
        after = await store.now()
        assert job.id == job_id
        assert job.state is core.JobState.RUNNING
        assert job.attempts == 1
        assert job.claims == 1
        assert job.claimed_by == kit.WORKER
        assert job.claimed_at is not None
        assert before <= job.claimed_at <= after
        assert job.payload == kit.PAYLOAD
        assert job.lease == core.Lease(job_id=job_id, worker_id=kit.WORKER, attempt=1, claim=1)
        stored = await kit.get(store, job_id)
        assert (stored.state, stored.attempts, stored.claims, stored.claimed_by) == (
            core.JobState.RUNNING,
            1,
            1,
            kit.WORKER,
        )

    async def test_claim_says_what_it_charged_beside_what_it_throttled(
        self, store: AsyncJobStore
    ) -> None:
        # The claim's result names the jobs it paid an attempt for: exactly those whose
        # stored attempts it raised (and started), whatever start_now, limits and suspects
        # made of it. The worker runs those and holds the rest without deciding again.
        kind = kit.fresh_kind()
        ids = [await kit.enqueue(store, kind, priority=p) for p in (4, 3, 2, 1, 0)]
        before = {i: (await kit.get(store, i)).attempts for i in ids}
        jobs = await store.claim(kit.claim_request(kinds=frozenset({kind}), start_now=2))
        assert isinstance(jobs, ClaimedJobs)
        assert kit.ids(jobs) == ids
        assert jobs.charged == set(ids[:2])
        assert [job.id for job in jobs.held()] == ids[2:]
        assert (jobs.throttled, dict(jobs.throttled_kinds), jobs.retry_in) == (
            frozenset(),
            {},
            None,
        )
        for job in jobs:
            stored = await kit.get(store, job.id)
            paid = stored.attempts - before[job.id]
            assert paid == (1 if job.id in jobs.charged else 0), job.id
            assert job.attempts == stored.attempts  # the attempt it charged, if it did
        # A claim that takes nothing charges nothing.
        empty = await store.claim(kit.claim_request(kinds=frozenset({kind})))
        assert isinstance(empty, ClaimedJobs)
        assert (list(empty), empty.charged) == ([], frozenset())

    async def test_claim_with_errors_carries_the_earlier_attempts_errors(
        self, store: AsyncJobStore
    ) -> None:
        # ClaimRequest.with_errors: each claimed job comes with its recorded errors, as
        # get reads them (charged or held, capped claim or not); without it, none (a
        # claim reads no more than the worker needs).
        kind = kit.fresh_kind()
        failed = await kit.enqueue(store, kind, priority=1)
        fresh = await kit.enqueue(store, kind)
        for text in ("first", "second"):
            job = await kit.claim_one(store, kind)
            assert job.id == failed
            await kit.finish(store, job, core.Retry(delay=timedelta(0), error=text))
        recorded = (await kit.get(store, failed)).errors
        assert [(e.attempt, e.error) for e in recorded] == [(1, "first"), (2, "second")]
        only = frozenset({kind})
        requests = [
            kit.claim_request(kinds=only, with_errors=True),
            kit.claim_request(kinds=only, with_errors=True, start_now=0),
            kit.claim_request(kinds=only, with_errors=True, kind_limits={kind: 5}),
        ]
        for request in requests:
            jobs = await store.claim(request)
            assert kit.ids(jobs) == [failed, fresh]
            assert [job.errors for job in jobs] == [recorded, ()]
            for job in jobs:  # back to pending, for the next request
                await kit.finish(store, job, core.Release(refund=job.id in jobs.charged))
        jobs = await store.claim(kit.claim_request(kinds=only))
        assert kit.ids(jobs) == [failed, fresh]
        assert [job.errors for job in jobs] == [(), ()]

    async def test_next_due_is_the_earliest_job_due_later_of_the_kinds_and_tenants(
        self, store: AsyncJobStore
    ) -> None:
        assert await store.next_due(None, None) is None
        await kit.enqueue(store, "contract.now")  # due already: the claim's, not the timer's
        assert await store.next_due(None, None) is None
        before = await store.now()
        later = await kit.enqueue(store, "contract.later", delay=timedelta(hours=2), priority=5)
        soon = await kit.enqueue(store, "contract.soon", delay=timedelta(hours=1), tenant="t1")
        sooner = await kit.enqueue(store, "contract.sooner", delay=timedelta(minutes=30))
        at = {i: (await kit.get(store, i)).available_at for i in (later, soon, sooner)}
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
            [kit.request("contract.other", delay=timedelta(seconds=60 + i)) for i in range(100)]
        )
        mine = await kit.enqueue(store, "contract.mine", delay=timedelta(seconds=600))
        available_at = (await kit.get(store, mine)).available_at
        due = await store.next_due(frozenset({"contract.mine"}), None)
        assert due is not None
        assert due.now + timedelta(seconds=59) < due.at <= available_at

    async def test_claim_order_priority_then_available_at_then_id(
        self, store: AsyncJobStore
    ) -> None:
        now = await store.now()

        async def job(priority: int, seconds_ago: int) -> int:
            return await kit.enqueue(
                store, priority=priority, available_at=now - timedelta(seconds=seconds_ago)
            )

        a = await job(0, 30)
        b = await job(5, 10)
        c = await job(5, 20)
        d = await job(0, 30)  # same as a, later id
        e = await job(-1, 60)
        claimed = []
        for _ in range(5):
            jobs = await store.claim(kit.claim_request(limit=1))
            claimed += kit.ids(jobs)
        assert claimed == [c, b, a, d, e]
        assert await store.claim(kit.claim_request()) == []

    async def test_claim_batch_takes_the_first_in_order(self, store: AsyncJobStore) -> None:
        low = await kit.enqueue(store, priority=-5)
        high = [await kit.enqueue(store, priority=p) for p in (3, 2, 1)]
        jobs = await store.claim(kit.claim_request(limit=3))
        assert sorted(kit.ids(jobs)) == sorted(high)
        assert (await kit.get(store, low)).state is core.JobState.PENDING

    async def test_claim_not_before_available_at(self, store: AsyncJobStore) -> None:
        now = await store.now()
        due = await kit.enqueue(store, available_at=now - timedelta(seconds=1))
        later = await kit.enqueue(store, available_at=now + timedelta(hours=1))
        delayed = await kit.enqueue(store, delay=timedelta(hours=1))
        assert kit.ids(await store.claim(kit.claim_request())) == [due]
        assert await store.claim(kit.claim_request()) == []
        for job_id in (later, delayed):
            assert (await kit.get(store, job_id)).state is core.JobState.PENDING

    @kit.requires("controllable_clock")
    async def test_claim_once_the_clock_reaches_available_at(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        job_id = await kit.enqueue(store, delay=timedelta(seconds=10))
        assert await store.claim(kit.claim_request()) == []
        clock.advance(9.999)
        assert await store.claim(kit.claim_request()) == []
        clock.advance(0.001)
        assert kit.ids(await store.claim(kit.claim_request())) == [job_id]

    async def test_claim_respects_limit(self, store: AsyncJobStore) -> None:
        ids = [await kit.enqueue(store) for _ in range(5)]
        first = await store.claim(kit.claim_request(limit=2))
        second = await store.claim(kit.claim_request(limit=2))
        third = await store.claim(kit.claim_request(limit=2))
        assert [len(first), len(second), len(third)] == [2, 2, 1]
        assert sorted(kit.ids(first) + kit.ids(second) + kit.ids(third)) == ids
        assert await store.claim(kit.claim_request(limit=2)) == []

    async def test_claim_restricted_to_kinds(self, store: AsyncJobStore) -> None:
        a = await kit.enqueue(store, "contract.a")
        await kit.enqueue(store, "contract.b")
        jobs = await store.claim(kit.claim_request(kinds=frozenset({"contract.a", "contract.x"})))
        assert kit.ids(jobs) == [a]

    async def test_claim_restricted_to_tenants(self, store: AsyncJobStore) -> None:
        t1 = await kit.enqueue(store, tenant="t1")
        await kit.enqueue(store, tenant="t2")
        no_tenant = await kit.enqueue(store)
        jobs = await store.claim(kit.claim_request(tenants=frozenset({"t1"})))
        assert kit.ids(jobs) == [t1]
        rest = await store.claim(kit.claim_request())
        assert no_tenant in kit.ids(rest)

    async def test_claim_kind_limits_cap_a_kind_in_one_claim(self, store: AsyncJobStore) -> None:
        for _ in range(3):
            await kit.enqueue(store, "contract.x")
            await kit.enqueue(store, "contract.y")
        jobs = await store.claim(kit.claim_request(kind_limits={"contract.x": 1}))
        kinds = sorted(job.kind for job in jobs)
        assert kinds == ["contract.x"] + ["contract.y"] * 3

    async def test_claim_skips_excluded_kind_tenant_pairs(self, store: AsyncJobStore) -> None:
        await kit.enqueue(store, "contract.x", tenant="a")
        xb = await kit.enqueue(store, "contract.x", tenant="b")
        await kit.enqueue(store, "contract.x")
        ya = await kit.enqueue(store, "contract.y", tenant="a")
        excluded = frozenset({("contract.x", "a"), ("contract.x", None)})
        jobs = await store.claim(kit.claim_request(excluded=excluded))
        assert sorted(kit.ids(jobs)) == sorted([xb, ya])

    async def test_claim_skips_excluded_kinds(self, store: AsyncJobStore) -> None:
        await kit.enqueue(store, "contract.x")
        y = await kit.enqueue(store, "contract.y")
        jobs = await store.claim(kit.claim_request(excluded_kinds=frozenset({"contract.x"})))
        assert kit.ids(jobs) == [y]

    async def test_claim_cluster_limits_count_running_jobs_of_every_worker(
        self, store: AsyncJobStore
    ) -> None:
        for _ in range(5):
            await kit.enqueue(store, "contract.limited")
        free = await kit.enqueue(store, "contract.free")
        limits = {"contract.limited": 2}
        first = await store.claim(kit.claim_request("w1", cluster_limits=limits))
        assert sorted(job.kind for job in first) == ["contract.free"] + ["contract.limited"] * 2
        assert free in kit.ids(first)
        assert await store.claim(kit.claim_request("w2", cluster_limits=limits)) == []
        done = next(job for job in first if job.kind == "contract.limited")
        await kit.finish(store, done, core.Succeeded())
        second = await store.claim(kit.claim_request("w2", cluster_limits=limits))
        assert [job.kind for job in second] == ["contract.limited"]

    @kit.requires("concurrent")
    async def test_claim_cluster_limit_is_strict_under_concurrency(
        self, store: AsyncJobStore
    ) -> None:
        await store.enqueue([kit.request("contract.limited") for _ in range(20)])
        limits = {"contract.limited": 3}

        async def claimer(worker_id: str) -> list[int]:
            return kit.ids(
                await store.claim(kit.claim_request(worker_id, 5, cluster_limits=limits))
            )

        tasks = [spawn(claimer, f"w{i}") for i in range(8)]
        claimed = [job_id for task in tasks for job_id in await join(task)]
        assert len(claimed) <= 3
        assert len(set(claimed)) == len(claimed)
        await store.claim(kit.claim_request("late", 5, cluster_limits=limits))
        running = await store.list_jobs(
            core.JobFilter(states=frozenset({core.JobState.RUNNING})), core.Page(limit=100)
        )
        assert len(running) == 3

    # ---- concurrency keys (issue 41) ---------------------------------------------------

    async def test_claim_concurrency_key_holds_its_limit_across_kinds(
        self, store: AsyncJobStore
    ) -> None:
        # Index builds of one table, of two kinds, one at a time; another table's key
        # allows two; a job without a key is not held back by either.
        key = {"concurrency_key": "table:orders", "concurrency_limit": 1}
        first = await kit.enqueue(store, "contract.index_sync", priority=9, **key)
        gin = await kit.enqueue(store, "contract.gin_backfill", priority=8, **key)
        await kit.enqueue(store, "contract.index_sync", priority=7, **key)
        wide = [
            await kit.enqueue(
                store, "contract.gin_backfill", concurrency_key="table:users", concurrency_limit=2
            )
            for _ in range(3)
        ]
        free = await kit.enqueue(store, "contract.mail")
        claimed = await store.claim(kit.claim_request("w1", 10))
        assert sorted(kit.ids(claimed)) == sorted([first, *wide[:2], free])
        assert {(j.concurrency_key, j.concurrency_limit) for j in claimed} == {
            ("table:orders", 1),
            ("table:users", 2),
            (None, None),
        }
        # A full key holds nothing and charges nothing: its jobs stay pending as they were.
        assert await store.claim(kit.claim_request("w2", 10)) == []
        waiting = await kit.get(store, gin)
        assert (waiting.state, waiting.attempts, waiting.claims) == (core.JobState.PENDING, 0, 0)
        running = next(job for job in claimed if job.id == first)
        await kit.finish(store, running, core.Succeeded())
        # The place is free: the next job of the key, of the other kind, in claim order.
        assert kit.ids(await store.claim(kit.claim_request("w2", 10))) == [gin]

    async def test_claim_concurrency_key_full_holds_back_nothing_behind_it(
        self, store: AsyncJobStore
    ) -> None:
        # Many jobs of a full key ahead in claim order do not starve the others.
        key = {"concurrency_key": "contract:hot"}
        await store.enqueue([kit.request("contract.hot", priority=5, **key) for _ in range(6)])
        others = [await kit.enqueue(store, "contract.cold") for _ in range(2)]
        first = await store.claim(kit.claim_request("w1", 1))
        assert [job.kind for job in first] == ["contract.hot"]
        assert sorted(kit.ids(await store.claim(kit.claim_request("w2", 2)))) == sorted(others)

    @kit.requires("concurrent")
    async def test_claim_concurrency_key_is_strict_under_concurrency(
        self, store: AsyncJobStore
    ) -> None:
        limit = 2
        key = {"concurrency_key": "contract:shared", "concurrency_limit": limit}
        kinds = ("contract.index_sync", "contract.gin_backfill")
        await store.enqueue([kit.request(kinds[i % 2], **key) for i in range(24)])

        async def claimer(worker_id: str) -> list[int]:
            return kit.ids(await store.claim(kit.claim_request(worker_id, 5)))

        tasks = [spawn(claimer, f"w{i}") for i in range(8)]
        claimed = [job_id for task in tasks for job_id in await join(task)]
        assert 1 <= len(claimed) <= limit
        assert len(set(claimed)) == len(claimed)
        # Then rounds of claimers that each finish what they took: never more than the
        # limit running, every job run once.
        done: list[int] = list(claimed)
        for job_id in claimed:
            await kit.finish(store, await kit.get(store, job_id), core.Succeeded())

        async def sweeper(worker_id: str) -> list[int]:
            got: list[int] = []
            while True:
                jobs = await store.claim(kit.claim_request(worker_id, 3))
                if not jobs:
                    pending = await store.list_jobs(
                        core.JobFilter(states=frozenset({core.JobState.PENDING})),
                        core.Page(limit=1),
                    )
                    if not pending:
                        return got
                    continue
                running = await store.list_jobs(
                    core.JobFilter(states=frozenset({core.JobState.RUNNING})),
                    core.Page(limit=100),
                )
                assert len(running) <= limit, [job.id for job in running]
                got += kit.ids(jobs)
                for job in jobs:
                    await kit.finish(store, job, core.Succeeded())

        tasks = [spawn(sweeper, f"s{i}") for i in range(4)]
        done += [job_id for task in tasks for job_id in await join(task)]
        assert len(done) == len(set(done)) == 24

    @kit.requires("concurrent")
    async def test_claim_concurrent_claimers_never_share_a_job(self, store: AsyncJobStore) -> None:
        results = await store.enqueue([kit.request(payload=i) for i in range(60)])

        async def claimer(worker_id: str) -> list[int]:
            got: list[int] = []
            while jobs := await store.claim(kit.claim_request(worker_id, 3)):
                assert all(job.claimed_by == worker_id for job in jobs)
                got += kit.ids(jobs)
            return got

        tasks = [spawn(claimer, f"w{i}") for i in range(8)]
        claimed = [job_id for task in tasks for job_id in await join(task)]
        claimed += kit.ids(await store.claim(kit.claim_request("sweeper", 100)))
        assert len(claimed) == len(set(claimed))
        assert sorted(claimed) == sorted(r.id for r in results)
