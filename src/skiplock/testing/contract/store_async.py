"""The job store contract (async source; ``store.py`` is its generated sync twin).

Every store — the in-memory one, each PostgreSQL adapter, yours — must pass these tests.
For an async store subclass ``AsyncJobStoreContract``, for a sync one ``JobStoreContract``
(same tests, plain ``def`` fixture)::

    # conftest.py
    pytest_plugins = ["skiplock.testing.plugin"]

    # test_my_store.py
    from skiplock.testing.contract import AsyncJobStoreContract, Capabilities

    class TestMyStore(AsyncJobStoreContract):
        capabilities = Capabilities(listen_notify=False)

        @pytest.fixture
        async def store(self, clock):
            store = MyStore(...)  # fresh and empty for every test
            yield store
            await store.close()

The tests assert behaviour only (states, ids, counts, fencing, atomicity under
concurrency), never how a store does it. Due times are compared with ``await
store.now()``; only tests marked ``skiplock_requires("controllable_clock")`` move the
``clock`` fixture, which such a store must use as its clock.
"""

from __future__ import annotations

import itertools
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from skiplock._compat_async import join, spawn
from skiplock.core import (
    MAX_ERROR_LENGTH,
    Bury,
    ClaimRequest,
    Completion,
    EnqueueRequest,
    Event,
    Job,
    JobFilter,
    JobState,
    Lease,
    Outcome,
    Page,
    Release,
    Retry,
    Succeeded,
    WorkerInfo,
    sources,
    transition,
)

from ._lifecycle_async import AsyncLifecycleContract
from .capabilities import Capabilities

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock

_KIND = "contract.job"
_WORKER = "contract-worker-1"
_STALE_MARK = "[stale-claim recovered]"
_TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
_PAYLOAD = {
    "to": "someone@example.com",
    "n": 3,
    "tags": ["a", "b"],
    "nested": {"ok": True, "nothing": None},
    "text": "grüße ✓",
}
_unique = itertools.count(1)


class _Rollback(Exception):
    """Raised inside a transaction to roll it back."""


def requires(*capabilities: str) -> pytest.MarkDecorator:
    """Mark a test as needing store capabilities (skipped when one is off)."""
    return pytest.mark.skiplock_requires(*capabilities)


def _request(kind: str = _KIND, **fields: Any) -> EnqueueRequest:
    return EnqueueRequest(kind=kind, **fields)


def _claim_request(worker_id: str = _WORKER, limit: int = 100, **fields: Any) -> ClaimRequest:
    return ClaimRequest(worker_id=worker_id, limit=limit, **fields)


def _fresh_kind() -> str:
    """A kind no other job in the test has, to claim exactly one job."""
    return f"contract.k{next(_unique)}"


async def _enqueue(store: AsyncJobStore, kind: str = _KIND, **fields: Any) -> int:
    [result] = await store.enqueue([_request(kind, **fields)])
    assert result.created
    return result.id


async def _get(store: AsyncJobStore, job_id: int) -> Job:
    job = await store.get(job_id)
    assert job is not None, f"job {job_id} is gone"
    return job


async def _claim_one(store: AsyncJobStore, kind: str, worker_id: str = _WORKER) -> Job:
    jobs = await store.claim(_claim_request(worker_id, limit=1, kinds=frozenset({kind})))
    assert len(jobs) == 1, f"expected to claim one {kind!r} job, got {jobs}"
    return jobs[0]


async def _running(store: AsyncJobStore, worker_id: str = _WORKER, **fields: Any) -> Job:
    """A fresh job, claimed by ``worker_id``."""
    kind = _fresh_kind()
    await _enqueue(store, kind, **fields)
    return await _claim_one(store, kind, worker_id)


async def _finish(store: AsyncJobStore, job: Job, outcome: Outcome) -> None:
    assert await store.complete([Completion(lease=job.lease, outcome=outcome)]) == [True]


