"""Worker processes on a real server: crashes and poison jobs (R12), many workers (R4),
LISTEN (R11).

Each test starts ``python -m skiplock worker`` subprocesses for a small app module
written into a temporary directory, and watches the database until a deadline.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from typing import TYPE_CHECKING

import psycopg
import pytest

from skiplock.core import EnqueueRequest
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
import sys
import time

import psycopg

from skiplock import AsyncEngine, Engine, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore, PsycopgJobStore

DSN = os.environ["SKIPLOCK_TEST_APP_DSN"]
settings = Settings(
    concurrency=8,
    poll_interval=float(os.environ.get("SKIPLOCK_TEST_APP_POLL", "1")),
    heartbeat_interval=0.5,
    stale_ttl=2.0,
    maintenance_interval=0.5,
    shutdown_timeout=5.0,
    backoff_base=0.1,
)


def started(job_id, attempt):
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO public.started VALUES (%s, %s, %s)", [job_id, attempt, os.getpid()]
        )


RUN = "INSERT INTO public.runs VALUES (%s, %s, %s)"

if os.environ["SKIPLOCK_TEST_APP_FLAVOUR"] == "async":
    engine = AsyncEngine(AsyncPsycopgJobStore(DSN, max_size=12), settings)

    @engine.processor("proc.count", transactional=True)
    async def count(payload, ctx):
        await ctx.connection.execute(RUN, [ctx.job_id, ctx.attempt, os.getpid()])

    @engine.processor("proc.hang", transactional=True)
    async def hang(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        if ctx.attempt == 1:
            await asyncio.sleep(600)
        await ctx.connection.execute(RUN, [ctx.job_id, ctx.attempt, os.getpid()])

    @engine.processor("proc.poison", stale_ttl=1.0)
    async def poison(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        os.kill(os.getpid(), signal.SIGKILL)

    @engine.processor("proc.block")
    async def block(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        await asyncio.sleep(600)

    @engine.processor("proc.limited", cluster_limit=2)
    async def limited(payload, ctx):
        await asyncio.sleep(0.02)  # the work itself: long enough for claims to overlap

    @engine.processor("proc.late", transactional=True)
    async def late(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        if ctx.attempt == 1:
            await asyncio.sleep(1.0)  # the test freezes the process in here
        await ctx.connection.execute(RUN, [ctx.job_id, ctx.attempt, os.getpid()])

    @engine.processor("proc.nap", transactional=True)
    async def nap(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        await asyncio.sleep(0.3)
        await ctx.connection.execute(RUN, [ctx.job_id, ctx.attempt, os.getpid()])

    @engine.processor("proc.exit")
    async def leave(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        if payload == "exit":
            sys.exit(3)
        raise KeyboardInterrupt

    # A plain function blocked in one C call (as a Django task may be): an interruption
    # cannot reach it.
    @engine.processor("proc.stuck")
    def stuck(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        time.sleep(600)

else:
    engine = Engine(PsycopgJobStore(DSN, max_size=12), settings)

    @engine.processor("proc.count", transactional=True)
    def count(payload, ctx):
        ctx.connection.execute(RUN, [ctx.job_id, ctx.attempt, os.getpid()])

    @engine.processor("proc.hang", transactional=True)
    def hang(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        if ctx.attempt == 1:
            time.sleep(600)
        ctx.connection.execute(RUN, [ctx.job_id, ctx.attempt, os.getpid()])

    @engine.processor("proc.poison", stale_ttl=1.0)
    def poison(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        os.kill(os.getpid(), signal.SIGKILL)

    @engine.processor("proc.block")
    def block(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        while True:
            time.sleep(0.01)  # short sleeps: the stop's exception lands between them

    @engine.processor("proc.limited", cluster_limit=2)
    def limited(payload, ctx):
        time.sleep(0.02)  # the work itself: long enough for claims to overlap

    @engine.processor("proc.late", transactional=True)
    def late(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        if ctx.attempt == 1:
            time.sleep(1.0)  # the test freezes the process in here
        ctx.connection.execute(RUN, [ctx.job_id, ctx.attempt, os.getpid()])

    @engine.processor("proc.nap", transactional=True)
    def nap(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        time.sleep(0.3)
        ctx.connection.execute(RUN, [ctx.job_id, ctx.attempt, os.getpid()])

    @engine.processor("proc.exit")
    def leave(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        if payload == "exit":
            sys.exit(3)
        raise KeyboardInterrupt

    # A plain function blocked in one C call (as a Django task may be): an interruption
    # cannot reach it.
    @engine.processor("proc.stuck")
    def stuck(payload, ctx):
        started(ctx.job_id, ctx.attempt)
        time.sleep(600)
"""

