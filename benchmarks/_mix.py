"""The production mix of issue 29, shared by ``benchmarks.counts`` and ``benchmarks.size``.

``size`` jobs: 80 % succeeded over the last day, 10 % dead, 10 % pending and due; four
kinds, eight tenants. Bulk-inserted with ``INSERT ... SELECT`` (in chunks), never
analyzed (autovacuum off), the count deltas of each chunk folded into the running totals
(as a worker's counts loop would) and the deltas table vacuumed at the end (as its
autovacuum settings would).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from psycopg import sql

from benchmarks import _pg
from benchmarks._scenarios import SCHEMA

#: The mix, as one INSERT ... SELECT over generate_series(first, last) of n: i % 10 picks
#: the state (0: dead, 1: pending, else succeeded), (i / 10) % 4 the kind, (i / 40) % 8
#: the tenant (independent of each other); completion times spread over the last day.
_MIX = """
INSERT INTO {jobs} (kind, tenant_id, payload, status, available_at, created_at,
                    claimed_at, attempts, completed_at, last_error)
SELECT 'kind.' || (i / 10 %% 4), 'tenant-' || (i / 40 %% 8), jsonb_build_object('i', i),
       CASE i %% 10 WHEN 0 THEN 'dead' WHEN 1 THEN 'pending' ELSE 'succeeded' END,
       t - interval '1 second', t - interval '1 second',
       CASE WHEN i %% 10 <> 1 THEN t END,
       CASE WHEN i %% 10 <> 1 THEN 1 ELSE 0 END,
       CASE WHEN i %% 10 <> 1 THEN t END,
       CASE WHEN i %% 10 = 0 THEN 'boom' END
FROM generate_series(%s::bigint, %s::bigint) AS i
CROSS JOIN LATERAL (SELECT now() - (i::float8 / %s) * interval '1 day' AS t) AS s
"""


def _log(message: str) -> None:
    print(f"[mix] {message}", file=sys.stderr, flush=True)


async def load(conninfo: str, store: Any, size: int, *, chunk: int | None = None) -> float:
    """Insert ``size`` jobs of the mix into the ``bench`` schema's ``jobs`` (the schema
    applied, autovacuum off) in chunks of ``chunk`` rows (default: one statement),
    folding the count deltas after each through ``store.roll_up_counts()``, then vacuum
    the deltas table; returns the seconds it took."""
    jobs = sql.Identifier(SCHEMA, "jobs")
    step = chunk or size
    started = time.perf_counter()
    for first in range(1, size + 1, step):
        last = min(first + step - 1, size)
        await _pg.execute(conninfo, sql.SQL(_MIX).format(jobs=jobs), [first, last, size])
        await store.roll_up_counts()
        if last < size:
            _log(f"{last:,} of {size:,} jobs loaded ({time.perf_counter() - started:.0f} s)")
    # What the deltas table's own autovacuum settings (any 10,000 dead rows) do within a
    # minute of the load; jobs itself stays unanalyzed and unvacuumed.
    await _pg.execute(
        conninfo, sql.SQL("VACUUM {}").format(sql.Identifier(SCHEMA, "job_count_deltas"))
    )
    return time.perf_counter() - started
