"""``python -m benchmarks.pooled``: the queue through PgBouncer in transaction pooling
against a direct connection, in one run (issue 43, docs/scaling.md).

A throw-away PgBouncer (:mod:`benchmarks.pgbouncer`, transaction pooling) in front of the
server; each store (psycopg and asyncpg, async) runs every workload twice, directly and
through it with ``pgbouncer=True`` (its notifier on ``listen_dsn``, PostgreSQL directly),
one right after the other so that the machine's drifting load hits both alike:

- **pickup**: an idle worker (poll interval 60 s: woken by NOTIFY) and one job enqueued
  at a time through the same connection path; the time from ``enqueue`` returning to the
  processor starting, median and 90th percentile of ``--pickups`` jobs;
- **drain @16**: ``--drain-jobs`` no-op jobs enqueued directly (not timed), drained by
  one in-process worker at 16 slots (``run_until_idle``), jobs per second;
- **single enqueue**: back-to-back ``enqueue`` calls from one client, each its own
  transaction, jobs per second.

Prints Markdown with the load average at start and end. Every workload runs in a fresh
database of the server (dropped afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

from psycopg.conninfo import make_conninfo

from benchmarks import _pg
from benchmarks.pgbouncer import pgbouncer

if TYPE_CHECKING:
    from collections.abc import Sequence

KIND = "bench.pooled"


def _store(adapter: str, dsn: str, *, bounced: bool, listen_dsn: str) -> Any:
    options: dict[str, Any] = {"max_size": 20}
    if bounced:
        options |= {"pgbouncer": True, "listen_dsn": listen_dsn}
    if adapter == "asyncpg":
        from skiplock.adapters.asyncpg import AsyncpgJobStore

        return AsyncpgJobStore(dsn, **options)
    from skiplock.adapters.psycopg import AsyncPsycopgJobStore

    return AsyncPsycopgJobStore(dsn, **options)


async def _apply_schema(direct: str) -> None:
    from skiplock.adapters.psycopg import apply_schema

    await asyncio.to_thread(apply_schema, direct)


async def pickup(store: Any, n: int) -> list[float]:
    """Seconds from ``enqueue`` returning to the processor starting, per job."""
    from skiplock import AsyncEngine, JobContext, Settings

    engine = AsyncEngine(store, Settings(poll_interval=60.0))
    started: asyncio.Queue[float] = asyncio.Queue()

    @engine.processor(KIND)
    async def mark(payload: int, ctx: JobContext) -> None:
        started.put_nowait(time.perf_counter())

    took = []
    async with engine.worker(install_signal_handlers=False).in_background():
        await engine.enqueue(KIND, -1)  # warm up: connections, the first claim
        await asyncio.wait_for(started.get(), 30)
        for i in range(n):
            await engine.enqueue(KIND, i)
            returned = time.perf_counter()
            took.append(await asyncio.wait_for(started.get(), 30) - returned)
    return took


async def drain(store: Any, direct_store: Any, jobs: int) -> float:
    """Jobs per second of one worker at 16 slots over ``jobs`` no-op jobs."""
    from skiplock import AsyncEngine, JobContext, Settings
    from skiplock.core import EnqueueRequest

    for start in range(0, jobs, 4000):
        count = min(4000, jobs - start)
        await direct_store.enqueue([EnqueueRequest(kind=KIND, payload=i) for i in range(count)])
    engine = AsyncEngine(store, Settings(concurrency=16))

    @engine.processor(KIND)
    async def noop(payload: int, ctx: JobContext) -> None:
        return None

    began = time.perf_counter()
    done = await engine.worker(install_signal_handlers=False).run_until_idle()
    seconds = time.perf_counter() - began
    assert done == jobs, (done, jobs)
    return jobs / seconds


async def enqueue_single(store: Any, n: int) -> float:
    """Back-to-back single enqueues from one client, per second."""
    from skiplock import AsyncEngine

    engine = AsyncEngine(store)
    engine.declare_kind(KIND)
    await engine.enqueue(KIND, -1)  # warm up
    began = time.perf_counter()
    for i in range(n):
        await engine.enqueue(KIND, i)
    return n / (time.perf_counter() - began)


async def _one(what: str, adapter: str, base: str, bouncer_port: int | None,
               ns: argparse.Namespace, run: str) -> str:  # fmt: skip
    """One workload on one path, in a fresh database; its figure as text."""
    name = f"skiplock_bench_pooled_{run}_{what}_{adapter}_{'pgb' if bouncer_port else 'direct'}"
    async with _pg.fresh_database(base, name) as direct:
        await _apply_schema(direct)
        direct = _pg.to_uri(direct)  # asyncpg reads URLs only
        dsn = direct
        if bouncer_port is not None:
            dsn = _pg.to_uri(make_conninfo(direct, host="127.0.0.1", port=str(bouncer_port)))
        store = _store(adapter, dsn, bounced=bouncer_port is not None, listen_dsn=direct)
        try:
            if what == "pickup":
                took = sorted(await pickup(store, ns.pickups))
                p90 = took[int(0.9 * (len(took) - 1))]
                return f"{1000 * statistics.median(took):.2f} / {1000 * p90:.2f} ms"
            if what == "drain":
                direct_store = _store(adapter, direct, bounced=False, listen_dsn=direct)
                try:
                    return f"{await drain(store, direct_store, ns.drain_jobs):,.0f}/s"
                finally:
                    await direct_store.close()
            return f"{await enqueue_single(store, ns.enqueues):,.0f}/s"
        finally:
            await store.close()


async def run(ns: argparse.Namespace) -> list[list[str]]:
    """Every workload of every adapter, direct then through PgBouncer."""
    rows = []
    run_id = _pg.new_run_id()
    with pgbouncer(_pg.to_uri(ns.dsn), "transaction") as bouncer:
        for adapter in ns.adapter.split(","):
            for what in ("pickup", "drain", "single enqueue"):
                key = what.replace(" ", "_")
                direct = await _one(key, adapter, ns.dsn, None, ns, run_id)
                pooled = await _one(key, adapter, ns.dsn, bouncer.port, ns, run_id)
                print(f"[pooled] {adapter} {what}: {direct} | {pooled}", file=sys.stderr)
                rows.append([f"skiplock/{adapter}", what, direct, pooled])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run it; print Markdown."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.pooled", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--dsn", default=_pg.default_dsn())
    p.add_argument("--adapter", default="psycopg,asyncpg", help="comma-separated")
    p.add_argument("--pickups", type=int, default=100)
    p.add_argument("--drain-jobs", type=int, default=20_000)
    p.add_argument("--enqueues", type=int, default=2_000)
    ns = p.parse_args(argv)
    load_start, started = os.getloadavg(), dt.datetime.now(dt.UTC)
    rows = asyncio.run(run(ns))
    load_end = os.getloadavg()
    print(f"## Through PgBouncer, transaction pooling ({started:%Y-%m-%d %H:%M} UTC)\n")
    print("| store | workload | direct | through PgBouncer |\n| --- | --- | ---: | ---: |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("\n- pickup: median / 90th percentile, from `enqueue` returning to the processor")
    print("- load average at start {}; at end {}".format(
        *(", ".join(f"{x:.2f}" for x in avg) for avg in (load_start, load_end))))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