_MODULE = "skiplock_pg_process_app"


@pytest.fixture
def app(tmp_path: Path, pg_dsn: str) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Starts workers of the app module; kills whatever is left at the end."""
    sql(pg_dsn, "DROP TABLE IF EXISTS public.runs, public.started")
    sql(pg_dsn, "CREATE TABLE public.runs (job_id bigint, attempt int, pid int)")
    sql(pg_dsn, "CREATE TABLE public.started (job_id bigint, attempt int, pid int)")
    with worker_processes(tmp_path, _MODULE, _APP) as run:

        def start(
            flavour: str, *, poll: float = 1.0, log_level: str = "WARNING"
        ) -> subprocess.Popen[bytes]:
            env = {
                "SKIPLOCK_TEST_APP_DSN": pg_dsn,
                "SKIPLOCK_TEST_APP_FLAVOUR": flavour,
                "SKIPLOCK_TEST_APP_POLL": str(poll),
            }
            return run(env, log_level)

        yield start


def test_job_of_a_killed_worker_completes_elsewhere(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str
) -> None:
    victim = app("sync")
    [job_id] = enqueue(pg_dsn, [EnqueueRequest(kind="proc.hang")])
    wait_for(
        lambda: bool(sql(pg_dsn, "SELECT 1 FROM public.started WHERE job_id = %s", job_id)),
        30,
        "the first attempt to start",
    )
    os.kill(victim.pid, signal.SIGKILL)  # mid-job: no release, no unregister
    victim.wait(10)
    rescuer = app("async")

    def succeeded() -> bool:
        rows = sql(pg_dsn, "SELECT status FROM skiplock.jobs WHERE id = %s", job_id)
        return rows == [("succeeded",)]

    wait_for(succeeded, 60, "the job to be recovered and to succeed")
    [(attempts, last_error)] = sql(
        pg_dsn, "SELECT attempts, last_error FROM skiplock.jobs WHERE id = %s", job_id
    )
    assert attempts == 2
    assert last_error is None
    assert sql(pg_dsn, "SELECT attempt, pid FROM public.runs") == [(2, rescuer.pid)]
    starts = sql(pg_dsn, "SELECT attempt, pid FROM public.started ORDER BY attempt")
    assert starts == [(1, victim.pid), (2, rescuer.pid)]
    stop([rescuer])


def test_job_that_kills_its_worker_every_time_ends_dead(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str
) -> None:
    poison = EnqueueRequest(kind="proc.poison", max_attempts=3, explicit_max_attempts=True)
    [job_id] = enqueue(pg_dsn, [poison])

    def dead() -> bool:
        rows = sql(pg_dsn, "SELECT status FROM skiplock.jobs WHERE id = %s", job_id)
        return rows == [("dead",)]

    def settled(proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
        return lambda: proc.poll() is not None or dead()

    # Restart a worker whenever the job killed the last one; the poison job's stale TTL of
    # 1 s lets the next worker's maintenance recover it quickly.
    flavours = itertools.cycle(["sync", "async"])
    killed: list[int] = []
    worker = app(next(flavours), poll=0.2)
    while True:
        wait_for(settled(worker), 30, "the job to kill its worker or to be buried")
        if worker.poll() is None:
            break
        assert worker.returncode == -signal.SIGKILL
        killed.append(worker.pid)
        assert len(killed) <= 3, "the job ran more often than max_attempts"
        worker = app(next(flavours), poll=0.2)
    assert len(killed) == 3
    [(attempts, last_error, completed_at)] = sql(
        pg_dsn,
        "SELECT attempts, last_error, completed_at FROM skiplock.jobs WHERE id = %s",
        job_id,
    )
    assert attempts == 3
    assert last_error.startswith("[stale-claim recovered]")
    assert completed_at is not None
    starts = sql(pg_dsn, "SELECT attempt, pid FROM public.started ORDER BY attempt")
    assert starts == [(n, pid) for n, pid in enumerate(killed, start=1)]
    stop([worker])  # the survivor never ran it: it was buried before any claim


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_second_signal_releases_running_jobs_and_unregisters(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str, tmp_path: Path, flavour: str
) -> None:
    worker = app(flavour, log_level="INFO")
    [job_id] = enqueue(pg_dsn, [EnqueueRequest(kind="proc.block")])
    wait_for(
        lambda: bool(sql(pg_dsn, "SELECT 1 FROM public.started WHERE job_id = %s", job_id)),
        30,
        "the job to start",
    )
    worker.send_signal(signal.SIGTERM)  # drain: the job would run on for shutdown_timeout
    # Two signals sent at once may arrive as one: wait until the first was handled.
    log = tmp_path / "worker0.log"
    wait_for(lambda: "SIGTERM" in log.read_text(), 10, "the first SIGTERM to be handled")
    worker.send_signal(signal.SIGTERM)  # stop now
    assert worker.wait(30) == 130
    # Released (no attempt used, no stale-recovery mark), and the worker's row is gone.
    assert sql(
        pg_dsn,
        "SELECT status, attempts, claimed_by, last_error FROM skiplock.jobs WHERE id = %s",
        job_id,
    ) == [("pending", 0, None, None)]
    assert sql(pg_dsn, "SELECT count(*) FROM skiplock.workers") == [(0,)]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_second_ctrl_c_releases_a_job_blocked_in_a_sync_call(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str, tmp_path: Path, flavour: str
) -> None:
    # Issue 41 item 3: the job stayed `running` until the next maintenance pass (minutes)
    # and the worker's last words said stale-claim recovery would take it.
    worker = app(flavour, log_level="INFO")
    [job_id] = enqueue(pg_dsn, [EnqueueRequest(kind="proc.stuck")])
    wait_for(
        lambda: bool(sql(pg_dsn, "SELECT 1 FROM public.started WHERE job_id = %s", job_id)),
        30,
        "the job to start",
    )
    log = tmp_path / "worker0.log"
    worker.send_signal(signal.SIGINT)  # Ctrl-C: drain
    wait_for(lambda: "SIGINT received" in log.read_text(), 10, "the first SIGINT to be handled")
    worker.send_signal(signal.SIGINT)  # Ctrl-C again: stop now
    assert worker.wait(30) == 130
    # Released as a forced stop releases a running job: pending, no attempt used, nobody's
    # claim; and the worker's row is gone.
    assert sql(
        pg_dsn,
        "SELECT status, attempts, claimed_by, recovered FROM skiplock.jobs WHERE id = %s",
        job_id,
    ) == [("pending", 0, None, False)]
    assert sql(pg_dsn, "SELECT count(*) FROM skiplock.workers") == [(0,)]
    text = log.read_text()
    assert "stale-claim recovery will return" not in text
    assert f"released job(s) [{job_id}] to pending without using an attempt" in text


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize(
    ("how", "status", "error"),
    [("exit", 3, "SystemExit: 3"), ("interrupt", 130, "KeyboardInterrupt")],
)
def test_an_exit_in_a_processor_fails_its_job_and_stops_the_worker_cleanly(
    app: Callable[..., subprocess.Popen[bytes]],
    pg_dsn: str,
    flavour: str,
    how: str,
    status: int,
    error: str,
) -> None:
    # Issue 9: sys.exit(3) in a processor used to end the process with every claimed
    # job left running, most of them never started.
    leaver = EnqueueRequest(
        kind="proc.exit", payload=how, priority=1, max_attempts=1, explicit_max_attempts=True
    )
    [bad_id] = enqueue(pg_dsn, [leaver])
    others = enqueue(pg_dsn, [EnqueueRequest(kind="proc.nap") for _ in range(40)])
    worker = app(flavour)
    assert worker.wait(30) == status
    jobs = {
        job_id: rest
        for job_id, *rest in sql(
            pg_dsn, "SELECT id, status, attempts, claims, claimed_by, last_error FROM skiplock.jobs"
        )
    }
    assert [s for s, *_ in jobs.values() if s == "running"] == []
    bad_status, bad_attempts, _, _, last_error = jobs[bad_id]
    assert (bad_status, bad_attempts) == ("dead", 1)
    assert last_error.startswith(error)
    started = {job_id for (job_id,) in sql(pg_dsn, "SELECT job_id FROM public.started")}
    ran = {job_id for (job_id,) in sql(pg_dsn, "SELECT job_id FROM public.runs")}
    assert started - {bad_id} == ran  # what started finished, in the graceful stop
    for job_id in others:
        if job_id in started:
            assert jobs[job_id][:2] == ["succeeded", 1]
        else:  # never started: no attempt paid, nobody's claim
            assert jobs[job_id][:2] == ["pending", 0]
            assert jobs[job_id][3] is None
    # Claimed and held, never started: released, not left running.
    assert any(jobs[i][2] > 0 for i in others if i not in started)
    assert sql(pg_dsn, "SELECT count(*) FROM skiplock.workers") == [(0,)]


def test_four_workers_drain_20k_jobs_exactly_once(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str
) -> None:
    total = 20_000
    enqueue(pg_dsn, [EnqueueRequest(kind="proc.count", payload=i) for i in range(total)])
    workers = [app(flavour) for flavour in ("sync", "async", "sync", "async")]

    def drained() -> bool:
        [(done,)] = sql(pg_dsn, "SELECT count(*) FROM skiplock.jobs WHERE status = 'succeeded'")
        return int(done) == total

    started = time.monotonic()
    wait_for(drained, 180, f"{total} jobs to succeed")
    elapsed = time.monotonic() - started
    stop(workers)
    [(runs, distinct, attempts)] = sql(
        pg_dsn, "SELECT count(*), count(DISTINCT job_id), max(attempt) FROM public.runs"
    )
    assert (runs, distinct, attempts) == (total, total, 1)  # no job ran twice
    by_worker = sql(pg_dsn, "SELECT DISTINCT pid FROM public.runs")
    assert {pid for (pid,) in by_worker} == {w.pid for w in workers}
    assert sql(pg_dsn, "SELECT count(*) FROM skiplock.workers") == [(0,)]
    print(f"{total} jobs by 4 workers x 8 slots in {elapsed:.1f} s")


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_processing_resumes_after_the_listener_is_terminated(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str, flavour: str
) -> None:
    # A fallback poll of a minute: only LISTEN/NOTIFY can make the pickup fast.
    worker = app(flavour, poll=60.0)
    listeners = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND query ILIKE 'LISTEN%%'"
    )
    wait_for(lambda: bool(sql(pg_dsn, listeners)), 30, "the worker to LISTEN")

    def processed(n: int) -> Callable[[], bool]:
        return lambda: sql(pg_dsn, "SELECT count(*) FROM public.runs") == [(n,)]

    sql(pg_dsn, "INSERT INTO skiplock.jobs (kind) VALUES ('proc.count')")
    wait_for(processed(1), 10, "a job inserted with plain SQL to run")
    [(old_pid,)] = sql(pg_dsn, listeners)
    sql(pg_dsn, "SELECT pg_terminate_backend(%s)", old_pid)

    def relistening() -> bool:
        return [pid for (pid,) in sql(pg_dsn, listeners)] not in ([], [old_pid])

    wait_for(relistening, 20, "the listener to reconnect")
    sql(pg_dsn, "INSERT INTO skiplock.jobs (kind) VALUES ('proc.count')")
    wait_for(processed(2), 10, "a job inserted after the reconnect to run")
    stop([worker])


def test_frozen_workers_late_completion_is_rejected(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str, tmp_path: Path
) -> None:
    victim = app("async")
    [job_id] = enqueue(pg_dsn, [EnqueueRequest(kind="proc.late")])
    wait_for(
        lambda: bool(sql(pg_dsn, "SELECT 1 FROM public.started WHERE job_id = %s", job_id)),
        30,
        "the first attempt to start",
    )
    # Frozen mid-job: no heartbeats, so the job is recovered and runs elsewhere.
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        rescuer = app("sync")
        wait_for(
            lambda: (
                sql(pg_dsn, "SELECT status FROM skiplock.jobs WHERE id = %s", job_id)
                == [("succeeded",)]
            ),
            60,
            "the job to be recovered and to succeed on the rescuer",
        )
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    # The victim wakes up and either finishes attempt 1 and tries to complete it (fenced
    # out: its transaction, the processor's write included, rolls back) or first learns
    # from its heartbeat that the job is gone and interrupts it; which comes first is up
    # to the event loop. Either way its write never commits.
    log = tmp_path / "worker0.log"
    wait_for(lambda: "no longer ours" in log.read_text(), 30, "the victim to end its attempt")
    assert sql(pg_dsn, "SELECT job_id, attempt, pid FROM public.runs") == [(job_id, 2, rescuer.pid)]
    assert sql(pg_dsn, "SELECT attempts, status FROM skiplock.jobs WHERE id = %s", job_id) == [
        (2, "succeeded")
    ]
    stop([victim, rescuer])


def test_cluster_limit_is_never_exceeded_by_three_worker_processes(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str
) -> None:
    total = 60
    enqueue(pg_dsn, [EnqueueRequest(kind="proc.limited", payload=i) for i in range(total)])
    workers = [app(flavour, poll=0.1) for flavour in ("async", "sync", "async")]
    running = (
        "SELECT count(*) FROM skiplock.jobs WHERE kind = 'proc.limited' AND status = 'running'"
    )
    done = "SELECT count(*) FROM skiplock.jobs WHERE status = 'succeeded'"
    samples: list[int] = []
    deadline = time.monotonic() + 120
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        while conn.execute(done).fetchone() != (total,):
            assert time.monotonic() < deadline, "timed out waiting for the jobs to succeed"
            row = conn.execute(running).fetchone()
            assert row is not None
            samples.append(int(row[0]))
    stop(workers)
    assert max(samples) <= 2, f"cluster limit 2 exceeded: {max(samples)} running at once"
    assert max(samples) == 2, "the limit was never reached: the test proves nothing"
    assert len(samples) > 20


def test_plain_sql_insert_is_picked_up_within_a_second_without_polling(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str
) -> None:
    worker = app("async", poll=60.0)  # a fallback poll of a minute: only NOTIFY is fast
    listening = (
        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
        "AND query ILIKE 'LISTEN%%'"
    )
    wait_for(lambda: bool(sql(pg_dsn, listening)), 30, "the worker to LISTEN")
    wait_for(
        lambda: bool(sql(pg_dsn, "SELECT 1 FROM skiplock.workers")), 30, "the worker to register"
    )
    inserted = time.monotonic()
    sql(pg_dsn, "INSERT INTO skiplock.jobs (kind) VALUES ('proc.count')")
    wait_for(
        lambda: sql(pg_dsn, "SELECT count(*) FROM public.runs") == [(1,)],
        1.0,
        "the job inserted with plain SQL to run within 1 s",
    )
    assert time.monotonic() - inserted < 1.0
    stop([worker])
