"""``python -m benchmarks.search``: job search at production size (issue 45, item 2;
docs/search.md).

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
- a non-selective payload field (half the table: ``plan``) with the index;
- with the opt-in error index (``jobs_error_search_idx``, pg_trgm; migration 0023) the
  error text of one attempt again, a text of about ten jobs' last errors, one in every
  failed job's (fills its page from the walk), and that one with a kind no job has (the
  probe finds it not selective: partial).

``--indexes`` names the opt-in indexes measured (default ``payload,error``), each built
through ``store.add_search_index`` (``skiplock schema index add``) at ``--jobs`` (its
build time and size). Then the write cost of each: ``--enqueues`` jobs enqueued into the
full table in batches of 100 and a tenth as many one per call, and ten times as many rows
by one ``INSERT ... SELECT`` (the database's own cost, without a client), before and after
(median of ``--rounds``); for the error index, which a job pays for when it fails, also
``--enqueues`` jobs marked failed by one ``UPDATE`` (their last error and an attempt's).
And into an empty table of another throw-away schema, without either (the schema before
migration 0022), with ``jobs_errored_idx`` (as shipped) and with each opt-in index too,
interleaved ``--rounds`` times. ``--enqueue-only`` runs only the empty-table part. It
prints Markdown.
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
from skiplock.adapters._pg import SEARCH_INDEXES
from skiplock.engine import AsyncEngine, Enqueue, Settings

_CHUNK = 1_000_000

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


async def _searches(operator: Any, size: int, repeat: int, index: str | None) -> list[str]:
    """The searches without an opt-in index (``index`` None), or those ``index`` serves."""
    rng = random.Random(45)
    rows: list[str] = []

    def pick(step: int) -> int:
        return rng.randrange(1, size // step) * step

    payload: list[tuple[str, Any]] = [
        ("payload `user_id=N` (1 job)", lambda n: {"payload": {"user_id": pick(1)}}),
        ("payload `org=N` (100 jobs)", lambda n: {"payload": {"org": pick(1) % 100_000}}),
    ]
    one_error = ("error text of one attempt", lambda n: {"error": f"'account-{pick(100)}'"})
    every = {"error": "timeouterror"}
    common = [
        ("error text of every failed job", lambda n: every),
        ("that text, a kind no job has", lambda n: every | {"kind": "none.such"}),
    ]
    if index is None:
        cases = [
            ("idempotency key (1 job)", lambda n: {"idempotency_key": f"order-{pick(10)}"}),
            one_error,
            *common,
            *payload,
        ]
    elif index == "payload":
        cases = [
            *payload,
            ("payload `plan=pro` (half the table)", lambda n: {"payload": {"plan": "pro"}}),
        ]
    else:
        cases = [
            one_error,
            # "user 5432": the last errors of users 543200 and 5432000 to 5432900.
            ("error text of ~10 jobs", lambda n: {"error": f"user {pick(100) // 1000}"}),
            *common,
        ]
    for name, make in cases:
        took, partial, found = await _timed(operator, repeat, make)
        used = "none" if index is None else index
        rows.append(f"| {name} | {used} | {_ms(took)} | {partial}/{repeat} | {found} |")
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


_FAIL = """
UPDATE {jobs} SET status = 'dead', last_error = 'RuntimeError: bench ' || id,
    errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'worker_id', 'w',
        'claimed_at', null, 'failed_at', now(), 'error', 'OSError: bench ' || id))
