"""``python -m benchmarks.search``: job search at production size (issue 45, item 2;
docs/admin.md, "Search").

A throw-away database (dropped at the end, also on failure) holding ``--jobs`` jobs
(default 10,000,000), bulk-loaded with ``INSERT ... SELECT generate_series`` in chunks of
1,000,000 rows: every payload ``{"user_id": i, "org": i % 100000, "plan": "pro"|"free"}``,
a job in 100 failed once (its last error and its recorded attempt, both naming ``i``), a
job in 10 with an idempotency key; then ``VACUUM ANALYZE`` (as autovacuum would). Each
search is run ``--repeat`` times through ``AsyncEngine.operator().list_jobs`` (limit 50,
the dashboard's page; a different value each time), p50/p99/max in milliseconds and
whether its pages were partial:

- an idempotency key (its unique index);
- an error text that one job's recorded attempt holds (the walk of the failed jobs);
- a payload field of one job, and one of 100 jobs (``org``), without the payload index
  (a bounded walk: partial pages), then with it (``jobs_payload_search_idx``, opt-in);
- a non-selective payload field (half the table: ``plan``) with the index.

Then the enqueue cost of the search's indexes: ``--enqueues`` jobs enqueued in batches of
100 and a tenth as many one per call, into an empty table of another throw-away schema,
without either (the schema before migration 0022), with ``jobs_errored_idx`` (as
shipped) and with the opt-in payload index too, interleaved ``--rounds`` times (jobs/s,
median of the rounds; also ten times as many rows by one ``INSERT ... SELECT``: the
database's own cost, without a client); and the payload index's build time and size at
``--jobs``. ``--enqueue-only`` runs only the empty-table part. It prints Markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from typing import Any

from psycopg import sql

from benchmarks import _pg
from benchmarks._scenarios import SCHEMA
from benchmarks.adapters import get_adapter
from skiplock.engine import AsyncEngine, Enqueue, Settings

_CHUNK = 1_000_000
#: The opt-in index, as docs/admin.md ("Search") gives it.
_INDEX = "CREATE INDEX {name} ON {jobs} USING gin (payload jsonb_path_ops)"

_FILL = """
INSERT INTO {jobs} (kind, tenant_id, payload, status, available_at, created_at, claimed_at,
                    attempts, completed_at, last_error, errors, idempotency_key)
