"""Contract tests of transactions (async source; ``_transactions.py`` is its generated twin).

The caller's transaction and autocommit handles: writes commit or roll back together.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock.core import (
    Completion,
    Event,
    JobFilter,
    JobState,
    Lease,
    Succeeded,
)

from ._support_async import (
    AsyncContractBase,
    _all_jobs,
    _claim_request,
    _enqueue,
    _finish,
    _get,
    _ids,
    _in_state,
    _request,
    _Rollback,
    _running,
    requires,
)

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore


class AsyncTransactionContract(AsyncContractBase):
    """Writes through ``transaction()`` and ``autocommit()`` handles."""

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
    async def test_transaction_rollback_discards_apply_job(self, store: AsyncJobStore) -> None:
        dead = await _in_state(store, JobState.DEAD)
        before = await _get(store, dead)

        async def replay_then_fail() -> None:
            async with store.transaction() as tx:
                replayed = await store.apply_job(
                    dead, Event.REPLAY, reset_attempts=True, connection=tx
                )
                assert replayed is not None
                assert (replayed.state, replayed.attempts) == (JobState.PENDING, 0)
                assert await store.get(dead, connection=tx) == replayed
                raise _Rollback

        with pytest.raises(_Rollback):
            await replay_then_fail()
        assert await _get(store, dead) == before

    @requires("transactions")
    async def test_transaction_apply_job_commits(self, store: AsyncJobStore) -> None:
        pending = await _enqueue(store)
        async with store.transaction() as tx:
            cancelled = await store.apply_job(pending, Event.CANCEL, connection=tx)
        assert cancelled is not None
        assert cancelled.state is JobState.CANCELLED
        assert await _get(store, pending) == cancelled

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
