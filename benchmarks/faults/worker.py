"""A worker process of the fault suite: ``python -m benchmarks.faults.worker --dsn ...``.

One skiplock worker with the suite's processors. Each appends to the ledger file
(:class:`~benchmarks.faults.ledger.LedgerFile`: one ``O_APPEND`` write per line, so lines
of processes never interleave, and it works while the database is down) when it starts
and when it returns, and writes its side effect to
``faults.effects``: through ``ctx.connection`` for the transactional kind (the effect
commits with the job's completion, or not at all), through an autocommit connection of
its own for the plain kind (the effect commits at once, whatever becomes of the job).

Ledger lines (times are ``time.monotonic()``: one clock for every process of the
machine): ``R <pid> <t>`` ready, ``S <job> <attempt> <pid> <t>`` started, ``F <job>
<attempt> <pid> <t>`` returned, ``A <job> <attempt> <pid> <t>`` its success acknowledged
by the database (the completion's statement returned, or for a transactional job the
commit of its transaction; :class:`~benchmarks.faults.ledger.Acknowledging`): a job run
again after that had a completion undone.

``FAULTS_SKEW=<seconds>`` sets the process's wall clock wrong by that much (see
:func:`skew_clock`); the worker then writes ``C <pid> <skew>``, the skew its skiplock clock
shows. skiplock's time decisions (due times, leases, retries) use the database's
``now()``, so the process keeps every promise.

``FAULTS_BROKEN=outside`` breaks the build on purpose (the suite's own test that it can
fail): the transactional kind writes its effect outside the job's transaction, as its
run begins, so an attempt whose completion is refused keeps its effect.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import signal
import sys
import time
from typing import Any

import psycopg

from benchmarks.faults.ledger import Acknowledging, LedgerFile
from skiplock import AsyncEngine, JobContext, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.ports import SystemClock

#: The kinds: effect in the job's transaction; effect in autocommit; kills its process.
TX, PLAIN, POISON = "faults.tx", "faults.plain", "faults.poison"
#: A transactional kind whose first attempt fails; its retry is due ``FLAKY_BACKOFF``
#: seconds later (by the database's clock).
FLAKY = "faults.flaky"
FLAKY_BACKOFF = 2.0
#: Attempts allowed: an outage may fail a plain job's effect a few times (each a retry).
MAX_ATTEMPTS = 50
EFFECT = "INSERT INTO faults.effects (job_id, attempt, pid, tx) VALUES (%s, %s, %s, %s)"


def poison(ledger: LedgerFile, job: int, attempt: int, pid: int) -> None:
    """The poison kind's processor: its start line, then its process killed (SIGKILL).
    skiplock's worker and the peers' (benchmarks/faults/peers.py) run it."""
    ledger.write("S", job, attempt, pid, time.monotonic())
    os.kill(pid, signal.SIGKILL)


class Autocommit:
    """One autocommit connection, reopened after a failure."""

    def __init__(self, dsn: str, *, bounced: bool = False) -> None:
        self._dsn = dsn
        # Through PgBouncer's transaction pooling a statement psycopg prepared on one
        # server connection is unknown on the next: never prepare.
        self._prepare: dict[str, Any] = {"prepare_threshold": None} if bounced else {}
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()

    async def execute(self, query: str, params: tuple[Any, ...]) -> None:
        """Run ``query``; a connection opened before a restart fails on first use, so a
        failure on an old connection is retried once on a new one (as an application's
        pool would check it out)."""
        async with self._lock:
            fresh = self._conn is None
            try:
                await self._execute(query, params)
            except psycopg.OperationalError:
                if fresh:
                    raise
                await self._execute(query, params)

    async def _execute(self, query: str, params: tuple[Any, ...]) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, connect_timeout=3, **self._prepare
                )
            await self._conn.execute(query.encode(), params)  # bytes: not a literal
        except BaseException:
            if self._conn is not None:
                await self._conn.close()
            self._conn = None
            raise


class LedgerStore(Acknowledging, AsyncPsycopgJobStore):
    """The suite's store: psycopg's, acknowledging (see :class:`Acknowledging`)."""


_REAL = dt.datetime


class _Wall(type):
    # A real datetime (from the database, from another module) is still an instance of
    # the skewed class, so isinstance checks in the patched modules hold.
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _REAL)


def skew_clock(seconds: float) -> None:
    """Set this process's wall clock ``seconds`` wrong: ``time.time()`` and
    ``datetime.now()``/``utcnow()`` (the class in the ``datetime`` module and every name
    a loaded module bound to it: skiplock's system clock). ``time.monotonic()`` stays
    right (the ledger's clock, shared by every process)."""
    shift = dt.timedelta(seconds=seconds)
    real_time = time.time

    class Skewed(_REAL, metaclass=_Wall):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Skewed:
            return super().now(tz) + shift

        @classmethod
        def utcnow(cls) -> Skewed:
            return super().now(dt.UTC).replace(tzinfo=None) + shift

    time.time = lambda: real_time() + seconds
    for module in list(sys.modules.values()):
        if getattr(module, "datetime", None) is _REAL:
            vars(module)["datetime"] = Skewed


def settings(ns: argparse.Namespace) -> Settings:
    """The worker's settings: a short lease (``stale_ttl``) so that faults resolve in
    seconds, with the heartbeat and maintenance scaled to it."""
    return Settings(
        concurrency=ns.concurrency,
        prefetch=ns.prefetch,
        poll_interval=ns.poll,
        heartbeat_interval=ns.lease / 4,
        stale_ttl=ns.lease,
        maintenance_interval=ns.lease / 4,
        shutdown_timeout=5.0,
        backoff_base=0.1,
    )


def build(ns: argparse.Namespace) -> tuple[AsyncEngine, AsyncPsycopgJobStore]:
    """The engine with the suite's processors."""
    ledger = LedgerFile(ns.ledger)
    # Through PgBouncer (``--listen-dsn``: the server itself, for LISTEN): its mode.
    bounced = {"pgbouncer": True, "listen_dsn": ns.listen_dsn} if ns.listen_dsn else {}
    store = LedgerStore(ns.dsn, max_size=ns.concurrency + 4, connect_timeout=3, **bounced)
    store.keep(ledger)
    engine = AsyncEngine(store, settings(ns))
    side = Autocommit(ns.dsn, bounced=bool(ns.listen_dsn))
    broken = os.environ.get("FAULTS_BROKEN") == "outside"
    pid = os.getpid()

    @engine.processor(TX, transactional=True, max_attempts=MAX_ATTEMPTS)
    async def tx(payload: dict[str, Any], ctx: JobContext) -> None:
        ledger.write("S", ctx.job_id, ctx.attempt, pid, time.monotonic())
        effect = (ctx.job_id, ctx.attempt, pid, True)
        if broken:
            # Committed at once, outside the job's transaction: a run frozen in the sleep
            # below has its effect in already, whatever the resumed worker does next, so
            # the re-run elsewhere makes it twice on every schedule.
            await side.execute(EFFECT, effect)
        await asyncio.sleep(payload["ms"] / 1000)
        if not broken:
            await ctx.connection.execute(EFFECT, effect)
        ledger.write("F", ctx.job_id, ctx.attempt, pid, time.monotonic())

    @engine.processor(PLAIN, max_attempts=MAX_ATTEMPTS)
    async def plain(payload: dict[str, Any], ctx: JobContext) -> None:
        ledger.write("S", ctx.job_id, ctx.attempt, pid, time.monotonic())
        await asyncio.sleep(payload["ms"] / 1000)
        await side.execute(EFFECT, (ctx.job_id, ctx.attempt, pid, False))
        ledger.write("F", ctx.job_id, ctx.attempt, pid, time.monotonic())

    @engine.processor(FLAKY, transactional=True, max_attempts=MAX_ATTEMPTS,
                      backoff_base=FLAKY_BACKOFF, backoff_factor=1.0)  # fmt: skip
    async def flaky(payload: dict[str, Any], ctx: JobContext) -> None:
        ledger.write("S", ctx.job_id, ctx.attempt, pid, time.monotonic())
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails on purpose")
        await ctx.connection.execute(EFFECT, (ctx.job_id, ctx.attempt, pid, True))
        ledger.write("F", ctx.job_id, ctx.attempt, pid, time.monotonic())

    @engine.processor(POISON, max_attempts=3)
    async def poisoned(payload: dict[str, Any], ctx: JobContext) -> None:
        poison(ledger, ctx.job_id, ctx.attempt, pid)

    return engine, store


async def _main(ns: argparse.Namespace) -> int:
    skew = float(os.environ.get("FAULTS_SKEW", "0"))
    if skew:
        real = time.time()
        skew_clock(skew)
        seen = SystemClock().now().timestamp() - real
        LedgerFile(ns.ledger).write("C", os.getpid(), f"{seen:.0f}")
    engine, store = build(ns)
    worker = engine.worker(install_signal_handlers=False)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    loop.add_signal_handler(signal.SIGINT, worker.stop)
    LedgerFile(ns.ledger).write("R", os.getpid(), time.monotonic())
    try:
        await worker.run()
    finally:
        await store.close()
    return 0


def parser() -> argparse.ArgumentParser:
    """The worker's options (the harness passes every one)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.faults.worker")
    p.add_argument("--dsn", required=True)
    p.add_argument("--ledger", required=True)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--lease", type=float, default=4.0, help="stale_ttl, seconds")
    p.add_argument("--poll", type=float, default=0.5, help="poll_interval, seconds")
    p.add_argument("--listen-dsn", help="--dsn is a PgBouncer in transaction pooling; LISTEN here")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one worker until SIGTERM."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return asyncio.run(_main(parser().parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