WHERE id > %s AND id <= %s AND last_error IS NULL AND errors IS NULL
"""


async def _write_cost(
    dsn: str, store: Any, count: int, rounds: int, first: int
) -> tuple[list[float], int]:
    """Into the full table: jobs/s of ``count`` jobs in batches of 100, a tenth as many
    one per call, 10 x ``count`` rows by one INSERT ... SELECT and ``count`` jobs marked
    failed by one UPDATE (medians of ``rounds``); and the next id to fail. ``first``: the
    id after which jobs are failed (each round fails jobs that never failed)."""
    batched, single, bulk, failed = [], [], [], []
    jobs = sql.Identifier(SCHEMA, "jobs")
    for _ in range(rounds):
        batched.append(await _enqueue_rate(store, count, 100))
        single.append(await _enqueue_rate(store, count // 10, 1))
        began = time.perf_counter()
        await _pg.execute(dsn, sql.SQL(_BULK).format(jobs=jobs), [10 * count])
        bulk.append(10 * count / (time.perf_counter() - began))
        last = first + count * 100 // 99 + 1  # a job in 100 failed already
        began = time.perf_counter()
        await _pg.execute(dsn, sql.SQL(_FAIL).format(jobs=jobs), [first, last])
        failed.append(count / (time.perf_counter() - began))
        first = last
    return [statistics.median(rates) for rates in (batched, single, bulk, failed)], first


#: The enqueue configurations compared: the schema before migration 0022 (no search
#: index), the schema as shipped (jobs_errored_idx, which an enqueue skips), then the
#: schema with each opt-in index measured.
_BASE_CONFIGS = ("before 0022", "as shipped")


def _configs(indexes: list[str]) -> list[str]:
    return [*_BASE_CONFIGS, *(f"with the {name} index" for name in indexes)]


async def _enqueue_cost(dsn: str, count: int, rounds: int, indexes: list[str]) -> list[str]:
    """Jobs/s enqueued into an empty table in each configuration (interleaved rounds)."""
    adapter = get_adapter("psycopg")
    schema = "search_enqueue"
    await adapter.apply_schema(dsn, schema)
    store = await adapter.open_store(dsn, schema, 2)
    jobs = sql.Identifier(schema, "jobs")
    errored = sql.SQL(
        "CREATE INDEX IF NOT EXISTS jobs_errored_idx ON {} (id)"
        " WHERE (last_error IS NOT NULL OR errors IS NOT NULL)"
    ).format(jobs)
    configs = _configs(indexes)
    rates: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(rounds):
            for config in configs:
                for batch in (1, 100, 0):
                    await _pg.execute(dsn, sql.SQL("TRUNCATE {}").format(jobs))
                    for name in indexes:
                        await store.drop_search_index(name)
                    drop = sql.SQL("DROP INDEX IF EXISTS {}")
                    await _pg.execute(dsn, drop.format(sql.Identifier(schema, "jobs_errored_idx")))
                    if config != configs[0]:
                        await _pg.execute(dsn, errored)
                    for name in indexes:
                        if config == f"with the {name} index":
                            await store.add_search_index(name, create_extension=True)
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
        base = statistics.median(rates[(configs[0], batch)])
        cells = [f"{base:,.0f}"]
        for config in configs[1:]:
            rate = statistics.median(rates[(config, batch)])
            cells.append(f"{rate:,.0f} ({(rate / base - 1) * 100:+.0f} %)")
        rows.append(f"| {what} | {' | '.join(cells)} |")
    return rows


async def run(args: argparse.Namespace) -> None:
    indexes: list[str] = args.indexes
    name = f"{_pg.DB_PREFIX}search_{_pg.new_run_id()}"
    if args.enqueue_only:
        async with _pg.fresh_database(_pg.default_dsn(), name) as dsn:
            enqueue = await _enqueue_cost(dsn, args.enqueues, args.rounds, indexes)
        _print_enqueue(args, enqueue)
        return
    async with _pg.fresh_database(_pg.default_dsn(), name) as dsn:
        adapter = get_adapter("psycopg")
        await adapter.apply_schema(dsn, SCHEMA)
        jobs = sql.Identifier(SCHEMA, "jobs")
        await _pg.execute(
            dsn, sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(jobs)
        )
        began = time.perf_counter()
        for first in range(1, args.jobs + 1, _CHUNK):
            last = min(first + _CHUNK - 1, args.jobs)
            await _pg.execute(dsn, sql.SQL(_FILL).format(jobs=jobs), [first, last, args.jobs])
            _log(f"{last:,} jobs loaded ({time.perf_counter() - began:.0f} s)")
        await _pg.settle(dsn)
        _log(f"loaded and analyzed in {time.perf_counter() - began:.0f} s")
        [table] = await _pg.fetch_one(
            dsn, "SELECT pg_size_pretty(pg_table_size(%s::regclass))", [f"{SCHEMA}.jobs"]
        )
        store = await adapter.open_store(dsn, SCHEMA, 2)
        rows: list[str] = []
        costs: dict[str, list[float]] = {}
        built: dict[str, tuple[float, str]] = {}
        # The ids to fail start after this one (a moving range), past those the error
        # searches walk.
        fails = args.jobs // 2
        try:
            operator = AsyncEngine(store, Settings()).operator()
            rows += await _searches(operator, args.jobs, args.repeat, None)
            costs["none"], fails = await _write_cost(dsn, store, args.enqueues, args.rounds, fails)
            _log(f"writes at size without an opt-in index: {costs['none']}")
            for index in indexes:
                began = time.perf_counter()
                await store.add_search_index(index, create_extension=True, progress=_log)
                took = time.perf_counter() - began
                [size] = await _pg.fetch_one(
                    dsn,
                    "SELECT pg_size_pretty(pg_relation_size(%s::regclass))",
                    [f"{SCHEMA}.{SEARCH_INDEXES[index].index}"],
                )
                built[index] = (took, size)
                _log(f"{index} index built in {took:.0f} s, {size}")
                await _pg.settle(dsn)
                rows += await _searches(operator, args.jobs, args.repeat, index)
                costs[index], fails = await _write_cost(
                    dsn, store, args.enqueues, args.rounds, fails
                )
                _log(f"writes at size with the {index} index: {costs[index]}")
                await store.drop_search_index(index)  # each measured on its own
        finally:
            await store.close()
        enqueue = await _enqueue_cost(dsn, args.enqueues, args.rounds, indexes)
    print(f"Search at {args.jobs:,} jobs, limit 50, {args.repeat} searches each (ms):\n")
    print("| search | opt-in index | p50 | p99 | max | partial pages | jobs found |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print()
    for index, (took, size) in built.items():
        print(f"The {index} index: built in {took:.0f} s, {size} (the table: {table}).")
    print(f"\nWrites into the table of {args.jobs:,} jobs, median of {args.rounds} rounds:\n")
    print(f"| write | without | {' | '.join(f'with the {i} index' for i in built)} |")
    print(f"|---|---:|{'---:|' * len(built)}")
    for n, what in enumerate(
        (
            "enqueue, batches of 100 (jobs/s)",
            "enqueue, one per call (jobs/s)",
            "INSERT ... SELECT (rows/s)",
            "UPDATE marking jobs failed (rows/s)",
        )
    ):
        was = costs["none"][n]
        cells = [f"{costs[i][n]:,.0f} ({(costs[i][n] / was - 1) * 100:+.0f} %)" for i in built]
        print(f"| {what} | {was:,.0f} | {' | '.join(cells)} |")
    _print_enqueue(args, enqueue)


def _print_enqueue(args: argparse.Namespace, enqueue: list[str]) -> None:
    configs = _configs(args.indexes)
    print(f"\nEnqueue into an empty table, median of {args.rounds} rounds (jobs/s; rows/s):\n")
    print(f"| enqueue | {' | '.join(configs)} |")
    print(f"|---|{'---:|' * len(configs)}")
    print("\n".join(enqueue))


def _index_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in SEARCH_INDEXES:
            raise argparse.ArgumentTypeError(f"no search index {name!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--enqueues", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--enqueue-only", action="store_true", help="only the enqueue cost into an empty table"
    )
    parser.add_argument(
        "--indexes",
        type=_index_names,
        default=list(SEARCH_INDEXES),
        help="the opt-in search indexes measured, comma-separated (default: payload,error)",
    )
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
