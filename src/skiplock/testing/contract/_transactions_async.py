"""Contract tests of transactions (async source; ``_transactions.py`` is its generated twin).

The caller's transaction and autocommit handles: writes commit or roll back together.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock import core

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore


class AsyncTransactionContract(kit.AsyncContractBase):
    """Writes through ``transaction()`` and ``autocommit()`` handles."""

    # ---- transactions (R0, R10) -------------------------------------------------------

    @kit.requires("transactions")
    async def test_transaction_rollback_discards_enqueue(self, store: AsyncJobStore) -> None:
        async def enqueue_then_fail() -> None:
            async with store.transaction() as tx:
                await store.enqueue([kit.request(), kit.request()], connection=tx)
                raise kit.Rollback

        with pytest.raises(kit.Rollback):
            await enqueue_then_fail()
        assert await kit.all_jobs(store) == []

    @kit.requires("transactions")
    async def test_transaction_commit_makes_enqueue_visible(self, store: AsyncJobStore) -> None:
        async with store.transaction() as tx:
            [result] = await store.enqueue([kit.request(payload="tx")], connection=tx)
            inside = await store.get(result.id, connection=tx)
            assert inside is not None
            assert inside.payload == "tx"
            assert await store.get(result.id) is None  # not committed yet
        job = await kit.get(store, result.id)
        assert job.state is core.JobState.PENDING
        assert kit.ids(await store.claim(kit.claim_request())) == [result.id]

    @kit.requires("transactions")
    async def test_transaction_bulk_enqueue_is_all_or_nothing(self, store: AsyncJobStore) -> None:
        async def enqueue_then_fail() -> None:
            async with store.transaction() as tx:
                await store.enqueue([kit.request(payload=i) for i in range(100)], connection=tx)
                await store.enqueue([kit.request(payload="more")], connection=tx)
                raise kit.Rollback

        with pytest.raises(kit.Rollback):
            await enqueue_then_fail()
        assert await kit.all_jobs(store) == []
        async with store.transaction() as tx:
            await store.enqueue([kit.request(payload=i) for i in range(100)], connection=tx)
        assert len(await kit.all_jobs(store)) == 100

    @kit.requires("transactions")
    async def test_transaction_idempotency_key_within_the_transaction(
        self, store: AsyncJobStore
    ) -> None:
        async with store.transaction() as tx:
            [first] = await store.enqueue([kit.request(idempotency_key="tx-key")], connection=tx)
            [second] = await store.enqueue([kit.request(idempotency_key="tx-key")], connection=tx)
        assert first.created
        assert not second.created
        assert second.id == first.id
        assert kit.ids(await kit.all_jobs(store)) == [first.id]

    @kit.requires("transactions")
    async def test_transaction_enqueue_and_complete_commit_together(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store)
        async with store.transaction() as tx:
            [follow_up] = await store.enqueue([kit.request("contract.follow_up")], connection=tx)
            applied = await store.complete(
                [core.Completion(lease=job.lease, outcome=core.Succeeded())], connection=tx
            )
            assert applied == [True]
        assert (await kit.get(store, job.id)).state is core.JobState.SUCCEEDED
        assert (await kit.get(store, follow_up.id)).kind == "contract.follow_up"

    @kit.requires("transactions")
    async def test_transaction_rollback_keeps_the_job_running(self, store: AsyncJobStore) -> None:
        job = await kit.running(store)

        async def complete_then_fail() -> None:
            async with store.transaction() as tx:
                await store.enqueue([kit.request("contract.follow_up")], connection=tx)
                await store.complete(
                    [core.Completion(lease=job.lease, outcome=core.Succeeded())], connection=tx
                )
                raise kit.Rollback

        with pytest.raises(kit.Rollback):
            await complete_then_fail()
        after = await kit.get(store, job.id)
        assert after.state is core.JobState.RUNNING
        assert after.lease == job.lease
        assert [j.kind for j in await kit.all_jobs(store)] == [job.kind]
        # The claim is intact: its worker can still finish it.
        await kit.finish(store, job, core.Succeeded())

    @kit.requires("transactions")
    async def test_transaction_rollback_discards_apply_and_delete(
        self, store: AsyncJobStore
    ) -> None:
        pending = await kit.enqueue(store)
        dead = await kit.in_state(store, core.JobState.DEAD)

        async def change_then_fail() -> None:
            async with store.transaction() as tx:
                assert await store.apply(
                    core.JobFilter(ids=frozenset({pending})), core.Event.CANCEL, connection=tx
                ) == [pending]
                deleted = await store.delete(core.JobFilter(ids=frozenset({dead})), connection=tx)
                assert kit.ids(deleted) == [dead]
                raise kit.Rollback

        with pytest.raises(kit.Rollback):
            await change_then_fail()
        assert (await kit.get(store, pending)).state is core.JobState.PENDING
        assert (await kit.get(store, dead)).state is core.JobState.DEAD

    @kit.requires("transactions")
    async def test_transaction_rollback_discards_apply_job(self, store: AsyncJobStore) -> None:
        dead = await kit.in_state(store, core.JobState.DEAD)
        before = await kit.get(store, dead)

        async def replay_then_fail() -> None:
            async with store.transaction() as tx:
                replayed = await store.apply_job(
                    dead, core.Event.REPLAY, reset_attempts=True, connection=tx
                )
                assert replayed is not None
                assert (replayed.state, replayed.attempts) == (core.JobState.PENDING, 0)
                assert await store.get(dead, connection=tx) == replayed
                raise kit.Rollback

        with pytest.raises(kit.Rollback):
            await replay_then_fail()
        assert await kit.get(store, dead) == before

    @kit.requires("transactions")
    async def test_transaction_apply_job_commits(self, store: AsyncJobStore) -> None:
        pending = await kit.enqueue(store)
        async with store.transaction() as tx:
            cancelled = await store.apply_job(pending, core.Event.CANCEL, connection=tx)
        assert cancelled is not None
        assert cancelled.state is core.JobState.CANCELLED
        assert await kit.get(store, pending) == cancelled

    @kit.requires("transactions")
    async def test_transaction_apply_and_delete_commit(self, store: AsyncJobStore) -> None:
        pending = await kit.enqueue(store)
        dead = await kit.in_state(store, core.JobState.DEAD)
        async with store.transaction() as tx:
            await store.apply(
                core.JobFilter(ids=frozenset({pending})), core.Event.CANCEL, connection=tx
            )
            await store.delete(core.JobFilter(ids=frozenset({dead})), connection=tx)
        assert (await kit.get(store, pending)).state is core.JobState.CANCELLED
        assert await store.get(dead) is None

    @kit.requires("transactions")
    async def test_transaction_fenced_complete_with_a_stale_lease_is_false(
        self, store: AsyncJobStore
    ) -> None:
        job = await kit.running(store)
        stale = core.Lease(
            job_id=job.id, worker_id="someone-else", attempt=job.attempts, claim=job.claims
        )
        async with store.transaction() as tx:
            assert await store.complete(
                [core.Completion(lease=stale, outcome=core.Succeeded())], connection=tx
            ) == [False]
        assert (await kit.get(store, job.id)).state is core.JobState.RUNNING

    async def test_transaction_and_autocommit_take_a_statement_timeout(
        self, store: AsyncJobStore
    ) -> None:
        async with store.transaction(statement_timeout=30.0) as tx:
            [result] = await store.enqueue([kit.request()], connection=tx)
        async with store.autocommit(statement_timeout=30.0) as conn:
            assert await store.get(result.id, connection=conn) is not None
        async with store.transaction(statement_timeout=None) as tx:
            assert await store.get(result.id, connection=tx) is not None

    async def test_autocommit_writes_apply_immediately(self, store: AsyncJobStore) -> None:
        async with store.autocommit() as conn:
            [result] = await store.enqueue([kit.request()], connection=conn)
            assert (await kit.get(store, result.id)).state is core.JobState.PENDING
        assert (await kit.get(store, result.id)).state is core.JobState.PENDING
