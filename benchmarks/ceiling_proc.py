"""The driver alone: ``python -m benchmarks.ceiling_proc --driver asyncpg --dsn ... --jobs N``.

What one Python process gets out of a PostgreSQL driver with no queue around it.
``--workload tx``: ``--clients`` connections, each taking the next job number and running
``BEGIN``; the processor's one-row ``INSERT``; the job row's ``UPDATE`` by primary key;
``COMMIT``. That is the least a transactional job needs (its write and its completion
commit together), without a claim, a lease check or a session reset, so it bounds every
queue that runs transactional jobs through that driver in one process. ``--workload
enqueue``: one autocommit ``INSERT ... RETURNING id`` of a job row per job, the least a
single enqueue needs. Prints ``elapsed <seconds>`` when all jobs are done.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Tables the harness creates before the run (see benchmarks._ceiling).
JOBS_TABLE = "ceiling_jobs"
WRITES_TABLE = "ceiling_writes"

_INSERT = f"INSERT INTO {WRITES_TABLE} (i) VALUES ({{p}})"
_ENQUEUE = f"INSERT INTO {JOBS_TABLE} (id, status) VALUES ({{p}}, 'pending') RETURNING id"
_UPDATE = (
    f"UPDATE {JOBS_TABLE} SET status = 'succeeded', completed_at = clock_timestamp() "
    "WHERE id = {p} AND status = 'running'"
)

Job = Callable[[int], Awaitable[None]]


async def _psycopg(
    dsn: str, clients: int, workload: str
) -> tuple[list[Job], Callable[[], Awaitable[None]]]:
    import psycopg

    conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(clients)]
    insert, update = _INSERT.format(p="%s"), _UPDATE.format(p="%s")
    enqueue = _ENQUEUE.format(p="%s")

    def job(conn: psycopg.AsyncConnection[Any]) -> Job:
        async def run(i: int) -> None:
            async with conn.transaction():
                await conn.execute(insert, [i])
                await conn.execute(update, [i])

        async def enqueue_one(i: int) -> None:
            cur = await conn.execute(enqueue, [i])
            await cur.fetchone()

        return enqueue_one if workload == "enqueue" else run

    async def close() -> None:
        for conn in conns:
            await conn.close()

    return [job(c) for c in conns], close


async def _asyncpg(
    dsn: str, clients: int, workload: str
) -> tuple[list[Job], Callable[[], Awaitable[None]]]:
    import asyncpg

    conns = [await asyncpg.connect(dsn) for _ in range(clients)]
    insert, update = _INSERT.format(p="$1"), _UPDATE.format(p="$1")
    enqueue = _ENQUEUE.format(p="$1")

    def job(conn: Any) -> Job:
        async def run(i: int) -> None:
            async with conn.transaction():
                await conn.execute(insert, i)
                await conn.execute(update, i)

        async def enqueue_one(i: int) -> None:
            await conn.fetchval(enqueue, i)

        return enqueue_one if workload == "enqueue" else run

    async def close() -> None:
        for conn in conns:
            await conn.close()

    return [job(c) for c in conns], close


DRIVERS = {"psycopg": _psycopg, "asyncpg": _asyncpg}
WORKLOADS = ("tx", "enqueue")


async def _main(driver: str, dsn: str, clients: int, jobs: int, workload: str) -> float:
    runners, close = await DRIVERS[driver](dsn, clients, workload)
    todo = list(range(jobs, 0, -1))  # popped from the end: job 1 first

    async def loop(run: Job) -> None:
        while todo:
            await run(todo.pop())

    try:
        started = time.monotonic()
        await asyncio.gather(*(loop(run) for run in runners))
        return time.monotonic() - started
    finally:
        await close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the jobs and print ``elapsed <seconds>``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.ceiling_proc")
    p.add_argument("--driver", choices=sorted(DRIVERS), required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--workload", choices=WORKLOADS, default="tx")
    ns = p.parse_args(argv)
    elapsed = asyncio.run(_main(ns.driver, ns.dsn, ns.clients, ns.jobs, ns.workload))
    print(f"elapsed {elapsed:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
