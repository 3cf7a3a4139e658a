"""The workloads, each measured the same way for every system."""

from __future__ import annotations

import asyncio
import random
import shutil
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from benchmarks import _pg
from benchmarks._procs import WorkerError, WorkerProcess, release, workers
from benchmarks._results import (
    DRAIN,
    DRAIN_BACKLOG,
    DRAIN_TX,
    ENQUEUE_BATCHES,
    ENQUEUE_BULK,
    ENQUEUE_SINGLE,
    LATENCY,
    LATENESS,
    Measurement,
    Tables,
    percentile,
)
from benchmarks._system import Client, Mode, System, WorkerArgs

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

#: How often the harness checks whether a drain is finished: every 20 ms, or every
#: n / 2,000,000 s for bigger drains (100 ms at 200,000 jobs), since each probe counts the
#: unfinished jobs on the very tables being drained.
POLL_INTERVAL = 0.02
POLL_JOBS_PER_SECOND = 2_000_000
#: The schema skiplock is installed in (not the default one, to exercise ``schema=``).
SCHEMA = "bench"


class Namer:
    """Names this run's databases: ``skiplock_bench_<run>_<n>_<tag>``."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._n = 0

    def main(self) -> str:
        """The run's main database (pgbench)."""
        return f"{_pg.DB_PREFIX}{self.run_id}"

    def next(self, tag: str) -> str:
        """A new database name for one scenario."""
        self._n += 1
        return f"{_pg.DB_PREFIX}{self.run_id}_{self._n}_{tag}"[:63]


@asynccontextmanager
async def installed(
    system: System, dsn: str, namer: Namer, tag: str
) -> AsyncIterator[tuple[str, Client]]:
    """A fresh database with ``system`` installed: ``(conninfo, client)``; dropped after."""
    async with _pg.fresh_database(dsn, namer.next(tag)) as conninfo:
        client = await system.install(conninfo, SCHEMA)
        try:
            yield conninfo, client
        finally:
            await client.close()


async def enqueue_single(label: str, client: Client, n: int) -> Measurement:
    """``n`` jobs, one ``enqueue`` call (one transaction) each, back to back."""
    await client.enqueue_single(-1)  # warm up: connection, prepared statements
    start = time.perf_counter()
    for i in range(n):
        await client.enqueue_single(i)
    secs = time.perf_counter() - start
    return Measurement(
        label, ENQUEUE_SINGLE, "enqueue, one job per transaction", 1, n / secs, "jobs/s",
        jobs=n, seconds=secs,
    )  # fmt: skip


async def enqueue_bulk(label: str, client: Client, n: int) -> Measurement:
    """``n`` jobs in one call."""
    await client.enqueue_bulk(range(-10, 0))  # warm up
    start = time.perf_counter()
    await client.enqueue_bulk(range(n))
    secs = time.perf_counter() - start
    return Measurement(
        label, ENQUEUE_BULK, f"bulk enqueue, {n:,} jobs in one call", 1, n / secs, "jobs/s",
        jobs=n, seconds=secs,
    )  # fmt: skip


#: Jobs per call of the batched bulk enqueue.
BATCH_CALL = 1_000


async def enqueue_batches(label: str, client: Client, n: int) -> Measurement:
    """``n`` jobs in calls of :data:`BATCH_CALL` jobs each, back to back."""
    await client.enqueue_bulk(range(-10, 0))  # warm up
    start = time.perf_counter()
    for first in range(0, n, BATCH_CALL):
        await client.enqueue_bulk(range(first, min(first + BATCH_CALL, n)))
    secs = time.perf_counter() - start
    return Measurement(
        label, ENQUEUE_BATCHES, f"bulk enqueue, {n:,} jobs in calls of {BATCH_CALL:,}", 1,
        n / secs, "jobs/s", jobs=n, seconds=secs,
    )  # fmt: skip


def drain_name(
    *, n: int, processes: int, concurrency: int, mode: Mode, tables: Tables, backlog: bool
) -> tuple[str, str]:
    """A drain's workload and the label of its row (e.g. ``drain, 1 process x 16, cold
    tables``)."""
    workload = DRAIN_TX if mode == "tx" else DRAIN
    what = "transactional drain" if mode == "tx" else "drain"
    if backlog:
        workload, what = DRAIN_BACKLOG, f"backlog of {n:,} from one enqueue_many"
    procs = f"{processes} processes" if processes > 1 else "1 process"
    return workload, f"{what}, {procs} x {concurrency or 'unlimited'}, {tables} tables"


