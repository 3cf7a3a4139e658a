"""Cluster-wide limits across worker processes on a real server (issue 30): a rate holds
across four processes, an idle throttled worker does not spin, and a cluster limit is
shared by two nodes without one hoarding it.

Each test starts ``python -m skiplock worker`` subprocesses for a small app module and
reads what they did from the database (start times on its clock, the claims each process
made), waiting on conditions with deadlines.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from skiplock.core import EnqueueRequest
from tests.pghelpers import enqueue, sql, stop, wait_for, worker_processes

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: The rate of ``rate.tick`` (jobs per second, cluster-wide) and its burst.
RATE, BURST = 20, 2
#: The window the rate is measured over, in seconds, from SETTLE seconds after the first
#: start (the four processes' first claims are past: the steady rate is what is measured).
WINDOW = 5.0
SETTLE = 1.0

#: The worker app: ``rate.tick`` at ``SKIPLOCK_TEST_APP_RATE``/``_BURST`` (default RATE,
#: BURST), each start recorded in ``public.started`` and each claim in ``public.claims``.
APP = """
import os
import time

import psycopg

from skiplock import Engine, RateLimit, Settings
from skiplock.adapters.psycopg import PsycopgJobStore

DSN = os.environ["SKIPLOCK_TEST_APP_DSN"]


class CountingStore(PsycopgJobStore):
    # Every claim of this process, with the number of jobs it took, on the database clock.
    def claim(self, request, *, audit=None):
        jobs = super().claim(request, audit=audit)
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO public.claims VALUES (%s, clock_timestamp(), %s)",
                [os.getpid(), len(jobs)],
            )
        return jobs


settings = Settings(
    concurrency=int(os.environ["SKIPLOCK_TEST_APP_SLOTS"]),
    poll_interval=1.0,
    heartbeat_interval=0.5,
    stale_ttl=5.0,
    shutdown_timeout=5.0,
)
engine = Engine(CountingStore(DSN, max_size=6), settings)
RUN = "INSERT INTO public.started VALUES (%s, %s, clock_timestamp())"


TICK = RateLimit(
    rps=float(os.environ.get("SKIPLOCK_TEST_APP_RATE", "{rate}")),
    burst=int(os.environ.get("SKIPLOCK_TEST_APP_BURST", "{burst}")),
)


@engine.processor("rate.tick", rate_limit=TICK, transactional=True)
def tick(payload, ctx):
    ctx.connection.execute(RUN, [ctx.job_id, os.getpid()])


@engine.processor("rate.slow", rate_limit=RateLimit(rps=0.1, burst=1), transactional=True)
def slow_rate(payload, ctx):
    ctx.connection.execute(RUN, [ctx.job_id, os.getpid()])


@engine.processor("cap.slow", cluster_limit=4)
def capped(payload, ctx):
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(RUN, [ctx.job_id, os.getpid()])
    time.sleep(0.5)
""".replace("{rate}", str(RATE)).replace("{burst}", str(BURST))

#: The app's module name (benchmarks.rates runs the same app for longer).
MODULE = "skiplock_pg_rate_app"


@pytest.fixture
def app(tmp_path: Path, pg_dsn: str) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Starts worker processes of the app module (``slots`` each); kills what is left."""
    sql(pg_dsn, "DROP TABLE IF EXISTS public.started, public.claims")
    sql(pg_dsn, "CREATE TABLE public.started (job_id bigint, pid int, at timestamptz)")
    sql(pg_dsn, "CREATE TABLE public.claims (pid int, at timestamptz, took int)")
    with worker_processes(tmp_path, MODULE, APP) as run:

        def start(slots: int) -> subprocess.Popen[bytes]:
            env = {"SKIPLOCK_TEST_APP_DSN": pg_dsn, "SKIPLOCK_TEST_APP_SLOTS": str(slots)}
            return run(env, "WARNING")

        yield start


def _registered(dsn: str, n: int) -> None:
    wait_for(lambda: sql(dsn, "SELECT count(*) FROM skiplock.workers")[0][0] == n, 60, "workers")


