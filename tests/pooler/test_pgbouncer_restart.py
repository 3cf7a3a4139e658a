"""A PgBouncer restart while a worker drains jobs through it loses nothing and strands
nothing (issue 43, point 1).

A worker process (``skiplock worker``) runs a store with ``pgbouncer=True`` through a
throw-away PgBouncer in transaction pooling (tests/pgbouncer.py), its notifier on
PostgreSQL directly. Each job writes a row in the job's own transaction (the effects
table: a committed run) and appends its id to a ledger file when its processor starts (a
run, committed or not). The PgBouncer process is stopped by its PID mid-drain (every
client and server connection cut) and started again on the same port; more jobs are
enqueued through it. Then every job succeeded, each committed exactly once, and nothing
is left running, pending or open on the server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

import skiplock
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core import EnqueueRequest
from tests.pgbouncer import pgbouncer
from tests.pgcluster import wait_until
from tests.pgfixtures import fetch

pytestmark = pytest.mark.postgres

#: The worker's application: ``BOUNCE_DRIVER`` (psycopg or asyncpg) picks the store.
APP = """
import asyncio
import os

from skiplock import AsyncEngine, Settings

if os.environ["BOUNCE_DRIVER"] == "asyncpg":
    from skiplock.adapters.asyncpg import AsyncpgJobStore as Store

    async def insert(conn, job_id):
        await conn.execute("INSERT INTO public.effects (job_id) VALUES ($1)", job_id)
else:
    from skiplock.adapters.psycopg import AsyncPsycopgJobStore as Store

    async def insert(conn, job_id):
        await conn.execute("INSERT INTO public.effects (job_id) VALUES (%s)", [job_id])

store = Store(
    os.environ["BOUNCE_DSN"],
    pgbouncer=True,
    listen_dsn=os.environ["BOUNCE_LISTEN_DSN"],
    min_size=2,
    max_size=8,
)
# A job the restart cut fails, and is retried soon.
engine = AsyncEngine(store, Settings(concurrency=4, poll_interval=0.5, backoff_base=0.1))


@engine.processor("bounce.mark", transactional=True)
async def mark(payload, ctx):
    fd = os.open("ledger.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{ctx.job_id}\\n".encode())  # one O_APPEND write per line
    finally:
        os.close(fd)
    await asyncio.sleep(0.02)
    await insert(ctx.connection, ctx.job_id)
"""

#: Jobs enqueued before the restart (the worker drains them across it) and after it.
BEFORE, AFTER = 300, 100


def _ledger(folder: Path) -> Counter[int]:
    path = folder / "ledger.txt"
    if not path.exists():
        return Counter()
    return Counter(int(line) for line in path.read_text(encoding="utf-8").split())


def _enqueue(store: PsycopgJobStore, count: int) -> list[int]:
    results = store.enqueue([EnqueueRequest(kind="bounce.mark", payload=i) for i in range(count)])
    return [result.id for result in results]


def _committed(dsn: str) -> int:
    return int(fetch(dsn, "SELECT count(*) FROM public.effects")[0][0])


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_a_pgbouncer_restart_loses_and_strands_nothing(
    driver: str, pg_dsn: str, effects: str, tmp_path: Path
) -> None:
    (tmp_path / "bounce_app.py").write_text(textwrap.dedent(APP), encoding="utf-8")
    here = str(Path(skiplock.__file__).resolve().parent.parent)
    path = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with pgbouncer("transaction") as bouncer:
        bounced = bouncer.dsn(pg_dsn)
        env = os.environ | {
            "BOUNCE_DSN": bounced,
            "BOUNCE_LISTEN_DSN": pg_dsn,
            "BOUNCE_DRIVER": driver,
            "PYTHONPATH": path,
        }
        with PsycopgJobStore(pg_dsn, max_size=2) as direct:
            ids = _enqueue(direct, BEFORE)
        with open(tmp_path / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "skiplock", "worker", "bounce_app:engine"],
                cwd=tmp_path,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(lambda: _committed(pg_dsn) >= 50, 60, "the worker's first jobs")
            pid = bouncer.pid
            bouncer.stop()
            stopped_at = _committed(pg_dsn)
            assert stopped_at < BEFORE, "the drain ended before the restart: more jobs"
            down = time.monotonic()
            wait_until(lambda: time.monotonic() - down >= 1.0, 5, "the outage")
            assert worker.poll() is None, "the worker died during the outage"
            bouncer.start()
            assert bouncer.pid != pid
            with PsycopgJobStore(bounced, max_size=2, pgbouncer=True) as through:
                ids += _enqueue(through, AFTER)
            wait_until(lambda: _committed(pg_dsn) >= BEFORE + AFTER, 60, "every job to commit")
            rows = fetch(
                pg_dsn,
                "SELECT status, count(*) FROM skiplock.jobs GROUP BY status ORDER BY status",
            )
            assert rows == [("succeeded", BEFORE + AFTER)], rows
        finally:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(10)
        log_text = (tmp_path / "worker.log").read_text(encoding="utf-8", errors="replace")
        assert worker.returncode == 0, log_text[-4000:]
    committed = Counter(int(r[0]) for r in fetch(pg_dsn, "SELECT job_id FROM public.effects"))
    assert sorted(committed) == sorted(ids)
    assert set(committed.values()) == {1}, "a job committed twice"
    started = _ledger(tmp_path)
    assert set(started) == set(ids)
    # A run the restart cut rolled back and was retried: only jobs in flight then.
    reruns = {job: n for job, n in started.items() if n > 1}
    assert len(reruns) <= 8 + 4, reruns
    # Nothing stranded on the server: no session of the test database is left in a
    # transaction (PgBouncer's server connections were closed with it).
    open_transactions = fetch(
        pg_dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
    )
    assert open_transactions == [(0,)]
