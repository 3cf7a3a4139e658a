"""Concurrency keys through the engine (issue 41): set at enqueue or derived by a kind's
declaration from the payload, validated before anything is written, and honoured by the
workers: at most the key's limit of its jobs run at once, whatever their kinds."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from skiplock import Engine, Enqueue, JobState, ValidationError, declare
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.core import ClaimRequest, JobFilter, Page

if TYPE_CHECKING:
    from skiplock import JobContext


@attrs.frozen
class Build:
    table: str
    index: str = "idx"


index_sync = declare("index_sync", Build, concurrency_key=lambda build: f"table:{build.table}")
gin_backfill = declare(
    "gin_backfill", Build, concurrency_key=lambda build: f"table:{build.table}", max_attempts=3
)


@pytest.fixture
def engine() -> Engine:
    return Engine(InMemoryJobStore())


def test_the_declaration_derives_the_key_from_the_payload(engine: Engine) -> None:
    sync, gin = engine.declare(index_sync), engine.declare(gin_backfill)
    first = sync.enqueue(Build("orders"))
    second = gin.enqueue(Build("orders"))
    other = gin.enqueue(Build("users"))
    jobs = [engine.store.get(r.id) for r in (first, second, other)]
    assert [(j.concurrency_key, j.concurrency_limit) for j in jobs if j] == [
        ("table:orders", 1),
        ("table:orders", 1),
        ("table:users", 1),
    ]


def test_an_enqueue_names_its_own_key_and_limit(engine: Engine) -> None:
    engine.declare_kind("report")
    sync = engine.declare(index_sync)
    own = sync.enqueue(Build("orders"), concurrency_key="db:main", concurrency_limit=3)
    plain = engine.enqueue("report", {}, concurrency_key="tenant:acme")
    none = engine.enqueue("report", {})
    [many] = engine.enqueue_many(
        [Enqueue("report", {}, concurrency_key="tenant:acme", concurrency_limit=2)]
    )
    got = [engine.store.get(r.id) for r in (own, plain, none, many)]
    assert [(j.concurrency_key, j.concurrency_limit) for j in got if j] == [
        ("db:main", 3),
        ("tenant:acme", 1),
        (None, None),
        ("tenant:acme", 2),
    ]


def test_a_key_function_may_leave_a_job_without_a_key(engine: Engine) -> None:
    task = engine.declare(
        declare("maybe", dict[str, Any], concurrency_key=lambda p: p.get("table"))
    )
    job = engine.store.get(task.enqueue({}).id)
    assert job is not None
    assert (job.concurrency_key, job.concurrency_limit) == (None, None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency_limit": 2}, "concurrency_limit needs a concurrency_key"),
        ({"concurrency_key": ""}, "concurrency_key must not be empty"),
        ({"concurrency_key": 7}, "concurrency_key must be a str"),
        ({"concurrency_key": "a\nb"}, "control characters"),
        ({"concurrency_key": "k" * 256}, "concurrency_key too long"),
        ({"concurrency_key": "k", "concurrency_limit": 0}, "concurrency_limit"),
        ({"concurrency_key": "k", "concurrency_limit": True}, "concurrency_limit must be an int"),
    ],
)
def test_bad_keys_and_limits_are_refused_before_anything_is_written(
    engine: Engine, options: dict[str, Any], message: str
) -> None:
    engine.declare_kind("report")
    with pytest.raises(ValidationError, match=message):
        engine.enqueue("report", {}, **options)
    assert engine.store.list_jobs(JobFilter(), Page()) == []


def test_a_failing_key_function_is_a_validation_error(engine: Engine) -> None:
    def broken(payload: dict[str, Any]) -> str:
        return str(payload["table"])

    task = engine.declare(declare("broken", dict[str, Any], concurrency_key=broken))
    with pytest.raises(ValidationError, match=r"could not be derived.*KeyError"):
        task.enqueue({})


def test_declare_refuses_a_bad_limit() -> None:
    with pytest.raises(ValidationError, match="concurrency_limit"):
        declare("x", concurrency_key="k", concurrency_limit=0)
    with pytest.raises(ValidationError, match="concurrency_limit needs a concurrency_key"):
        declare("x", concurrency_limit=2)
    assert declare("x", concurrency_key="k").options() == {"concurrency_key": "k"}


def test_workers_run_the_jobs_of_one_key_one_at_a_time_across_kinds(engine: Engine) -> None:
    # Each processor reads how many jobs of its key the store has running at that
    # moment: with the key it is never more than 1, though the worker has four slots
    # and claims them in one batch (without the key all four would run at once).
    seen: list[int] = []
    lock = threading.Lock()
    running = JobFilter(states=frozenset({JobState.RUNNING}))

    def process(build: Build, ctx: JobContext) -> None:
        jobs = engine.store.list_jobs(running, Page(limit=100))
        with lock:
            seen.append(sum(1 for job in jobs if job.concurrency_key == f"table:{build.table}"))

    sync = engine.task(index_sync)(process)
    gin = engine.task(gin_backfill)(process)
    for _ in range(2):
        sync.enqueue(Build("orders"))
        gin.enqueue(Build("orders"))
    assert engine.worker(concurrency=4).run_until_idle() == 4
    assert seen == [1, 1, 1, 1]
    done = engine.store.list_jobs(JobFilter(states=frozenset({JobState.SUCCEEDED})), Page())
    assert len(done) == 4
    assert {job.attempts for job in done} == {1}


def test_a_full_key_charges_no_attempt(engine: Engine) -> None:
    gin = engine.declare(gin_backfill)
    first, second = gin.enqueue(Build("orders")), gin.enqueue(Build("orders"))
    store = engine.store
    assert [j.id for j in store.claim(ClaimRequest(worker_id="w1", limit=5))] == [first.id]
    for _ in range(3):  # more claims than max_attempts: the waiting job pays for none
        assert store.claim(ClaimRequest(worker_id="w2", limit=5)) == []
    waiting = store.get(second.id)
    assert waiting is not None
    assert (waiting.state, waiting.attempts, waiting.claims) == (JobState.PENDING, 0, 0)
