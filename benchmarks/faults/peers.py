"""``--competitors``: the fault suite's scenarios run on other PostgreSQL job queues, when
installed — pgqueuer and procrastinate — with the same harness, load, faults and ledger.

Each peer's worker process (``python -m benchmarks.faults.peers --system NAME ...``, the
harness passes the options of :mod:`benchmarks.faults.worker`) runs a processor of the
plain kind: it writes the ``S`` and ``F`` ledger lines and its effect on an autocommit
connection of its own (neither peer commits a processor's writes with the job's
completion, so "effects twice" does not apply: a repeated effect is reported as the
at-least-once case). The effect's write is retried until the database answers, so that
a peer's retry policy does not turn an outage into a failed job. The poison kind writes
its ``S`` line and kills its process. Settings are the peers' documented ones, scaled to
the suite's lease (:data:`~Load.lease`, 4 s):

- pgqueuer: ``QueueManager.run(batch_size=prefetch, max_concurrent_tasks=...,
  heartbeat_timeout=lease)`` (a picked job whose heartbeat is older is picked again),
  on one asyncpg connection, as its documentation sets it up;
- procrastinate: ``run_worker_async(concurrency=..., update_heartbeat_interval=lease/4,
  stalled_worker_timeout=lease)`` and its documented stalled-job recipe
  (``job_manager.get_stalled_jobs`` then ``retry_job``) run every ``lease/4`` seconds in
  each worker process: procrastinate does not recover a dead worker's jobs by itself.

Neither caps the runs of a job whose worker died (pgqueuer picks it again after the
heartbeat timeout, the recipe retries it), so the poison job is left as they leave it.
Behind PgBouncer (``--listen-dsn`` given: transaction pooling) each peer gets its
driver's documented setting for it — asyncpg's ``statement_cache_size=0``, psycopg's
``prepare_threshold=None`` — and nothing else: neither can LISTEN on another DSN than its
queue's, so their wakeups go through the pooler (see :data:`CAVEATS`). Through a
multi-host DSN (the failover scenarios) both drivers follow
``target_session_attrs=read-write``; their workers write no ``A`` line (a completion
the database acknowledged), so the check sees no completion of theirs undone.

The final rows: pgqueuer deletes a finished job from its queue (``pgqueuer``) and logs
its outcome (``pgqueuer_log``: ``successful`` is success); procrastinate keeps it in
``procrastinate_jobs`` (``todo``/``doing`` are not final).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib.util
import json
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

import psycopg

from benchmarks.faults import producer
from benchmarks.faults.ledger import LedgerFile, Row
from benchmarks.faults.worker import EFFECT, PLAIN, POISON, Autocommit, parser, poison

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from benchmarks.faults.harness import Harness, Load
    from benchmarks.faults.ledger import Ledger

#: The scenarios the peers run (their faults need nothing of skiplock's).
SCENARIOS = (
    "kill-storm", "pg-restart", "freeze", "pg-hang", "cut-off", "poison",
    "pgbouncer-restart", "failover-sync", "failover-async",
)  # fmt: skip
#: Why the other scenarios do not apply to a peer.
NOT_APPLICABLE = {
    "listener-kill": "measures skiplock's notifier (its pickup latency after a reconnect)",
    "clock-skew": "patches skiplock's clock; its delayed and retried jobs use skiplock's API",
    "rolling-deploy": "upgrades skiplock's own schema between two of its versions",
}
#: What the peers cannot express in a scenario they run, said once next to their figures.
CAVEATS = {
    "poison": "no attempt cap applies to a job whose worker died (pgqueuer picks it again "
    "after its heartbeat timeout; procrastinate's stalled-job recipe retries it), so the "
    "poison job runs until the deadline",
    "pgbouncer-restart": "neither can LISTEN on another DSN than its queue's (skiplock's "
    "listen_dsn): their LISTEN goes through transaction pooling, where notifications are "
    "lost, and they find jobs by polling (0.5 s); each gets its driver's PgBouncer setting "
    "only (asyncpg statement_cache_size=0, psycopg prepare_threshold=None)",
    "failover-sync": "their workers write no acknowledgement (`A`) line of a completion, so "
    "the check cannot see one undone (which a synchronous standby must never cause): its "
    "job's next run, if any, counts as a re-run the failover explains",
    "failover-async": "their workers write no acknowledgement (`A`) line of a completion, "
    "so one the asynchronous window undid is not counted as undone: its job's next run, if "
    'any, counts as a re-run the failover explains ("failover"), not as "async window"',
}
PAYLOAD = {"ms": 100.0}


def installed() -> list[str]:
    """The peers importable here."""
    return [name for name in ("pgqueuer", "procrastinate") if importlib.util.find_spec(name)]


# ---- the harness's side: schema, enqueue, final rows --------------------------------------


async def _pgq_queries(dsn: str, *, bounced: bool = False) -> tuple[Any, Any]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    # Behind PgBouncer's transaction pooling: asyncpg's documented setting.
    conn = await asyncpg.connect(dsn, **({"statement_cache_size": 0} if bounced else {}))
    return conn, Queries(AsyncpgDriver(conn))


def _procrastinate_app(dsn: str, size: int = 4, *, bounced: bool = False) -> Any:
    import procrastinate

    # Behind PgBouncer's transaction pooling: psycopg's documented setting.
    kwargs: dict[str, Any] = {"kwargs": {"prepare_threshold": None}} if bounced else {}
    connector = procrastinate.PsycopgConnector(conninfo=dsn, min_size=1, max_size=size, **kwargs)
    return procrastinate.App(connector=connector)


async def install(system: str, dsn: str) -> None:
    """Create the peer's tables."""
    if system == "pgqueuer":
        conn, queries = await _pgq_queries(dsn)
        try:
            await queries.install()
        finally:
            await conn.close()
    else:
        app = _procrastinate_app(dsn)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()


