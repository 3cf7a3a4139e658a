"""Concurrency limits set at run time (issue 45) on the in-memory store (async source;
``test_concurrency_controls.py`` is its generated twin): a running worker follows a kind's
cluster and node limit changed by another engine (another process) within
``controls_refresh``, a cleared limit gives the declared one back, ``why`` reports the
limit in force, and the changes are audited with the actor."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, JobContext, Settings, UnknownKindError, ValidationError
from skiplock._compat_async import Event, join, spawn, wait_event
from skiplock.core import AuditAction, ClaimRequest

from .helpers_async import CountingStore, eventually

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.core import AuditEvent
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(clock=clock)


def make_engine(store: CountingStore, clock: FakeClock, **kw: Any) -> AsyncEngine:
    return AsyncEngine(store, Settings(**kw), clock=clock)


class Blocking:
    """A processor whose jobs run until released; counts how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.done = 0
        self.release = Event()

    async def __call__(self, payload: object, ctx: JobContext) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
            self.done += 1


@pytest.mark.parametrize("scope", ["cluster", "node"])
async def test_a_running_worker_follows_a_kind_limit_set_elsewhere(
    store: CountingStore, clock: FakeClock, scope: str
) -> None:
    # The worker's engine and the operator's are two engines on one store: two
    # processes. The change reaches the worker through the store within controls_refresh.
    settings: dict[str, Any] = {"concurrency": 6, "controls_refresh": 0.2, "poll_interval": 0.05}
    engine = make_engine(store, clock, **settings)
    operator = make_engine(store, clock)
    blocking = Blocking()
    engine.processor("sync", cluster_limit=4, node_limit=4)(blocking)
    for _ in range(6):
        await engine.enqueue("sync", {})
    await operator.set_concurrency(kind="sync", limit=1, scope=scope, allow_unknown_kind=True)
    worker = engine.worker()
    task = spawn(worker.run)
    await eventually(lambda: blocking.running == 1)
    # Held at one while the limit stands (the declared 4 would let four run): for half
    # a second (polls and controls refreshes) no second job starts.
    assert not await wait_event(Event(), 0.5)
    assert blocking.running == 1
    started = time.monotonic()
    raised = await operator.set_concurrency(kind="sync", limit=3, scope=scope)
    assert (raised.kind, raised.key, raised.scope, raised.limit) == ("sync", None, scope, 3)
    await eventually(lambda: blocking.running == 3, timeout=5)
    assert time.monotonic() - started < 1.0  # controls_refresh, plus a claim
    # Cleared: the declared limit (4) applies again.
    cleared = await operator.clear_concurrency(kind="sync", scope=scope)
    assert cleared is not None
    assert cleared.limit == 3
    await eventually(lambda: blocking.running == 4, timeout=5)
    assert blocking.most == 4
    blocking.release.set()
    await eventually(lambda: blocking.done == 6, timeout=5)
    worker.stop()
    await join(task)


async def test_why_reports_the_limits_in_force(store: CountingStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    engine.processor("sync", cluster_limit=5)(Blocking())
    keyed: list[int] = []
    jobs: list[int] = []
    for _ in range(2):
        keyed.append(
            (await engine.enqueue("sync", {}, concurrency_key="db", concurrency_limit=3)).id
        )
        jobs.append((await engine.enqueue("sync", {})).id)
    # A worker of another process holds the first two (one of the key).
    claimed = await store.claim(ClaimRequest(worker_id="w", limit=2))
    assert sorted(job.id for job in claimed) == [keyed[0], jobs[0]]
    assert "concurrency_full" not in (await engine.why(jobs[1])).codes
    await engine.set_concurrency(kind="sync", limit=2)
    await engine.set_concurrency(key="db", limit=1)
    wait = await engine.why(keyed[1])
    full = [r for r in wait.reasons if r.code == "concurrency_full"]
    assert [(r.details["scope"], r.details["limit"]) for r in full] == [("key", 1), ("kind", 2)]
    await engine.clear_concurrency(key="db")
    wait = await engine.why(keyed[1])
    assert [r.details["scope"] for r in wait.reasons if r.code == "concurrency_full"] == ["kind"]


async def test_concurrency_changes_are_audited_and_checked(
    store: CountingStore, clock: FakeClock
) -> None:
    events: list[AuditEvent] = []

    def sink(recorded: Sequence[AuditEvent], connection: object) -> None:
        events.extend(recorded)

    engine = AsyncEngine(store, Settings(audit=True), clock=clock, audit_sink=sink)
    engine.processor("sync")(Blocking())
    ops = engine.operator("alice")
    stored = await ops.set_concurrency(kind="sync", limit=2, scope="node")
    assert stored.actor == "alice"
    await ops.set_concurrency(key="db:main", limit=3)
    assert {(c.kind, c.key) for c in await engine.concurrency_limits()} == {
        ("sync", None),
        (None, "db:main"),
    }
    await ops.clear_concurrency(kind="sync", scope="node")
    assert await ops.clear_concurrency(kind="sync", scope="node") is None
    assert [(e.action, e.kind, e.actor, e.details) for e in events] == [
        (AuditAction.CONCURRENCY_SET, "sync", "alice", {"key": None, "scope": "node", "limit": 2}),
        (
            AuditAction.CONCURRENCY_SET,
            None,
            "alice",
            {"key": "db:main", "scope": "cluster", "limit": 3},
        ),
        (
            AuditAction.CONCURRENCY_CLEARED,
            "sync",
            "alice",
            {"key": None, "scope": "node", "limit": 2},
        ),
    ]
    with pytest.raises(UnknownKindError):
        await ops.set_concurrency(kind="typo", limit=1)
    with pytest.raises(ValidationError):
        await ops.set_concurrency(key="db:main", limit=1, scope="node")
    with pytest.raises(ValidationError):
        await ops.set_concurrency(kind="sync", limit=0)
