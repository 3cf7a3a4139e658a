"""pgqueuer (asyncpg driver, its documented setup) as a benchmarked system.

pgqueuer deletes a finished job from its queue table and logs the outcome in
``pgqueuer_log``; "exactly once" is checked there: one ``successful`` entry per job.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from benchmarks import _pg
from benchmarks._system import KIND, Client, DrainConfig, Hooks, WorkerArgs, WorkerRunner

if TYPE_CHECKING:
    from pgqueuer.models import Job


class _PgqClient:
    label = "pgqueuer"
    unfinished_sql = "SELECT count(*) FROM pgqueuer"

    def __init__(self, conn: Any, queries: Any) -> None:
        self._conn = conn
        self._queries = queries

    async def enqueue_single(self, number: int) -> None:
        # An asyncpg connection outside a transaction: each statement commits by itself.
        await self._queries.enqueue(KIND, str(number).encode())

    async def enqueue_scheduled(self, number: int, delay: float) -> None:
        await self._queries.enqueue(
            KIND, str(number).encode(), execute_after=timedelta(seconds=delay)
        )

    async def lateness_ms(self) -> list[float] | None:
        return None  # a finished job leaves the queue table; the harness's clock measures

    async def enqueue_bulk(self, numbers: range) -> None:
        n = len(numbers)
        await self._queries.enqueue([KIND] * n, [str(i).encode() for i in numbers], [0] * n)

    async def verify(self, n: int, *, transactional: bool) -> str | None:
        left = await self._conn.fetchval("SELECT count(*) FROM pgqueuer")
        row = await self._conn.fetchrow(
            "SELECT count(*) AS done, count(DISTINCT job_id) AS jobs FROM pgqueuer_log"
            " WHERE status = 'successful'"
        )
        if left != 0 or row["done"] != n or row["jobs"] != n:
            return f"{left} left in queue, {row['done']} successes for {row['jobs']} of {n} jobs"
        return None

    async def close(self) -> None:
        await self._conn.close()


class _PgqWorker:
    def __init__(self, conn: Any, qm: Any, args: WorkerArgs) -> None:
        self._conn = conn
        self._qm = qm
        self._args = args

    async def run(self) -> None:
        batch = self._args.batch_size or 10
        # max_concurrent_tasks must be at least twice the batch size; 0 means unlimited.
        limit = max(self._args.concurrency, 2 * batch) if self._args.concurrency else None
        await self._qm.run(batch_size=batch, max_concurrent_tasks=limit)

    def stop(self) -> None:
        self._qm.shutdown.set()

    async def close(self) -> None:
        await self._conn.close()


class PgqueuerSystem:
    """pgqueuer, when installed."""

    name = "pgqueuer"
    drain_configs: tuple[DrainConfig, ...] = (
        DrainConfig("batch 10, unlimited tasks (default)", 0, 10),
        DrainConfig("batch 2, 4 tasks", 4, 2),
        DrainConfig("batch 8, 16 tasks", 16, 8),
        DrainConfig("batch 50, unlimited tasks", 0, 50),
        DrainConfig("batch 200, unlimited tasks", 0, 200),
    )
    backlog_config = DrainConfig("batch 200, unlimited tasks", 0, 200)

    async def install(self, conninfo: str, schema: str) -> Client:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(_pg.to_uri(conninfo))
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        return _PgqClient(conn, queries)

    async def open_worker(self, args: WorkerArgs, hooks: Hooks) -> WorkerRunner:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(_pg.to_uri(args.conninfo))
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint(KIND)
        async def noop(job: Job) -> None:
            hooks.started(int(job.payload or b"0"))

        return _PgqWorker(conn, qm, args)