class Producer(producer.Producer):
    """The harness's producer for a peer: the load's rate of plain jobs through the peer's
    own API (see :mod:`benchmarks.faults.producer`), on a connection opened again after
    a failure."""

    def __init__(
        self, system: str, dsn: str, load: Load, ledger: Ledger, extra: list[str], *, bounced: bool
    ) -> None:
        super().__init__(f"faults-producer-{system}", load.rate, ledger, extra)
        self._system, self._dsn, self._bounced = system, dsn, bounced
        self._loop: asyncio.AbstractEventLoop | None = None
        self._enqueue: Callable[[list[str]], Any] | None = None
        self._close: Callable[[], Any] | None = None

    async def _enqueuer(self) -> tuple[Callable[[list[str]], Any], Callable[[], Any]]:
        """Enqueue jobs of the given kinds (their ids, in order), and close."""
        if self._system == "pgqueuer":
            conn, queries = await _pgq_queries(self._dsn, bounced=self._bounced)
            body = json.dumps(PAYLOAD).encode()

            async def pgq(kinds: list[str]) -> list[int]:
                # One statement per kind: the ids come back in the order of ``kinds``
                # (extra kinds first).
                ids = []
                for kind in dict.fromkeys(kinds):
                    n = kinds.count(kind)
                    ids += [int(i) for i in await queries.enqueue([kind] * n, [body] * n, [0] * n)]
                return ids

            return pgq, conn.close
        app = _procrastinate_app(self._dsn, 1, bounced=self._bounced)
        await app.open_async()
        tasks = {kind: app.task(name=kind)(_never) for kind in (PLAIN, POISON)}

        async def proc(kinds: list[str]) -> list[int]:
            ids = [int(await tasks[k].defer_async(**PAYLOAD)) for k in kinds if k != PLAIN]
            plain = kinds.count(PLAIN)
            batch = await tasks[PLAIN].batch_defer_async(*([PAYLOAD] * plain)) if plain else []
            return ids + [int(i) for i in batch]

        return proc, app.close_async

    async def _closed(self) -> None:
        if self._close is not None:
            with contextlib.suppress(Exception):
                await self._close()
        self._enqueue = self._close = None

    async def _ids(self, kinds: list[str]) -> list[int]:
        try:
            if self._enqueue is None:
                self._enqueue, self._close = await self._enqueuer()
            return list(await self._enqueue(kinds))
        except Exception:  # the database is down: a new connection, next time
            await self._closed()
            raise

    def enqueue(self, extra: list[str], numbers: range) -> list[tuple[int, str]]:
        assert self._loop is not None
        kinds = extra + [PLAIN] * len(numbers)
        ids = self._loop.run_until_complete(self._ids(kinds))
        return list(zip(ids, kinds, strict=True))

    def run(self) -> None:
        self._loop = loop = asyncio.new_event_loop()  # this thread's, for the peer's driver
        asyncio.set_event_loop(loop)
        try:
            self.produce()
        finally:
            loop.run_until_complete(self._closed())
            loop.close()


async def _never(ms: float) -> None:
    """The producer's side of a procrastinate task (it only defers)."""


_PGQ_ROWS = """
SELECT id, entrypoint, status::text FROM pgqueuer
UNION ALL
SELECT job_id, max(entrypoint),
       CASE WHEN bool_or(status::text = 'successful') THEN 'succeeded' ELSE 'failed' END
FROM pgqueuer_log WHERE status::text IN ('successful', 'exception', 'canceled', 'deleted')
  AND job_id NOT IN (SELECT id FROM pgqueuer)
GROUP BY job_id
"""
_PROC_ROWS = "SELECT id, task_name, status::text, attempts FROM procrastinate_jobs"
_FINAL = {"todo": "pending", "doing": "running"}


def rows(system: str, h: Harness) -> list[Row]:
    """The peer's final rows, as the ledger's (its statuses mapped to final or not)."""
    if system == "pgqueuer":
        return [Row(int(i), k, _FINAL.get(s, s), 0) for i, k, s in h.sql(_PGQ_ROWS)]
    return [Row(int(i), k, _FINAL.get(s, s), int(a)) for i, k, s, a in h.sql(_PROC_ROWS)]