async def drain(
    system: System,
    label: str,
    conninfo: str,
    client: Client,
    *,
    n: int,
    processes: int,
    concurrency: int,
    mode: Mode = "noop",
    batch_size: int = 0,
    config: str = "",
    adapter: str = "psycopg",
    profile: Path | None = None,
    tables: Tables = "analyzed",
    backlog: bool = False,
    worker_conninfo: str | None = None,
    before_release: Callable[[], Awaitable[None]] | None = None,
) -> Measurement:
    """``n`` no-op jobs enqueued in one bulk call, then processed by ``processes`` worker
    processes; ``backlog`` names it the big-backlog workload. The workers connect to
    ``worker_conninfo`` when given (the same database through a delay proxy:
    benchmarks/network.py), which calls ``before_release`` once they are ready.

    Autovacuum is off for every table of the (fresh) database before the prefill, so
    nothing analyzes them behind the harness's back; after the prefill the tables are
    either left ``cold`` (no statistics) or ``analyzed`` (VACUUM ANALYZE). The analyze
    counts before and after the timed phase are recorded, and so are the columns with
    statistics at its start. The clock starts when the first processor runs (reported by
    the workers on the shared monotonic clock) and stops when the harness's poll sees no
    unfinished job; then every job must have succeeded exactly once.
    """
    workload, name = drain_name(
        n=n, processes=processes, concurrency=concurrency, mode=mode, tables=tables,
        backlog=backlog,
    )  # fmt: skip
    slots = concurrency or 16
    extra: dict[str, object] = {
        "processes": processes,
        "concurrency": concurrency,
        "tables": tables,
    }
    if config:
        extra["note"] = config
    extra["autovacuum_off_tables"] = len(await _pg.autovacuum_off(conninfo))
    await client.enqueue_bulk(range(n))
    await _pg.settle(conninfo, analyze=tables == "analyzed")
    before = await _pg.table_stats(conninfo)
    wargs = WorkerArgs(
        system=system.name,
        conninfo=worker_conninfo or conninfo,
        concurrency=concurrency,
        mode=mode,
        schema=SCHEMA,
        adapter=adapter,
        batch_size=batch_size,
    )
    deadline_secs = max(120.0, n / 50)
    poll_interval = max(POLL_INTERVAL, n / POLL_JOBS_PER_SECOND)
    async with (
        _pg.Poller.open(conninfo, client.unfinished_sql) as poller,
        workers([wargs] * processes) as procs,
    ):
        profilers = await _profile(profile, procs, f"{label}-{workload}-{processes}x{concurrency}")
        if before_release is not None:
            await before_release()
        released = time.monotonic()
        release(procs)
        while True:
            await asyncio.sleep(poll_interval)
            left = await poller.value()
            now = time.monotonic()
            if left == 0:
                end = now
                break
            dead = [p for p in procs if not p.alive]
            if dead:
                raise WorkerError(dead[0].failure())
            if now - released > deadline_secs:
                raise TimeoutError(f"{left} of {n} jobs left after {deadline_secs:.0f} s")
        firsts = [p.first for p in procs if p.first is not None]
        start = min(firsts) if firsts else released
        after = await _pg.table_stats(conninfo)
    extra["stats_columns_at_start"] = before.columns
    extra["analyses_during"] = after.analyses - before.analyses
    for profiler in profilers:
        await profiler.wait()  # py-spy writes its file when the worker exits
    secs = end - start
    problem = await client.verify(n, transactional=mode == "tx")
    if problem is not None:
        raise AssertionError(f"verification failed: {problem}")
    return Measurement(
        label, workload, name, processes * slots, n / secs, "jobs/s",
        jobs=n, seconds=secs, processes=processes, extra=extra,
    )  # fmt: skip


async def _profile(
    directory: Path | None, procs: list[WorkerProcess], name: str
) -> list[asyncio.subprocess.Process]:
    """Attach py-spy to each worker (raw collapsed stacks, idle frames included)."""
    if directory is None:
        return []
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    found = []
    for p in procs:
        out = directory / f"{name.replace('/', '_')}-{p.proc.pid}.txt"
        argv = [exe, "record", "--pid", str(p.proc.pid), "--rate", "250", "--idle"]
        argv += ["--format", "raw", "-o", str(out)]
        devnull = asyncio.subprocess.DEVNULL
        found.append(await asyncio.create_subprocess_exec(*argv, stdout=devnull, stderr=devnull))
    await asyncio.sleep(0.5)  # let py-spy attach before the clock starts
    return found


class IdleScenario(Protocol):
    """A scenario of one idle worker (:func:`latency`, :func:`lateness`)."""

    async def __call__(
        self,
        system: System,
        label: str,
        conninfo: str,
        client: Client,
        *,
        samples: int,
        adapter: str = ...,
    ) -> Measurement: ...


