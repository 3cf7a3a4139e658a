"""Contract tests of the health snapshot (async source; ``_health.py`` is its generated twin).

What ``health_snapshot()`` reads for the health report (R9): the store's now, the
registered workers with their running jobs, and per (kind, tenant) the pending, running and
dead jobs. Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from skiplock import core
from skiplock.core.store import OrphanedJobs

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock

_KIND = "contract.health"


def _queues(snapshot: core.HealthSnapshot) -> dict[tuple[str, str | None], core.QueueStats]:
    by_key = {(q.kind, q.tenant): q for q in snapshot.queues}
    assert len(by_key) == len(snapshot.queues), "one row per (kind, tenant)"
    return by_key


class AsyncHealthContract(kit.AsyncContractBase):
    """The health snapshot: workers, per-kind queues, the store's now and schema."""

    async def test_health_snapshot_of_an_empty_store(self, store: AsyncJobStore) -> None:
        before = await store.now()
        snapshot = await store.health_snapshot()
        after = await store.now()
        assert before <= snapshot.now <= after
        assert snapshot.workers == ()
        assert snapshot.queues == ()
        schema = snapshot.schema
        if schema is not None:  # a store with a versioned schema: installed and current
            assert schema.installed
            assert schema.up_to_date
            assert schema.pending == ()
            assert schema.version >= schema.expected >= 1

    async def test_health_snapshot_counts_pending_running_and_dead_per_kind_and_tenant(
        self, store: AsyncJobStore
    ) -> None:
        now = await store.now()
        oldest = now - timedelta(hours=1)
        await kit.enqueue(store, _KIND, tenant="t1", available_at=oldest)
        await kit.enqueue(store, _KIND, tenant="t1", available_at=now - timedelta(minutes=1))
        await kit.enqueue(store, _KIND, tenant="t1", delay=timedelta(hours=1))
        recent = now - timedelta(seconds=30)
        await kit.enqueue(store, _KIND, available_at=recent)
        await kit.enqueue(store, _KIND, tenant="t2")
        [dead] = await store.claim(
            kit.claim_request(kinds=frozenset({_KIND}), tenants=frozenset({"t2"}))
        )
        await kit.finish(store, dead, core.Bury(error="buried by the contract"))
        running = await kit.running(store, tenant="t2")
        succeeded = await kit.running(store)
        await kit.finish(store, succeeded, core.Succeeded())

        snapshot = await store.health_snapshot()
        assert _queues(snapshot) == {
            (_KIND, "t1"): core.QueueStats(_KIND, "t1", due=2, scheduled=1, oldest_due_at=oldest),
            (_KIND, None): core.QueueStats(_KIND, None, due=1, oldest_due_at=recent),
            (_KIND, "t2"): core.QueueStats(_KIND, "t2", dead=1),
            (running.kind, "t2"): core.QueueStats(running.kind, "t2", running=1),
        }

    async def test_health_snapshot_lists_workers_with_their_running_jobs(
        self, store: AsyncJobStore
    ) -> None:
        await store.register_worker(
            core.WorkerInfo(
                id="contract-w1",
                host="host-1",
                pid=11,
                kinds=frozenset({"contract.a", "contract.b"}),
                tenants=frozenset({"t1"}),
            )
        )
        await store.register_worker(core.WorkerInfo(id="contract-w2", host="host-2", pid=22))
        await kit.enqueue(store, "contract.a", tenant="t1")
        await kit.enqueue(store, "contract.a", tenant="t1")
        await kit.claim_one(store, "contract.a", "contract-w1")
        await kit.claim_one(store, "contract.a", "contract-w1")

        snapshot = await store.health_snapshot()
        workers = {w.id: w for w in snapshot.workers}
        assert sorted(workers) == ["contract-w1", "contract-w2"]
        w1, w2 = workers["contract-w1"], workers["contract-w2"]
        assert (w1.host, w1.pid, w1.running) == ("host-1", 11, 2)
        assert w1.kinds == frozenset({"contract.a", "contract.b"})
        assert w1.tenants == frozenset({"t1"})
        assert (w2.host, w2.pid, w2.running, w2.kinds, w2.tenants) == ("host-2", 22, 0, None, None)
        assert w2.oldest_claimed_at is None
        for worker in (w1, w2):
            assert worker.started_at <= worker.heartbeat_at <= snapshot.now
        assert _queues(snapshot)["contract.a", "t1"].running == 2

        await store.unregister_worker("contract-w2")
        assert [w.id for w in (await store.health_snapshot()).workers] == ["contract-w1"]

    async def test_health_snapshot_reads_the_running_jobs_whose_worker_has_no_row(
        self, store: AsyncJobStore
    ) -> None:
        # Issue 41: jobs left running by a worker that is gone must show in the report.
        await store.register_worker(core.WorkerInfo(id="contract-w3", host="h", pid=3))
        first = await kit.running(store, "contract-w3")
        await kit.running(store, "contract-w3")
        gone = [await kit.running(store, "contract-gone") for _ in range(2)]
        other = await kit.running(store, "contract-other")
        snapshot = await store.health_snapshot()
        [worker] = snapshot.workers
        assert (worker.id, worker.running) == ("contract-w3", 2)
        assert worker.oldest_claimed_at == first.claimed_at
        gone_claims = sorted(job.claimed_at for job in gone if job.claimed_at is not None)
        assert other.claimed_at is not None
        assert snapshot.orphaned == (
            OrphanedJobs("contract-gone", 2, gone_claims[0]),
            OrphanedJobs("contract-other", 1, other.claimed_at),
        )
        await kit.finish(store, other, core.Succeeded())
        snapshot = await store.health_snapshot()
        assert [o.worker_id for o in snapshot.orphaned] == ["contract-gone"]
        assert (await store.health_snapshot()).workers[0].oldest_claimed_at == first.claimed_at

    @kit.requires("controllable_clock")
    async def test_health_snapshot_shows_the_age_of_heartbeats(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        await store.register_worker(core.WorkerInfo(id="contract-quiet", host="h", pid=1))
        registered = await store.now()
        clock.advance(timedelta(minutes=10))
        [worker] = (await store.health_snapshot()).workers
        assert worker.heartbeat_at == worker.started_at == registered
        assert await store.heartbeat("contract-quiet") == []
        snapshot = await store.health_snapshot()
        [worker] = snapshot.workers
        assert worker.heartbeat_at == snapshot.now == registered + timedelta(minutes=10)
        assert worker.started_at == registered

    @kit.requires("controllable_clock")
    async def test_health_snapshot_counts_a_scheduled_job_as_due_once_its_time_comes(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        await kit.enqueue(store, _KIND, delay=timedelta(minutes=5))
        [stats] = (await store.health_snapshot()).queues
        assert (stats.due, stats.scheduled, stats.oldest_due_at) == (0, 1, None)
        due_at = await store.now() + timedelta(minutes=5)
        clock.advance(timedelta(minutes=6))
        [stats] = (await store.health_snapshot()).queues
        assert (stats.due, stats.scheduled, stats.oldest_due_at) == (1, 0, due_at)