def test_rate_holds_across_four_worker_processes_without_spinning(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str
) -> None:
    procs = [app(4) for _ in range(4)]
    _registered(pg_dsn, 4)
    # More jobs than the window can start, so the backlog never runs dry.
    enqueue(pg_dsn, [EnqueueRequest(kind="rate.tick") for _ in range(int(RATE * WINDOW * 2))])
    # A slow pair: one job runs, two wait (one token per 10 s) while the workers are idle.
    enqueue(pg_dsn, [EnqueueRequest(kind="rate.slow", tenant="t") for _ in range(3)])

    def window_passed() -> bool:
        rows = sql(
            pg_dsn,
            "SELECT extract(epoch FROM clock_timestamp() - min(at)) FROM public.started s "
            "JOIN skiplock.jobs j ON j.id = s.job_id WHERE j.kind = 'rate.tick'",
        )
        return rows[0][0] is not None and rows[0][0] > SETTLE + WINDOW + 0.5

    wait_for(window_passed, 60, "the measuring window")
    [(started, pids)] = sql(
        pg_dsn,
        "WITH t AS (SELECT s.* FROM public.started s JOIN skiplock.jobs j ON j.id = s.job_id "
        "WHERE j.kind = 'rate.tick'), w AS (SELECT min(at) + %s * interval '1 s' AS f FROM t) "
        "SELECT count(*) FILTER (WHERE at >= w.f AND at < w.f + %s * interval '1 s'), "
        "count(DISTINCT pid) FROM t, w GROUP BY w.f",
        SETTLE,
        WINDOW,
    )
    allowed = BURST + RATE * WINDOW  # a bucket refilled to its burst, then the rate
    assert started <= allowed
    claims = sql(
        pg_dsn,
        "SELECT date_trunc('second', at), count(*), sum(took) FROM public.claims "
        "GROUP BY 1 ORDER BY 1",
    )
    # The lower bound says the limiter does not starve the kind. 0.8, not 0.9: on a
    # saturated 2-core machine (load 25 seen) four processes start late now and then
    # (87 of 100 measured there), while a starving limiter falls far below.
    assert started >= 0.8 * RATE * WINDOW, claims
    assert pids >= 2  # the rate is shared, not one process's

    # The slow pair: its bucket refilled at most once since its first job.
    [(slow,)] = sql(
        pg_dsn,
        "SELECT count(*) FROM public.started s JOIN skiplock.jobs j ON j.id = s.job_id "
        "WHERE j.kind = 'rate.slow'",
    )
    assert 1 <= slow <= 2

    # No spinning: once the backlog ran out, an idle worker claims about once per token
    # of the throttled pair or per poll, not in a loop.
    wait_for(
        lambda: (
            sql(
                pg_dsn,
                "SELECT count(*) FROM skiplock.jobs WHERE kind = 'rate.tick' "
                "AND status = 'pending'",
            )[0][0]
            == 0
        ),
        60,
        "the rate.tick backlog to drain",
    )
    time.sleep(0.2)  # the last claims of the drain land
    [(before,)] = sql(pg_dsn, "SELECT count(*) FROM public.claims")
    idle = 3.0
    begun = time.monotonic()
    wait_for(lambda: time.monotonic() - begun >= idle, idle + 1, "an idle period")
    [(during,)] = sql(pg_dsn, "SELECT count(*) FROM public.claims")
    # Four workers, each waking at most once per poll (1 s) and per token: a handful.
    assert during - before <= 4 * (idle / 1.0 + 2)
    stop(procs)


def test_cluster_limit_is_shared_by_two_nodes_without_hoarding(
    app: Callable[..., subprocess.Popen[bytes]], pg_dsn: str
) -> None:
    procs = [app(2) for _ in range(2)]
    _registered(pg_dsn, 2)
    ids = enqueue(pg_dsn, [EnqueueRequest(kind="cap.slow") for _ in range(8)])
    peak: dict[str, int] = {}

    def done() -> bool:
        # Running jobs per node (held ones included: they are running in the store).
        for worker, n in sql(
            pg_dsn,
            "SELECT claimed_by, count(*) FROM skiplock.jobs WHERE status = 'running' "
            "GROUP BY claimed_by",
        ):
            peak[worker] = max(peak.get(worker, 0), n)
        rows = sql(pg_dsn, "SELECT count(*) FROM skiplock.jobs WHERE status = 'succeeded'")
        return bool(rows[0][0] == len(ids))

    wait_for(done, 60, "the eight jobs to succeed")
    assert len(peak) == 2  # both nodes ran jobs
    assert max(peak.values()) <= 2  # no node held more than it could start
    starts = sql(pg_dsn, "SELECT pid FROM public.started ORDER BY at")
    assert len(starts) == len(ids)
    first = [pid for (pid,) in starts[:4]]
    assert len(set(first)) == 2  # the first wave ran on both nodes at once
    stop(procs)
