"""``python -m benchmarks.dead_rows``: operator reads with a burst of dead rows between
autovacuum runs (issue 45, point 6; docs/performance.md, "Dead rows").

On a throw-away PostgreSQL server (``benchmarks.pgcluster``: the shared one is never
touched; autovacuum on its default settings, the schema's own per-table ones), a
database of ``--jobs`` jobs of the production mix (``benchmarks._mix``), vacuumed and
analyzed. Then a burst: ``--jobs * 2 / 3`` jobs enqueued, claimed and completed in
chunks, as workers would, and as many of the oldest succeeded jobs purged, as retention
would (the table keeps its size): three dead row versions per job, twice ``--jobs`` in
all. To keep that window "between two autovacuum runs" for as long as the
measurement lasts, a session holds the jobs table's SHARE UPDATE EXCLUSIVE lock (the
lock VACUUM takes, so autovacuum skips the table; reads and writes are not blocked, and
it holds back no transaction horizon: the dead rows are removable, as after a real
burst).

Two uvicorn processes serve ``benchmarks.size_app``: one with the library of
``--base`` (a source tree, e.g. the previous commit's ``src``), one with this checkout's.
For each page (the overview, the lists, ``/health``, the metrics scrape) one client asks
both in turn, ``--repeat`` times each (before and after interleaved, so the machine's noise
falls on both): median, p99, max and the ratio. Then ``--clients`` concurrent clients
for ``--duration`` seconds on each in turn: the slowest answer. The same before the burst
(vacuumed) and with the dead rows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from benchmarks import _mix, _pg, pgcluster, size
from benchmarks._scenarios import SCHEMA
from benchmarks.adapters import get_adapter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

#: One chunk of the burst: enqueued now (due), claimed, completed, purged.
_BURST = (
    """INSERT INTO {jobs} (kind, tenant_id, payload, status, available_at)
    SELECT 'kind.' || (i %% 4), 'tenant-' || (i / 4 %% 8), '{{}}'::jsonb, 'pending', now()
    FROM generate_series(1, %(n)s) AS i""",
    """UPDATE {jobs} SET status = 'running', claimed_at = now(), claimed_by = 'burst',
        attempts = 1 WHERE id > %(after)s AND status = 'pending'""",
    """UPDATE {jobs} SET status = 'succeeded', completed_at = now()
    WHERE id > %(after)s AND status = 'running'""",
    # Retention keeps the table's size: as many of the oldest succeeded jobs go.
    """DELETE FROM {jobs} WHERE id IN (
        SELECT id FROM {jobs} WHERE status = 'succeeded' ORDER BY completed_at LIMIT %(n)s
    )""",
)

_CHUNK = 50_000

#: This checkout's library.
_SRC = Path(__file__).resolve().parents[1] / "src"

#: The pages measured, by label.
PAGES = {
    "dashboard: overview": "/admin/",
    "dashboard: jobs, every state": "/admin/jobs",
    "dashboard: pending jobs": "/admin/jobs?state=pending",
    "dashboard: dead letters": "/admin/dead",
    "REST: jobs": "/api/jobs?limit=50",
    "REST: pending jobs": "/api/jobs?state=pending&limit=50",
    "REST: running jobs": "/api/jobs?state=running&limit=50",
    "REST: succeeded jobs of a tenant": "/api/jobs?state=succeeded&tenant=tenant-3&limit=50",
    "REST: /health": "/api/health",
    "metrics scrape": "/internal/metrics",
}

#: What the concurrent clients ask for in turn.
CONCURRENT = ("/admin/", "/admin/dead", "/admin/jobs", "/api/health")


def _log(message: str) -> None:
    print(f"[dead_rows] {message}", file=sys.stderr, flush=True)


async def load(dsn: str, jobs: int) -> str:
    """A database of ``jobs`` jobs of the mix on ``dsn``'s server, vacuumed; its conninfo."""
    name = f"{_pg.DB_PREFIX}dead_rows"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    conninfo = _pg.with_dbname(dsn, name)
    adapter = get_adapter("psycopg")
    await adapter.apply_schema(conninfo, SCHEMA)
    store = await adapter.open_store(conninfo, SCHEMA, 2)
    try:
        seconds = await _mix.load(conninfo, store, jobs, chunk=1_000_000)
    finally:
        await store.close()
    await _pg.settle(conninfo)
    _log(f"{jobs:,} jobs loaded in {seconds:.0f} s")
    return conninfo


@contextlib.asynccontextmanager
async def autovacuum_held(conninfo: str) -> AsyncIterator[None]:
    """Autovacuum skips the jobs table while this holds its SHARE UPDATE EXCLUSIVE lock."""
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        await conn.execute("LOCK TABLE bench.jobs IN SHARE UPDATE EXCLUSIVE MODE")
        try:
            yield
        finally:
            await conn.rollback()


async def burst(conninfo: str, jobs: int) -> None:
    """``jobs`` jobs through enqueue, claim and completion, and as many old ones purged,
    in chunks (each statement a transaction of its own, as workers' would be)."""
    table = sql.Identifier(SCHEMA, "jobs")
    statements = [sql.SQL(s).format(jobs=table) for s in _BURST]
    started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        for first in range(0, jobs, _CHUNK):
            cur = await conn.execute("SELECT coalesce(max(id), 0) FROM bench.jobs")
            row = await cur.fetchone()
            after = int(row[0]) if row else 0
            for statement in statements:
                await conn.execute(statement, {"n": min(_CHUNK, jobs - first), "after": after})
        await conn.execute("SELECT bench.roll_up_job_counts(0)")
    _log(f"burst of {jobs:,} jobs in {time.perf_counter() - started:.0f} s")


