"""``python -m benchmarks.soak``: steady load for a long time, reported minute by minute.

A worker process (:mod:`benchmarks.soak_worker`, processors that sleep a few ms) serves
a fresh database while the harness enqueues at a steady rate (by default half the drain
rate it measured first, in the same database), with retention on and a short window and
autovacuum on its default settings. Each report window gives the jobs finished in it
(throughput), their pickup latency (``started_at - available_at``, both on the database
clock), the jobs table's and its indexes' size, dead tuples, autovacuum runs, and the
backlog. At the end: whether every job enqueued finished exactly once, and the targets
(throughput of the last 5 windows within 10 % of the first 5, their pickup p99 within
2x, the table's size on a plateau).

The harness reads every figure from PostgreSQL through psycopg, never through skiplock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from benchmarks import _pg
from benchmarks._procs import ROOT
from benchmarks.adapters import get_adapter
from benchmarks.soak_worker import KIND
from skiplock.engine import AsyncEngine, Enqueue, Settings

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

SCHEMA = "soak"
#: How many report windows the first and the last span of the targets have.
SPAN = 5
#: How often the enqueuer tops up to the steady rate.
TICK = 0.02


@dataclasses.dataclass(frozen=True)
class SoakPlan:
    """What one soak run does."""

    minutes: float = 30.0
    #: Seconds per report row.
    window: float = 60.0
    #: Jobs per second to enqueue; None: ``fraction`` of the drain rate measured first.
    rate: float | None = None
    fraction: float = 0.5
    #: Jobs of the calibration drain (when ``rate`` is None).
    calibrate_jobs: int = 20_000
    concurrency: int = 16
    sleep_ms: float = 3.0
    #: Seconds a succeeded job is kept (the worker's ``retention``).
    retention: float = 300.0
    #: Seconds between maintenance runs (the worker's ``maintenance_interval``).
    maintenance: float = 30.0
    adapter: str = "psycopg"

    def worker_env(self) -> dict[str, str]:
        """The settings of the worker process, as ``SKIPLOCK_*`` variables."""
        return {
            "SKIPLOCK_RETENTION": f"{self.retention:g}s",
            "SKIPLOCK_MAINTENANCE_INTERVAL": f"{self.maintenance:g}s",
        }


@dataclasses.dataclass(frozen=True)
class Window:
    """One report row: what happened between ``start`` and ``end`` (database clock)."""

    index: int
    start: dt.datetime
    end: dt.datetime
    enqueued: int
    finished: int
    pickup_p50_ms: float | None
    pickup_p99_ms: float | None
    table_bytes: int
    index_bytes: int
    rows: int
    dead_tuples: int
    autovacuums: int
    backlog: int

    @property
    def throughput(self) -> float:
        """Jobs finished per second."""
        return self.finished / max((self.end - self.start).total_seconds(), 1e-9)


@dataclasses.dataclass(frozen=True)
class SoakResult:
    """A whole run."""

    plan: SoakPlan
    #: The calibration drain's rate (None when the plan gave the rate).
    drain_rate: float | None
    rate: float
    enqueued: int
    #: The windows of the steady phase, then one for the final drain.
    windows: list[Window]
    #: Jobs that ended other than succeeded (dead, failed, cancelled) or never finished.
    unfinished: int
    failed: int

    @property
    def steady(self) -> list[Window]:
        """The windows of the steady phase (the final drain's left out)."""
        return self.windows[:-1]

    @property
    def finished(self) -> int:
        """Jobs that succeeded during the run (counted window by window)."""
        return sum(w.finished for w in self.windows)

    def targets(self) -> list[tuple[str, bool | None, str]]:
        """(target, met or None when the run is too short to tell, the figures)."""
        out: list[tuple[str, bool | None, str]] = []
        once = self.finished == self.enqueued and self.failed == 0 and self.unfinished == 0
        out.append(
            (
                "every job finished, once",
                once,
                f"{self.finished:,} finished of {self.enqueued:,} enqueued, "
                f"{self.failed} failed, {self.unfinished} unfinished",
            )
        )
        steady = self.steady
        if len(steady) < 2 * SPAN:
            out.append(("throughput and pickup stay flat", None, "fewer than 10 windows"))
        else:
            first, last = steady[:SPAN], steady[-SPAN:]
            t_first = sum(w.throughput for w in first) / SPAN
            t_last = sum(w.throughput for w in last) / SPAN
            out.append(
                (
                    "last 5 windows' throughput within 10 % of the first 5",
                    abs(t_last - t_first) <= 0.10 * t_first,
                    f"{t_first:,.0f} -> {t_last:,.0f} jobs/s ({t_last / t_first:.3f}x)",
                )
            )
            p_first = _mean([w.pickup_p99_ms for w in first])
            p_last = _mean([w.pickup_p99_ms for w in last])
            if p_first is None or p_last is None:
                out.append(("pickup p99 within 2x", None, "no pickups measured"))
            else:
                out.append(
                    (
                        "last 5 windows' pickup p99 within 2x of the first 5",
                        p_last <= 2 * p_first,
                        f"{p_first:.1f} -> {p_last:.1f} ms (mean of the windows' p99)",
                    )
                )
        if len(steady) >= 3:
            third = steady[len(steady) * 2 // 3]
            grew = steady[-1].table_bytes / max(third.table_bytes, 1)
            out.append(
                (
                    "table size on a plateau (last third grows < 10 %)",
                    grew < 1.10,
                    f"{_mib(third.table_bytes)} at window {third.index} -> "
                    f"{_mib(steady[-1].table_bytes)} at window {steady[-1].index}",
                )
            )
        return out

    def markdown(self) -> str:
        """The report: settings, one row per window, the targets."""
        p = self.plan
        lines = [
            f"Soak: {p.minutes:g} min at {self.rate:,.0f} jobs/s"
            + (
                f" ({p.fraction:g} x the measured drain, {self.drain_rate:,.0f} jobs/s)"
                if self.drain_rate is not None
                else ""
            )
            + f"; {p.concurrency} slots, processors sleep {p.sleep_ms:g} ms, retention "
            f"{p.retention:g} s, maintenance every {p.maintenance:g} s, adapter {p.adapter}, "
            "autovacuum on its defaults.",
            "",
            "| window | enqueued | finished | jobs/s | pickup p50 ms | pickup p99 ms | "
            "table | indexes | rows | dead tuples | autovacuums | backlog |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for w in self.windows:
            lines.append(
                f"| {w.index} | {w.enqueued:,} | {w.finished:,} | {w.throughput:,.0f} | "
                f"{_ms(w.pickup_p50_ms)} | {_ms(w.pickup_p99_ms)} | {_mib(w.table_bytes)} | "
                f"{_mib(w.index_bytes)} | {w.rows:,} | {w.dead_tuples:,} | {w.autovacuums} | "
                f"{w.backlog:,} |"
            )
        lines += ["", "| target | met | figures |", "| --- | --- | --- |"]
        for name, met, figures in self.targets():
            verdict = "n/a" if met is None else ("yes" if met else "**no**")
            lines.append(f"| {name} | {verdict} | {figures} |")
        return "\n".join(lines) + "\n"


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


_WINDOW_SQL = """
SELECT count(*),
    percentile_cont(0.5) WITHIN GROUP (ORDER BY p.ms),
    percentile_cont(0.99) WITHIN GROUP (ORDER BY p.ms)
FROM {jobs} AS j
CROSS JOIN LATERAL (
    SELECT extract(epoch FROM j.started_at - j.available_at) * 1000 AS ms
) AS p
WHERE j.status = 'succeeded' AND j.completed_at >= %s AND j.completed_at < %s
"""

_SIZE_SQL = """
SELECT pg_relation_size(c.oid), pg_indexes_size(c.oid),
    (SELECT count(*) FROM {jobs}), coalesce(s.n_dead_tup, 0), coalesce(s.autovacuum_count, 0),
    (SELECT count(*) FROM {jobs} AS j WHERE j.status = 'pending')
FROM pg_class AS c
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = %s::regclass
"""


class _Observer:
    """The harness's own connection: window figures, sizes, the backlog."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self._jobs = sql.Identifier(SCHEMA, "jobs")
        self._regclass = f'"{SCHEMA}".jobs'

    async def now(self) -> dt.datetime:
        cur = await self._conn.execute("SELECT now()")
        row = await cur.fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    async def unfinished(self) -> int:
        cur = await self._conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE status IN ('pending', 'running')").format(
                self._jobs
            )
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def failed(self) -> int:
        cur = await self._conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {} WHERE status IN ('failed', 'dead', 'cancelled')"
            ).format(self._jobs)
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def window(
        self, index: int, start: dt.datetime, end: dt.datetime, enqueued: int
    ) -> Window:
        cur = await self._conn.execute(sql.SQL(_WINDOW_SQL).format(jobs=self._jobs), [start, end])
        finished, p50, p99 = await cur.fetchone() or (0, None, None)
        cur = await self._conn.execute(sql.SQL(_SIZE_SQL).format(jobs=self._jobs), [self._regclass])
        row = await cur.fetchone()
        assert row is not None
        table, indexes, rows, dead, vacuums, backlog = (int(v) for v in row)
        return Window(
            index, start, end, enqueued, int(finished),
            None if p50 is None else float(p50), None if p99 is None else float(p99),
            table, indexes, rows, dead, vacuums, backlog,
        )  # fmt: skip


class _Enqueuer:
    """Enqueues at a steady rate: every tick, what the rate owes since the start."""

    def __init__(self, engine: AsyncEngine, rate: float) -> None:
        self._engine = engine
        self._rate = rate
        self.sent = 0
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            owed = int((time.monotonic() - started) * self._rate) - self.sent
            if owed > 0:
                first = self.sent
                await self._engine.enqueue_many(
                    [Enqueue(KIND, {"i": i}) for i in range(first, first + owed)]
                )
                self.sent += owed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), TICK)


async def _until(probe: Callable[[], Any], deadline: float, what: str) -> None:
    """Poll ``probe`` (an awaitable factory returning a truthy value when done)."""
    end = time.monotonic() + deadline
    while not await probe():
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not reached within {deadline:g} s")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _worker(conninfo: str, plan: SoakPlan) -> Any:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.soak_worker",
        "--dsn", conninfo, "--schema", SCHEMA, "--adapter", plan.adapter,
        "--concurrency", str(plan.concurrency), "--sleep-ms", str(plan.sleep_ms),
        cwd=str(ROOT), env={**os.environ, **plan.worker_env()},
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"soak worker did not start (exit {await proc.wait()})")
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _log(message: str) -> None:
    print(f"[soak] {message}", file=sys.stderr, flush=True)


async def run(dsn: str, plan: SoakPlan, *, log: Callable[[str], None] = _log) -> SoakResult:
    """One soak run in a fresh database on the server of ``dsn`` (dropped afterwards)."""
    adapter = get_adapter(plan.adapter)
    name = f"{_pg.DB_PREFIX}{_pg.new_run_id()}_soak"
    async with _pg.fresh_database(dsn, name) as conninfo:
        await adapter.apply_schema(conninfo, SCHEMA)
        store = await adapter.open_store(conninfo, SCHEMA, 2)
        engine = AsyncEngine(store, Settings())
        engine.declare_kind(KIND)
        try:
            async with (
                await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn,
                _worker(conninfo, plan),
            ):
                observer = _Observer(conn)
                if plan.rate is not None:
                    return await _soak(plan, plan.rate, None, engine, observer, log)
                drain_rate = await _calibrate(engine, observer, plan.calibrate_jobs)
                log(f"drain rate {drain_rate:,.0f} jobs/s")
                rate = plan.fraction * drain_rate
                return await _soak(plan, rate, drain_rate, engine, observer, log)
        finally:
            await store.close()


async def _calibrate(engine: AsyncEngine, observer: _Observer, n: int) -> float:
    started = time.monotonic()
    for first in range(0, n, 1_000):
        await engine.enqueue_many(
            [Enqueue(KIND, {"i": -i - 1}) for i in range(first, min(first + 1_000, n))]
        )

    async def drained() -> bool:
        return await observer.unfinished() == 0

    await _until(drained, 600, "the calibration drain")
    return n / (time.monotonic() - started)


async def _soak(
    plan: SoakPlan,
    rate: float,
    drain_rate: float | None,
    engine: AsyncEngine,
    observer: _Observer,
    log: Callable[[str], None],
) -> SoakResult:
    enqueuer = _Enqueuer(engine, rate)
    task = asyncio.ensure_future(enqueuer.run())
    windows: list[Window] = []
    db_start = await observer.now()
    mono_start = time.monotonic()
    count = max(int(plan.minutes * 60 / plan.window), 1)
    last_sent = 0
    try:
        for index in range(count):
            # A window is read 1 s after its end: its jobs' completions have committed.
            wake = mono_start + (index + 1) * plan.window + 1.0
            await asyncio.sleep(max(wake - time.monotonic(), 0))
            if task.done():
                task.result()  # the enqueuer failed: raise it
            start = db_start + dt.timedelta(seconds=index * plan.window)
            end = start + dt.timedelta(seconds=plan.window)
            sent = enqueuer.sent
            window = await observer.window(index + 1, start, end, sent - last_sent)
            last_sent = sent
            windows.append(window)
            log(
                f"window {window.index}/{count}: {window.throughput:,.0f} jobs/s, pickup p99 "
                f"{_ms(window.pickup_p99_ms)} ms, table {_mib(window.table_bytes)}, "
                f"backlog {window.backlog:,}"
            )
    finally:
        enqueuer.stop()
        await task

    async def drained() -> bool:
        return await observer.unfinished() == 0

    with contextlib.suppress(TimeoutError):
        await _until(drained, 120, "the final drain")
    await asyncio.sleep(1.0)  # the last completions commit (as for every window)
    start = windows[-1].end if windows else db_start
    tail = await observer.window(
        len(windows) + 1, start, await observer.now(), enqueuer.sent - last_sent
    )
    windows.append(tail)
    return SoakResult(
        plan=plan,
        drain_rate=drain_rate,
        rate=rate,
        enqueued=enqueuer.sent,
        windows=windows,
        unfinished=await observer.unfinished(),
        failed=await observer.failed(),
    )


def main(argv: list[str] | None = None) -> int:
    """Run a soak and print its Markdown report; exit 1 when a target is missed."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    d = SoakPlan()
    p.add_argument("--dsn", default=_pg.default_dsn(), help="server to create the database on")
    p.add_argument("--minutes", type=float, default=d.minutes)
    p.add_argument("--window", type=float, default=d.window, help="seconds per report row")
    p.add_argument("--rate", type=float, default=None,
                   help="jobs/s (default: --fraction of a drain measured first)")  # fmt: skip
    p.add_argument("--fraction", type=float, default=d.fraction)
    p.add_argument("--calibrate-jobs", type=int, default=d.calibrate_jobs)
    p.add_argument("--concurrency", type=int, default=d.concurrency)
    p.add_argument("--sleep-ms", type=float, default=d.sleep_ms)
    p.add_argument("--retention", type=float, default=d.retention, help="seconds")
    p.add_argument("--maintenance", type=float, default=d.maintenance, help="seconds")
    p.add_argument("--adapter", default=d.adapter)
    p.add_argument("--output", type=Path, help="also write the report to this file")
    ns = p.parse_args(argv)
    plan = SoakPlan(
        minutes=ns.minutes, window=ns.window, rate=ns.rate, fraction=ns.fraction,
        calibrate_jobs=ns.calibrate_jobs,
        concurrency=ns.concurrency, sleep_ms=ns.sleep_ms, retention=ns.retention,
        maintenance=ns.maintenance, adapter=ns.adapter,
    )  # fmt: skip
    result = asyncio.run(run(ns.dsn, plan))
    report = result.markdown()
    print(report)
    if ns.output is not None:
        ns.output.write_text(report)
    return 0 if all(met is not False for _, met, _ in result.targets()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
