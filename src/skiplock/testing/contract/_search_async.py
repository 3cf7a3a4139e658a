"""Contract tests of the job search (async source; ``_search.py`` is its generated twin).

``JobFilter``'s search fields (docs/search.md, "The search filters"): payload
containment (jsonb ``@>``), error text across attempts, idempotency keys; on
``list_jobs`` and on the operator's ``apply`` and ``delete``, which take the same
filter. Mixed into :class:`~.store_async.AsyncJobStoreContract`. A PostgreSQL store
gives the same answers with its opt-in search indexes as without (an index changes
speed, not results: tests/contract/test_search_indexed_async.py runs these tests with
both).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from skiplock import core

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore


async def _search(store: AsyncJobStore, **fields: Any) -> list[int]:
    """Every match of the filter, following the cursor of each page (a page may stop
    early: ``resume_after``)."""
    found: list[int] = []
    after: int | None = None
    for _ in range(10_000):
        page = await store.list_jobs(core.JobFilter(**fields), core.Page(limit=2, after_id=after))
        found += kit.ids(page)
        after = page.next_after(2)
        if after is None:
            return found
    raise AssertionError("the search did not end")


class AsyncSearchContract(kit.AsyncContractBase):
    """Search by payload, error text and idempotency key."""

    async def test_search_by_payload_containment(self, store: AsyncJobStore) -> None:
        payloads: list[Any] = [
            {"user_id": 42, "plan": "pro"},
            {"user_id": 42, "plan": "free", "tags": ["a", "b"]},
            {"user_id": "42"},
            {"user_id": 43, "nested": {"org": {"id": 7}, "x": 1}},
            {"flag": True},
            {"flag": 1},
            {"score": 1.0},
            [42],
            "user_id",
            None,
        ]
        ids = [await kit.enqueue(store, payload=p) for p in payloads]
        await kit.running(store, payload={"user_id": 42})  # a running job matches too
        running = (await store.list_jobs(core.JobFilter(), core.Page(limit=100)))[-1].id

        assert await _search(store, payload={"user_id": 42}) == [ids[0], ids[1], running]
        assert await _search(store, payload={"user_id": 42, "plan": "pro"}) == [ids[0]]
        assert await _search(store, payload={"user_id": "42"}) == [ids[2]]  # the string
        assert await _search(store, payload={"tags": ["b"]}) == [ids[1]]
        assert await _search(store, payload={"nested": {"org": {"id": 7}}}) == [ids[3]]
        assert await _search(store, payload={"flag": True}) == [ids[4]]  # not 1
        assert await _search(store, payload={"flag": 1}) == [ids[5]]
        assert await _search(store, payload={"score": 1}) == [ids[6]]  # 1 and 1.0: one number
        assert await _search(store, payload={"user_id": 44}) == []
        assert await _search(
            store, payload={"user_id": 42}, states=frozenset({core.JobState.RUNNING})
        ) == [running]

    async def test_search_by_error_text_across_attempts(self, store: AsyncJobStore) -> None:
        job = await kit.running(store, max_attempts=3)
        await kit.finish(store, job, core.Retry(delay=timedelta(0), error="Timeout talking to S3"))
        again = await kit.claim_one(store, job.kind)
        await kit.finish(store, again, core.Bury(error="KeyError: 'user'"))
        other = await kit.running(store)
        await kit.finish(store, other, core.Bury(error="ValueError: timeout must be > 0"))
        await kit.in_state(store, core.JobState.SUCCEEDED)
        await kit.enqueue(store, payload={"text": "timeout"})  # a payload is not an error

        # The first attempt's error, no longer the last one, is found; lower case compared.
        assert await _search(store, error="timeout talking") == [job.id]
        assert await _search(store, error="KEYERROR") == [job.id]
        assert await _search(store, error="Timeout") == [job.id, other.id]
        assert await _search(store, error="timeout", kinds=frozenset({other.kind})) == [other.id]
        assert await _search(store, error="no such error") == []
        # Characters LIKE would read as patterns are matched as they are.
        assert await _search(store, error="%") == []
        assert await _search(store, error="'user'") == [job.id]

    async def test_search_by_idempotency_key(self, store: AsyncJobStore) -> None:
        keyed = await kit.enqueue(store, idempotency_key="order-17")
        tenant = await kit.enqueue(
            store, tenant="t1", idempotency_key="order-17", idempotency_scope="tenant"
        )
        await kit.enqueue(store, idempotency_key="order-170")
        await kit.enqueue(store, payload={"key": "order-17"})

        assert await _search(store, idempotency_key="order-17") == [keyed, tenant]
        assert await _search(store, idempotency_key="order-17", tenants=frozenset({"t1"})) == [
            tenant
        ]
        assert await _search(store, idempotency_key="order-1") == []
        page = await store.list_jobs(
            core.JobFilter(idempotency_key="order-17"), core.Page(limit=1, after_id=keyed)
        )
        assert (kit.ids(page), page.resume_after) == ([tenant], None)
        down = await store.list_jobs(
            core.JobFilter(idempotency_key="order-17"), core.Page(limit=5, descending=True)
        )
        assert kit.ids(down) == [tenant, keyed]

    async def test_search_fields_combine(self, store: AsyncJobStore) -> None:
        job = await kit.running(store, payload={"user_id": 42}, idempotency_key="k-1")
        await kit.finish(store, job, core.Bury(error="boom"))
        await kit.enqueue(store, payload={"user_id": 42}, idempotency_key="k-2")
        assert await _search(store, payload={"user_id": 42}, error="boom") == [job.id]
        assert await _search(store, payload={"user_id": 42}, idempotency_key="k-1") == [job.id]
        assert await _search(store, error="boom", idempotency_key="k-2") == []
        dead = frozenset({core.JobState.DEAD})
        assert await _search(store, payload={"user_id": 42}, states=dead) == [job.id]

    async def test_apply_and_delete_take_the_search_fields(self, store: AsyncJobStore) -> None:
        mine = await kit.enqueue(store, payload={"user_id": 42})
        theirs = await kit.enqueue(store, payload={"user_id": 43})
        keyed = await kit.enqueue(store, idempotency_key="gone")
        cancel = core.JobFilter(payload={"user_id": 42})
        assert await store.apply(cancel, core.Event.CANCEL) == [mine]
        deleted = await store.delete(core.JobFilter(idempotency_key="gone"))
        assert kit.ids(deleted) == [keyed]
        assert await store.delete(core.JobFilter(error="nothing failed")) == []
        assert kit.ids(await kit.all_jobs(store)) == [mine, theirs]

    async def test_a_search_follows_the_cursor_to_every_match(self, store: AsyncJobStore) -> None:
        # One job in 25 matches: a page may stop at its read budget (resume_after), and
        # following the cursor still finds every match once, in order.
        results = await store.enqueue(
            [
                kit.request(payload={"n": i, "even": i % 25 == 0})
                for i in range(2 * 25 * core.JobPage.READ_FACTOR)
            ]
        )
        wanted = [r.id for i, r in enumerate(results) if i % 25 == 0]
        assert await _search(store, payload={"even": True}) == sorted(wanted)

    async def test_an_error_search_follows_the_cursor_to_every_match(
        self, store: AsyncJobStore
    ) -> None:
        # One failed job in 25 holds the text: a page may stop at its read budget (the
        # walk of the jobs that failed) or read through an index; following the cursor
        # finds every match once, in order, either way.
        kind = kit.fresh_kind()
        count = 5 * core.JobPage.READ_FACTOR
        await store.enqueue([kit.request(kind) for _ in range(count)])
        jobs = sorted(
            await store.claim(kit.claim_request(limit=count, kinds=frozenset({kind}))),
            key=lambda job: job.id,
        )
        assert len(jobs) == count
        errors = [
            f"Timeout talking to host-{i}" if i % 25 == 0 else f"KeyError: k{i} 100%"
            for i in range(count)
        ]
        done = [
            core.Completion(lease=job.lease, outcome=core.Bury(error=error))
            for job, error in zip(jobs, errors, strict=True)
        ]
        assert await store.complete(done) == [True] * count
        wanted = [job.id for i, job in enumerate(jobs) if i % 25 == 0]
        assert await _search(store, error="talking to HOST") == wanted
        assert await _search(store, error="talking to host-25") == [jobs[25].id]
        # LIKE's wildcards and its escape character are matched as they are.
        assert await _search(store, error="error: k1_") == []
        assert await _search(store, error="k1 100%") == [jobs[1].id]
        assert await _search(store, error="k1\\") == []
        assert await _search(store, error="k1 100%", kinds=frozenset({"none.such"})) == []