async def dead_rows(conninfo: str) -> dict[str, int]:
    """The jobs table's live and dead rows and its autovacuum runs so far."""
    row = await _pg.fetch_one(
        conninfo,
        """SELECT n_live_tup, n_dead_tup, autovacuum_count, vacuum_count
        FROM pg_stat_user_tables WHERE relid = 'bench.jobs'::regclass""",
    )
    return dict(zip(("live", "dead", "autovacuums", "vacuums"), map(int, row), strict=True))


@contextlib.asynccontextmanager
async def servers(
    conninfo: str, base: str, port: int, workers: int = 1
) -> AsyncIterator[dict[str, int]]:
    """The app on ``port`` with the ``base`` library, on ``port + 1`` with this one's
    (each in ``workers`` uvicorn processes)."""
    async with contextlib.AsyncExitStack() as stack:
        ports = {"before": port, "after": port + 1}
        for at, src in zip(ports.values(), (base, str(_SRC)), strict=True):
            served = size.server(conninfo, at, pythonpath=src, workers=workers)
            await stack.enter_async_context(served)
        yield ports


async def measure_pages(ports: dict[str, int], repeat: int) -> dict[str, dict[str, Any]]:
    """Every page on both servers in turn, one client each, ``repeat`` times."""
    clients = {name: size.Client(at) for name, at in ports.items()}
    results: dict[str, dict[str, Any]] = {}
    try:
        for label, target in PAGES.items():
            samples: dict[str, list[float]] = {name: [] for name in clients}
            for turn in range(repeat + 3):
                for name, client in clients.items():
                    started = time.perf_counter()
                    status, body = await client.get(target)
                    if status != 200:
                        raise RuntimeError(f"{name} GET {target}: {status} {body[:200]!r}")
                    if turn >= 3:  # the first three warm connections and plan caches
                        samples[name].append((time.perf_counter() - started) * 1000)
            results[label] = {name: size._summary(s) for name, s in samples.items()}
            _log(
                f"{label}: p99 {results[label]['before']['p99']:.1f} -> "
                f"{results[label]['after']['p99']:.1f} ms"
            )
    finally:
        for client in clients.values():
            await client.close()
    return results


async def measure_concurrent(
    ports: dict[str, int], clients: int, duration: float
) -> dict[str, dict[str, Any]]:
    """``clients`` concurrent clients on each server in turn."""
    return {
        name: await size.measure_concurrent(at, clients, duration, CONCURRENT)
        for name, at in ports.items()
    }


def _by_status(concurrent: dict[str, Any]) -> str:
    statuses = concurrent.get("statuses") or {}
    return f" ({', '.join(f'{n} x {s}' for s, n in sorted(statuses.items()))})" if statuses else ""


def report(phases: dict[str, dict[str, Any]], clients: int) -> str:
    """The Markdown tables of every phase."""
    lines: list[str] = []
    for phase, got in phases.items():
        facts = got["facts"]
        lines += [
            f"### {phase}: {facts['live']:,} live rows, {facts['dead']:,} dead "
            f"({facts['autovacuums']} autovacuums so far)",
            "",
            "| page (1 client) | before p50 / p99 | after p50 / p99 | p99 after/before |",
            "| --- | ---: | ---: | ---: |",
        ]
        for label, pair in got["pages"].items():
            b, a = pair["before"], pair["after"]
            lines.append(
                f"| {label} | {b['median']:.1f} / {b['p99']:.1f} ms | "
                f"{a['median']:.1f} / {a['p99']:.1f} ms | {a['p99'] / b['p99']:.2f}x |"
            )
        lines.append("")
        for name, c in got["concurrent"].items():
            lines.append(
                f"- {clients} concurrent clients, {name}: {c['n']:,.0f} requests, "
                f"{c['rate']:.0f}/s, median {c['median']:.0f} ms, p99 {c['p99']:.0f} ms, "
                f"max {c['max']:.0f} ms, {c['errors']:.0f} errors{_by_status(c)}"
            )
        lines.append("")
    return "\n".join(lines)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dead_rows", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--base", required=True, help="the library's src folder to compare")
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=8775)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn processes per app")
    return parser.parse_args(argv)


async def _phase(conninfo: str, ns: argparse.Namespace) -> dict[str, Any]:
    async with servers(conninfo, ns.base, ns.port, ns.workers) as ports:
        pages = await measure_pages(ports, ns.repeat)
        concurrent = await measure_concurrent(ports, ns.clients, ns.duration)
    return {"facts": await dead_rows(conninfo), "pages": pages, "concurrent": concurrent}


async def _main(ns: argparse.Namespace, dsn: str) -> None:
    conninfo = await load(dsn, ns.jobs)
    phases = {"vacuumed": await _phase(conninfo, ns)}
    async with autovacuum_held(conninfo):
        await burst(conninfo, ns.jobs * 2 // 3)
        _log(f"after the burst: {await dead_rows(conninfo)}")
        phases["dead rows"] = await _phase(conninfo, ns)
    print(report(phases, ns.clients))


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parse(argv)
    settings = {"shared_buffers": "256MB", "max_connections": "100"}
    with pgcluster.cluster(settings) as server:
        asyncio.run(_main(ns, server.dsn))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