SELECT 'kind.' || (i %% 4), 'tenant-' || (i / 4 %% 8),
       jsonb_build_object('user_id', i, 'org', i %% 100000,
                          'plan', CASE WHEN i %% 2 = 0 THEN 'pro' ELSE 'free' END),
       CASE WHEN i %% 100 = 0 THEN 'dead' ELSE 'succeeded' END, t, t, t, 1, t,
       CASE WHEN i %% 100 = 0 THEN 'TimeoutError: user ' || i END,
       CASE WHEN i %% 100 = 0 THEN jsonb_build_array(jsonb_build_object('attempt', 1,
           'worker_id', 'w', 'claimed_at', t, 'failed_at', t,
           'error', 'KeyError: ''account-' || i || '''')) END,
       CASE WHEN i %% 10 = 0 THEN 'order-' || i END
FROM generate_series(%s::bigint, %s::bigint) AS i
CROSS JOIN LATERAL (SELECT now() - (i::float8 / %s) * interval '1 day' AS t) AS s
"""


def _log(message: str) -> None:
    print(f"[search] {message}", file=sys.stderr, flush=True)


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1000:.1f} | {p99 * 1000:.1f} | {ordered[-1] * 1000:.1f}"


async def _timed(operator: Any, repeat: int, make: Any) -> tuple[list[float], int, int]:
    """``repeat`` searches (after two warm-ups): their seconds, how many pages were
    partial and how many jobs they found in all."""
    for n in range(2):
        await operator.list_jobs(limit=51, **make(n))
    took, partial, found = [], 0, 0
    for n in range(repeat):
        began = time.perf_counter()
        page = await operator.list_jobs(limit=51, **make(n + 2))
        took.append(time.perf_counter() - began)
        partial += page.resume_after is not None
        found += len(page)
    return took, partial, found


async def _searches(operator: Any, size: int, repeat: int, indexed: bool) -> list[str]:
    rng = random.Random(45)
    rows: list[str] = []

    def pick(step: int) -> int:
        return rng.randrange(1, size // step) * step

    cases: list[tuple[str, Any]] = [
        ("payload `user_id=N` (1 job)", lambda n: {"payload": {"user_id": pick(1)}}),
        ("payload `org=N` (100 jobs)", lambda n: {"payload": {"org": pick(1) % 100_000}}),
    ]
    if indexed:
        cases.append(
            ("payload `plan=pro` (half the table)", lambda n: {"payload": {"plan": "pro"}})
        )
    else:
        cases = [
            ("idempotency key (1 job)", lambda n: {"idempotency_key": f"order-{pick(10)}"}),
            ("error text of one attempt", lambda n: {"error": f"'account-{pick(100)}'"}),
            *cases,
        ]
    for name, make in cases:
        took, partial, found = await _timed(operator, repeat, make)
        index = "with" if indexed else "without"
        rows.append(f"| {name} | {index} | {_ms(took)} | {partial}/{repeat} | {found} |")
        _log(rows[-1])
    return rows


async def _enqueue_rate(store: Any, count: int, batch: int) -> float:
    engine = AsyncEngine(store, Settings())
    # Keys of their own: the searches above never find these jobs.
    payload = {"seq": 0, "team": 0, "plan": "pro", "items": [1, 2, 3], "note": "x" * 80}
    await engine.enqueue("bench.enqueue", payload)  # warm: a pooled connection, plans
    began = time.perf_counter()
    for first in range(0, count, batch):
        if batch == 1:
            await engine.enqueue("bench.enqueue", payload | {"seq": first})
        else:
            jobs = [Enqueue("bench.enqueue", payload | {"seq": first + k}) for k in range(batch)]
            await engine.enqueue_many(jobs)
    return count / (time.perf_counter() - began)


_BULK = """
INSERT INTO {jobs} (kind, payload)
SELECT 'bench.bulk', jsonb_build_object('seq', i, 'team', i %% 100000, 'plan', 'pro',
                                        'note', repeat('x', 80))
FROM generate_series(1, %s) AS i
"""


async def _enqueue_at_size(dsn: str, store: Any, count: int, rounds: int) -> list[float]:
    """Into the full table: jobs/s of ``count`` jobs in batches of 100, a tenth as many
    one per call, and 10 x ``count`` rows by one INSERT ... SELECT (medians of
    ``rounds``)."""
    batched, single, bulk = [], [], []
    jobs = sql.Identifier(SCHEMA, "jobs")
    for _ in range(rounds):
        batched.append(await _enqueue_rate(store, count, 100))
        single.append(await _enqueue_rate(store, count // 10, 1))
        began = time.perf_counter()
        await _pg.execute(dsn, sql.SQL(_BULK).format(jobs=jobs), [10 * count])
        bulk.append(10 * count / (time.perf_counter() - began))
    return [statistics.median(batched), statistics.median(single), statistics.median(bulk)]


#: The enqueue configurations compared: the schema before migration 0022 (no search
#: index), the schema as shipped (jobs_errored_idx, which an enqueue skips) and the
#: schema with the opt-in payload index.
_CONFIGS = ("before 0022", "as shipped", "with the payload index")


async def _enqueue_cost(dsn: str, count: int, rounds: int) -> list[str]:
    """Jobs/s enqueued into an empty table in each configuration (interleaved rounds)."""
    adapter = get_adapter("psycopg")
    schema = "search_enqueue"
    await adapter.apply_schema(dsn, schema)
    store = await adapter.open_store(dsn, schema, 2)
    jobs = sql.Identifier(schema, "jobs")
    payload_index = sql.Identifier("jobs_payload_search_idx")
    errored = sql.SQL(
        "CREATE INDEX IF NOT EXISTS jobs_errored_idx ON {} (id)"
        " WHERE (last_error IS NOT NULL OR errors IS NOT NULL)"
    ).format(jobs)
    rates: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(rounds):
            for config in _CONFIGS:
                for batch in (1, 100, 0):
                    await _pg.execute(dsn, sql.SQL("TRUNCATE {}").format(jobs))
                    for name in ("jobs_payload_search_idx", "jobs_errored_idx"):
                        drop = sql.SQL("DROP INDEX IF EXISTS {}")
                        await _pg.execute(dsn, drop.format(sql.Identifier(schema, name)))
                    if config != _CONFIGS[0]:
                        await _pg.execute(dsn, errored)
                    if config == _CONFIGS[2]:
                        index = sql.SQL(_INDEX).format(name=payload_index, jobs=jobs)
                        await _pg.execute(dsn, index)
                    await _pg.execute(dsn, sql.SQL("VACUUM ANALYZE {}").format(jobs))
                    if batch:
                        rate = await _enqueue_rate(
                            store, count if batch > 1 else count // 10, batch
                        )
                    else:  # the database's own cost, without a client's round trips
                        began = time.perf_counter()
                        await _pg.execute(dsn, sql.SQL(_BULK).format(jobs=jobs), [10 * count])
                        rate = 10 * count / (time.perf_counter() - began)
                    rates.setdefault((config, batch), []).append(rate)
                    _log(f"enqueue batch={batch} {config}: {rate:,.0f} jobs/s")
    finally:
        await store.close()
    rows = []
    for batch, what in ((1, "one per call"), (100, "batches of 100"), (0, "INSERT ... SELECT")):
        base = statistics.median(rates[(_CONFIGS[0], batch)])
        cells = [f"{base:,.0f}"]
        for config in _CONFIGS[1:]:
            rate = statistics.median(rates[(config, batch)])
            cells.append(f"{rate:,.0f} ({(rate / base - 1) * 100:+.0f} %)")
        rows.append(f"| {what} | {' | '.join(cells)} |")
    return rows


async def run(args: argparse.Namespace) -> None:
    name = f"{_pg.DB_PREFIX}search_{_pg.new_run_id()}"
    if args.enqueue_only:
        async with _pg.fresh_database(_pg.default_dsn(), name) as dsn:
            enqueue = await _enqueue_cost(dsn, args.enqueues, args.rounds)
        _print_enqueue(args, enqueue)
        return
    async with _pg.fresh_database(_pg.default_dsn(), name) as dsn:
        adapter = get_adapter("psycopg")
        await adapter.apply_schema(dsn, SCHEMA)
        await _pg.execute(
            dsn,
            sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
                sql.Identifier(SCHEMA, "jobs")
            ),
        )
        jobs = sql.Identifier(SCHEMA, "jobs")
        began = time.perf_counter()
        for first in range(1, args.jobs + 1, _CHUNK):
            last = min(first + _CHUNK - 1, args.jobs)
            await _pg.execute(dsn, sql.SQL(_FILL).format(jobs=jobs), [first, last, args.jobs])
            _log(f"{last:,} jobs loaded ({time.perf_counter() - began:.0f} s)")
        await _pg.settle(dsn)
        _log(f"loaded and analyzed in {time.perf_counter() - began:.0f} s")
        store = await adapter.open_store(dsn, SCHEMA, 2)
        rows: list[str] = []
        try:
            operator = AsyncEngine(store, Settings()).operator()
            rows += await _searches(operator, args.jobs, args.repeat, indexed=False)
            before = await _enqueue_at_size(dsn, store, args.enqueues, args.rounds)
            _log(f"enqueue at size without the payload index: {before}")
            began = time.perf_counter()
            index = sql.Identifier("jobs_payload_search_idx")
            await _pg.execute(dsn, sql.SQL(_INDEX).format(name=index, jobs=jobs))
            built = time.perf_counter() - began
            [size] = await _pg.fetch_one(
                dsn,
                "SELECT pg_size_pretty(pg_relation_size(%s::regclass))",
                [f"{SCHEMA}.jobs_payload_search_idx"],
            )
            [table] = await _pg.fetch_one(
                dsn, "SELECT pg_size_pretty(pg_table_size(%s::regclass))", [f"{SCHEMA}.jobs"]
            )
            _log(f"index built in {built:.0f} s, {size}")
            await _pg.settle(dsn)
            rows += await _searches(operator, args.jobs, args.repeat, indexed=True)
            after = await _enqueue_at_size(dsn, store, args.enqueues, args.rounds)
            _log(f"enqueue at size with the payload index: {after}")
        finally:
            await store.close()
        enqueue = await _enqueue_cost(dsn, args.enqueues, args.rounds)
    print(f"Search at {args.jobs:,} jobs, limit 50, {args.repeat} searches each (ms):\n")
    print("| search | payload index | p50 | p99 | max | partial pages | jobs found |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(f"\nThe payload index: built in {built:.0f} s, {size} (the table: {table}).\n")
    print(f"Enqueue into the table of {args.jobs:,} jobs, median of {args.rounds} rounds:\n")
    print("| enqueue | without the payload index | with it |")
    print("|---|---:|---:|")
    for what, was, now in zip(
        ("batches of 100 (jobs/s)", "one per call (jobs/s)", "INSERT ... SELECT (rows/s)"),
        before,
        after,
        strict=True,
    ):
        print(f"| {what} | {was:,.0f} | {now:,.0f} ({(now / was - 1) * 100:+.0f} %) |")
    _print_enqueue(args, enqueue)


def _print_enqueue(args: argparse.Namespace, enqueue: list[str]) -> None:
    print(f"\nEnqueue into an empty table, median of {args.rounds} rounds (jobs/s; rows/s):\n")
    print(f"| enqueue | {' | '.join(_CONFIGS)} |")
    print("|---|---:|---:|---:|")
    print("\n".join(enqueue))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--enqueues", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--enqueue-only", action="store_true", help="only the enqueue cost into an empty table"
    )
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
