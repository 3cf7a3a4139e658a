"""procrastinate (psycopg connector) as a benchmarked system.

Finished jobs stay in ``procrastinate_jobs`` (``delete_jobs`` defaults to never);
"exactly once" is status ``succeeded`` with ``attempts = 1`` for every job.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from benchmarks._system import KIND, Client, DrainConfig, Hooks, WorkerArgs, WorkerRunner


def _app(conninfo: str, hooks: Hooks | None, pool_size: int = 4) -> tuple[Any, Any]:
    import procrastinate

    connector = procrastinate.PsycopgConnector(
        conninfo=conninfo, min_size=1, max_size=max(4, pool_size)
    )
    app = procrastinate.App(connector=connector)

    @app.task(name=KIND)
    async def noop(i: int) -> None:
        if hooks is not None:
            hooks.started(i)

    return app, noop


class _ProcClient:
    label = "procrastinate"
    unfinished_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"

    def __init__(self, app: Any, task: Any) -> None:
        self._app = app
        self._task = task

    async def enqueue_single(self, number: int) -> None:
        await self._task.defer_async(i=number)

    async def enqueue_scheduled(self, number: int, delay: float) -> None:
        await self._task.configure(schedule_in={"seconds": delay}).defer_async(i=number)

    async def lateness_ms(self) -> list[float] | None:
        return None  # the harness's clock measures

    async def enqueue_bulk(self, numbers: range) -> None:
        await self._task.batch_defer_async(*({"i": i} for i in numbers))

    async def verify(self, n: int, *, transactional: bool) -> str | None:
        pool = self._app.connector.pool
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1)"
                " FROM procrastinate_jobs"
            )
            total, once = await cur.fetchone()
        if total != n or once != n:
            return f"{once} of {total} jobs succeeded exactly once (expected {n})"
        return None

    async def close(self) -> None:
        await self._app.close_async()


class _ProcWorker:
    def __init__(self, app: Any, args: WorkerArgs) -> None:
        self._app = app
        self._args = args
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        self._task = asyncio.ensure_future(
            self._app.run_worker_async(
                concurrency=self._args.concurrency or 1,
                wait=True,
                install_signal_handlers=False,
            )
        )
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def close(self) -> None:
        await self._app.close_async()


class ProcrastinateSystem:
    """procrastinate, when installed."""

    name = "procrastinate"
    drain_configs: tuple[DrainConfig, ...] = (
        DrainConfig("concurrency 4", 4),
        DrainConfig("concurrency 16", 16),
    )
    backlog_config = DrainConfig("concurrency 16", 16)

    async def install(self, conninfo: str, schema: str) -> Client:
        app, task = _app(conninfo, None)
        await app.open_async()
        await app.schema_manager.apply_schema_async()
        return _ProcClient(app, task)

    async def open_worker(self, args: WorkerArgs, hooks: Hooks) -> WorkerRunner:
        # A connection per slot plus the listener, so the pool never limits the slots.
        app, _ = _app(args.conninfo, hooks, pool_size=args.concurrency + 2)
        await app.open_async()
        return _ProcWorker(app, args)
