"""Contract tests of the concurrency limits set at run time (issue 45) (async source;
``_concurrency.py`` is its generated twin): stored, listed, replaced and cleared as the
port says, audited without a job, and a key's stored limit is the one the claim applies
(in place of the jobs' own ``concurrency_limit``) until it is cleared. Mixed into
:class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock import core
from skiplock.core.store import ConcurrencyLimit, Controls
from skiplock.ports import AsyncAudit

from . import _support_async as kit
from ._audit_events_async import _Sink, _SinkError

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore

_ACTOR = "ops@example.com"


class AsyncConcurrencyContract(kit.AsyncContractBase):
    """Concurrency limits of kinds and keys set at run time, and the claim's key limit."""

    async def test_concurrency_limits_are_set_replaced_and_cleared(
        self, store: AsyncJobStore
    ) -> None:
        before = await store.now()
        node = await store.set_concurrency(
            ConcurrencyLimit(2, kind="contract.k", scope="node", actor=_ACTOR)
        )
        assert (node.kind, node.key, node.scope, node.limit, node.actor) == (
            "contract.k",
            None,
            "node",
            2,
            _ACTOR,
        )
        assert node.updated_at is not None
        assert before <= node.updated_at <= await store.now()
        await store.set_concurrency(ConcurrencyLimit(5, kind="contract.k", scope="cluster"))
        await store.set_concurrency(ConcurrencyLimit(3, key="table:orders"))
        replaced = await store.set_concurrency(ConcurrencyLimit(4, kind="contract.k", scope="node"))
        assert replaced.limit == 4
        controls = await store.controls()
        assert {(c.kind, c.key, c.scope): c.limit for c in controls.concurrency} == {
            ("contract.k", None, "node"): 4,
            ("contract.k", None, "cluster"): 5,
            (None, "table:orders", "cluster"): 3,
        }
        assert controls.key_limits() == {"table:orders": 3}
        assert controls.concurrency_of("contract.k", None, "cluster") is not None
        cleared = await store.clear_concurrency("contract.k", None, "node")
        assert cleared is not None
        assert cleared.limit == 4
        assert await store.clear_concurrency("contract.k", None, "node") is None
        assert await store.clear_concurrency(None, "table:orders", "cluster") is not None
        [left] = (await store.controls()).concurrency
        assert (left.kind, left.key, left.scope, left.limit) == ("contract.k", None, "cluster", 5)

    async def test_a_concurrency_limit_names_a_kind_or_a_cluster_wide_key(self) -> None:
        with pytest.raises(core.ValidationError):
            ConcurrencyLimit(1)
        with pytest.raises(core.ValidationError):
            ConcurrencyLimit(1, kind="k", key="x")
        with pytest.raises(core.ValidationError):
            ConcurrencyLimit(1, key="x", scope="node")
        with pytest.raises(core.ValidationError):
            ConcurrencyLimit(0, kind="k")
        with pytest.raises(core.ValidationError):
            ConcurrencyLimit(1, kind="k", scope="everywhere")  # type: ignore[arg-type]

    async def test_concurrency_changes_are_audited_without_a_job(
        self, store: AsyncJobStore
    ) -> None:
        sink = _Sink(store)
        audit = AsyncAudit(actor=_ACTOR, sink=sink)
        await store.set_concurrency(
            ConcurrencyLimit(2, kind="contract.k", actor=_ACTOR), audit=audit
        )
        await store.clear_concurrency("contract.k", None, "cluster", audit=audit)
        await store.clear_concurrency("contract.k", None, "cluster", audit=audit)  # no event
        await store.set_concurrency(ConcurrencyLimit(7, key="db:main", actor=_ACTOR), audit=audit)
        facts = [(e.action, e.job_id, e.kind, e.tenant, e.actor, e.details) for e in sink.events()]
        kind = {"key": None, "scope": "cluster", "limit": 2}
        key = {"key": "db:main", "scope": "cluster", "limit": 7}
        assert facts == [
            (core.AuditAction.CONCURRENCY_SET, None, "contract.k", None, _ACTOR, kind),
            (core.AuditAction.CONCURRENCY_CLEARED, None, "contract.k", None, _ACTOR, kind),
            (core.AuditAction.CONCURRENCY_SET, None, None, None, _ACTOR, key),
        ]

    async def test_a_failing_sink_undoes_a_concurrency_change(self, store: AsyncJobStore) -> None:
        audit = AsyncAudit(actor=_ACTOR, sink=_Sink(store, fail=True))
        with pytest.raises(_SinkError):
            await store.set_concurrency(ConcurrencyLimit(2, kind="contract.k"), audit=audit)
        assert await store.controls() == Controls()

    async def test_the_audit_table_takes_concurrency_events(self, store: AsyncJobStore) -> None:
        await store.set_concurrency(
            ConcurrencyLimit(1, key="contract:key", actor=_ACTOR), audit=AsyncAudit(actor=_ACTOR)
        )
        assert (await store.controls()).key_limits() == {"contract:key": 1}

    async def test_claim_applies_a_keys_stored_limit_over_the_jobs_own(
        self, store: AsyncJobStore
    ) -> None:
        key = {"concurrency_key": "contract:db", "concurrency_limit": 1}
        jobs = [await kit.enqueue(store, "contract.sync", **key) for _ in range(4)]
        # Raised at run time: two of the key's jobs run at once.
        await store.set_concurrency(ConcurrencyLimit(2, key="contract:db"))
        first = await store.claim(kit.claim_request("w1", 10))
        assert kit.ids(first) == jobs[:2]
        assert await store.claim(kit.claim_request("w2", 10)) == []
        # Lowered below what runs: nothing more until enough of them finished.
        await store.set_concurrency(ConcurrencyLimit(1, key="contract:db"))
        await kit.finish(store, first[0], core.Succeeded())
        assert await store.claim(kit.claim_request("w2", 10)) == []
        # Cleared: the jobs' own limit (1) again; one still runs, so none starts.
        assert await store.clear_concurrency(None, "contract:db", "cluster") is not None
        assert await store.claim(kit.claim_request("w2", 10)) == []
        await kit.finish(store, first[1], core.Succeeded())
        assert kit.ids(await store.claim(kit.claim_request("w2", 10))) == [jobs[2]]

    async def test_a_keys_stored_limit_can_lower_the_jobs_own(self, store: AsyncJobStore) -> None:
        key = {"concurrency_key": "contract:wide", "concurrency_limit": 5}
        jobs = [await kit.enqueue(store, "contract.sync", **key) for _ in range(3)]
        other = await kit.enqueue(store, "contract.sync", concurrency_key="contract:other")
        await store.set_concurrency(ConcurrencyLimit(1, key="contract:wide"))
        claimed = await store.claim(kit.claim_request("w1", 10))
        assert sorted(kit.ids(claimed)) == sorted([jobs[0], other])
