"""Contract tests: the operator reads agree with a recount (async source; ``_recount.py``
is its generated twin).

``counts()``, ``health_snapshot()`` and ``finished_counts()`` may be served from
bookkeeping (PostgreSQL keeps running totals, migration 0011) but must answer exactly what
counting the jobs one by one answers, after any mix of enqueues, claims, outcomes,
operator changes, deletes and retention purges, whether or not ``roll_up_counts()`` ran
in between. Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING

from skiplock import core

from . import _support_async as kit

if TYPE_CHECKING:
    from datetime import datetime

    from skiplock.ports import AsyncJobStore

_KINDS = ("recount.a", "recount.b", "recount.c")
_TENANTS = (None, "t1", "t2")


def _bucket_start(since: datetime, bucket: timedelta, at: datetime) -> datetime:
    return since + ((at - since) // bucket) * bucket


async def _mixed_workload(store: AsyncJobStore, *, roll_up: bool) -> None:
    """Jobs of three kinds and three tenants through every state, with operator changes,
    a delete and a retention purge; ``roll_up`` folds the bookkeeping between steps."""

    async def step() -> None:
        if roll_up:
            assert await store.roll_up_counts() >= 0

    later = await store.now() + timedelta(hours=1)
    requests = [
        core.EnqueueRequest(
            kind=kind,
            tenant=tenant,
            payload=n,
            available_at=later if n % 5 == 4 else None,
        )
        for n in range(5)
        for kind in _KINDS
        for tenant in _TENANTS
    ]
    await store.enqueue(requests)
    await step()
    claimed = await store.claim(kit.claim_request(limit=30))
    assert len(claimed) == 30
    outcomes: list[core.Outcome] = [
        core.Succeeded(),
        core.Retry(delay=timedelta(0), error="again"),
        core.Bury(error="buried"),
        core.Succeeded(),
        core.Retry(delay=timedelta(hours=2), error="later"),
    ]
    completions = [
        core.Completion(lease=job.lease, outcome=outcomes[n % len(outcomes)])
        for n, job in enumerate(claimed[:25])
    ]
    assert all(await store.complete(completions))
    await step()
    jobs = await kit.all_jobs(store)
    dead = [j.id for j in jobs if j.state is core.JobState.DEAD]
    pending = [j.id for j in jobs if j.state is core.JobState.PENDING]
    await store.apply(core.JobFilter(ids=frozenset(dead[:2])), core.Event.REPLAY)
    await store.apply(core.JobFilter(ids=frozenset(pending[:3])), core.Event.CANCEL)
    await store.apply(core.JobFilter(ids=frozenset(pending[3:5])), core.Event.MARK_FAILED)
    await step()
    await store.delete(core.JobFilter(ids=frozenset(pending[5:8])))
    await store.purge(older_than=timedelta(0), archive=False, batch_size=3)
    await step()
    again = await store.claim(kit.claim_request(limit=4))
    assert all(
        await store.complete(
            [core.Completion(lease=j.lease, outcome=core.Succeeded()) for j in again]
        )
    )


class AsyncRecountContract(kit.AsyncContractBase):
    """counts, health_snapshot and finished_counts equal a recount of the jobs."""

    async def _assert_reads_match_a_recount(self, store: AsyncJobStore) -> None:
        jobs: list[core.Job] = await kit.all_jobs(store)

        counted = {(c.state, c.kind, c.tenant): c for c in await store.counts()}
        expected = Counter((j.state, j.kind, j.tenant) for j in jobs)
        assert {key: c.count for key, c in counted.items()} == dict(expected)
        for (state, _, _), c in counted.items():
            assert (c.oldest_due_age is not None) == (state is core.JobState.PENDING)

        snapshot = await store.health_snapshot()
        queues = {(q.kind, q.tenant): q for q in snapshot.queues}
        keys = {
            (j.kind, j.tenant)
            for j in jobs
            if j.state in (core.JobState.PENDING, core.JobState.RUNNING, core.JobState.DEAD)
        }
        assert set(queues) == keys
        for (kind, tenant), q in queues.items():
            group = [j for j in jobs if j.kind == kind and j.tenant == tenant]
            due = [
                j
                for j in group
                if j.state is core.JobState.PENDING and j.available_at <= snapshot.now
            ]
            assert (q.due, q.scheduled, q.running, q.dead, q.bounded) == (
                len(due),
                sum(j.state is core.JobState.PENDING for j in group) - len(due),
                sum(j.state is core.JobState.RUNNING for j in group),
                sum(j.state is core.JobState.DEAD for j in group),
                False,
            )
            assert q.oldest_due_at == min((j.available_at for j in due), default=None)

        now = await store.now()
        for since, bucket in (
            (now - timedelta(hours=1), timedelta(minutes=1)),
            # Edges inside minutes: a bucket that is not a whole minute, a since between
            # seconds.
            (now - timedelta(minutes=10, microseconds=1500), timedelta(seconds=7)),
        ):
            finished: Counter[tuple[datetime, core.JobState, str]] = Counter()
            for j in jobs:
                if j.state in core.FINISHED_STATES and j.completed_at and j.completed_at >= since:
                    start = _bucket_start(since, bucket, j.completed_at)
                    finished[start, j.state, j.kind] += 1
            rows = await store.finished_counts(since, bucket)
            assert {(r.start, r.state, r.kind): r.count for r in rows} == dict(finished)

    async def test_operator_reads_match_a_recount_after_a_mixed_workload(
        self, store: AsyncJobStore
    ) -> None:
        await _mixed_workload(store, roll_up=False)
        await self._assert_reads_match_a_recount(store)
        await store.roll_up_counts()
        await self._assert_reads_match_a_recount(store)

    async def test_operator_reads_match_a_recount_with_folds_between_changes(
        self, store: AsyncJobStore
    ) -> None:
        await _mixed_workload(store, roll_up=True)
        await self._assert_reads_match_a_recount(store)
        assert await store.roll_up_counts() >= 0
        await self._assert_reads_match_a_recount(store)

    async def test_health_bounds_the_due_and_scheduled_split_of_a_huge_queue(
        self, store: AsyncJobStore
    ) -> None:
        """More than QueueStats.SPLIT_BOUND pending jobs on both sides of now: both are given
        as that bound and flagged; with one side within it, the split is exact."""
        bound = core.QueueStats.SPLIT_BOUND
        later = await store.now() + timedelta(hours=1)
        await store.enqueue(
            [core.EnqueueRequest(kind="huge", available_at=later) for _ in range(bound + 1)]
            + [core.EnqueueRequest(kind="huge") for _ in range(bound + 1)]
            + [
                core.EnqueueRequest(kind="huge", tenant="t", available_at=later)
                for _ in range(bound + 1)
            ]
            + [core.EnqueueRequest(kind="huge", tenant="t") for _ in range(3)]
        )
        queues = {q.tenant: q for q in (await store.health_snapshot()).queues}
        assert (queues[None].due, queues[None].scheduled, queues[None].bounded) == (
            bound,
            bound,
            True,
        )
        assert queues[None].oldest_due_at is not None
        assert (queues["t"].due, queues["t"].scheduled, queues["t"].bounded) == (
            3,
            bound + 1,
            False,
        )
