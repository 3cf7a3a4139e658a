"""Contract tests of the requests to a worker (issue 45) (async source;
``_worker_requests.py`` is its generated twin): a registered worker's slots and version
and an operator's request to drain or stop it are stored on its row, read back by
``controls()`` and ``health_snapshot()``, replaced by a later request, gone with the row,
and audited without a job. Mixed into :class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from skiplock import core
from skiplock.ports import AsyncAudit

from . import _support_async as kit
from ._audit_events_async import _Sink, _SinkError

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore

_ACTOR = "ops@example.com"


async def _worker(store: AsyncJobStore, worker_id: str) -> core.WorkerInfo:
    info = core.WorkerInfo(id=worker_id, host="h1", pid=9, slots=4, version="9.9.9")
    await store.register_worker(info)
    return info


class AsyncWorkerRequestsContract(kit.AsyncContractBase):
    """Slots, version and drain or stop requests on a worker's row."""

    async def test_a_worker_registers_its_slots_and_version(self, store: AsyncJobStore) -> None:
        await _worker(store, "w-slots")
        await store.register_worker(core.WorkerInfo(id="w-old", host="h2", pid=3))
        workers = {w.id: w for w in (await store.health_snapshot()).workers}
        assert (workers["w-slots"].slots, workers["w-slots"].version) == (4, "9.9.9")
        assert (workers["w-old"].slots, workers["w-old"].version) == (None, None)
        assert workers["w-slots"].request is None

    async def test_a_request_is_stored_read_replaced_and_gone_with_the_row(
        self, store: AsyncJobStore
    ) -> None:
        assert await store.request_worker("nobody", "drain", actor=_ACTOR) is None
        assert (await store.controls()).requests == ()
        await _worker(store, "w1")
        await _worker(store, "w2")
        before = await store.now()
        drain = await store.request_worker("w1", "drain", actor=_ACTOR)
        assert drain is not None
        assert (drain.worker_id, drain.action, drain.actor) == ("w1", "drain", _ACTOR)
        assert drain.requested_at is not None
        assert before <= drain.requested_at <= await store.now()
        controls = await store.controls()
        assert controls.requests == (drain,)
        assert controls.request_for("w1") == drain
        assert controls.request_for("w2") is None
        [shown] = [w for w in (await store.health_snapshot()).workers if w.id == "w1"]
        assert shown.request == drain
        # A heartbeat and a registration again keep it; a later request replaces it.
        assert await store.heartbeat("w1") == []
        await _worker(store, "w1")
        assert (await store.controls()).request_for("w1") == drain
        stop = await store.request_worker("w1", "stop")
        assert stop is not None
        assert (stop.action, stop.actor) == ("stop", None)
        assert (await store.controls()).requests == (stop,)
        # The worker leaves: its request goes with its row.
        await store.unregister_worker("w1")
        assert (await store.controls()).requests == ()

    async def test_a_request_is_audited_without_a_job(self, store: AsyncJobStore) -> None:
        await _worker(store, "w-audit")
        sink = _Sink(store)
        audit = AsyncAudit(actor=_ACTOR, sink=sink)
        await store.request_worker("w-audit", "drain", actor=_ACTOR, audit=audit)
        await store.request_worker("w-audit", "stop", actor=_ACTOR, audit=audit)
        await store.request_worker("w-gone", "stop", actor=_ACTOR, audit=audit)  # no event
        facts = [(e.action, e.job_id, e.kind, e.tenant, e.actor, e.details) for e in sink.events()]
        details = {"worker_id": "w-audit"}
        assert facts == [
            (core.AuditAction.WORKER_DRAIN, None, None, None, _ACTOR, details),
            (core.AuditAction.WORKER_STOP, None, None, None, _ACTOR, details),
        ]
        table = AsyncAudit(actor=_ACTOR)
        assert await store.request_worker("w-audit", "drain", actor=_ACTOR, audit=table)

    async def test_a_failing_sink_undoes_a_request(self, store: AsyncJobStore) -> None:
        await _worker(store, "w-sink")
        audit = AsyncAudit(actor=_ACTOR, sink=_Sink(store, fail=True))
        with pytest.raises(_SinkError):
            await store.request_worker("w-sink", "stop", actor=_ACTOR, audit=audit)
        assert (await store.controls()).requests == ()

    async def test_a_request_is_drain_or_stop(self) -> None:
        with pytest.raises(core.ValidationError):
            core.store.WorkerRequest("w", "pause")  # type: ignore[arg-type]
        with pytest.raises(core.ValidationError):
            core.store.WorkerRequest(" ", "drain")
