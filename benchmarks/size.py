"""``python -m benchmarks.size``: the operator surfaces at production size (issue 29,
point 8; docs/performance.md, "Production size: 10 million jobs").

A database holding ``--jobs`` jobs (default 10,000,000) of the production mix
(``benchmarks._mix``: 80 % succeeded over the last day, 10 % dead, 10 % pending; four
kinds, eight tenants), bulk-loaded in chunks of 1,000,000 rows with the count deltas
folded after each, never analyzed (autovacuum off); plus ``--jobs / 1000`` succeeded jobs
of a fifth kind, ``kind.quiet``, that has no dead jobs, and two days of queue samples
(one per minute and kind, as workers take them). Then, over real HTTP to a uvicorn
process serving ``benchmarks.size_app`` (dashboard, REST API, metrics endpoint):

- ``counts()`` through the library's API (``AsyncOperator``), in this process;
- one client: each page ``--repeat`` times after a warm-up (the metrics scrape, every
  dashboard page: the overview, the dead letters, the job browser with filters and a
  search, a job, the charts over 1 h and 24 h, the pauses and limits; the REST
  API's list pages with each filter and second keyset pages), median, p99 and max;
- ``--clients`` concurrent clients for ``--duration`` seconds, each asking for the
  overview and the dead-letter pages in turn as soon as the last answer came (or, with
  ``--think``, about that many seconds later): requests/s, median, p99 and max latency.

It prints a Markdown table of the targets (met / missed). ``--keep`` leaves the database
behind (its name is printed), ``--load-only`` loads one and stops there; ``--reuse NAME``
measures a database kept before without loading again (drop it yourself afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

import h11
import psycopg
from psycopg import sql

from benchmarks import _mix, _pg
from benchmarks._scenarios import SCHEMA
from benchmarks.adapters import get_adapter
from benchmarks.size_app import DSN_VARIABLE
from skiplock.engine import AsyncEngine, Settings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

_CHUNK = 1_000_000
_HOST = "127.0.0.1"

#: A fifth kind, only succeeded jobs (so none dead), newest ids.
_QUIET = """
INSERT INTO {jobs} (kind, tenant_id, payload, status, available_at, created_at,
                    claimed_at, attempts, completed_at)
SELECT 'kind.quiet', 'tenant-0', '{{}}'::jsonb, 'succeeded', t, t, t, 1, t
FROM generate_series(1, %s) AS i
CROSS JOIN LATERAL (SELECT now() - i * interval '1 second' AS t) AS s
"""

#: Two days of the queue samples workers take each minute (all they keep; the charts page
#: reads them): every kind of the mix and their sum ('').
_SAMPLES = """
INSERT INTO {samples} (minute, kind, pending, due, due_bounded, running, claims,
                       claim_p50, claim_p99)
SELECT date_bin('1 minute', now(), 'epoch') - m * interval '1 minute', k, 1000 + mod(m, 500),
    900 + mod(m, 400), false, 16, 200, 0.01 + mod(m, 7) / 1000.0, 0.2 + mod(m, 13) / 100.0
