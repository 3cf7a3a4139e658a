"""Contract tests of enqueue and get (async source; ``_enqueue.py`` is its generated twin).

The store's clock, what an enqueued job keeps, due times, batches, and idempotency keys.
Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock import core
from skiplock._compat_async import join, spawn

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock


class AsyncEnqueueContract(kit.AsyncContractBase):
    """Enqueue, get, the store's clock and idempotency keys."""

    # ---- clock, enqueue, get ----------------------------------------------------------

    async def test_now_is_aware_utc(self, store: AsyncJobStore) -> None:
        now = await store.now()
        assert now.utcoffset() == timedelta(0)

    @kit.requires("controllable_clock")
    async def test_now_follows_the_clock(self, store: AsyncJobStore, clock: FakeClock) -> None:
        assert await store.now() == clock.now()
        clock.advance(90)
        assert await store.now() == clock.now()

    async def test_a_single_enqueue_reports_the_created_at_it_wrote(
        self, store: AsyncJobStore
    ) -> None:
        [result] = await store.enqueue([kit.request("contract.created_at")])
        job = await kit.get(store, result.id)
        assert result.created_at == job.created_at
        assert result.created_at is not None
        assert result.created_at.utcoffset() == timedelta(0)

    async def test_enqueue_get_round_trip_keeps_every_field(self, store: AsyncJobStore) -> None:
        before = await store.now()
        available_at = (before - timedelta(minutes=1)).astimezone(UTC)
        [result] = await store.enqueue(
            [
                kit.request(
                    "contract.round_trip",
                    payload=kit.PAYLOAD,
                    priority=7,
                    tenant="tenant-a",
                    available_at=available_at,
                    max_attempts=3,
                    idempotency_key="round-trip-1",
                    trace_context=kit.TRACE,
                )
            ]
        )
        after = await store.now()
        assert result.created
        job = await kit.get(store, result.id)
        assert job.id == result.id
        assert job.kind == "contract.round_trip"
        assert job.payload == kit.PAYLOAD
        assert job.state is core.JobState.PENDING
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
        assert dict(job.trace_context) == kit.TRACE

    async def test_enqueue_defaults_make_the_job_due_now(self, store: AsyncJobStore) -> None:
        before = await store.now()
        job_id = await kit.enqueue(store)
        after = await store.now()
        job = await kit.get(store, job_id)
        assert job.payload is None
        assert job.priority == 0
        assert job.tenant is None
        assert job.max_attempts == 5
        assert job.idempotency_key is None
        assert not job.trace_context
        assert before <= job.available_at <= after

    async def test_enqueue_with_delay_is_due_later(self, store: AsyncJobStore) -> None:
        before = await store.now()
        job_id = await kit.enqueue(store, delay=timedelta(hours=1))
        after = await store.now()
        job = await kit.get(store, job_id)
        assert before + timedelta(hours=1) <= job.available_at <= after + timedelta(hours=1)

    async def test_enqueue_batch_results_follow_request_order(self, store: AsyncJobStore) -> None:
        requests = [kit.request(f"contract.batch{i}", payload={"i": i}) for i in range(5)]
        results = await store.enqueue(requests)
        assert [r.created for r in results] == [True] * 5
        assert len({r.id for r in results}) == 5
        for i, result in enumerate(results):
            job = await kit.get(store, result.id)
            assert (job.kind, job.payload) == (f"contract.batch{i}", {"i": i})

    async def test_enqueue_empty_batch_creates_nothing(self, store: AsyncJobStore) -> None:
        assert await store.enqueue([]) == []
        assert await kit.all_jobs(store) == []

    async def test_enqueue_large_batch(self, store: AsyncJobStore) -> None:
        results = await store.enqueue([kit.request(payload=i) for i in range(500)])
        assert len({r.id for r in results}) == 500
        assert len(await kit.all_jobs(store)) == 500

    @pytest.mark.parametrize("size", [600, 5000], ids=["statement", "bulk"])
    async def test_enqueue_takes_a_batch_of_columns_as_its_requests(
        self, store: AsyncJobStore, size: int
    ) -> None:
        # What the engine hands over for enqueue_many: an EnqueueBatch, of every size a
        # store may write differently (PostgreSQL: one INSERT below 5,000 jobs, COPY from
        # 5,000), and small with keys (a statement). The engine's carry their payload's
        # JSON text; a batch of plain requests may not. Every field must arrive.
        now = await store.now()
        payloads = [
            None if i % 7 == 0 else {"i": i, "text": "tab\tnew\nline \\ ✓"} for i in range(size)
        ]
        requests = [
            kit.request(
                f"contract.columns{i % 3}",
                payload=payload,
                payload_json=None if i % 2 else core.encode_payload(payload),
                priority=i % 5 - 2,
                tenant=None if i % 2 else f"tenant-{i % 4}",
                available_at=(now - timedelta(minutes=1)).astimezone(UTC) if i % 3 == 0 else None,
                delay=timedelta(hours=1) if i % 3 == 1 else None,
                max_attempts=1 + i % 4,
                explicit_max_attempts=i % 6 == 0,
                trace_context=kit.TRACE if i % 5 == 0 else None,
            )
            for i, payload in enumerate(payloads)
        ]
        keyed = [
            kit.request("contract.columns.keyed", idempotency_key=f"k{i % 2}") for i in range(3)
        ]
        created_ids = [r.id for r in await store.enqueue(core.EnqueueBatch.of(requests))]
        assert len(created_ids) == len(requests)
        assert created_ids == sorted(created_ids)  # ids follow the request order
        results = await store.enqueue(core.EnqueueBatch.of(keyed))
        assert len(results) == len(keyed)
        after = await store.now()
        assert [r.created for r in results] == [True, True, False]
        assert results[2].id == results[0].id
        jobs = {job.id: job for job in await kit.all_jobs(store)}
        assert len(jobs) == len(requests) + 2
        assert sorted(jobs)[: len(requests)] == created_ids
        for request, job_id in zip(requests, created_ids, strict=True):
            job = jobs[job_id]
            assert (job.kind, job.payload, job.priority, job.tenant, job.max_attempts) == (
                request.kind,
                request.payload,
                request.priority,
                request.tenant,
                request.max_attempts,
            )
            assert job.explicit_max_attempts is request.explicit_max_attempts
            assert (job.trace_context or None) == request.trace_context
            assert (job.state, job.attempts, job.idempotency_key) == (
                core.JobState.PENDING,
                0,
                None,
            )
            if request.available_at is not None:
                assert job.available_at == request.available_at
            elif request.delay is not None:
                assert now + request.delay <= job.available_at <= after + request.delay
            else:
                assert now <= job.available_at <= after
            assert job.created_at <= after

    @pytest.mark.parametrize("size", [1, 3, 5000], ids=["one", "statement", "bulk"])
    async def test_enqueue_keeps_concurrency_keys_on_every_path(
        self, store: AsyncJobStore, size: int
    ) -> None:
        # One job, a batch, a bulk batch (PostgreSQL: COPY), and a batch with idempotency
        # keys: every path writes a job's concurrency key and limit (1 for a key given
        # without one), and none for a job without a key.
        def key(i: int) -> dict[str, object]:
            if i % 3 == 0:
                return {}
            if i % 3 == 1:
                return {"concurrency_key": f"table:t{i % 4}"}
            return {"concurrency_key": "db:main", "concurrency_limit": 1 + i % 5}

        requests = [kit.request("contract.keys", payload=i, **key(i)) for i in range(size)]
        idempotent = [
            kit.request("contract.keys.idem", idempotency_key=f"idem-{i}", **key(i))
            for i in range(3)
        ]
        ids = [r.id for r in await store.enqueue(core.EnqueueBatch.of(requests))]
        ids += [r.id for r in await store.enqueue(idempotent)]
        jobs = {job.id: job for job in await kit.all_jobs(store)}
        for request, job_id in zip([*requests, *idempotent], ids, strict=True):
            job = jobs[job_id]
            expected = (
                (None, None)
                if request.concurrency_key is None
                else (request.concurrency_key, request.concurrency_limit or 1)
            )
            assert (job.concurrency_key, job.concurrency_limit) == expected, job

    async def test_get_unknown_id_returns_none(self, store: AsyncJobStore) -> None:
        assert await store.get(987_654_321) is None

    # ---- idempotency (R16) ----------------------------------------------------------

    async def test_enqueue_idempotency_key_returns_the_existing_job(
        self, store: AsyncJobStore
    ) -> None:
        [first] = await store.enqueue([kit.request(payload=1, idempotency_key="once")])
        [second] = await store.enqueue([kit.request(payload=2, idempotency_key="once")])
        assert first.created
        assert not second.created
        assert second.id == first.id
        jobs = await kit.all_jobs(store)
        assert kit.ids(jobs) == [first.id]
        assert jobs[0].payload == 1

    async def test_enqueue_idempotency_key_within_one_batch(self, store: AsyncJobStore) -> None:
        results = await store.enqueue(
            [
                kit.request(payload=1, idempotency_key="dup"),
                kit.request(payload=2),
                kit.request(payload=3, idempotency_key="dup"),
            ]
        )
        assert [r.created for r in results] == [True, True, False]
        assert results[2].id == results[0].id
        assert sorted(kit.ids(await kit.all_jobs(store))) == sorted({r.id for r in results})

    async def test_enqueue_idempotency_key_holds_in_any_state(self, store: AsyncJobStore) -> None:
        job = await kit.running(store, idempotency_key="busy")
        [again] = await store.enqueue([kit.request(idempotency_key="busy")])
        assert again.id == job.id
        assert not again.created

    async def test_delete_frees_the_idempotency_key(self, store: AsyncJobStore) -> None:
        job_id = await kit.enqueue(store, idempotency_key="reusable")
        await store.delete(core.JobFilter(ids=frozenset({job_id})))
        [again] = await store.enqueue([kit.request(idempotency_key="reusable")])
        assert again.created
        assert again.id != job_id

    @kit.requires("concurrent")
    async def test_enqueue_idempotency_key_under_concurrency(self, store: AsyncJobStore) -> None:
        async def enqueue(i: int) -> tuple[int, bool]:
            [result] = await store.enqueue([kit.request(payload=i, idempotency_key="race")])
            return result.id, result.created

        tasks = [spawn(enqueue, i) for i in range(8)]
        results = [await join(task) for task in tasks]
        assert len({job_id for job_id, _ in results}) == 1
        assert sum(created for _, created in results) == 1
        assert len(await kit.all_jobs(store)) == 1
