"""Exactly-once starts under pause, prefetch, crashes, throttling and outages, with real
worker processes and real signals (docs/worker-internals.md, "The worker").

Every processor appends ``<job id> <attempt> <pid>`` to an invocation log (a file, so
it works while the database is down) before it does anything else: the log is the truth
of which processor ran which job how often, and the tests compare it with the table.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from typing import TYPE_CHECKING

import psycopg
import pytest

from skiplock import AsyncEngine, JobContext, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore, apply_schema
from skiplock.core import EnqueueRequest
from tests.pgcluster import cluster
from tests.pghelpers import enqueue, sql, stop, wait_for, worker_processes

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_APP = """
import asyncio
import os
import signal

from skiplock import AsyncEngine, RateLimit, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore

DSN = os.environ["SKIPLOCK_TEST_APP_DSN"]
LOG = os.environ["SKIPLOCK_TEST_APP_LOG"]
settings = Settings(
    concurrency=int(os.environ["SKIPLOCK_TEST_APP_CONCURRENCY"]),
    prefetch=int(os.environ["SKIPLOCK_TEST_APP_PREFETCH"]),
    poll_interval=0.2,
    heartbeat_interval=0.5,
    stale_ttl=2.0,
    maintenance_interval=0.5,
    shutdown_timeout=5.0,
    backoff_base=0.1,
)
engine = AsyncEngine(AsyncPsycopgJobStore(DSN, max_size=24), settings)


def invoked(ctx):
    line = f"{ctx.job_id} {ctx.attempt} {os.getpid()}\\n".encode()
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)  # one O_APPEND write: lines of processes never interleave
    finally:
        os.close(fd)


@engine.processor("lease.slow")
async def slow(payload, ctx):
    invoked(ctx)
    await asyncio.sleep(float(payload or 0.5))


@engine.processor("lease.quick")
async def quick(payload, ctx):
    invoked(ctx)


@engine.processor("lease.poison", stale_ttl=1.0)
async def poison(payload, ctx):
    invoked(ctx)
    os.kill(os.getpid(), signal.SIGKILL)


@engine.processor("lease.limited", rate_limit=RateLimit(rps=2, burst=2))
async def limited(payload, ctx):
    invoked(ctx)
"""

_MODULE = "skiplock_lease_app"


class Invocations:
    """The processors' invocation log."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self) -> list[tuple[int, int, int]]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            job_id, attempt, pid = line.split()
            rows.append((int(job_id), int(attempt), int(pid)))
        return rows

    def per_job(self) -> Counter[int]:
        return Counter(job_id for job_id, _, _ in self.rows())

    def by(self, pid: int) -> list[int]:
        return [job_id for job_id, _, p in self.rows() if p == pid]


@pytest.fixture
def invocations(tmp_path: Path) -> Invocations:
    return Invocations(tmp_path / "invocations.log")