FROM generate_series(1, 2 * 24 * 60) AS m
CROSS JOIN unnest(ARRAY['', 'kind.0', 'kind.1', 'kind.2', 'kind.3', 'kind.quiet']) AS k
ON CONFLICT (minute, kind) DO NOTHING
"""

#: The dashboard pages the concurrent clients read in turn (paths under the app).
_DASHBOARD = (
    "/admin/",
    "/admin/dead",
    "/admin/dead?kind=kind.2",
    "/admin/dead?kind=kind.quiet",
)


def _log(message: str) -> None:
    print(f"[size] {message}", file=sys.stderr, flush=True)


def _p99(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _summary(samples: Sequence[float]) -> dict[str, float]:
    return {
        "median": statistics.median(samples),
        "p99": _p99(samples),
        "max": max(samples),
        "n": len(samples),
    }


# ---- the database ---------------------------------------------------------------------


async def load(dsn: str, name: str, jobs: int) -> None:
    """Create database ``name`` and load the mix (and the quiet kind) into it."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    conninfo = _pg.with_dbname(dsn, name)
    adapter = get_adapter("psycopg")
    await adapter.apply_schema(conninfo, SCHEMA)
    await _pg.autovacuum_off(conninfo)
    store = await adapter.open_store(conninfo, SCHEMA, 2)
    try:
        seconds = await _mix.load(conninfo, store, jobs, chunk=_CHUNK)
        quiet = sql.SQL(_QUIET).format(jobs=sql.Identifier(SCHEMA, "jobs"))
        await _pg.execute(conninfo, quiet, [max(1, jobs // 1000)])
        samples = sql.SQL(_SAMPLES).format(samples=sql.Identifier(SCHEMA, "queue_samples"))
        await _pg.execute(conninfo, samples, [])
        await store.roll_up_counts()
    finally:
        await store.close()
    # The load's WAL and dirty pages out of the way of the timed phases.
    await _pg.settle(conninfo, analyze=False)
    _log(f"{jobs:,} jobs loaded in {seconds:.0f} s into {name}")


async def drop(dsn: str, name: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        ident = sql.Identifier(name)
        await admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


async def table_facts(conninfo: str) -> dict[str, Any]:
    """The jobs table's rows, size and whether it was ever analyzed."""
    row = await _pg.fetch_one(
        conninfo,
        """SELECT (SELECT count(*) FROM bench.jobs),
                  pg_total_relation_size('bench.jobs'),
                  (SELECT analyze_count + autoanalyze_count FROM pg_stat_user_tables
                   WHERE relid = 'bench.jobs'::regclass)""",
    )
    return {"rows": int(row[0]), "bytes": int(row[1]), "analyzes": int(row[2])}


# ---- HTTP -----------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP/1.1 connection (h11 over asyncio streams)."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._conn = h11.Connection(our_role=h11.CLIENT)

    async def get(self, target: str) -> tuple[int, bytes]:
        """The status and body of ``GET target``."""
        if self._writer is None or self._conn.our_state is not h11.IDLE:
            await self.close()
            self._conn = h11.Connection(our_role=h11.CLIENT)
            self._reader, self._writer = await asyncio.open_connection(_HOST, self._port)
        assert self._reader is not None
        assert self._writer is not None
        request = h11.Request(
            method="GET", target=target, headers=[("Host", f"{_HOST}:{self._port}")]
        )
        self._writer.write(self._conn.send(request) + self._conn.send(h11.EndOfMessage()))
        status, body = 0, bytearray()
        while True:
            event = self._conn.next_event()
            if event is h11.NEED_DATA:
                self._conn.receive_data(await self._reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the server closed the connection")
        if self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE:
            self._conn.start_next_cycle()
        return status, bytes(body)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._reader = self._writer = None


@contextlib.asynccontextmanager
async def server(
    conninfo: str, port: int, *, pythonpath: str | None = None, workers: int = 1
) -> AsyncIterator[None]:
    """uvicorn serving ``benchmarks.size_app`` on ``port`` (one process, one loop, or
    ``workers`` processes), with the library found first on ``pythonpath`` if given."""
    env = os.environ | {DSN_VARIABLE: conninfo}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "benchmarks.size_app:create_app",
        "--host", _HOST, "--port", str(port), "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    if workers > 1:
        command += ["--workers", str(workers)]
    process = await asyncio.create_subprocess_exec(*command, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                probe = Client(port)
                status, _ = await probe.get("/admin/static/dashboard.css")
                await probe.close()
                if status == 200:
                    break
            except OSError:
                pass
            if process.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            await asyncio.sleep(0.1)
        yield
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


# ---- measurements ---------------------------------------------------------------------


async def _timed(call: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    for _ in range(max(3, repeat // 20)):  # warm-up: connections, plan caches
        await call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def measure_counts(conninfo: str, repeat: int) -> dict[str, float]:
    """counts() through the library's API, in this process."""
    store = await get_adapter("psycopg").open_store(conninfo, SCHEMA, 2)
    try:
        operator = AsyncEngine(store, Settings()).operator()
        return _summary(await _timed(operator.counts, repeat))
    finally:
        await store.close()


async def second_pages(client: Client) -> dict[str, str]:
    """The second page of the dashboard's dead letters and of the REST API's jobs of one
    tenant, from the first pages' links."""
    _, html = await client.get("/admin/dead")
    link = re.search(rb'href="/admin/dead\?([^"]*after=\d+[^"]*)"', html)
    _, page = await client.get("/api/jobs?tenant=tenant-3&limit=50")
    cursor = json.loads(page)["next_cursor"]
    if link is None or cursor is None:
        raise RuntimeError("a first page has no next page")
    after = link.group(1).decode().replace("&amp;", "&")
    return {
        "dashboard: dead letters, page 2": f"/admin/dead?{after}",
        "REST: jobs of a tenant, page 2": f"/api/jobs?tenant=tenant-3&limit=50&cursor={cursor}",
    }


def single_client_pages() -> dict[str, str]:
    """The pages one client reads, by label (second pages are added at run time)."""
    return {
        "metrics scrape": "/internal/metrics",
        "dashboard: overview": "/admin/",
        "dashboard: dead letters": "/admin/dead",
        "dashboard: dead letters of a kind": "/admin/dead?kind=kind.2",
        "dashboard: dead letters of a kind with none": "/admin/dead?kind=kind.quiet",
        "REST: pending jobs": "/api/jobs?state=pending&limit=50",
        "REST: jobs of a kind": "/api/jobs?kind=kind.1&limit=50",
        "REST: jobs of a tenant": "/api/jobs?tenant=tenant-3&limit=50",
        "REST: failed jobs (none)": "/api/jobs?state=failed&limit=50",
        "REST: pending jobs of a kind with none": "/api/jobs?kind=kind.quiet&state=pending",
        "REST: dead letters of a tenant": "/api/dlq?tenant=tenant-5&limit=50",
        "REST: dead letters of a kind with none": "/api/dlq?kind=kind.quiet&limit=50",
        "dashboard: jobs, every state": "/admin/jobs",
        "dashboard: pending jobs": "/admin/jobs?state=pending",
        "dashboard: scheduled jobs": "/admin/jobs?state=scheduled",
        "dashboard: succeeded jobs of a tenant": "/admin/jobs?state=succeeded&tenant=tenant-3",
        "dashboard: dead jobs, text search": "/admin/jobs?state=dead&q=timeout",
        "dashboard: a job": "/admin/jobs/1",
        "dashboard: charts, 1 h": "/admin/charts?window=1h",
        "dashboard: charts, 24 h": "/admin/charts?window=24h",
        "dashboard: pauses and limits": "/admin/controls",
    }


async def measure_pages(port: int, repeat: int) -> dict[str, dict[str, float]]:
    """Each page ``repeat`` times, one client, one keep-alive connection."""
    client = Client(port)
    try:
        pages = single_client_pages() | await second_pages(client)
        results = {}
        for label, target in pages.items():

            async def call(target: str = target) -> None:
                status, body = await client.get(target)
                if status != 200:
                    raise RuntimeError(f"GET {target}: {status} {body[:200]!r}")

            results[label] = _summary(await _timed(call, repeat))
            _log(f"{label}: p99 {results[label]['p99']:.1f} ms")
        return results
    finally:
        await client.close()


async def measure_concurrent(
    port: int, clients: int, duration: float, targets: Sequence[str], think: float = 0.0
) -> dict[str, Any]:
    """``clients`` clients asking for ``targets`` in turn for ``duration`` seconds, back
    to back, or with ``think``: each starts at a random moment within ``think`` seconds
    and waits between 0.5 and 1.5 times ``think`` after each answer (browsers refreshing
    independently). ``errors``: the answers other than 200, ``statuses`` their count by
    status (the first one of each is logged)."""
    latencies: list[float] = []
    slowest = dict.fromkeys(targets, 0.0)
    errors = 0
    statuses: dict[int, int] = {}
    stop = time.monotonic() + duration

    async def one(index: int) -> None:
        nonlocal errors
        client = Client(port)
        if think:
            await asyncio.sleep(random.uniform(0, think))
        try:
            turn = index
            while time.monotonic() < stop:
                target = targets[turn % len(targets)]
                turn += 1
                started = time.perf_counter()
                status, body = await client.get(target)
                latency = (time.perf_counter() - started) * 1000
                latencies.append(latency)
                slowest[target] = max(slowest[target], latency)
                if status != 200:
                    errors += 1
                    if status not in statuses:
                        _log(f"{target}: {status} after {latency:.0f} ms: {body[:300]!r}")
                    statuses[status] = statuses.get(status, 0) + 1
                if think:
                    await asyncio.sleep(think * random.uniform(0.5, 1.5))
        finally:
            await client.close()

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(clients)))
    elapsed = time.monotonic() - started
    _log("slowest answer per page: " + ", ".join(f"{t} {v:.0f} ms" for t, v in slowest.items()))
    return _summary(latencies) | {
        "errors": errors,
        "statuses": statuses,
        "rate": len(latencies) / elapsed,
    }


# ---- the report -----------------------------------------------------------------------


def report(
    facts: dict[str, Any],
    counts: dict[str, float],
    pages: dict[str, dict[str, float]],
    concurrent: dict[str, Any],
    clients: int,
    think: float,
) -> str:
    """The Markdown tables: every target, met or missed, then each page's figures."""

    def verdict(value: float, limit: float) -> str:
        return "met" if value <= limit else "**missed**"

    lists = {k: v for k, v in pages.items() if k not in ("metrics scrape", "dashboard: overview")}
    worst_list = max(lists, key=lambda k: lists[k]["p99"])
    rows = [
        ("`counts()` median", counts["median"], 20.0),
        ("`counts()` p99", counts["p99"], 20.0),
        ("metrics scrape p99", pages["metrics scrape"]["p99"], 50.0),
        ("dashboard overview p99 (1 client)", pages["dashboard: overview"]["p99"], 50.0),
        (f"slowest list page p99 (1 client): {worst_list}", lists[worst_list]["p99"], 50.0),
        (f"{clients} concurrent clients: slowest request", concurrent["max"], 1000.0),
    ]
    lines = [
        f"{facts['rows']:,} jobs, `jobs` {facts['bytes'] / 2**30:.2f} GiB with its indexes, "
        f"analyzed {facts['analyzes']} times",
        "",
        "| target | measured | limit | |",
        "| --- | ---: | ---: | --- |",
    ]
    lines += [
        f"| {name} | {value:.1f} ms | {limit:.0f} ms | {verdict(value, limit)} |"
        for name, value, limit in rows
    ]
    lines += ["", "| page (1 client) | median | p99 | max |", "| --- | ---: | ---: | ---: |"]
    lines += [
        f"| {label} | {s['median']:.1f} ms | {s['p99']:.1f} ms | {s['max']:.1f} ms |"
        for label, s in pages.items()
    ]
    lines += [
        "",
        f"{clients} concurrent clients (overview and dead-letter pages, "
        f"{f'about {think:g} s between requests' if think else 'no think time'}): "
        f"{concurrent['n']:,.0f} requests, {concurrent['rate']:.0f}/s, "
        f"median {concurrent['median']:.0f} ms, p99 {concurrent['p99']:.0f} ms, "
        f"max {concurrent['max']:.0f} ms, {concurrent['errors']:.0f} errors",
    ]
    return "\n".join(lines)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.size", description=__doc__)
    parser.add_argument("--dsn", default=_pg.default_dsn())
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=200, help="timed requests per page")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds, concurrent phase")
    parser.add_argument("--think", type=float, default=0.0, help="seconds between requests")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", metavar="NAME", help="measure this kept database, no load")
    parser.add_argument("--load-only", action="store_true", help="load and keep, measure nothing")
    return parser.parse_args(argv)


async def _main(ns: argparse.Namespace) -> None:
    if ns.reuse:
        if not ns.reuse.startswith(_pg.DB_PREFIX):
            raise SystemExit(f"--reuse: not a benchmark database: {ns.reuse}")
        name = ns.reuse
    else:
        name = f"{_pg.DB_PREFIX}size_{_pg.new_run_id()}"
        await load(ns.dsn, name, ns.jobs)
        if ns.load_only:
            _log(f"database kept: --reuse {name}")
            return
    conninfo = _pg.with_dbname(ns.dsn, name)
    try:
        facts = await table_facts(conninfo)
        counts = await measure_counts(conninfo, ns.repeat)
        _log(f"counts(): median {counts['median']:.2f} ms, p99 {counts['p99']:.2f} ms")
        async with server(conninfo, ns.port):
            pages = await measure_pages(ns.port, ns.repeat)
            concurrent = await measure_concurrent(
                ns.port, ns.clients, ns.duration, _DASHBOARD, ns.think
            )
        print(report(facts, counts, pages, concurrent, ns.clients, ns.think))
    finally:
        if ns.keep or ns.reuse:
            _log(f"database kept: --reuse {name}")
        else:
            await drop(ns.dsn, name)


def main(argv: Sequence[str] | None = None) -> int:
    asyncio.run(_main(_parse(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
