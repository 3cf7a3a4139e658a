"""``python -m benchmarks.counts``: the operator reads at two table sizes, and the cost of
their bookkeeping on the claim/complete path (issue 29, docs/performance.md).

``reads``: for each size, a fresh database holding the production mix of the issue
(80 % succeeded over the last day, 10 % dead, 10 % pending and due; four kinds, eight
tenants), bulk-inserted with one ``INSERT ... SELECT`` and never analyzed (autovacuum
off), then the count deltas of the load folded once (as a worker's counts loop would)
and the deltas table vacuumed (as its autovacuum settings would).
Each read runs through the library's API (``AsyncOperator``) ``--repeat`` times after a
warm-up; the median is reported, and each read's growth from the first size to the last.

``drain``: the 16-slot drain of the main harness (one process, cold tables) on fresh
databases, alternately with the count triggers enabled and disabled
(``ALTER TABLE ... DISABLE TRIGGER``), ``--rounds`` times each; prints every rate and the
ratio of the medians (target >= 0.95).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from psycopg import sql

from benchmarks import _mix, _pg, _scenarios
from benchmarks._scenarios import SCHEMA, Namer, installed
from benchmarks.adapters import get_adapter
from benchmarks.systems import make_system
from skiplock.engine import AsyncEngine, Settings

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from benchmarks._system import System

_COUNT_TRIGGERS = ("jobs_count_insert", "jobs_count_update", "jobs_count_delete")


def _log(message: str) -> None:
    print(f"[counts] {message}", file=sys.stderr, flush=True)


async def _median_ms(call: Callable[[], Awaitable[Any]], repeat: int) -> float:
    await call()  # warm-up: connection, plan caches
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def measure_reads(dsn: str, size: int, repeat: int, namer: Namer) -> dict[str, float]:
    """Median milliseconds of counts(), health() and throughput(1 h) at ``size`` jobs."""
    async with _pg.fresh_database(dsn, namer.next(f"reads{size}")) as conninfo:
        adapter = get_adapter("psycopg")
        await adapter.apply_schema(conninfo, SCHEMA)
        await _pg.autovacuum_off(conninfo)
        store = await adapter.open_store(conninfo, SCHEMA, 2)
        try:
            seconds = await _mix.load(conninfo, store, size)
            _log(f"{size:,} jobs loaded in {seconds:.1f} s")
            operator = AsyncEngine(store, Settings()).operator()
            return {
                "counts()": await _median_ms(operator.counts, repeat),
                "health()": await _median_ms(operator.health, repeat),
                "throughput() (1 h)": await _median_ms(
                    lambda: operator.throughput(window=timedelta(hours=1)), repeat
                ),
            }
        finally:
            await store.close()


async def _drain_once(
    system: System, dsn: str, jobs: int, namer: Namer, *, triggers: bool
) -> float:
    """Jobs/s of one 16-slot drain on a fresh database, the count triggers on or off."""
    async with installed(system, dsn, namer, "drain") as (conninfo, client):
        if not triggers:
            for trigger in _COUNT_TRIGGERS:
                await _pg.execute(
                    conninfo,
                    sql.SQL("ALTER TABLE {} DISABLE TRIGGER {}").format(
                        sql.Identifier(SCHEMA, "jobs"), sql.Identifier(trigger)
                    ),
                )
        m = await _scenarios.drain(
            system, "skiplock/psycopg", conninfo, client, n=jobs, processes=1, concurrency=16,
            tables="cold",
        )  # fmt: skip
    assert m.value is not None, m.error
    return m.value


async def measure_drain(dsn: str, jobs: int, rounds: int, namer: Namer) -> dict[str, list[float]]:
    """Jobs/s of the 16-slot drain with and without the count triggers, interleaved."""
    system = make_system("skiplock", "psycopg")
    rates: dict[str, list[float]] = {"with triggers": [], "without triggers": []}
    await _drain_once(system, dsn, jobs, namer, triggers=True)  # warm-up, not counted
    for r in range(rounds):
        order = ["with triggers", "without triggers"]
        if r % 2:
            order.reverse()
        for variant in order:
            rate = await _drain_once(system, dsn, jobs, namer, triggers=variant == "with triggers")
            rates[variant].append(rate)
            _log(f"round {r + 1}, {variant}: {rate:,.0f} jobs/s")
    return rates


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.counts", description=__doc__)
    parser.add_argument("--dsn", default=_pg.default_dsn())
    parser.add_argument("--only", default="reads,drain", help="reads, drain or both")
    parser.add_argument("--sizes", default="10000,1000000", help="table sizes for reads")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per read")
    parser.add_argument("--drain-jobs", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=5, help="drains per variant")
    return parser.parse_args(argv)


async def _main(ns: argparse.Namespace) -> None:
    namer = Namer(_pg.new_run_id())
    only = set(ns.only.split(","))
    if "reads" in only:
        sizes = [int(s) for s in ns.sizes.split(",")]
        table = {size: await measure_reads(ns.dsn, size, ns.repeat, namer) for size in sizes}
        first, last = sizes[0], sizes[-1]
        print(f"| read | {' | '.join(f'{s:,} jobs' for s in sizes)} | growth |")
        print(f"| --- |{' ---: |' * len(sizes)} ---: |")
        for read in table[first]:
            cells = " | ".join(f"{table[s][read]:.2f} ms" for s in sizes)
            growth = table[last][read] / table[first][read]
            print(f"| `{read}` | {cells} | {growth:.1f}x |")
    if "drain" in only:
        rates = await measure_drain(ns.dsn, ns.drain_jobs, ns.rounds, namer)
        with_t = statistics.median(rates["with triggers"])
        without = statistics.median(rates["without triggers"])
        print("| drain, 1 process x 16, cold tables | jobs/s (median) | runs |")
        print("| --- | ---: | --- |")
        for variant, values in rates.items():
            runs = ", ".join(f"{v:,.0f}" for v in values)
            print(f"| {variant} | {statistics.median(values):,.0f} | {runs} |")
        print(f"\nratio with / without: {with_t / without:.3f} (target >= 0.95)")


def main(argv: Sequence[str] | None = None) -> int:
    asyncio.run(_main(_parse(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
