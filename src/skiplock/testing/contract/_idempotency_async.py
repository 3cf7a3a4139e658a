"""Contract tests of idempotency keys' scopes, conflict policies and their memory after
retention (async source; ``_idempotency.py`` is its generated twin).

Mixed into :class:`~.store_async.AsyncJobStoreContract`; the basics (a key returns its
job, in a batch, under concurrency) are in ``_enqueue_async.py``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from skiplock import core
from skiplock.ports import AsyncAudit

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore
    from skiplock.testing import FakeClock

_ACTOR = "contract-idempotency"
_WINDOW = timedelta(hours=1)


def _tenant_key(key: str, tenant: str | None, **fields: Any) -> Any:
    return kit.request(idempotency_key=key, tenant=tenant, idempotency_scope="tenant", **fields)


def _replacing(key: str, **fields: Any) -> Any:
    return kit.request(idempotency_key=key, idempotency_conflict="replace_pending", **fields)


class AsyncIdempotencyContract(kit.AsyncContractBase):
    """Key scopes (global, per tenant), ``replace_pending``, and keys remembered for a
    window after retention purged their job."""

    # ---- scope ------------------------------------------------------------------------

    async def test_tenant_scope_lets_two_tenants_use_one_key(self, store: AsyncJobStore) -> None:
        a, b = await store.enqueue(
            [_tenant_key("order-1", "acme"), _tenant_key("order-1", "globex")]
        )
        assert a.created
        assert b.created
        assert a.id != b.id
        [again] = await store.enqueue([_tenant_key("order-1", "acme", payload=2)])
        assert again == core.EnqueueResult(id=a.id, created=False)
        job = await kit.get(store, a.id)
        assert (job.idempotency_key, job.idempotency_scope, job.tenant) == (
            "order-1",
            "tenant",
            "acme",
        )

    async def test_global_and_tenant_scopes_are_apart(self, store: AsyncJobStore) -> None:
        [scoped] = await store.enqueue([_tenant_key("shared", "acme")])
        [first] = await store.enqueue([kit.request(idempotency_key="shared", tenant="acme")])
        [second] = await store.enqueue([kit.request(idempotency_key="shared", tenant="globex")])
        assert scoped.created
        assert first.created
        assert scoped.id != first.id
        # The global scope is every job's: another tenant's global key is the same key.
        assert second == core.EnqueueResult(id=first.id, created=False)
        assert (await kit.get(store, first.id)).idempotency_scope == "global"

    async def test_tenant_scope_without_a_tenant_is_global(self, store: AsyncJobStore) -> None:
        [scoped] = await store.enqueue([_tenant_key("no-tenant", None)])
        [plain] = await store.enqueue([kit.request(idempotency_key="no-tenant")])
        assert scoped.created
        assert plain == core.EnqueueResult(id=scoped.id, created=False)
        assert (await kit.get(store, scoped.id)).idempotency_scope == "global"

    async def test_tenant_scoped_duplicates_within_one_batch(self, store: AsyncJobStore) -> None:
        results = await store.enqueue(
            [
                _tenant_key("batch-key", "acme", payload=1),
                _tenant_key("batch-key", "globex", payload=2),
                _tenant_key("batch-key", "acme", payload=3),
            ]
        )
        assert [r.created for r in results] == [True, True, False]
        assert results[2].id == results[0].id != results[1].id
        assert (await kit.get(store, results[0].id)).payload == 1

    # ---- conflict policy --------------------------------------------------------------

    async def test_ignore_leaves_the_pending_job_as_it_is(self, store: AsyncJobStore) -> None:
        job_id = await kit.enqueue(store, payload=1, idempotency_key="ignored")
        [again] = await store.enqueue(
            [kit.request(payload=2, priority=9, idempotency_key="ignored")]
        )
        assert again == core.EnqueueResult(id=job_id, created=False)
        job = await kit.get(store, job_id)
        assert (job.payload, job.priority) == (1, 0)

    async def test_replace_pending_takes_payload_due_time_and_priority(
        self, store: AsyncJobStore
    ) -> None:
        job_id = await kit.enqueue(store, payload={"v": 1}, idempotency_key="replaced")
        before = await kit.get(store, job_id)
        later = (await store.now()) + timedelta(hours=3)
        [again] = await store.enqueue(
            [_replacing("replaced", payload={"v": 2}, priority=7, available_at=later)]
        )
        assert again == core.EnqueueResult(id=job_id, created=False, replaced=True)
        job = await kit.get(store, job_id)
        assert (job.payload, job.priority, job.available_at) == ({"v": 2}, 7, later)
        assert (job.state, job.attempts, job.created_at, job.kind) == (
            core.JobState.PENDING,
            0,
            before.created_at,
            before.kind,
        )

    async def test_replace_pending_in_a_tenant_scope(self, store: AsyncJobStore) -> None:
        a, b = await store.enqueue(
            [_tenant_key("scoped", "acme", payload=1), _tenant_key("scoped", "globex", payload=1)]
        )
        [again] = await store.enqueue(
            [_tenant_key("scoped", "globex", payload=2, idempotency_conflict="replace_pending")]
        )
        assert again == core.EnqueueResult(id=b.id, created=False, replaced=True)
        assert ((await kit.get(store, a.id)).payload, (await kit.get(store, b.id)).payload) == (
            1,
            2,
        )

    async def test_replace_pending_leaves_a_running_job_alone(self, store: AsyncJobStore) -> None:
        job = await kit.running(store, payload=1, idempotency_key="busy-replace")
        [again] = await store.enqueue([_replacing("busy-replace", payload=2)])
        assert again == core.EnqueueResult(id=job.id, created=False)
        now = await kit.get(store, job.id)
        assert (now.state, now.payload) == (core.JobState.RUNNING, 1)

    async def test_replace_pending_leaves_a_finished_job_alone(self, store: AsyncJobStore) -> None:
        job = await kit.running(store, payload=1, idempotency_key="done-replace")
        await kit.finish(store, job, core.Succeeded())
        [again] = await store.enqueue([_replacing("done-replace", payload=2)])
        assert again == core.EnqueueResult(id=job.id, created=False)
        assert (await kit.get(store, job.id)).payload == 1

    async def test_replace_pending_and_new_keys_in_one_batch(self, store: AsyncJobStore) -> None:
        job_id = await kit.enqueue(store, payload=1, idempotency_key="mixed-old")
        results = await store.enqueue(
            [_replacing("mixed-new", payload=1), _replacing("mixed-old", payload=2)]
        )
        assert results[0].created
        assert not results[0].replaced
        assert results[1] == core.EnqueueResult(id=job_id, created=False, replaced=True)
        assert (await kit.get(store, job_id)).payload == 2

    async def test_replace_pending_is_audited_with_the_actor(self, store: AsyncJobStore) -> None:
        kind = kit.fresh_kind()
        [first] = await store.enqueue(
            [kit.request(kind, payload="old", priority=1, idempotency_key="audited-replace")],
            audit=AsyncAudit(actor=_ACTOR),
        )
        [again] = await store.enqueue(
            [_replacing("audited-replace", kind=kind, payload="new")],
            audit=AsyncAudit(actor=_ACTOR),
        )
        assert again.replaced
        events = await store.audit_trail(first.id)
        assert [(e.action, e.actor, e.kind, e.details) for e in events] == [
            (core.AuditAction.ENQUEUED, _ACTOR, kind, None),
            (core.AuditAction.REPLACED, _ACTOR, kind, {"payload": "old", "priority": 1}),
        ]

    # ---- keys remembered after retention ----------------------------------------------

    async def _purged(
        self, store: AsyncJobStore, clock: FakeClock, window: timedelta | None, **fields: Any
    ) -> int:
        """A succeeded job with ``fields`` (a key), purged by retention with ``window``."""
        job = await kit.running(store, **fields)
        await kit.finish(store, job, core.Succeeded())
        if self.capabilities.controllable_clock:
            clock.advance(timedelta(hours=2))
        older_than = timedelta(hours=1) if self.capabilities.controllable_clock else timedelta(0)
        purged = await store.purge(
            older_than=older_than, archive=False, batch_size=100, key_window=window
        )
        assert purged >= 1
        assert await store.get(job.id) is None
        return job.id

    async def test_purge_remembers_keys_for_the_window(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        job_id = await self._purged(store, clock, _WINDOW, idempotency_key="remembered")
        [again] = await store.enqueue([kit.request(idempotency_key="remembered")])
        assert again == core.EnqueueResult(id=job_id, created=False, purged=True)
        assert await store.get(job_id) is None
        # Duplicates of it in one batch say the same; other keys are created.
        results = await store.enqueue(
            [kit.request(idempotency_key="remembered"), kit.request(idempotency_key="fresh")]
        )
        assert results[0] == core.EnqueueResult(id=job_id, created=False, purged=True)
        assert results[1].created

    async def test_remembered_keys_keep_their_scope(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        job_id = await self._purged(
            store,
            clock,
            _WINDOW,
            idempotency_key="scoped-gone",
            tenant="acme",
            idempotency_scope="tenant",
        )
        [same] = await store.enqueue([_tenant_key("scoped-gone", "acme")])
        [other] = await store.enqueue([_tenant_key("scoped-gone", "globex")])
        [unscoped] = await store.enqueue([kit.request(idempotency_key="scoped-gone")])
        assert same == core.EnqueueResult(id=job_id, created=False, purged=True)
        assert other.created
        assert unscoped.created

    async def test_purge_without_a_window_frees_keys(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        await self._purged(store, clock, None, idempotency_key="forgotten")
        [again] = await store.enqueue([kit.request(idempotency_key="forgotten")])
        assert again.created

    async def test_remembered_keys_are_purged_after_the_window(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        job_id = await self._purged(store, clock, _WINDOW, idempotency_key="expiring")
        # A later purge within the window keeps the key ...
        await store.purge(
            older_than=timedelta(days=1), archive=False, batch_size=100, key_window=_WINDOW
        )
        [kept] = await store.enqueue([kit.request(idempotency_key="expiring")])
        assert kept == core.EnqueueResult(id=job_id, created=False, purged=True)
        # ... one after it forgets it (a store on the database's clock: a window of 0).
        if self.capabilities.controllable_clock:
            clock.advance(_WINDOW + timedelta(seconds=1))
            window = _WINDOW
        else:
            window = timedelta(0)
        await store.purge(
            older_than=timedelta(days=1), archive=False, batch_size=100, key_window=window
        )
        [again] = await store.enqueue([kit.request(idempotency_key="expiring")])
        assert again.created
        assert again.id != job_id
