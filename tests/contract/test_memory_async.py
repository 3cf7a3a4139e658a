"""The in-memory store against the contract kit, plus what only the memory store promises."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryTransaction, MemoryState
from skiplock.core import (
    ClaimRequest,
    Completion,
    EnqueueRequest,
    Event,
    Job,
    JobFilter,
    JobState,
    LeaseLostError,
    Page,
    StoreError,
    Succeeded,
    ValidationError,
)
from skiplock.testing import Capabilities, FakeClock
from skiplock.testing.contract import AsyncJobStoreContract

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

pytestmark = pytest.mark.anyio


class TestAsyncInMemoryJobStore(AsyncJobStoreContract):
    capabilities = Capabilities(
        controllable_clock=True, statement_timeouts=False, fault_injection=False
    )

    @pytest.fixture
    async def store(self, clock: FakeClock) -> AsyncIterator[AsyncInMemoryJobStore]:
        store = AsyncInMemoryJobStore(clock=clock)
        yield store
        await store.close()


@pytest.fixture
def memory(clock: FakeClock) -> AsyncInMemoryJobStore:
    return AsyncInMemoryJobStore(clock=clock)


def _req(kind: str = "mem.job", **fields: Any) -> EnqueueRequest:
    return EnqueueRequest(kind, **fields)


def _claim(worker_id: str = "w", limit: int = 100) -> ClaimRequest:
    return ClaimRequest(worker_id=worker_id, limit=limit)


class _Failure(Exception):
    def __init__(self, tx: InMemoryTransaction) -> None:
        self.tx = tx


def _one(job_id: int) -> JobFilter:
    return JobFilter(ids=frozenset({job_id}))


# ---- construction ----------------------------------------------------------------------


def test_store_takes_a_clock_or_a_state_not_both(clock: FakeClock) -> None:
    store = AsyncInMemoryJobStore(clock=clock)
    shared = AsyncInMemoryJobStore(state=store.state)
    assert shared.state is store.state
    with pytest.raises(TypeError, match="either clock= or state="):
        AsyncInMemoryJobStore(clock=clock, state=store.state)


async def test_store_default_clock_is_the_system_clock() -> None:
    store = AsyncInMemoryJobStore()
    now = await store.now()
    job_id = (await store.enqueue([_req()]))[0].id
    assert _ids(await store.claim(_claim())) == [job_id]
    assert now.utcoffset() == timedelta(0)


async def test_stores_sharing_a_state_see_the_same_jobs(memory: AsyncInMemoryJobStore) -> None:
    other = AsyncInMemoryJobStore(state=memory.state)
    [result] = await memory.enqueue([_req()])
    assert await other.get(result.id) is not None


# ---- transaction handles ---------------------------------------------------------------


async def test_transaction_handle_of_another_store_is_rejected(
    memory: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    other = AsyncInMemoryJobStore(clock=clock)

    async def enqueue_with_the_other_handle() -> None:
        async with other.transaction() as tx:
            await memory.enqueue([_req()], connection=tx)

    with pytest.raises(ValidationError, match="another in-memory store"):
        await enqueue_with_the_other_handle()
    assert await memory.counts() == []


async def test_transaction_handle_after_commit_or_rollback_is_rejected(
    memory: AsyncInMemoryJobStore,
) -> None:
    async with memory.transaction() as committed:
        pass
    with pytest.raises(ValidationError, match="already committed or rolled back"):
        await memory.enqueue([_req()], connection=committed)

    async def fail() -> InMemoryTransaction:
        async with memory.transaction() as tx:
            raise _Failure(tx)

    with pytest.raises(_Failure) as failed:
        await fail()
    rolled_back = failed.value.tx
    with pytest.raises(ValidationError, match="already committed or rolled back"):
        await memory.get(1, connection=rolled_back)
    async with memory.autocommit() as conn:
        pass
    with pytest.raises(ValidationError, match="already committed or rolled back"):
        await memory.apply(JobFilter(), Event.CANCEL, connection=conn)
    assert await memory.counts() == []


async def test_connection_of_the_wrong_type_is_rejected(memory: AsyncInMemoryJobStore) -> None:
    with pytest.raises(TypeError, match="transaction\\(\\) or autocommit\\(\\)"):
        await memory.enqueue([_req()], connection=object())


async def test_transaction_handle_type(memory: AsyncInMemoryJobStore) -> None:
    async with memory.transaction() as tx:
        assert isinstance(tx, InMemoryTransaction)
        assert not tx.autocommit
        assert "transaction" in repr(tx)
    assert tx.closed
    async with memory.autocommit() as conn:
        assert conn.autocommit


async def test_transaction_sees_its_own_writes(memory: AsyncInMemoryJobStore) -> None:
    async with memory.transaction() as tx:
        [result] = await memory.enqueue([_req()], connection=tx)
        assert await memory.apply(_one(result.id), Event.CANCEL, connection=tx) == [result.id]
        inside = await memory.get(result.id, connection=tx)
        assert inside is not None
        assert inside.state is JobState.CANCELLED
        assert await memory.get(result.id) is None
        assert await memory.list_jobs(JobFilter(), _page()) == []
    job = await memory.get(result.id)
    assert job is not None
    assert job.state is JobState.CANCELLED


async def test_transaction_key_committed_elsewhere_first_keeps_that_job(
    memory: AsyncInMemoryJobStore,
) -> None:
    async with memory.transaction() as tx:
        buffered, _ = await memory.enqueue(
            [_req(idempotency_key="k", payload="tx"), _req(payload="other")], connection=tx
        )
        [outside] = await memory.enqueue([_req(idempotency_key="k", payload="outside")])
        assert outside.created  # the transaction's key is not visible before its commit
    jobs = await memory.list_jobs(JobFilter(), _page())
    keyed = [job for job in jobs if job.idempotency_key == "k"]
    assert [(job.id, job.payload) for job in keyed] == [(outside.id, "outside")]
    assert await memory.get(buffered.id) is None
    assert sorted(job.payload for job in jobs) == ["other", "outside"]


async def test_transaction_may_reuse_a_key_it_freed(memory: AsyncInMemoryJobStore) -> None:
    [old] = await memory.enqueue([_req(idempotency_key="k")])
    async with memory.transaction() as tx:
        await memory.delete(_one(old.id), connection=tx)
        [new] = await memory.enqueue([_req(idempotency_key="k")], connection=tx)
        assert new.created
    assert await memory.get(old.id) is None
    job = await memory.get(new.id)
    assert job is not None
    assert job.idempotency_key == "k"


async def test_transaction_lease_lost_at_commit_applies_nothing(
    memory: AsyncInMemoryJobStore,
) -> None:
    await memory.enqueue([_req()])
    [job] = await memory.claim(_claim("gone"))

    async def complete_while_recovered() -> None:
        async with memory.transaction() as tx:
            await memory.enqueue([_req("mem.follow_up")], connection=tx)
            completion = Completion(lease=job.lease, outcome=Succeeded())
            assert await memory.complete([completion], connection=tx) == [True]
            # Meanwhile maintenance decides the worker is gone and takes the job back.
            recovered = await memory.recover_stale(default_ttl=timedelta(hours=1), ttls={})
            assert recovered == [job.id]

    with pytest.raises(LeaseLostError):
        await complete_while_recovered()
    jobs = await memory.list_jobs(JobFilter(), _page())
    assert [(j.id, j.state) for j in jobs] == [(job.id, JobState.PENDING)]


async def test_transaction_conflicting_change_fails_the_commit(
    memory: AsyncInMemoryJobStore,
) -> None:
    [result] = await memory.enqueue([_req()])

    async def cancel_while_claimed() -> None:
        async with memory.transaction() as tx:
            await memory.apply(_one(result.id), Event.CANCEL, connection=tx)
            assert _ids(await memory.claim(_claim())) == [result.id]

    with pytest.raises(StoreError, match="changed concurrently"):
        await cancel_while_claimed()
    job = await memory.get(result.id)
    assert job is not None
    assert job.state is JobState.RUNNING


# ---- input and operator checks ----------------------------------------------------------


async def test_enqueue_payload_that_is_not_json_writes_nothing(
    memory: AsyncInMemoryJobStore,
) -> None:
    with pytest.raises(ValidationError, match="not JSON"):
        await memory.enqueue([_req(payload={"ok": 1}), _req(payload={1, 2})])
    assert await memory.counts() == []


async def test_enqueue_copies_the_payload(memory: AsyncInMemoryJobStore) -> None:
    payload = {"items": [1, 2]}
    [result] = await memory.enqueue([_req(payload=payload)])
    payload["items"].append(3)
    job = await memory.get(result.id)
    assert job is not None
    assert job.payload == {"items": [1, 2]}
    job.payload["items"].append(4)
    again = await memory.get(result.id)
    assert again is not None
    assert again.payload == {"items": [1, 2]}


async def test_apply_rejects_a_non_operator_event(memory: AsyncInMemoryJobStore) -> None:
    await memory.enqueue([_req()])
    with pytest.raises(ValidationError, match="operator event"):
        await memory.apply(JobFilter(), Event.CLAIM)


async def test_claim_with_no_limit_claims_nothing(memory: AsyncInMemoryJobStore) -> None:
    await memory.enqueue([_req()])
    assert await memory.claim(_claim(limit=0)) == []


async def test_purge_archive_keeps_the_jobs_aside(
    memory: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    await memory.enqueue([_req(), _req()])
    jobs = await memory.claim(_claim())
    await memory.complete([Completion(lease=j.lease, outcome=Succeeded()) for j in jobs])
    clock.advance(10)
    purged = await memory.purge(older_than=timedelta(seconds=5), archive=True, batch_size=1)
    assert purged == 2
    archived = memory.archived()
    assert sorted(archived) == sorted(_ids(jobs))
    assert all(job.state is JobState.SUCCEEDED for job in archived.values())


async def test_purge_needs_a_positive_batch_size(memory: AsyncInMemoryJobStore) -> None:
    with pytest.raises(ValidationError, match="batch_size"):
        await memory.purge(older_than=timedelta(0), archive=False, batch_size=0)


# ---- notifier ---------------------------------------------------------------------------


async def test_notifier_remembers_one_wakeup(memory: AsyncInMemoryJobStore) -> None:
    notifier = memory.notifier()
    await notifier.start()
    await memory.enqueue([_req()])
    await memory.enqueue([_req()])
    assert await notifier.wait(0)
    assert not await notifier.wait(0)
    await notifier.close()


async def test_notifier_hears_jobs_due_later(memory: AsyncInMemoryJobStore) -> None:
    # A worker's next-due timer is armed for them (docs/worker-internals.md, "The worker").
    notifier = memory.notifier()
    await notifier.start()
    await memory.enqueue([_req(delay=timedelta(hours=1))])
    assert await notifier.wait(0)
    await notifier.close()


async def test_notifier_hears_nothing_before_start_or_after_close(
    memory: AsyncInMemoryJobStore,
) -> None:
    notifier = memory.notifier()
    await memory.enqueue([_req()])
    assert not await notifier.wait(0)  # wait() starts listening, too late for that one
    await memory.enqueue([_req()])
    assert await notifier.wait(0)
    await notifier.close()
    await memory.enqueue([_req()])
    await notifier.start()
    assert not await notifier.wait(0)
    await notifier.close()


async def test_notifier_woken_at_commit_not_before(memory: AsyncInMemoryJobStore) -> None:
    notifier = memory.notifier()
    await notifier.start()
    async with memory.transaction() as tx:
        await memory.enqueue([_req()], connection=tx)
        assert not await notifier.wait(0)
    assert await notifier.wait(0)
    await notifier.close()


async def test_notifier_closed_with_the_store(memory: AsyncInMemoryJobStore) -> None:
    notifier = memory.notifier()
    await notifier.start()
    await memory.close()
    await memory.enqueue([_req()])
    assert not await notifier.wait(0)


async def test_notifier_woken_from_another_thread(memory: AsyncInMemoryJobStore) -> None:
    notifier = memory.notifier()
    await notifier.start()
    go = threading.Event()

    def enqueue_later() -> None:
        go.wait(10)
        memory.state.enqueue([_req()])  # the state is sync and shared by both flavours

    thread = threading.Thread(target=enqueue_later)
    thread.start()
    go.set()
    try:
        assert await notifier.wait(10.0)
    finally:
        thread.join(10)
        await notifier.close()


# ---- thread safety ----------------------------------------------------------------------


def _drain(state: MemoryState, worker_id: str) -> list[int]:
    got: list[int] = []
    while jobs := state.claim(_claim(worker_id, limit=2)):
        got += _ids(jobs)
        done = [Completion(lease=job.lease, outcome=Succeeded()) for job in jobs]
        assert state.complete(done) == [True] * len(jobs)
    return got


def test_threads_hammering_claim_never_share_a_job(clock: FakeClock) -> None:
    # Both flavours wrap the same sync state; real threads hammer it directly.
    state = AsyncInMemoryJobStore(clock=clock).state
    results = state.enqueue([_req(payload=i) for i in range(400)])
    claimed: list[list[int]] = [[] for _ in range(8)]

    def worker(i: int) -> None:
        claimed[i] = _drain(state, f"w{i}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    everything = [job_id for ids in claimed for job_id in ids]
    assert len(everything) == len(set(everything))
    assert sorted(everything) == sorted(r.id for r in results)
    [count] = state.counts()
    assert (count.state, count.count) == (JobState.SUCCEEDED, 400)


def test_threads_racing_for_maintenance_get_one_run(clock: FakeClock) -> None:
    state = AsyncInMemoryJobStore(clock=clock).state
    start = threading.Barrier(8)
    granted: list[bool] = []

    def race() -> None:
        start.wait(10)
        granted.append(state.try_maintenance("mem.race", timedelta(minutes=1)))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(granted) == [False] * 7 + [True]


# ---- helpers ----------------------------------------------------------------------------


def _ids(jobs: Sequence[Job]) -> list[int]:
    return [job.id for job in jobs]


def _page() -> Page:
    return Page(limit=1000)
