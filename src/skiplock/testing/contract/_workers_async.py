"""Contract tests of workers and maintenance (async source; ``_workers.py`` is its generated
twin).

Worker registration and heartbeats, stale-claim recovery, maintenance once per period,
retention. Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock import core
from skiplock._compat_async import join, spawn

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock


class AsyncWorkersContract(kit.AsyncContractBase):
    """Workers, stale claims, maintenance once per period and retention."""

    # ---- workers and stale claims (J1, R12) -------------------------------------------

    async def test_recover_stale_returns_jobs_of_unregistered_workers(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store, "never-registered")
        await kit.finish(store, job, core.Retry(delay=timedelta(0), error="first failure"))
        job = await kit.claim_one(store, job.kind, "never-registered")
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]
        recovered = await kit.get(store, job.id)
        assert recovered.state is core.JobState.PENDING
        assert recovered.attempts == 2
        assert recovered.claims == 2
        assert recovered.claimed_by is None
        assert recovered.claimed_at is None
        assert recovered.last_error is not None
        assert recovered.last_error.startswith(core.STALE_MARK)
        assert "first failure" in recovered.last_error
        rescued = await kit.claim_one(store, job.kind, "rescuer")
        assert (rescued.attempts, rescued.claims) == (3, 3)

    async def test_recover_stale_cuts_a_long_error_after_the_mark(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store, "never-registered")
        await kit.finish(
            store, job, core.Retry(delay=timedelta(0), error="e" * core.MAX_ERROR_LENGTH)
        )
        job = await kit.claim_one(store, job.kind, "never-registered")
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]
        recovered = await kit.get(store, job.id)
        # The mark, then the stored error, cut at the limit: no truncation marker.
        expected = f"{core.STALE_MARK} {'e' * core.MAX_ERROR_LENGTH}"[: core.MAX_ERROR_LENGTH]
        assert recovered.last_error == expected

    async def test_recover_stale_leaves_live_workers_alone(self, store: AsyncJobStore) -> None:
        await store.register_worker(core.WorkerInfo(id="alive", host="h", pid=1))
        job = await kit.running(store, "alive")
        assert await store.heartbeat("alive", [job.id]) == []
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == []
        still = await kit.get(store, job.id)
        assert (still.state, still.claimed_by) == (core.JobState.RUNNING, "alive")
        assert await store.heartbeat("alive", [job.id]) == []  # the row is still there

    def _silence(self, clock: FakeClock) -> timedelta:
        """A TTL that every heartbeat written so far is older than."""
        if self.capabilities.controllable_clock:
            clock.advance(timedelta(hours=2))
            return timedelta(hours=1)
        return timedelta(0)  # the store's own clock has moved on by itself

    async def test_recover_stale_removes_the_rows_of_silent_workers(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        await store.register_worker(core.WorkerInfo(id="crashed", host="h", pid=5))
        job = await kit.running(store, "crashed")
        ttl = self._silence(clock)
        assert await store.recover_stale(default_ttl=ttl, ttls={}) == [job.id]
        assert await store.heartbeat("crashed", [job.id]) is None  # must register again
        await store.register_worker(core.WorkerInfo(id="crashed", host="h", pid=5))
        assert await store.heartbeat("crashed", [job.id]) == [job.id]

    @kit.requires("controllable_clock")
    async def test_recover_stale_keeps_worker_rows_younger_than_the_longest_ttl(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        for worker_id in ("crashed", "alive"):
            await store.register_worker(core.WorkerInfo(id=worker_id, host="h", pid=6))
        job = await kit.running(store, "crashed")
        hour = timedelta(hours=1)
        ttls = {job.kind: timedelta(minutes=1), "contract.slow": 2 * hour}
        clock.advance(hour)
        assert await store.heartbeat("alive") == []
        clock.advance(hour / 2)
        # The job's own TTL ran out, but the worker row lives as long as the longest TTL.
        assert await store.recover_stale(default_ttl=hour, ttls=ttls) == [job.id]
        assert await store.heartbeat("crashed", [job.id]) == [job.id]
        clock.advance(hour)
        assert await store.heartbeat("alive") == []
        clock.advance(hour + timedelta(seconds=1))
        assert await store.recover_stale(default_ttl=hour, ttls=ttls) == []
        assert await store.heartbeat("crashed") is None
        assert await store.heartbeat("alive") == []

    async def test_heartbeat_of_a_missing_worker_returns_none(self, store: AsyncJobStore) -> None:
        assert await store.heartbeat("never-registered") is None
        assert await store.heartbeat("never-registered", [987_654_321]) is None
        await store.register_worker(core.WorkerInfo(id="back", host="h", pid=7))
        assert await store.heartbeat("back") == []
        await store.unregister_worker("back")
        assert await store.heartbeat("back") is None
        assert await store.heartbeat("back") is None  # a heartbeat does not register
        await store.register_worker(core.WorkerInfo(id="back", host="h", pid=7))
        assert await store.heartbeat("back") == []

    async def test_heartbeat_reports_jobs_no_longer_running_under_the_worker(
        self, store: AsyncJobStore
    ) -> None:
        await store.register_worker(core.WorkerInfo(id=kit.WORKER, host="h", pid=8))
        kept, cancelled, failed, deleted, finished = [await kit.running(store) for _ in range(5)]
        elsewhere = await kit.running(store, "other-worker")
        await store.apply(
            core.JobFilter(ids=frozenset({cancelled.id, deleted.id})), core.Event.CANCEL
        )
        await store.apply(core.JobFilter(ids=frozenset({failed.id})), core.Event.MARK_FAILED)
        assert kit.ids(await store.delete(core.JobFilter(ids=frozenset({deleted.id})))) == [
            deleted.id
        ]
        await kit.finish(store, finished, core.Succeeded())
        missing = 987_654_321
        believed = [missing, elsewhere.id, kept.id, finished.id, deleted.id, failed.id]
        believed += [cancelled.id, kept.id, cancelled.id]
        gone = await store.heartbeat(kit.WORKER, believed)
        expected = {missing, elsewhere.id, finished.id, deleted.id, failed.id, cancelled.id}
        assert gone == sorted(expected)
        assert await store.heartbeat(kit.WORKER, [kept.id]) == []
        assert (await kit.get(store, kept.id)).state is core.JobState.RUNNING

    async def test_heartbeat_releases_running_jobs_the_worker_does_not_hold(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        # Issue 43: a job running under a live worker that does not hold it (a completion
        # a failover undid) goes back to pending at the worker's next heartbeat that asks
        # for it (release_unheld) — unless it was claimed since the previous one (a claim
        # racing the heartbeat). A plain heartbeat leaves it alone.
        await store.register_worker(core.WorkerInfo(id="forgetful", host="h", pid=9))
        lost, listed = [await kit.running(store, "forgetful") for _ in range(2)]
        elsewhere = await kit.running(store, "other-worker")
        clock.advance(timedelta(seconds=1))  # a store with its own clock moves by itself
        # A claim refreshes the heartbeat: its jobs are not older than the cutoff.
        late = await kit.running(store, "forgetful")
        clock.advance(timedelta(seconds=1))
        assert await store.heartbeat("forgetful", [listed.id], release_unheld=True) == []
        released = await kit.get(store, lost.id)
        assert released.state is core.JobState.PENDING
        assert (released.claimed_by, released.claimed_at) == (None, None)
        assert released.recovered
        assert (released.attempts, released.claims) == (lost.attempts, lost.claims)
        for kept in (listed, late, elsewhere):
            assert (await kit.get(store, kept.id)).state is core.JobState.RUNNING
        assert (await kit.claim_one(store, lost.kind, "rescuer")).id == lost.id
        # The late claim is older than the cutoff now: a plain heartbeat leaves it alone,
        # the next one that asks releases it.
        clock.advance(timedelta(seconds=1))
        assert await store.heartbeat("forgetful", [listed.id, lost.id]) == [lost.id]
        assert (await kit.get(store, late.id)).state is core.JobState.RUNNING
        clock.advance(timedelta(seconds=1))
        assert await store.heartbeat("forgetful", [listed.id, lost.id], release_unheld=True) == [
            lost.id
        ]
        assert (await kit.get(store, late.id)).state is core.JobState.PENDING
        for kept in (listed, elsewhere):
            assert (await kit.get(store, kept.id)).state is core.JobState.RUNNING

    async def test_unregister_releases_the_jobs_still_running_under_the_worker(
        self, store: AsyncJobStore
    ) -> None:
        # Issue 41: what a leaving worker still held (a processor that ignored the stop, an
        # outcome it could not write) is not left `running` until stale-claim recovery.
        await store.register_worker(
            core.WorkerInfo(id="leaving", host="h", pid=2, kinds=frozenset({"a"}), tenants=None)
        )
        await store.register_worker(core.WorkerInfo(id="staying", host="h", pid=3))
        jobs = [await kit.running(store, "leaving") for _ in range(2)]
        other = await kit.running(store, "staying")
        assert await store.unregister_worker("leaving") == sorted(job.id for job in jobs)
        for job in jobs:
            released = await kit.get(store, job.id)
            assert released.state is core.JobState.PENDING
            assert (released.claimed_by, released.claimed_at) == (None, None)
            assert released.recovered
            assert (released.attempts, released.claims) == (job.attempts, job.claims)
            assert released.available_at == job.available_at
        assert (await kit.get(store, other.id)).state is core.JobState.RUNNING
        assert await store.heartbeat("leaving") is None
        assert await store.unregister_worker("leaving") == []
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == []

    async def test_recover_stale_buries_jobs_without_attempts_left(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store, "crashed", max_attempts=1)
        assert job.id in await store.recover_stale(default_ttl=timedelta(hours=1), ttls={})
        dead = await kit.get(store, job.id)
        assert dead.state is core.JobState.DEAD
        assert dead.attempts == 1
        assert dead.last_error is not None
        assert dead.last_error.startswith(core.STALE_MARK)
        # It keeps the claim of the worker it died with (as after a Bury), marked recovered
        # like every job recovery takes back.
        assert (dead.claimed_by, dead.claimed_at) == ("crashed", job.claimed_at)
        assert dead.completed_at is not None
        assert dead.recovered
        assert await store.claim(kit.claim_request()) == []

    @kit.requires("controllable_clock")
    async def test_recover_stale_uses_the_kind_ttl_and_heartbeats(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        await store.register_worker(core.WorkerInfo(id="w", host="h", pid=3))
        fast = await kit.running(store, "w")
        slow = await kit.running(store, "w")
        ttls = {fast.kind: timedelta(seconds=60)}
        clock.advance(50)
        await store.heartbeat("w")
        clock.advance(50)
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls=ttls) == []
        clock.advance(11)
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls=ttls) == [fast.id]
        assert (await kit.get(store, slow.id)).state is core.JobState.RUNNING
        clock.advance(timedelta(hours=1))
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls=ttls) == [slow.id]

    async def test_worker_calls_are_idempotent(self, store: AsyncJobStore) -> None:
        info = core.WorkerInfo(id="twice", host="h", pid=4)
        await store.register_worker(info)
        await store.register_worker(info)
        assert await store.heartbeat("twice") == []
        await store.unregister_worker("twice")
        await store.unregister_worker("twice")
        assert await store.heartbeat("twice") is None

    # ---- maintenance once per period (J13) ------------------------------------------

    async def test_try_maintenance_once_per_period(self, store: AsyncJobStore) -> None:
        hour = timedelta(hours=1)
        assert await store.try_maintenance("contract.recover", hour)
        assert not await store.try_maintenance("contract.recover", hour)
        assert await store.try_maintenance("contract.purge", hour)  # names are independent
        assert not await store.try_maintenance("contract.purge", hour)
        assert await store.try_maintenance("contract.recover", timedelta(0))
        assert await store.try_maintenance("contract.recover", timedelta(0))
        assert not await store.try_maintenance("contract.recover", hour)

    @kit.requires("controllable_clock")
    async def test_try_maintenance_again_once_the_period_passed(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        every = timedelta(minutes=5)
        assert await store.try_maintenance("contract.m", every)
        clock.advance(every - timedelta(milliseconds=1))
        assert not await store.try_maintenance("contract.m", every)
        clock.advance(timedelta(milliseconds=1))
        assert await store.try_maintenance("contract.m", every)
        clock.advance(timedelta(minutes=4))
        assert not await store.try_maintenance("contract.m", every)
        # Counted from the last granted run, not from the refused calls.
        clock.advance(timedelta(minutes=1))
        assert await store.try_maintenance("contract.m", every)

    @kit.requires("concurrent")
    async def test_try_maintenance_one_winner_among_concurrent_callers(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        async def race() -> list[bool]:
            tasks = [
                spawn(store.try_maintenance, "contract.race", timedelta(hours=1)) for _ in range(8)
            ]
            return [await join(task) for task in tasks]

        assert sorted(await race()) == [False] * 7 + [True]
        if self.capabilities.controllable_clock:
            clock.advance(timedelta(hours=1))
            assert sorted(await race()) == [False] * 7 + [True]

    # ---- retention (R26) ----------------------------------------------------------------

    async def _purge_setup(self, store: AsyncJobStore, clock: FakeClock, n: int) -> list[int]:
        done = [await kit.in_state(store, core.JobState.SUCCEEDED) for _ in range(n)]
        if self.capabilities.controllable_clock:
            clock.advance(timedelta(hours=2))
        return done

    def _cutoff(self) -> timedelta:
        # Without a controllable clock the store's own time moves on by itself.
        return timedelta(hours=1) if self.capabilities.controllable_clock else timedelta(0)

    @pytest.mark.parametrize("archive", [False, True])
    async def test_purge_removes_old_succeeded_jobs_only(
        self, store: AsyncJobStore, clock: FakeClock, archive: bool
    ) -> None:
        done = await self._purge_setup(store, clock, 3)
        others = [
            await kit.in_state(store, state)
            for state in (core.JobState.DEAD, core.JobState.PENDING)
        ]
        purged = await store.purge(older_than=self._cutoff(), archive=archive, batch_size=100)
        assert purged == 3
        for job_id in done:
            assert await store.get(job_id) is None
        for job_id in others:
            assert await store.get(job_id) is not None

    async def test_purge_works_through_every_batch(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        await self._purge_setup(store, clock, 5)
        assert await store.purge(older_than=self._cutoff(), archive=False, batch_size=2) == 5
        assert await store.counts() == []

    async def test_purge_keeps_recent_jobs(self, store: AsyncJobStore) -> None:
        job_id = await kit.in_state(store, core.JobState.SUCCEEDED)
        assert await store.purge(older_than=timedelta(days=7), archive=False, batch_size=10) == 0
        assert await store.get(job_id) is not None