def open_jobs(system: str, h: Harness, ids: list[int]) -> int:
    """How many of ``ids`` are not finished yet."""
    if system == "pgqueuer":
        query = "SELECT count(*) FROM pgqueuer WHERE id = ANY(%s)"
    else:
        query = (
            "SELECT count(*) FROM procrastinate_jobs WHERE id = ANY(%s) "
            "AND status IN ('todo', 'doing')"
        )
    return int(h.sql(query, ids)[0][0])


# ---- the worker process -----------------------------------------------------------------


async def _effect(side: Autocommit, params: tuple[Any, ...]) -> None:
    """The effect, retried until the database answers (see the module)."""
    end = time.monotonic() + 120
    while True:
        try:
            await side.execute(EFFECT, params)
            return
        except psycopg.OperationalError:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.2)


async def _pgqueuer(ns: argparse.Namespace, ledger: LedgerFile, stop: asyncio.Event) -> None:
    from pgqueuer.qm import QueueManager

    bounced = bool(ns.listen_dsn)
    conn, queries = await _pgq_queries(ns.dsn, bounced=bounced)
    qm = QueueManager(queries)
    side, pid = Autocommit(ns.dsn, bounced=bounced), os.getpid()

    # Typed where pgqueuer is installed with its hints; untyped elsewhere (CI's type env).
    @qm.entrypoint(PLAIN)  # type: ignore[untyped-decorator,unused-ignore]
    async def plain(job: Any) -> None:
        ledger.write("S", job.id, job.attempts, pid, time.monotonic())
        await asyncio.sleep(json.loads(job.payload)["ms"] / 1000)
        await _effect(side, (job.id, job.attempts, pid, False))
        ledger.write("F", job.id, job.attempts, pid, time.monotonic())

    @qm.entrypoint(POISON)  # type: ignore[untyped-decorator,unused-ignore]
    async def poisoned(job: Any) -> None:
        poison(ledger, job.id, job.attempts, pid)

    stop_task = asyncio.ensure_future(stop.wait())
    stop_task.add_done_callback(lambda _: qm.shutdown.set())
    ledger.write("R", pid, time.monotonic())
    batch = ns.prefetch
    await qm.run(
        batch_size=batch,
        max_concurrent_tasks=max(ns.concurrency, 2 * batch),
        dequeue_timeout=dt.timedelta(seconds=ns.poll),
        heartbeat_timeout=dt.timedelta(seconds=ns.lease),
    )
    await conn.close()


async def _procrastinate(ns: argparse.Namespace, ledger: LedgerFile, stop: asyncio.Event) -> None:
    bounced = bool(ns.listen_dsn)
    app = _procrastinate_app(ns.dsn, ns.concurrency + 2, bounced=bounced)
    side, pid = Autocommit(ns.dsn, bounced=bounced), os.getpid()

    @app.task(name=PLAIN, pass_context=True)  # type: ignore[untyped-decorator]
    async def plain(context: Any, ms: float) -> None:
        job = context.job
        ledger.write("S", job.id, job.attempts, pid, time.monotonic())
        await asyncio.sleep(ms / 1000)
        await _effect(side, (job.id, job.attempts, pid, False))
        ledger.write("F", job.id, job.attempts, pid, time.monotonic())

    @app.task(name=POISON, pass_context=True)  # type: ignore[untyped-decorator]
    async def poisoned(context: Any, ms: float) -> None:
        poison(ledger, context.job.id, context.job.attempts, pid)

    async def retry_stalled() -> None:
        # procrastinate's documented recipe (a periodic task there; a loop here, so
        # that it runs every lease/4 seconds rather than once a minute).
        while True:
            await asyncio.sleep(ns.lease / 4)
            with contextlib.suppress(Exception):
                stalled = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=ns.lease)
                for job in stalled:
                    await app.job_manager.retry_job(job)

    async with app.open_async():
        worker = asyncio.ensure_future(
            app.run_worker_async(
                concurrency=ns.concurrency,
                wait=True,
                install_signal_handlers=False,
                fetch_job_polling_interval=ns.poll,
                update_heartbeat_interval=ns.lease / 4,
                stalled_worker_timeout=ns.lease,
            )
        )
        recovery = asyncio.ensure_future(retry_stalled())
        ledger.write("R", pid, time.monotonic())
        stopper = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait([worker, stopper], return_when=asyncio.FIRST_COMPLETED)
        recovery.cancel()
        if worker in done:  # it ended by itself: what ended it ends the process
            await worker
            raise RuntimeError("the procrastinate worker stopped by itself")
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker


async def _main(ns: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    run = _pgqueuer if ns.system == "pgqueuer" else _procrastinate
    await run(ns, LedgerFile(ns.ledger), stop)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one peer worker until SIGTERM."""
    p = parser()
    p.prog = "python -m benchmarks.faults.peers"
    p.add_argument("--system", choices=("pgqueuer", "procrastinate"), required=True)
    return asyncio.run(_main(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
