"""Periodic schedules across worker processes on a real server: three ``skiplock worker``
processes, each running the same 1-second schedule, create exactly one job per tick
(docs/periodic.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from tests.pghelpers import sql, stop, wait_for, worker_processes

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_APP = """
import os

import psycopg

from skiplock import AsyncEngine, Engine, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore, PsycopgJobStore

DSN = os.environ["SKIPLOCK_TEST_APP_DSN"]
settings = Settings(concurrency=2, poll_interval=0.2, shutdown_timeout=5.0)
RUN = "INSERT INTO public.beats VALUES (%s, %s, %s)"

if os.environ["SKIPLOCK_TEST_APP_FLAVOUR"] == "async":
    engine = AsyncEngine(AsyncPsycopgJobStore(DSN, max_size=4), settings)

    @engine.periodic("proc.beat", every=1, catch_up=3)
    @engine.processor("proc.beat", transactional=True)
    async def beat(payload, ctx):
        await ctx.connection.execute(RUN, [ctx.job_id, ctx.job.idempotency_key, os.getpid()])

else:
    engine = Engine(PsycopgJobStore(DSN, max_size=4), settings)

    @engine.periodic("proc.beat", every=1, catch_up=3)
    @engine.processor("proc.beat", transactional=True)
    def beat(payload, ctx):
        ctx.connection.execute(RUN, [ctx.job_id, ctx.job.idempotency_key, os.getpid()])
"""

_MODULE = "skiplock_pg_periodic_app"
_PREFIX = "periodic:proc.beat:"


def _ticks(dsn: str) -> list[datetime]:
    """The tick of every job of the schedule, in id order."""
    query = "SELECT idempotency_key FROM skiplock.jobs WHERE kind = 'proc.beat' ORDER BY id"
    rows = sql(dsn, query)
    keys = [key for (key,) in rows]
    assert all(key.startswith(_PREFIX) for key in keys), keys
    return [datetime.fromisoformat(key.removeprefix(_PREFIX)) for key in keys]


def test_three_worker_processes_enqueue_one_job_per_tick(tmp_path: Path, pg_dsn: str) -> None:
    sql(pg_dsn, "DROP TABLE IF EXISTS public.beats")
    sql(pg_dsn, "CREATE TABLE public.beats (job_id bigint, key text, pid int)")
    with worker_processes(tmp_path, _MODULE, _APP) as start:
        procs = [
            start({"SKIPLOCK_TEST_APP_DSN": pg_dsn, "SKIPLOCK_TEST_APP_FLAVOUR": flavour}, "INFO")
            for flavour in ("sync", "async", "sync")
        ]
        wait_for(
            lambda: sql(pg_dsn, "SELECT count(*) FROM skiplock.workers") == [(3,)],
            30,
            "three registered workers",
        )
        # From here on all three schedulers race on every tick.
        [(all_up,)] = sql(pg_dsn, "SELECT now()")
        window = [all_up.replace(microsecond=0) + timedelta(seconds=s) for s in (1, 2, 3)]
        wait_for(
            lambda: all(tick in _ticks(pg_dsn) for tick in window),
            30,
            "the three ticks after all workers were up",
        )
        wait_for(
            lambda: (
                sql(
                    pg_dsn,
                    "SELECT count(*) FROM skiplock.jobs WHERE kind = 'proc.beat' "
                    "AND status <> 'succeeded'",
                )
                == [(0,)]
            ),
            30,
            "every tick job to run",
        )
        stop(procs)
    ticks = _ticks(pg_dsn)
    # One job per tick: the three ticks of the window, once each...
    assert [tick for tick in ticks if tick in window] == window
    # ... and over everything the processes enqueued, no tick twice and none left out
    # (catch_up=3 covers a pass that came late on a busy machine).
    assert len(set(ticks)) == len(ticks)
    first, last = min(ticks), max(ticks)
    assert sorted(ticks) == [
        first + timedelta(seconds=s) for s in range(int((last - first).total_seconds()) + 1)
    ]
    # Each job ran once, and its processor saw its tick's key.
    runs = sql(pg_dsn, "SELECT key FROM public.beats ORDER BY job_id")
    assert sorted(datetime.fromisoformat(key.removeprefix(_PREFIX)) for (key,) in runs) == sorted(
        ticks
    )