async def _in_state(store: AsyncJobStore, state: JobState) -> int:
    """A fresh job brought to ``state`` through the port."""
    if state is JobState.PENDING:
        return await _enqueue(store, _fresh_kind())
    if state is JobState.CANCELLED or state is JobState.FAILED:
        job_id = await _enqueue(store, _fresh_kind())
        event = Event.CANCEL if state is JobState.CANCELLED else Event.MARK_FAILED
        assert await store.apply(JobFilter(ids=frozenset({job_id})), event) == [job_id]
        return job_id
    job = await _running(store)
    if state is JobState.SUCCEEDED:
        await _finish(store, job, Succeeded())
    elif state is JobState.DEAD:
        await _finish(store, job, Bury(error="buried by the contract"))
    return job.id


def _ids(jobs: Sequence[Job]) -> list[int]:
    return [job.id for job in jobs]


async def _all_jobs(store: AsyncJobStore) -> list[Job]:
    return await store.list_jobs(JobFilter(), Page(limit=10_000))


class AsyncJobStoreContract(AsyncLifecycleContract):
    """Behaviour every job store must have. Subclass it as ``Test...`` and override the
    ``store`` fixture (a fresh, empty store per test); set ``capabilities`` for what your
    store cannot do."""

    pytestmark = pytest.mark.anyio

    #: What the store under test supports; tests needing a missing capability are skipped.
    capabilities: ClassVar[Capabilities] = Capabilities()

    @pytest.fixture
    async def store(self) -> AsyncJobStore:
        """Override me: yield a fresh, empty store (and close it afterwards)."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the `store` fixture with one that yields "
            "a fresh, empty store for each test"
        )

    @pytest.fixture(autouse=True)
    def _skiplock_requirements(self, request: pytest.FixtureRequest) -> None:
        for mark in request.node.iter_markers("skiplock_requires"):
            for name in mark.args:
                if not self.capabilities.supports(name):
                    pytest.skip(f"the store does not support {name!r}")

    # ---- clock, enqueue, get ----------------------------------------------------------

    async def test_now_is_aware_utc(self, store: AsyncJobStore) -> None:
        now = await store.now()
        assert now.utcoffset() == timedelta(0)

    @requires("controllable_clock")
    async def test_now_follows_the_clock(self, store: AsyncJobStore, clock: FakeClock) -> None:
        assert await store.now() == clock.now()
        clock.advance(90)
        assert await store.now() == clock.now()

    async def test_enqueue_get_round_trip_keeps_every_field(self, store: AsyncJobStore) -> None:
        before = await store.now()
        available_at = (before - timedelta(minutes=1)).astimezone(UTC)
        [result] = await store.enqueue(
            [
                _request(
                    "contract.round_trip",
                    payload=_PAYLOAD,
                    priority=7,
                    tenant="tenant-a",
                    available_at=available_at,
                    max_attempts=3,
                    idempotency_key="round-trip-1",
                    trace_context=_TRACE,
                )
            ]
        )
        after = await store.now()
        assert result.created
        job = await _get(store, result.id)
        assert job.id == result.id
        assert job.kind == "contract.round_trip"
        assert job.payload == _PAYLOAD
        assert job.state is JobState.PENDING
        assert job.priority == 7
        assert job.tenant == "tenant-a"
        assert job.available_at == available_at
        assert before <= job.created_at <= after
        assert job.attempts == 0
        assert job.claims == 0
        assert job.max_attempts == 3
        assert job.claimed_at is None
        assert job.claimed_by is None
        assert job.completed_at is None
        assert job.last_error is None
        assert job.idempotency_key == "round-trip-1"
        assert job.trace_context is not None
        assert dict(job.trace_context) == _TRACE

    async def test_enqueue_defaults_make_the_job_due_now(self, store: AsyncJobStore) -> None:
        before = await store.now()
        job_id = await _enqueue(store)
        after = await store.now()
        job = await _get(store, job_id)
        assert job.payload is None
        assert job.priority == 0
        assert job.tenant is None
        assert job.max_attempts == 5
        assert job.idempotency_key is None
        assert not job.trace_context
        assert before <= job.available_at <= after

    async def test_enqueue_with_delay_is_due_later(self, store: AsyncJobStore) -> None:
        before = await store.now()
        job_id = await _enqueue(store, delay=timedelta(hours=1))
        after = await store.now()
        job = await _get(store, job_id)
        assert before + timedelta(hours=1) <= job.available_at <= after + timedelta(hours=1)

    async def test_enqueue_batch_results_follow_request_order(self, store: AsyncJobStore) -> None:
        requests = [_request(f"contract.batch{i}", payload={"i": i}) for i in range(5)]
        results = await store.enqueue(requests)
        assert [r.created for r in results] == [True] * 5
        assert len({r.id for r in results}) == 5
        for i, result in enumerate(results):
            job = await _get(store, result.id)
            assert (job.kind, job.payload) == (f"contract.batch{i}", {"i": i})

    async def test_enqueue_empty_batch_creates_nothing(self, store: AsyncJobStore) -> None:
        assert await store.enqueue([]) == []
        assert await _all_jobs(store) == []

    async def test_enqueue_large_batch(self, store: AsyncJobStore) -> None:
        results = await store.enqueue([_request(payload=i) for i in range(500)])
        assert len({r.id for r in results}) == 500
        assert len(await _all_jobs(store)) == 500

    async def test_get_unknown_id_returns_none(self, store: AsyncJobStore) -> None:
        assert await store.get(987_654_321) is None

    # ---- idempotency (R16) ----------------------------------------------------------

    async def test_enqueue_idempotency_key_returns_the_existing_job(
        self, store: AsyncJobStore
    ) -> None:
        [first] = await store.enqueue([_request(payload=1, idempotency_key="once")])
        [second] = await store.enqueue([_request(payload=2, idempotency_key="once")])
        assert first.created
        assert not second.created
        assert second.id == first.id
        jobs = await _all_jobs(store)
        assert _ids(jobs) == [first.id]
        assert jobs[0].payload == 1

    async def test_enqueue_idempotency_key_within_one_batch(self, store: AsyncJobStore) -> None:
        results = await store.enqueue(
            [
                _request(payload=1, idempotency_key="dup"),
                _request(payload=2),
                _request(payload=3, idempotency_key="dup"),
            ]
        )
        assert [r.created for r in results] == [True, True, False]
        assert results[2].id == results[0].id
        assert sorted(_ids(await _all_jobs(store))) == sorted({r.id for r in results})

    async def test_enqueue_idempotency_key_holds_in_any_state(self, store: AsyncJobStore) -> None:
        job = await _running(store, idempotency_key="busy")
        [again] = await store.enqueue([_request(idempotency_key="busy")])
        assert again.id == job.id
        assert not again.created

    async def test_delete_frees_the_idempotency_key(self, store: AsyncJobStore) -> None:
        job_id = await _enqueue(store, idempotency_key="reusable")
        await store.delete(JobFilter(ids=frozenset({job_id})))
        [again] = await store.enqueue([_request(idempotency_key="reusable")])
        assert again.created
        assert again.id != job_id

    @requires("concurrent")
    async def test_enqueue_idempotency_key_under_concurrency(self, store: AsyncJobStore) -> None:
        async def enqueue(i: int) -> tuple[int, bool]:
            [result] = await store.enqueue([_request(payload=i, idempotency_key="race")])
            return result.id, result.created

        tasks = [spawn(enqueue, i) for i in range(8)]
        results = [await join(task) for task in tasks]
        assert len({job_id for job_id, _ in results}) == 1
        assert sum(created for _, created in results) == 1
        assert len(await _all_jobs(store)) == 1

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

    # ---- transactions (R0, R10) -------------------------------------------------------

    @requires("transactions")
    async def test_transaction_rollback_discards_enqueue(self, store: AsyncJobStore) -> None:
        async def enqueue_then_fail() -> None:
            async with store.transaction() as tx:
                await store.enqueue([_request(), _request()], connection=tx)
                raise _Rollback

        with pytest.raises(_Rollback):
            await enqueue_then_fail()
        assert await _all_jobs(store) == []

    @requires("transactions")
    async def test_transaction_commit_makes_enqueue_visible(self, store: AsyncJobStore) -> None:
        async with store.transaction() as tx:
            [result] = await store.enqueue([_request(payload="tx")], connection=tx)
            inside = await store.get(result.id, connection=tx)
            assert inside is not None
            assert inside.payload == "tx"
            assert await store.get(result.id) is None  # not committed yet
        job = await _get(store, result.id)
        assert job.state is JobState.PENDING
        assert _ids(await store.claim(_claim_request())) == [result.id]

    @requires("transactions")
    async def test_transaction_bulk_enqueue_is_all_or_nothing(self, store: AsyncJobStore) -> None:
        async def enqueue_then_fail() -> None:
            async with store.transaction() as tx:
                await store.enqueue([_request(payload=i) for i in range(100)], connection=tx)
                await store.enqueue([_request(payload="more")], connection=tx)
                raise _Rollback

        with pytest.raises(_Rollback):
            await enqueue_then_fail()
        assert await _all_jobs(store) == []
        async with store.transaction() as tx:
            await store.enqueue([_request(payload=i) for i in range(100)], connection=tx)
        assert len(await _all_jobs(store)) == 100

    @requires("transactions")
    async def test_transaction_idempotency_key_within_the_transaction(
        self, store: AsyncJobStore
    ) -> None:
        async with store.transaction() as tx:
            [first] = await store.enqueue([_request(idempotency_key="tx-key")], connection=tx)
            [second] = await store.enqueue([_request(idempotency_key="tx-key")], connection=tx)
        assert first.created
        assert not second.created
        assert second.id == first.id
        assert _ids(await _all_jobs(store)) == [first.id]

    @requires("transactions")
    async def test_transaction_enqueue_and_complete_commit_together(
        self, store: AsyncJobStore
    ) -> None:
        job = await _running(store)
        async with store.transaction() as tx:
            [follow_up] = await store.enqueue([_request("contract.follow_up")], connection=tx)
            applied = await store.complete(
                [Completion(lease=job.lease, outcome=Succeeded())], connection=tx
            )
            assert applied == [True]
        assert (await _get(store, job.id)).state is JobState.SUCCEEDED
        assert (await _get(store, follow_up.id)).kind == "contract.follow_up"

    @requires("transactions")
    async def test_transaction_rollback_keeps_the_job_running(self, store: AsyncJobStore) -> None:
        job = await _running(store)

        async def complete_then_fail() -> None:
            async with store.transaction() as tx:
                await store.enqueue([_request("contract.follow_up")], connection=tx)
                await store.complete(
                    [Completion(lease=job.lease, outcome=Succeeded())], connection=tx
                )
                raise _Rollback

        with pytest.raises(_Rollback):
            await complete_then_fail()
        after = await _get(store, job.id)
        assert after.state is JobState.RUNNING
        assert after.lease == job.lease
        assert [j.kind for j in await _all_jobs(store)] == [job.kind]
        # The claim is intact: its worker can still finish it.
        await _finish(store, job, Succeeded())

    @requires("transactions")
    async def test_transaction_rollback_discards_apply_and_delete(
        self, store: AsyncJobStore
    ) -> None:
        pending = await _enqueue(store)
        dead = await _in_state(store, JobState.DEAD)

        async def change_then_fail() -> None:
            async with store.transaction() as tx:
                assert await store.apply(
                    JobFilter(ids=frozenset({pending})), Event.CANCEL, connection=tx
                ) == [pending]
                deleted = await store.delete(JobFilter(ids=frozenset({dead})), connection=tx)
                assert _ids(deleted) == [dead]
                raise _Rollback

        with pytest.raises(_Rollback):
            await change_then_fail()
        assert (await _get(store, pending)).state is JobState.PENDING
        assert (await _get(store, dead)).state is JobState.DEAD

    @requires("transactions")
    async def test_transaction_apply_and_delete_commit(self, store: AsyncJobStore) -> None:
        pending = await _enqueue(store)
        dead = await _in_state(store, JobState.DEAD)
        async with store.transaction() as tx:
            await store.apply(JobFilter(ids=frozenset({pending})), Event.CANCEL, connection=tx)
            await store.delete(JobFilter(ids=frozenset({dead})), connection=tx)
        assert (await _get(store, pending)).state is JobState.CANCELLED
        assert await store.get(dead) is None

    @requires("transactions")
    async def test_transaction_fenced_complete_with_a_stale_lease_is_false(
        self, store: AsyncJobStore
    ) -> None:
        job = await _running(store)
        stale = Lease(
            job_id=job.id, worker_id="someone-else", attempt=job.attempts, claim=job.claims
        )
        async with store.transaction() as tx:
            assert await store.complete(
                [Completion(lease=stale, outcome=Succeeded())], connection=tx
            ) == [False]
        assert (await _get(store, job.id)).state is JobState.RUNNING

    async def test_transaction_and_autocommit_take_a_statement_timeout(
        self, store: AsyncJobStore
    ) -> None:
        async with store.transaction(statement_timeout=30.0) as tx:
            [result] = await store.enqueue([_request()], connection=tx)
        async with store.autocommit(statement_timeout=30.0) as conn:
            assert await store.get(result.id, connection=conn) is not None
        async with store.transaction(statement_timeout=None) as tx:
            assert await store.get(result.id, connection=tx) is not None

    async def test_autocommit_writes_apply_immediately(self, store: AsyncJobStore) -> None:
        async with store.autocommit() as conn:
            [result] = await store.enqueue([_request()], connection=conn)
            assert (await _get(store, result.id)).state is JobState.PENDING
        assert (await _get(store, result.id)).state is JobState.PENDING

    # ---- complete and fencing (R6, R10, R12) ---------------------------------------------

    async def test_complete_succeeded(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        before = await store.now()
        await _finish(store, job, Succeeded())
        after = await store.now()
        done = await _get(store, job.id)
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
        job = await _running(store)
        before = await store.now()
        await _finish(store, job, Retry(delay=timedelta(minutes=5), error="boom"))
        after = await store.now()
        retried = await _get(store, job.id)
        assert retried.state is JobState.PENDING
        assert retried.attempts == 1
        assert retried.last_error == "boom"
        assert retried.claimed_by is None
        assert retried.completed_at is None
        lo, hi = before + timedelta(minutes=5), after + timedelta(minutes=5)
        assert lo <= retried.available_at <= hi
        assert await store.claim(_claim_request(kinds=frozenset({job.kind}))) == []

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
        before = await store.now()
        await _finish(store, job, Bury(error="no hope"))
        after = await store.now()
        dead = await _get(store, job.id)
        assert dead.state is JobState.DEAD
        assert dead.last_error == "no hope"
        assert dead.completed_at is not None
        assert before <= dead.completed_at <= after
        assert dead.attempts == 1
        assert await store.claim(_claim_request()) == []

    async def test_complete_release_gives_the_attempt_back(self, store: AsyncJobStore) -> None:
        job = await _running(store)
        before = await store.now()
        await _finish(store, job, Release(delay=timedelta(seconds=30), error="throttled"))
        after = await store.now()
        released = await _get(store, job.id)
        assert released.state is JobState.PENDING
        assert released.attempts == 0
        assert released.claimed_by is None
        assert released.last_error == "throttled"
        lo, hi = before + timedelta(seconds=30), after + timedelta(seconds=30)
        assert lo <= released.available_at <= hi

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

    # ---- operator transitions (R13) ----------------------------------------------------

    @pytest.mark.parametrize("event", [Event.CANCEL, Event.MARK_FAILED, Event.REPLAY])
    async def test_apply_changes_only_jobs_in_legal_states(
        self, store: AsyncJobStore, event: Event
    ) -> None:
        by_state = {state: await _in_state(store, state) for state in JobState}
        changed = await store.apply(JobFilter(ids=frozenset(by_state.values())), event)
        legal = sources(event)
        assert sorted(changed) == sorted(by_state[s] for s in JobState if s in legal)
        for state, job_id in by_state.items():
            expected = transition(state, event) if state in legal else state
            assert (await _get(store, job_id)).state is expected, state

    async def test_apply_respects_the_filter(self, store: AsyncJobStore) -> None:
        a = await _enqueue(store, "contract.a", tenant="t1", priority=1)
        await _enqueue(store, "contract.a", tenant="t2", priority=1)
        await _enqueue(store, "contract.b", tenant="t1", priority=1)
        await _enqueue(store, "contract.a", tenant="t1", priority=9)
        selected = JobFilter(
            kinds=frozenset({"contract.a"}), tenants=frozenset({"t1"}), priority_max=5
        )
        assert await store.apply(selected, Event.CANCEL) == [a]
        cancelled = JobFilter(states=frozenset({JobState.CANCELLED}))
        assert _ids(await store.list_jobs(cancelled, Page())) == [a]

    async def test_apply_replay_makes_the_job_due_now(self, store: AsyncJobStore) -> None:
        job_id = await _in_state(store, JobState.DEAD)
        dead = await _get(store, job_id)
        assert await store.apply(JobFilter(ids=frozenset({job_id})), Event.REPLAY) == [job_id]
        now = await store.now()
        replayed = await _get(store, job_id)
        assert replayed.state is JobState.PENDING
        assert replayed.available_at <= now
        assert replayed.claimed_by is None
        assert replayed.claimed_at is None
        assert replayed.completed_at is None
        assert replayed.attempts == dead.attempts == 1
        again = await _claim_one(store, dead.kind)
        assert again.attempts == 2

    async def test_apply_replay_can_reset_attempts(self, store: AsyncJobStore) -> None:
        job_id = await _in_state(store, JobState.DEAD)
        changed = await store.apply(
            JobFilter(ids=frozenset({job_id})), Event.REPLAY, reset_attempts=True
        )
        assert changed == [job_id]
        replayed = await _get(store, job_id)
        assert (replayed.attempts, replayed.claims) == (0, 1)
        again = await _claim_one(store, replayed.kind)
        assert (again.attempts, again.claims) == (1, 2)

    async def test_apply_replay_of_dead_jobs_in_bulk(self, store: AsyncJobStore) -> None:
        dead = sorted([await _in_state(store, JobState.DEAD) for _ in range(3)])
        await _in_state(store, JobState.SUCCEEDED)
        only_dead = JobFilter(states=frozenset({JobState.DEAD}))
        assert sorted(await store.apply(only_dead, Event.REPLAY)) == dead
        assert await store.apply(only_dead, Event.REPLAY) == []

    # ---- delete -------------------------------------------------------------------------

    async def test_delete_removes_matching_jobs_but_not_running_ones(
        self, store: AsyncJobStore
    ) -> None:
        pending = await _in_state(store, JobState.PENDING)
        running = await _in_state(store, JobState.RUNNING)
        succeeded = await _in_state(store, JobState.SUCCEEDED)
        everything = JobFilter(ids=frozenset({pending, running, succeeded}))
        deleted = await store.delete(everything)
        assert sorted(_ids(deleted)) == sorted([pending, succeeded])
        assert {job.state for job in deleted} == {JobState.PENDING, JobState.SUCCEEDED}
        assert await store.get(pending) is None
        assert await store.get(succeeded) is None
        assert (await _get(store, running)).state is JobState.RUNNING

    async def test_delete_with_no_match_returns_nothing(self, store: AsyncJobStore) -> None:
        job_id = await _enqueue(store, "contract.keep")
        assert await store.delete(JobFilter(kinds=frozenset({"contract.other"}))) == []
        assert await store.get(job_id) is not None

    # ---- list and counts (R13, R5) -----------------------------------------------------

    async def test_list_jobs_filters(self, store: AsyncJobStore) -> None:
        a1 = await _enqueue(store, "contract.a", tenant="t1", priority=1)
        a2 = await _enqueue(store, "contract.a", tenant="t2", priority=5)
        b = await _enqueue(store, "contract.b", priority=-3)
        running = await _running(store, tenant="t1", priority=2)

        async def ids(**fields: Any) -> list[int]:
            return _ids(await store.list_jobs(JobFilter(**fields), Page()))

        assert await ids() == sorted([a1, a2, b, running.id])
        assert await ids(kinds=frozenset({"contract.a"})) == [a1, a2]
        assert await ids(tenants=frozenset({"t1"})) == [a1, running.id]
        assert await ids(states=frozenset({JobState.RUNNING})) == [running.id]
        assert await ids(ids=frozenset({b, a2})) == sorted([a2, b])
        assert await ids(priority_min=2) == [a2, running.id]
        assert await ids(priority_max=1) == [a1, b]
        assert await ids(priority_min=1, priority_max=2, tenants=frozenset({"t1"})) == [
            a1,
            running.id,
        ]
        assert await ids(kinds=frozenset({"contract.none"})) == []

    async def test_list_jobs_keyset_pages(self, store: AsyncJobStore) -> None:
        results = await store.enqueue([_request(payload=i) for i in range(7)])
        ids = sorted(r.id for r in results)
        everything = JobFilter()

        pages: list[list[int]] = []
        after: int | None = None
        while page := _ids(await store.list_jobs(everything, Page(limit=3, after_id=after))):
            pages.append(page)
            after = page[-1]
        assert pages == [ids[0:3], ids[3:6], ids[6:7]]

        pages = []
        after = None
        while page := _ids(
            await store.list_jobs(everything, Page(limit=3, after_id=after, descending=True))
        ):
            pages.append(page)
            after = page[-1]
        down = ids[::-1]
        assert pages == [down[0:3], down[3:6], down[6:7]]

    async def test_counts_per_state_kind_and_tenant(self, store: AsyncJobStore) -> None:
        await _enqueue(store, "contract.a", tenant="t1")
        await _enqueue(store, "contract.a", tenant="t1")
        await _enqueue(store, "contract.a")
        await _enqueue(store, "contract.b", tenant="t1")
        job = await _claim_one(store, "contract.b")
        await _finish(store, job, Bury(error="x"))
        counts = {(c.state, c.kind, c.tenant): c.count for c in await store.counts()}
        assert counts == {
            (JobState.PENDING, "contract.a", "t1"): 2,
            (JobState.PENDING, "contract.a", None): 1,
            (JobState.DEAD, "contract.b", "t1"): 1,
        }

    async def test_counts_of_an_empty_store(self, store: AsyncJobStore) -> None:
        assert await store.counts() == []

    # ---- workers and stale claims (J1, R12) -------------------------------------------

    async def test_recover_stale_returns_jobs_of_unregistered_workers(
        self, store: AsyncJobStore
    ) -> None:
        job = await _running(store, "never-registered")
        await _finish(store, job, Retry(delay=timedelta(0), error="first failure"))
        job = await _claim_one(store, job.kind, "never-registered")
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]
        recovered = await _get(store, job.id)
        assert recovered.state is JobState.PENDING
        assert recovered.attempts == 2
        assert recovered.claims == 2
        assert recovered.claimed_by is None
        assert recovered.claimed_at is None
        assert recovered.last_error is not None
        assert recovered.last_error.startswith(_STALE_MARK)
        assert "first failure" in recovered.last_error
        rescued = await _claim_one(store, job.kind, "rescuer")
        assert (rescued.attempts, rescued.claims) == (3, 3)

    async def test_recover_stale_leaves_live_workers_alone(self, store: AsyncJobStore) -> None:
        await store.register_worker(WorkerInfo(id="alive", host="h", pid=1))
        job = await _running(store, "alive")
        assert await store.heartbeat("alive", [job.id]) == []
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == []
        still = await _get(store, job.id)
        assert (still.state, still.claimed_by) == (JobState.RUNNING, "alive")
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
        await store.register_worker(WorkerInfo(id="crashed", host="h", pid=5))
        job = await _running(store, "crashed")
        ttl = self._silence(clock)
        assert await store.recover_stale(default_ttl=ttl, ttls={}) == [job.id]
        assert await store.heartbeat("crashed", [job.id]) is None  # must register again
        await store.register_worker(WorkerInfo(id="crashed", host="h", pid=5))
        assert await store.heartbeat("crashed", [job.id]) == [job.id]

    @requires("controllable_clock")
    async def test_recover_stale_keeps_worker_rows_younger_than_the_longest_ttl(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        for worker_id in ("crashed", "alive"):
            await store.register_worker(WorkerInfo(id=worker_id, host="h", pid=6))
        job = await _running(store, "crashed")
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
        await store.register_worker(WorkerInfo(id="back", host="h", pid=7))
        assert await store.heartbeat("back") == []
        await store.unregister_worker("back")
        assert await store.heartbeat("back") is None
        assert await store.heartbeat("back") is None  # a heartbeat does not register
        await store.register_worker(WorkerInfo(id="back", host="h", pid=7))
        assert await store.heartbeat("back") == []

    async def test_heartbeat_reports_jobs_no_longer_running_under_the_worker(
        self, store: AsyncJobStore
    ) -> None:
        await store.register_worker(WorkerInfo(id=_WORKER, host="h", pid=8))
        kept, cancelled, failed, deleted, finished = [await _running(store) for _ in range(5)]
        elsewhere = await _running(store, "other-worker")
        await store.apply(JobFilter(ids=frozenset({cancelled.id, deleted.id})), Event.CANCEL)
        await store.apply(JobFilter(ids=frozenset({failed.id})), Event.MARK_FAILED)
        assert _ids(await store.delete(JobFilter(ids=frozenset({deleted.id})))) == [deleted.id]
        await _finish(store, finished, Succeeded())
        missing = 987_654_321
        believed = [missing, elsewhere.id, kept.id, finished.id, deleted.id, failed.id]
        believed += [cancelled.id, kept.id, cancelled.id]
        gone = await store.heartbeat(_WORKER, believed)
        expected = {missing, elsewhere.id, finished.id, deleted.id, failed.id, cancelled.id}
        assert gone == sorted(expected)
        assert await store.heartbeat(_WORKER, [kept.id]) == []
        assert await store.heartbeat(_WORKER) == []
        assert (await _get(store, kept.id)).state is JobState.RUNNING

    async def test_recover_stale_after_unregister(self, store: AsyncJobStore) -> None:
        await store.register_worker(
            WorkerInfo(id="leaving", host="h", pid=2, kinds=frozenset({"a"}), tenants=None)
        )
        job = await _running(store, "leaving")
        await store.unregister_worker("leaving")
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]
        assert (await _get(store, job.id)).state is JobState.PENDING

    async def test_recover_stale_buries_jobs_without_attempts_left(
        self, store: AsyncJobStore
    ) -> None:
        job = await _running(store, "crashed", max_attempts=1)
        assert job.id in await store.recover_stale(default_ttl=timedelta(hours=1), ttls={})
        dead = await _get(store, job.id)
        assert dead.state is JobState.DEAD
        assert dead.attempts == 1
        assert dead.last_error is not None
        assert dead.last_error.startswith(_STALE_MARK)
        assert await store.claim(_claim_request()) == []

    @requires("controllable_clock")
    async def test_recover_stale_uses_the_kind_ttl_and_heartbeats(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        await store.register_worker(WorkerInfo(id="w", host="h", pid=3))
        fast = await _running(store, "w")
        slow = await _running(store, "w")
        ttls = {fast.kind: timedelta(seconds=60)}
        clock.advance(50)
        await store.heartbeat("w")
        clock.advance(50)
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls=ttls) == []
        clock.advance(11)
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls=ttls) == [fast.id]
        assert (await _get(store, slow.id)).state is JobState.RUNNING
        clock.advance(timedelta(hours=1))
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls=ttls) == [slow.id]

    async def test_worker_calls_are_idempotent(self, store: AsyncJobStore) -> None:
        info = WorkerInfo(id="twice", host="h", pid=4)
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

    @requires("controllable_clock")
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

    @requires("concurrent")
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
        done = [await _in_state(store, JobState.SUCCEEDED) for _ in range(n)]
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
        others = [await _in_state(store, state) for state in (JobState.DEAD, JobState.PENDING)]
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
        job_id = await _in_state(store, JobState.SUCCEEDED)
        assert await store.purge(older_than=timedelta(days=7), archive=False, batch_size=10) == 0
        assert await store.get(job_id) is not None

    # ---- notifier (R11) -----------------------------------------------------------------

    @requires("listen_notify")
    async def test_notifier_woken_by_enqueue(self, store: AsyncJobStore) -> None:
        notifier = store.notifier()
        assert notifier is not None
        await notifier.start()
        await notifier.start()  # idempotent
        try:
            await _enqueue(store)
            assert await notifier.wait(10.0)
        finally:
            await notifier.close()

    @requires("listen_notify")
    async def test_notifier_woken_by_replay_and_immediate_retry(self, store: AsyncJobStore) -> None:
        notifier = store.notifier()
        assert notifier is not None
        await notifier.start()
        try:
            job = await _running(store)
            assert await notifier.wait(10.0)  # the enqueue
            await _finish(store, job, Retry(delay=timedelta(0), error="again"))
            assert await notifier.wait(10.0)
            job = await _claim_one(store, job.kind)
            await _finish(store, job, Bury(error="dead"))
            await store.apply(JobFilter(ids=frozenset({job.id})), Event.REPLAY)
            assert await notifier.wait(10.0)
        finally:
            await notifier.close()

    # ---- lifecycle ----------------------------------------------------------------------

    async def test_close_is_idempotent(self, store: AsyncJobStore) -> None:
        await store.close()
        await store.close()
