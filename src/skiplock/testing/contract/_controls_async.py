"""Contract tests of the run-time controls (issue 30) (async source; ``_controls.py`` is
its generated twin): pauses and limits are stored, listed, replaced and removed as the
port says, audited without a job, and a claim leaves out the tenants it excludes in every
lane. Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock import core
from skiplock.core.store import Controls, Limit, Pause
from skiplock.ports import AsyncAudit

from . import _support_async as kit
from ._audit_events_async import _Sink, _SinkError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.ports import AsyncJobStore

_ACTOR = "ops@example.com"


def _facts(events: Sequence[core.AuditEvent]) -> list[tuple[Any, ...]]:
    return [(e.action, e.job_id, e.kind, e.tenant, e.actor, e.details) for e in events]


def _scopes(controls: Controls) -> set[tuple[str | None, str | None]]:
    return {(p.kind, p.tenant) for p in controls.pauses}


class AsyncControlsContract(kit.AsyncContractBase):
    """Pauses and limits set at run time, and the claim's tenant exclusion."""

    async def test_no_controls_at_first(self, store: AsyncJobStore) -> None:
        assert await store.controls() == Controls()

    async def test_pause_is_stored_with_its_reason_actor_and_time(
        self, store: AsyncJobStore
    ) -> None:
        before = await store.now()
        stored = await store.pause(Pause("contract.k", None, reason="outage", actor=_ACTOR))
        after = await store.now()
        assert (stored.kind, stored.tenant, stored.reason, stored.actor) == (
            "contract.k",
            None,
            "outage",
            _ACTOR,
        )
        assert stored.since is not None
        assert before <= stored.since <= after
        await store.pause(Pause(None, "t1"))
        await store.pause(Pause("contract.k", "t2"))
        controls = await store.controls()
        assert _scopes(controls) == {("contract.k", None), (None, "t1"), ("contract.k", "t2")}
        assert controls.pause_of("contract.k", "t9") == stored
        assert controls.pause_of("other", "t1") is not None
        assert controls.pause_of("other", "t2") is None

    async def test_pausing_again_keeps_since_and_takes_the_new_reason(
        self, store: AsyncJobStore
    ) -> None:
        first = await store.pause(Pause("contract.k", "t", reason="one", actor="a"))
        again = await store.pause(Pause("contract.k", "t", reason="two", actor="b"))
        assert (again.since, again.reason, again.actor) == (first.since, "two", "b")
        [only] = (await store.controls()).pauses
        assert only == again

    async def test_resume_lifts_exactly_one_pause(self, store: AsyncJobStore) -> None:
        await store.pause(Pause("contract.k", None, reason="r"))
        await store.pause(Pause("contract.k", "t"))
        assert await store.resume("contract.k", "other") is None
        assert await store.resume(None, "t") is None
        lifted = await store.resume("contract.k", None)
        assert lifted is not None
        assert (lifted.kind, lifted.tenant, lifted.reason) == (
            "contract.k",
            None,
            "r",
        )
        assert _scopes(await store.controls()) == {("contract.k", "t")}
        assert await store.resume("contract.k", None) is None

    async def test_a_pause_names_a_kind_or_a_tenant(self) -> None:
        with pytest.raises(core.ValidationError):
            Pause(None, None)
        with pytest.raises(core.ValidationError):
            Pause("", "t")

    async def test_limits_are_set_replaced_and_cleared(self, store: AsyncJobStore) -> None:
        kind_default = await store.set_limit(
            Limit(core.RateLimit(5, 10), kind="contract.k", actor=_ACTOR)
        )
        assert kind_default.updated_at is not None
        assert kind_default.actor == _ACTOR
        await store.set_limit(Limit(core.RateLimit(1, 1), kind="contract.k", tenant="big"))
        await store.set_limit(Limit(core.RateLimit(20, 40), provider="smtp"))
        replaced = await store.set_limit(Limit(core.RateLimit(2.5, 3), kind="contract.k"))
        assert replaced.limit == core.RateLimit(2.5, 3)
        limits = {(x.kind, x.tenant, x.provider): x.limit for x in (await store.controls()).limits}
        assert limits == {
            ("contract.k", None, None): core.RateLimit(2.5, 3),
            ("contract.k", "big", None): core.RateLimit(1, 1),
            (None, None, "smtp"): core.RateLimit(20, 40),
        }
        cleared = await store.clear_limit("contract.k", "big", None)
        assert cleared is not None
        assert cleared.limit == core.RateLimit(1, 1)
        assert await store.clear_limit("contract.k", "big", None) is None
        assert await store.clear_limit(None, None, "smtp") is not None
        [left] = (await store.controls()).limits
        assert (left.kind, left.tenant, left.provider) == ("contract.k", None, None)

    async def test_a_limit_names_a_kind_or_a_provider(self) -> None:
        with pytest.raises(core.ValidationError):
            Limit(core.RateLimit(1, 1))
        with pytest.raises(core.ValidationError):
            Limit(core.RateLimit(1, 1), kind="k", provider="p")
        with pytest.raises(core.ValidationError):
            Limit(core.RateLimit(1, 1), tenant="t")

    async def test_controls_are_audited_without_a_job(self, store: AsyncJobStore) -> None:
        sink = _Sink(store)
        audit = AsyncAudit(actor=_ACTOR, sink=sink)
        await store.pause(Pause("contract.k", "t", reason="outage", actor=_ACTOR), audit=audit)
        await store.resume("contract.k", "t", audit=audit)
        await store.resume("contract.k", "t", audit=audit)  # nothing lifted: no event
        await store.set_limit(
            Limit(core.RateLimit(2, 4), provider="smtp", actor=_ACTOR), audit=audit
        )
        await store.clear_limit(None, None, "smtp", audit=audit)
        limit = {"provider": "smtp", "rps": 2, "burst": 4}
        assert _facts(sink.events()) == [
            (core.AuditAction.PAUSED, None, "contract.k", "t", _ACTOR, {"reason": "outage"}),
            (core.AuditAction.RESUMED, None, "contract.k", "t", _ACTOR, {"reason": "outage"}),
            (core.AuditAction.LIMIT_SET, None, None, None, _ACTOR, limit),
            (core.AuditAction.LIMIT_CLEARED, None, None, None, _ACTOR, limit),
        ]

    async def test_a_failing_sink_undoes_the_change(self, store: AsyncJobStore) -> None:
        audit = AsyncAudit(actor=_ACTOR, sink=_Sink(store, fail=True))
        with pytest.raises(_SinkError):
            await store.pause(Pause("contract.k", None, actor=_ACTOR), audit=audit)
        assert await store.controls() == Controls()
        await store.set_limit(Limit(core.RateLimit(1, 1), kind="contract.k"))
        with pytest.raises(_SinkError):
            await store.clear_limit("contract.k", None, None, audit=audit)
        assert len((await store.controls()).limits) == 1

    async def test_the_audit_table_takes_control_events(self, store: AsyncJobStore) -> None:
        # Without a sink the store's own table takes them; they belong to no job.
        await store.pause(Pause(None, "t", actor=_ACTOR), audit=AsyncAudit(actor=_ACTOR))
        assert _scopes(await store.controls()) == {(None, "t")}

    async def test_claim_leaves_out_excluded_tenants_in_every_lane(
        self, store: AsyncJobStore
    ) -> None:
        x, y = kit.fresh_kind(), kit.fresh_kind()
        paused = [await kit.enqueue(store, x, tenant="p"), await kit.enqueue(store, y, tenant="p")]
        kept = [
            await kit.enqueue(store, x, tenant="q"),
            await kit.enqueue(store, x),
            await kit.enqueue(store, y, tenant="q"),
        ]
        excluded = frozenset({"p"})
        # A capped kind (x), a capped pair (y, q) and the rest each walk their own lane.
        request = kit.claim_request(
            kinds=frozenset({x, y}),
            excluded_tenants=excluded,
            kind_limits={x: 5},
            pair_limits={(y, "q"): 1},
        )
        jobs = await store.claim(request)
        assert sorted(job.id for job in jobs) == sorted(kept)
        for job_id in paused:
            job = await kit.get(store, job_id)
            assert (job.state.value, job.attempts, job.claims) == ("pending", 0, 0)
        plain = await store.claim(kit.claim_request(excluded_tenants=excluded))
        assert plain == []
