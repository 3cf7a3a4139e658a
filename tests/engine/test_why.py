"""Why is this job waiting? (issue 45): ``Engine.why`` on the in-memory store with a fake
clock, one test per reason a claim leaves a pending job where it is."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock import Engine, Enqueue, JobNotFoundError, JobState, RateLimit, Settings
from skiplock.adapters.memory import InMemoryJobStore as MemoryStore
from skiplock.core import ClaimRequest, WorkerInfo
from skiplock.core.rules import WAIT_COUNT_BOUND
from skiplock.core.store import RateTable
from skiplock.engine import Reader

if TYPE_CHECKING:
    from skiplock.testing import FakeClock


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def engine(store: MemoryStore, clock: FakeClock) -> Engine:
    engine = Engine(store, Settings(), clock=clock)
    for kind in ("mail", "report"):
        engine.processor(kind)(lambda payload: None)
    return engine


def _worker(store: MemoryStore, **kw: object) -> None:
    store.register_worker(WorkerInfo(id="w1", host="h", pid=1, **kw))  # type: ignore[arg-type]


def test_a_pending_job_nothing_holds_back_is_ready(engine: Engine, store: MemoryStore) -> None:
    _worker(store)
    job = engine.enqueue("mail", {})
    wait = engine.why(job.id)
    assert (wait.job_id, wait.state, wait.codes) == (job.id, JobState.PENDING, ["ready"])
    assert wait.to_json()["reasons"][0]["code"] == "ready"


def test_a_job_that_is_not_pending_says_its_state(engine: Engine, store: MemoryStore) -> None:
    _worker(store)
    job = engine.enqueue("mail", {})
    engine.cancel_job(job.id)
    wait = engine.why(job.id)
    assert wait.codes == ["not_pending"]
    assert "cancelled" in wait.reasons[0].message
    with pytest.raises(JobNotFoundError):
        engine.why(job.id + 100)


def test_a_job_due_later_says_when(engine: Engine, store: MemoryStore, clock: FakeClock) -> None:
    _worker(store)
    job = engine.enqueue("mail", {}, delay=timedelta(minutes=5))
    [reason] = engine.why(job.id).reasons
    assert (reason.code, reason.when) == ("due_later", clock.now() + timedelta(minutes=5))
    assert "in 5m" in reason.message
    clock.advance(300)
    _worker(store)  # a fresh heartbeat
    assert engine.why(job.id).codes == ["ready"]


def test_a_paused_job_says_by_whom_and_since_when(
    engine: Engine, store: MemoryStore, clock: FakeClock
) -> None:
    _worker(store)
    job = engine.enqueue("mail", {}, tenant="acme")
    engine.operator("alice").pause(tenant="acme", reason="invoice dispute")
    [reason] = engine.why(job.id).reasons
    assert reason.code == "paused"
    assert reason.details["actor"] == "alice"
    assert reason.details["since"] == clock.now().isoformat()
    assert "its tenant is paused by alice" in reason.message
    assert "invoice dispute" in reason.message


def test_a_rate_limited_job_says_when_the_next_token_comes(
    engine: Engine, store: MemoryStore, clock: FakeClock
) -> None:
    _worker(store)
    first, second = engine.enqueue("mail", {}), engine.enqueue("mail", {})
    rates = RateTable(kinds={"mail": RateLimit(rps=0.1, burst=1)})
    [claimed] = store.claim(ClaimRequest(worker_id="w0", limit=5, rates=rates))
    assert claimed.id == first.id
    [reason] = engine.why(second.id).reasons
    assert reason.code == "rate_limited"
    assert reason.when == clock.now() + timedelta(seconds=10)
    assert reason.details == {"scope": "pair", "rps": 0.1, "burst": 1}
    clock.advance(10)
    _worker(store)
    assert engine.why(second.id).codes == ["ready"]


def test_a_full_concurrency_key_names_the_jobs_holding_it(
    engine: Engine, store: MemoryStore
) -> None:
    _worker(store)
    holder = engine.enqueue("mail", {}, concurrency_key="db:main", concurrency_limit=1)
    waiting = engine.enqueue("report", {}, concurrency_key="db:main", concurrency_limit=1)
    store.claim(ClaimRequest(worker_id="w1", limit=5))
    assert engine.get_job(holder.id).state is JobState.RUNNING
    [reason] = engine.why(waiting.id).reasons
    assert reason.code == "concurrency_full"
    assert reason.details == {"scope": "key", "key": "db:main", "limit": 1, "holders": [holder.id]}
    assert f"job(s) {holder.id}" in reason.message


def test_no_live_worker_for_its_kind_or_tenant(
    engine: Engine, store: MemoryStore, clock: FakeClock
) -> None:
    job = engine.enqueue("mail", {}, tenant="acme")
    assert engine.why(job.id).codes == ["no_worker"]
    _worker(store, kinds=frozenset({"report"}))
    [reason] = engine.why(job.id).reasons
    assert (reason.code, reason.details) == ("no_worker", {"live_workers": 1})
    assert "kind 'mail' of tenant 'acme'" in reason.message
    _worker(store, tenants=frozenset({"acme"}))
    assert engine.why(job.id).codes == ["ready"]
    # A worker whose heartbeat is older than three heartbeat intervals is not live.
    clock.advance(timedelta(hours=1))
    assert engine.why(job.id).codes == ["no_worker"]


def test_a_job_behind_due_jobs_of_higher_priority_counts_them(
    engine: Engine, store: MemoryStore, clock: FakeClock
) -> None:
    _worker(store)
    engine.enqueue("mail", {}, priority=5)
    engine.enqueue("mail", {}, priority=5, delay=60)  # not due: not ahead
    engine.enqueue("report", {}, priority=9)  # another kind: not ahead
    earlier = engine.enqueue("mail", {})
    job = engine.enqueue("mail", {})
    engine.enqueue("mail", {})  # same priority, after it: not ahead
    [reason] = engine.why(job.id).reasons
    assert (reason.code, reason.details) == ("behind", {"count": 2, "bounded": False})
    assert engine.why(earlier.id).reasons[0].details["count"] == 1


def test_the_count_of_jobs_ahead_is_bounded(engine: Engine, store: MemoryStore) -> None:
    _worker(store)
    engine.enqueue_many([Enqueue("mail", {}, priority=1)] * (WAIT_COUNT_BOUND + 5))
    job = engine.enqueue("mail", {})
    [reason] = engine.why(job.id).reasons
    assert reason.details == {"count": WAIT_COUNT_BOUND, "bounded": True}
    assert f"at least {WAIT_COUNT_BOUND}" in reason.message


def test_several_reasons_and_every_read_door(engine: Engine, store: MemoryStore) -> None:
    job = engine.enqueue("mail", {}, delay=60)
    engine.pause(kind="mail")
    expected = ["due_later", "paused", "no_worker"]
    assert engine.why(job.id).codes == expected
    assert engine.operator("bob").why(job.id).codes == expected
    assert Reader(store).why(job.id).codes == expected
