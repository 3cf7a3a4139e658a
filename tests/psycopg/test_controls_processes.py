"""Pauses and limits set at run time (issue 30) reaching live worker processes on a real
server: a pause holds due jobs back (never claimed, attempts unchanged) until resumed, a
limit changed while a worker is throttled applies within a refresh, and ``skiplock
pause``/``resume`` work end to end from the command line.

Each test starts ``python -m skiplock worker`` subprocesses for a small app module and
changes the controls from this process, as another operator would.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock import Engine, cli
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core import EnqueueRequest
from tests.pghelpers import enqueue, sql, stop, wait_for, worker_processes

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_APP = """
import os

from skiplock import Engine, RateLimit, Settings
from skiplock.adapters.psycopg import PsycopgJobStore

DSN = os.environ["SKIPLOCK_TEST_APP_DSN"]
engine = Engine(
    PsycopgJobStore(DSN, max_size=4),
    Settings(concurrency=4, poll_interval=1.0, heartbeat_interval=0.5, stale_ttl=5.0),
)


@engine.processor("ctl.work", transactional=True)
def work(payload, ctx):
    ctx.connection.execute(
        "INSERT INTO public.ctl_runs VALUES (%s, %s, clock_timestamp())",
        [ctx.job_id, ctx.attempt],
    )


@engine.processor("ctl.limited", transactional=True, rate_limit=RateLimit(rps=0.1, burst=1))
def limited(payload, ctx):
    ctx.connection.execute(
        "INSERT INTO public.ctl_runs VALUES (%s, %s, clock_timestamp())",
        [ctx.job_id, ctx.attempt],
    )
"""

_MODULE = "skiplock_pg_controls_app"
#: A worker process's lifetime bound in these tests.
DEADLINE = 20.0


@pytest.fixture
def app(tmp_path: Path, pg_dsn: str) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    sql(pg_dsn, "DROP TABLE IF EXISTS public.ctl_runs")
    sql(pg_dsn, "CREATE TABLE public.ctl_runs (job_id bigint, attempt int, at timestamptz)")
    with worker_processes(tmp_path, _MODULE, _APP) as run:
        yield lambda: run({"SKIPLOCK_TEST_APP_DSN": pg_dsn}, "WARNING")


@pytest.fixture
def operator_engine(pg_dsn: str) -> Iterator[Engine]:
    """Another process's engine, as an operator's: its changes reach the workers through
    the store only."""
    store = PsycopgJobStore(pg_dsn, max_size=2)
    try:
        yield Engine(store)
    finally:
        store.close()


def _registered(dsn: str) -> bool:
    return bool(sql(dsn, "SELECT 1 FROM skiplock.workers"))


def _runs(dsn: str) -> int:
    return int(sql(dsn, "SELECT count(*) FROM public.ctl_runs")[0][0])


def _untouched(dsn: str, ids: list[int]) -> bool:
    rows = sql(
        dsn,
        "SELECT status, attempts, claims FROM skiplock.jobs WHERE id = ANY(%s)",
        ids,
    )
    return len(rows) == len(ids) and all(row == ("pending", 0, 0) for row in rows)


def _hold(check: Callable[[], bool], seconds: float, what: str) -> None:
    """``check`` holds at every look for ``seconds`` (a property over a span of time)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert check(), what
        time.sleep(0.05)


def test_a_pause_holds_due_jobs_from_a_live_worker_until_resumed(
    app: Callable[[], subprocess.Popen[bytes]], pg_dsn: str, operator_engine: Engine
) -> None:
    worker = app()
    wait_for(lambda: _registered(pg_dsn), DEADLINE, "the worker to register")
    operator_engine.operator("ops").pause(kind="ctl.work", reason="provider outage")
    # Due a little after the pause (more than controls_refresh): by then every worker
    # has it, so none of them may ever claim these jobs.
    later = timedelta(seconds=1.5)
    ids = enqueue(pg_dsn, [EnqueueRequest(kind="ctl.work", delay=later) for _ in range(5)])
    _hold(lambda: _untouched(pg_dsn, ids), 1.5 + 5.0, "a paused job was claimed")
    assert _runs(pg_dsn) == 0
    resumed_at = time.monotonic()
    assert operator_engine.resume(kind="ctl.work") is not None
    wait_for(lambda: _runs(pg_dsn) == 5, DEADLINE, "the resumed jobs to run")
    # The idle worker learns of the resume at its next refresh (1 s), not its next poll.
    assert time.monotonic() - resumed_at < 3.0
    attempts = sql(pg_dsn, "SELECT attempt FROM public.ctl_runs")
    assert sorted(a for (a,) in attempts) == [1] * 5  # the pause cost no attempt
    stop([worker])


def test_a_limit_changed_at_run_time_reaches_a_running_worker_within_a_second(
    app: Callable[[], subprocess.Popen[bytes]], pg_dsn: str, operator_engine: Engine
) -> None:
    worker = app()
    enqueue(pg_dsn, [EnqueueRequest(kind="ctl.limited", tenant="t") for _ in range(6)])
    # The policy allows one job now and the next in ten seconds.
    wait_for(lambda: _runs(pg_dsn) == 1, DEADLINE, "the first job")
    limit = operator_engine.operator("ops").set_limit(kind="ctl.limited", rps=100, burst=100)
    assert limit.updated_at is not None
    wait_for(lambda: _runs(pg_dsn) == 6, DEADLINE, "the rest under the new limit")
    [(last,)] = sql(pg_dsn, "SELECT max(at) FROM public.ctl_runs")
    # Within the workers' refresh (1 s) and a claim, on the database's clock.
    assert (last - limit.updated_at).total_seconds() < 1.5
    stop([worker])


def _cli(dsn: str, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = cli.main([*argv, "--dsn", dsn])
    out, err = capsys.readouterr()
    return status, out + err


def test_pause_and_resume_from_the_command_line(
    app: Callable[[], subprocess.Popen[bytes]],
    pg_dsn: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out = _cli(pg_dsn, "pause", "--kind", "ctl.work", "--reason", "outage", capsys=capsys)
    assert (status, out.strip()) == (0, "paused kind=ctl.work tenant=*")
    ids = enqueue(pg_dsn, [EnqueueRequest(kind="ctl.work") for _ in range(3)])
    worker = app()
    wait_for(lambda: _registered(pg_dsn), DEADLINE, "the worker to register")
    _hold(lambda: _untouched(pg_dsn, ids), 2.0, "a paused job was claimed")
    status, out = _cli(pg_dsn, "paused", "--json", capsys=capsys)
    assert status == 0
    [pause] = json.loads(out)["paused"]
    assert (pause["kind"], pause["tenant"], pause["reason"]) == ("ctl.work", None, "outage")
    status, out = _cli(pg_dsn, "health", capsys=capsys)
    assert "paused:   kind=ctl.work tenant=*: outage" in out
    status, out = _cli(pg_dsn, "resume", "--kind", "ctl.work", capsys=capsys)
    assert (status, out.strip()) == (0, "resumed kind=ctl.work tenant=*")
    wait_for(lambda: _runs(pg_dsn) == 3, DEADLINE, "the resumed jobs to run")
    status, out = _cli(pg_dsn, "resume", "--kind", "ctl.work", capsys=capsys)
    assert status == 1
    assert "no pause of kind=ctl.work tenant=*" in out
    stop([worker])
