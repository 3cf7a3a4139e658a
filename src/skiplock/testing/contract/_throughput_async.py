"""Contract tests of throughput over time (async source; ``_throughput.py`` is its
generated twin).

``finished_counts()`` counts the jobs that finished since a time per bucket and final
state, from their ``completed_at``. Mixed into :class:`~.store_async.AsyncJobStoreContract`.
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
    from skiplock.testing import FakeClock

_MINUTE = timedelta(minutes=1)


def _totals(rows: list[core.FinishedCount]) -> Counter[tuple[datetime, core.JobState]]:
    """The counts per (bucket, state), summed over the kinds (one row per bucket, state
    and kind)."""
    totals: Counter[tuple[datetime, core.JobState]] = Counter()
    seen = set()
    for row in rows:
        assert row.count > 0, "zero counts are omitted"
        assert row.kind, "each row names its kind"
        assert (row.start, row.state, row.kind) not in seen, "one row per bucket, state, kind"
        seen.add((row.start, row.state, row.kind))
        totals[row.start, row.state] += row.count
    return totals


class AsyncThroughputContract(kit.AsyncContractBase):
    """Finished jobs per bucket and final state."""

    async def test_finished_counts_of_an_empty_store(self, store: AsyncJobStore) -> None:
        assert await store.finished_counts(await store.now() - timedelta(hours=1), _MINUTE) == []

    async def test_finished_counts_count_each_final_state_in_its_bucket(
        self, store: AsyncJobStore
    ) -> None:
        since = await store.now() - timedelta(hours=1)
        by_state = {state: await kit.in_state(store, state) for state in core.JobState}
        second = await kit.in_state(store, core.JobState.DEAD)
        replayed = await kit.in_state(store, core.JobState.DEAD)
        assert await store.apply(core.JobFilter(ids=frozenset({replayed})), core.Event.REPLAY) == [
            replayed
        ]
        expected: Counter[tuple[datetime, core.JobState]] = Counter()
        for job_id in [*by_state.values(), second]:
            job = await kit.get(store, job_id)
            if job.state in core.FINISHED_STATES:
                assert job.completed_at is not None
                start = since + ((job.completed_at - since) // _MINUTE) * _MINUTE
                expected[start, job.state] += 1

        assert _totals(await store.finished_counts(since, _MINUTE)) == expected
        assert sum(expected.values()) == 5  # pending, running and the replayed job: not

    async def test_finished_counts_start_at_since(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)
        await kit.finish(store, job, core.Succeeded())
        completed_at = (await kit.get(store, job.id)).completed_at
        assert completed_at is not None
        rows = await store.finished_counts(completed_at, timedelta(seconds=30))
        assert _totals(rows) == {(completed_at, core.JobState.SUCCEEDED): 1}
        later = completed_at + timedelta(microseconds=1)
        assert await store.finished_counts(later, timedelta(seconds=30)) == []

    async def test_finished_counts_tell_the_kinds_apart(self, store: AsyncJobStore) -> None:
        since = await store.now() - timedelta(hours=1)
        mail, scan = kit.fresh_kind(), kit.fresh_kind()
        for kind, n in ((mail, 3), (scan, 2)):
            await store.enqueue([kit.request(kind) for _ in range(n)])
            jobs = await store.claim(kit.claim_request(limit=n, kinds=frozenset({kind})))
            assert len(jobs) == n
            for job in jobs:
                await kit.finish(store, job, core.Succeeded())
        per_kind: Counter[str] = Counter()
        for row in await store.finished_counts(since, timedelta(hours=2)):
            assert row.state is core.JobState.SUCCEEDED
            per_kind[row.kind or ""] += row.count
        assert per_kind == {mail: 3, scan: 2}

    @kit.requires("controllable_clock")
    async def test_finished_counts_put_jobs_in_the_buckets_of_their_completion(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        since = await store.now()
        await kit.in_state(store, core.JobState.SUCCEEDED)
        clock.advance(timedelta(seconds=59))
        await kit.in_state(store, core.JobState.SUCCEEDED)
        clock.advance(timedelta(seconds=1))
        await kit.in_state(store, core.JobState.SUCCEEDED)
        await kit.in_state(store, core.JobState.CANCELLED)
        clock.advance(timedelta(minutes=5))
        await kit.in_state(store, core.JobState.FAILED)

        assert _totals(await store.finished_counts(since, _MINUTE)) == {
            (since, core.JobState.SUCCEEDED): 2,
            (since + _MINUTE, core.JobState.SUCCEEDED): 1,
            (since + _MINUTE, core.JobState.CANCELLED): 1,
            (since + 6 * _MINUTE, core.JobState.FAILED): 1,
        }
        assert _totals(await store.finished_counts(since + _MINUTE, 5 * _MINUTE)) == {
            (since + _MINUTE, core.JobState.SUCCEEDED): 1,
            (since + _MINUTE, core.JobState.CANCELLED): 1,
            (since + 6 * _MINUTE, core.JobState.FAILED): 1,
        }