async def latency(
    system: System,
    label: str,
    conninfo: str,
    client: Client,
    *,
    samples: int,
    concurrency: int = 4,
    pause: tuple[float, float] = (0.02, 0.06),
    adapter: str = "psycopg",
) -> Measurement:
    """Pickup latency of an idle worker: enqueue commit → processor start.

    Jobs are enqueued one at a time with a random pause so the worker is idle (waiting
    for a notification) each time. Latency is the processor's start time minus the time
    the committing ``enqueue`` call returned, both ``time.monotonic()``.
    """
    wargs = _idle_worker(system, conninfo, concurrency, adapter)
    rng = random.Random(1234)
    from_return: list[float] = []
    from_call: list[float] = []
    async with workers([wargs]) as procs:
        (proc,) = procs
        release(procs)
        for k in range(-5, samples):  # five warm-up jobs first
            await asyncio.sleep(rng.uniform(*pause))
            called = time.monotonic()
            await client.enqueue_single(k)
            returned = time.monotonic()
            _, started = await _started(proc, k, 10.0)
            if k >= 0:
                from_return.append((started - returned) * 1000)
                from_call.append((started - called) * 1000)
    extra: dict[str, object] = {
        "p50_ms": percentile(from_return, 50),
        "p95_ms": percentile(from_return, 95),
        "p99_ms": percentile(from_return, 99),
        "max_ms": max(from_return),
        "samples": len(from_return),
        "from_call_p50_ms": percentile(from_call, 50),
        "from_call_p99_ms": percentile(from_call, 99),
        "note": f"{len(from_return)} samples, idle worker x {concurrency}",
    }
    return Measurement(
        label, LATENCY, "pickup latency (commit → processor start)", 1,
        float(extra["p50_ms"]), "ms", extra=extra,  # type: ignore[arg-type]
    )  # fmt: skip


async def lateness(
    system: System,
    label: str,
    conninfo: str,
    client: Client,
    *,
    samples: int,
    spread: tuple[float, float] = (0.3, 2.0),
    concurrency: int = 4,
    adapter: str = "psycopg",
) -> Measurement:
    """How late jobs scheduled for later start on an idle worker with default settings.

    ``samples`` jobs are enqueued back to back, each due a random 0.3-2.0 s later; the
    worker has nothing else to do. Lateness is start minus due time: on the server's
    clock where the system records its start (skiplock: ``started_at - available_at``),
    and on the harness's for every system (the processor's start minus the enqueue
    call's start plus the delay: an overestimate by at most the enqueue's round trip).
    """
    wargs = _idle_worker(system, conninfo, concurrency, adapter)
    rng = random.Random(4321)
    due: dict[int, float] = {}
    harness: list[float] = []
    async with workers([wargs]) as procs:
        (proc,) = procs
        release(procs)
        for k in range(-3, 0):  # warm up with jobs due now: the worker is listening
            await client.enqueue_single(k)
            await _started(proc, k, 10.0)
        await asyncio.sleep(0.2)  # idle: its claim came back empty, it sleeps
        for k in range(samples):
            delay = rng.uniform(*spread)
            called = time.monotonic()
            await client.enqueue_scheduled(k, delay)
            due[k] = called + delay
        deadline = time.monotonic() + spread[1] + 10.0
        while due:
            number, started = await _started(proc, None, max(0.1, deadline - time.monotonic()))
            harness.append((started - due.pop(number)) * 1000)
    server = await client.lateness_ms()
    shown = server if server else harness
    extra: dict[str, object] = {
        "p50_ms": percentile(shown, 50),
        "p99_ms": percentile(shown, 99),
        "max_ms": max(shown),
        "clock": "server" if server else "harness",
        "harness_p50_ms": percentile(harness, 50),
        "harness_p99_ms": percentile(harness, 99),
        "harness_max_ms": max(harness),
        "samples": len(shown),
        "note": f"{len(shown)} jobs due {spread[0]}-{spread[1]} s ahead, idle worker x "
        f"{concurrency}, default settings; {'server' if server else 'harness'} clock",
    }
    return Measurement(
        label, LATENESS, "scheduled-job lateness (due → start)", 1,
        float(extra["p50_ms"]), "ms", extra=extra,  # type: ignore[arg-type]
    )  # fmt: skip


def _idle_worker(system: System, conninfo: str, concurrency: int, adapter: str) -> WorkerArgs:
    """One worker that reports each job's start (``latency`` mode)."""
    return WorkerArgs(
        system=system.name,
        conninfo=conninfo,
        concurrency=concurrency,
        mode="latency",
        schema=SCHEMA,
        adapter=adapter,
    )


async def _started(proc: WorkerProcess, number: int | None, timeout: float) -> tuple[int, float]:
    """The next ``start`` report of ``proc`` (job ``number``, if given)."""
    try:
        got, started = await asyncio.wait_for(proc.starts.get(), timeout)
    except TimeoutError:
        if not proc.alive:
            raise WorkerError(proc.failure()) from None
        raise TimeoutError(f"no job started within {timeout:.1f} s") from None
    if number is not None and got != number:
        raise AssertionError(f"expected job {number} to start, got {got}")
    return got, started