@pytest.fixture
def app(
    tmp_path: Path, pg_dsn: str, invocations: Invocations
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Starts ``skiplock worker`` processes of the app (on ``pg_dsn`` unless ``dsn``);
    kills what is left at the end."""
    with worker_processes(tmp_path, _MODULE, _APP) as run:

        def start(
            *, concurrency: int = 4, prefetch: int = 4, dsn: str = pg_dsn
        ) -> subprocess.Popen[bytes]:
            env = {
                "SKIPLOCK_TEST_APP_DSN": dsn,
                "SKIPLOCK_TEST_APP_LOG": str(invocations.path),
                "SKIPLOCK_TEST_APP_CONCURRENCY": str(concurrency),
                "SKIPLOCK_TEST_APP_PREFETCH": str(prefetch),
            }
            return run(env, "INFO")

        yield start


def _held_by(dsn: str, pid: int) -> int:
    # Worker ids are <host>/<pid>/<uuid>: the jobs a process holds, running or prefetched.
    [(n,)] = sql(
        dsn,
        "SELECT count(*) FROM skiplock.jobs WHERE status = 'running' AND claimed_by LIKE %s",
        f"%/{pid}/%",
    )
    return int(n)


def test_a_resumed_worker_runs_none_of_the_jobs_recovered_from_it(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str, invocations: Invocations
) -> None:
    victim = app(concurrency=1, prefetch=4)
    ids = enqueue(pg_dsn, [EnqueueRequest(kind="lease.slow", payload=1.0) for _ in range(5)])
    # One running and four prefetched, then frozen.
    wait_for(lambda: _held_by(pg_dsn, victim.pid) == 5, 30, "the victim to hold five jobs")
    wait_for(lambda: len(invocations.by(victim.pid)) == 1, 30, "the first job to start")
    os.kill(victim.pid, signal.SIGSTOP)
    rescuer = app(concurrency=5, prefetch=0)

    def all_succeeded() -> bool:
        rows = sql(pg_dsn, "SELECT count(*) FROM skiplock.jobs WHERE status = 'succeeded'")
        return rows == [(5,)]

    wait_for(all_succeeded, 60, "the rescuer to recover and complete every job")
    resumed_at = sql(pg_dsn, "SELECT now()")[0][0]
    os.kill(victim.pid, signal.SIGCONT)

    def reregistered() -> bool:
        return bool(
            sql(
                pg_dsn,
                "SELECT 1 FROM skiplock.workers WHERE id LIKE %s AND heartbeat_at > %s",
                f"%/{victim.pid}/%",
                resumed_at,
            )
        )

    # It re-registers only after dropping every job it held, so by then a buffered job
    # would have started if it were going to.
    wait_for(reregistered, 30, "the resumed victim to register again")
    assert invocations.by(victim.pid) == ids[:1]  # only the job it ran before the freeze
    assert sorted(invocations.by(rescuer.pid)) == ids
    assert _held_by(pg_dsn, victim.pid) == 0
    stop([victim, rescuer])


def test_killed_workers_full_prefetch_buffers_cost_no_attempts(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str, invocations: Invocations
) -> None:
    total = 60
    ids = enqueue(pg_dsn, [EnqueueRequest(kind="lease.slow", payload=0.5) for _ in range(total)])
    for _ in range(3):
        victim = app(concurrency=2, prefetch=8)
        # Both slots started from the claim (they started together, so neither frees
        # before 0.5 s): kill now, with eight held jobs that never started.
        pid = victim.pid

        def two_started(pid: int = pid) -> bool:
            return len(invocations.by(pid)) >= 2

        def ten_held(pid: int = pid) -> bool:
            return _held_by(pg_dsn, pid) == 10

        wait_for(two_started, 30, "two jobs to start")
        # The buffer fills from the same claim or, on a loaded machine, the next one.
        wait_for(ten_held, 30, "ten jobs to be held")
        os.kill(pid, signal.SIGKILL)
        victim.wait(10)
    survivors = [app(concurrency=8, prefetch=8) for _ in range(2)]

    def drained() -> bool:
        rows = sql(pg_dsn, "SELECT count(*) FROM skiplock.jobs WHERE status = 'succeeded'")
        return rows == [(total,)]

    wait_for(drained, 120, "every job to succeed")
    stop(survivors)
    started = invocations.per_job()
    attempts = dict(sql(pg_dsn, "SELECT id, attempts FROM skiplock.jobs"))
    # Only started jobs paid: each job's attempts are exactly the times it started.
    assert {job_id: attempts[job_id] for job_id in ids} == {
        job_id: started[job_id] for job_id in ids
    }
    assert sum(started.values()) == total + 6  # the six killed mid-run ran twice
    assert max(attempts.values()) == 2


def test_a_poison_job_dies_alone_while_its_prefetched_neighbours_succeed(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str, invocations: Invocations
) -> None:
    innocent = [EnqueueRequest(kind="lease.quick", payload=i) for i in range(100)]
    poison = EnqueueRequest(kind="lease.poison", max_attempts=3, explicit_max_attempts=True)
    ids = enqueue(pg_dsn, [*innocent[:10], poison, *innocent[10:]])
    poison_id = ids[10]

    def settled() -> bool:
        rows = sql(pg_dsn, "SELECT status, count(*) FROM skiplock.jobs GROUP BY status")
        return dict(rows) == {"succeeded": 100, "dead": 1}

    kills = 0
    while not settled():
        worker = app(concurrency=2, prefetch=8)

        def ended(worker: subprocess.Popen[bytes] = worker) -> bool:
            return worker.poll() is not None or settled()

        wait_for(ended, 60, "a kill or the end")
        if worker.poll() is not None:
            assert worker.returncode == -signal.SIGKILL
            kills += 1
            # One more than max_attempts at most: a first fatal run that started from the
            # prefetch buffer is paid only by its outcome, which never comes.
            assert kills <= 4, "the poison job ran more often than its max_attempts + 1"
        else:
            stop([worker])
    assert kills >= 3
    [(status, attempts)] = sql(
        pg_dsn, "SELECT status, attempts FROM skiplock.jobs WHERE id = %s", poison_id
    )
    assert (status, attempts) == ("dead", 3)
    started = invocations.per_job()
    rows = sql(pg_dsn, "SELECT id, attempts FROM skiplock.jobs WHERE id <> %s", poison_id)
    # No innocent job paid for a crash it did not take part in. The one exception: a job
    # charged for the other slot together with the poison on its very first run, killed
    # before its processor was entered. After that the poison is a suspect and runs
    # alone, so this happens at most once (one other slot).
    excess = [attempts - started[job_id] for job_id, attempts in rows]
    assert sum(n for n in excess if n > 0) <= 1, excess
    assert all(attempts >= 1 for _, attempts in rows)


def test_a_throttled_tenant_costs_almost_no_unused_claims(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str, invocations: Invocations
) -> None:
    enqueue(
        pg_dsn, [EnqueueRequest(kind="lease.limited", tenant="t1", payload=i) for i in range(100)]
    )
    worker = app(concurrency=16, prefetch=64)
    wait_for(lambda: len(invocations.rows()) >= 2, 30, "the worker to start")
    begun = time.monotonic()
    # Ten seconds at 2/s: about 20 jobs run; wait on the count, bounded by the time.
    wait_for(
        lambda: time.monotonic() - begun >= 10 and len(invocations.rows()) >= 20,
        30,
        "ten seconds of throttled work",
    )
    [(ran, unused)] = sql(
        pg_dsn,
        "SELECT count(*) FILTER (WHERE status = 'succeeded'), "
        "coalesce(sum(claims - attempts) FILTER (WHERE status <> 'running'), 0) "
        "FROM skiplock.jobs",
    )
    stop([worker])
    assert ran >= 18
    # A claim never takes more of the pair than its bucket can start now.
    assert unused <= 0.05 * ran, f"{unused} claims released unused for {ran} jobs run"


@pytest.mark.anyio
async def test_two_workers_of_one_engine_share_the_node_limit(pg_dsn: str) -> None:
    settings = Settings(poll_interval=0.05, heartbeat_interval=0.5, prefetch=4)
    store = AsyncPsycopgJobStore(pg_dsn, max_size=12)
    engine = AsyncEngine(store, settings)
    ran: list[int] = []

    @engine.processor("lease.node", node_limit=2)
    async def node(payload: int, ctx: JobContext) -> None:
        ran.append(payload)
        await asyncio.sleep(0.02)

    total = 40
    await store.enqueue([EnqueueRequest(kind="lease.node", payload=i) for i in range(total)])
    workers = [engine.worker(concurrency=4, install_signal_handlers=False) for _ in range(2)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    samples: list[int] = []
    query = "SELECT count(*) FROM skiplock.jobs WHERE status = 'running'"
    deadline = time.monotonic() + 60
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        while len(ran) < total:
            assert time.monotonic() < deadline, "timed out waiting for the jobs"
            row = await (await conn.execute(query)).fetchone()
            assert row is not None
            samples.append(int(row[0]))
    for worker in workers:
        worker.stop()
    await asyncio.gather(*tasks)
    await store.close()
    assert sorted(ran) == list(range(total))
    # Held (prefetched) jobs are `running` in the table and count against the limit too.
    assert max(samples) <= 2, f"node limit 2 exceeded: {max(samples)} held at once"
    assert max(samples) == 2, "the limit was never reached: the test proves nothing"


@pytest.mark.anyio
async def test_the_running_processors_policy_decides_retries(pg_dsn: str) -> None:
    web = AsyncEngine(AsyncPsycopgJobStore(pg_dsn), Settings(max_attempts=5))
    store = AsyncPsycopgJobStore(pg_dsn)
    worker_engine = AsyncEngine(store, Settings(poll_interval=0.05, backoff_base=0))

    @worker_engine.processor("lease.fails", max_attempts=2)
    async def fails(payload: None, ctx: JobContext) -> None:
        raise RuntimeError("always")

    job = await web.enqueue("lease.fails", None)  # web knows no processor for it
    assert (await web.get_job(job.id)).max_attempts == 5
    await worker_engine.worker().run_until_idle()
    done = await web.get_job(job.id)
    assert (done.state.value, done.attempts, done.max_attempts) == ("dead", 2, 2)
    explicit = await web.enqueue("lease.fails", None, max_attempts=3)
    await worker_engine.worker().run_until_idle()
    assert (await web.get_job(explicit.id)).attempts == 3  # the caller's choice binds
    await web.store.close()
    await store.close()


def test_a_live_worker_keeps_its_jobs_through_an_outage_longer_than_the_ttl(
    app: Callable[..., subprocess.Popen[bytes]], invocations: Invocations
) -> None:
    # A server of the test's own (tests/pgcluster.py): stopping the shared one would fail
    # whatever else runs against it meanwhile.
    with cluster() as server:
        dsn = server.dsn
        apply_schema(dsn)
        worker = app(concurrency=4, prefetch=8, dsn=dsn)
        before = enqueue(dsn, [EnqueueRequest(kind="lease.slow", payload=1.5) for _ in range(30)])
        wait_for(lambda: _held_by(dsn, worker.pid) >= 8, 30, "the worker to hold jobs")
        server.stop()
        try:
            stopped = time.monotonic()
            # Down for twice the stale TTL (2 s) while the worker lives on.
            wait_for(lambda: time.monotonic() - stopped >= 4.0, 10, "the outage")
        finally:
            server.start()
        after = enqueue(dsn, [EnqueueRequest(kind="lease.quick") for _ in range(20)])

        def drained() -> bool:
            rows = sql(dsn, "SELECT count(*) FROM skiplock.jobs WHERE status = 'succeeded'")
            return rows == [(50,)]

        wait_for(drained, 120, "every job to succeed")
        stop([worker])
        started = invocations.per_job()
        assert {started[job_id] for job_id in before + after} == {1}  # none ran twice
        marks = sql(dsn, "SELECT count(*) FROM skiplock.jobs WHERE last_error IS NOT NULL")
        assert marks == [(0,)]  # none was recovered as stale
