"""The operator reads never scan jobs (issue 29, docs/internals.md "Operator reads").

A jobs table of 200,000 jobs in a production mix (succeeded over the last day, dead,
pending due, a few scheduled, a few running), filled by bulk inserts and never analyzed
(or analyzed while empty: stale statistics), its count deltas folded as a worker's counts
loop does, then a few more changes left unfolded. ``counts``, ``health_queues``,
``health_workers`` and ``finished_counts`` (minute buckets, and 7-second buckets whose
edges cut minutes) read the totals tables and, in jobs, only index entries bounded by the
groups and the jobs of the cut minutes; the roll-up's queue sample (``sample_queues``)
reads the groups and at most ``PICKUP_SAMPLE`` recent jobs: no node reads more than
``BOUND`` rows, and jobs is never read by a sequential scan. The plans inside the
functions (``pending_probe``, ``finished_kind_counts``, ``sample_queues``) come from
auto_explain, as in test_plans.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from skiplock.adapters._pg._rows_reads import bucket_params, health_queues_params
from skiplock.adapters._pg._rows_upkeep import roll_up_params
from skiplock.adapters._pg._sql import lock_key, neutral_query
from skiplock.core._history import PICKUP_SAMPLE
from tests.pgfixtures import create_database, drop_database
from tests.psycopg.test_plans import _explain, _nodes, _outline, _rows_read

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

SCHEMA = "skiplock"
JOBS = 200_000
SCHEDULED = 100
RUNNING = 64
#: No node of an operator read reads this many rows (the table has JOBS).
BOUND = 2_000

# i % 10: 0 dead, 1 pending (due), else succeeded; kind and tenant independent of it;
# completions spread over the last day.
_FILL = """
    INSERT INTO skiplock.jobs (kind, tenant_id, status, available_at, created_at,
                               claimed_at, attempts, completed_at)
    SELECT 'k' || (i / 10 %% 4), 't' || (i / 40 %% 8),
        CASE i %% 10 WHEN 0 THEN 'dead' WHEN 1 THEN 'pending' ELSE 'succeeded' END,
        t, t, CASE WHEN i %% 10 <> 1 THEN t END, CASE WHEN i %% 10 <> 1 THEN 1 ELSE 0 END,
        CASE WHEN i %% 10 <> 1 THEN t END
    FROM generate_series(1, %(n)s) AS i
    CROSS JOIN LATERAL (SELECT now() - (i::float8 / %(n)s) * interval '1 day' AS t) AS s
"""

_SCHEDULED = """
    INSERT INTO skiplock.jobs (kind, tenant_id, available_at)
    SELECT 'k' || (i %% 4), 't' || (i %% 8), now() + interval '1 hour'
    FROM generate_series(1, %(n)s) AS i
"""

_RUN = """
    UPDATE skiplock.jobs SET status = 'running', claimed_by = 'w', claimed_at = now(),
        claims = 1
    WHERE id IN (SELECT id FROM skiplock.jobs WHERE status = 'pending' ORDER BY id LIMIT %(n)s)
"""


@pytest.fixture(scope="module", params=["none", "empty"])
def table(request: pytest.FixtureRequest) -> Iterator[str]:
    """The production mix, no statistics or those of an empty table; folded, then RUNNING
    claims and the SCHEDULED jobs left as unfolded deltas. Every test rolls back."""
    name, dsn = create_database(with_schema=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table in ("jobs", "job_counts", "job_count_deltas", "job_finished_minutes"):
                conn.execute(f"ALTER TABLE skiplock.{table} SET (autovacuum_enabled = false)")
            if request.param == "empty":
                conn.execute("ANALYZE skiplock.jobs")
            conn.execute(_FILL, {"n": JOBS})
            conn.execute("SELECT skiplock.roll_up_job_counts(%s)", [lock_key(SCHEMA, "counts")])
            conn.execute("VACUUM skiplock.job_count_deltas")  # as its autovacuum would
            conn.execute(_SCHEDULED, {"n": SCHEDULED})
            conn.execute(_RUN, {"n": RUNNING})
            conn.execute("INSERT INTO skiplock.workers (id, host, pid) VALUES ('w', 'h', 1)")
            [(analyzed,)] = conn.execute(
                "SELECT reltuples FROM pg_class WHERE oid = 'skiplock.jobs'::regclass"
            ).fetchall()
            assert analyzed <= 0
        yield dsn
    finally:
        drop_database(name)


def _assert_never_scans_jobs(plans: list[dict[str, Any]], what: str, bound: int = BOUND) -> None:
    outline = "\n\n".join(_outline(plan) for plan in plans)
    for node in (node for plan in plans for node in _nodes(plan)):
        assert _rows_read(node) < bound, f"{what} reads O(table):\n{outline}"
        if node.get("Relation Name") == "jobs":
            assert node["Node Type"] != "Seq Scan", f"{what}:\n{outline}"


def _recount(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_counts_never_scan_jobs(table: str, mode: str) -> None:
    plans, rows = _explain(table, neutral_query("counts", SCHEMA), {}, mode)
    _assert_never_scans_jobs(plans, "counts")
    got = sorted((r[0], r[1], r[2], r[3]) for r in rows)
    expected = _recount(
        table,
        "SELECT status, kind, tenant_id, count(*) FROM skiplock.jobs GROUP BY 1, 2, 3"
        " ORDER BY 1, 2, 3",
    )
    assert got == sorted(expected)
    assert {r[0] for r in rows} == {"pending", "running", "succeeded", "dead"}
    assert all((r[4] is not None) == (r[0] == "pending") for r in rows)
    assert rows[0][5] > 0  # the backlog: the claims and scheduled jobs, unfolded


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_health_never_scans_jobs(table: str, mode: str) -> None:
    plans, rows = _explain(
        table, neutral_query("health_queues", SCHEMA), health_queues_params(), mode
    )
    _assert_never_scans_jobs(plans, "health_queues")
    assert len(rows) == 32
    assert sum(r[3] for r in rows) == SCHEDULED  # scheduled_upto: exact below the bound
    assert sum(r[6] for r in rows) == RUNNING
    plans, rows = _explain(table, neutral_query("health_workers", SCHEMA), {}, mode)
    _assert_never_scans_jobs(plans, "health_workers")
    assert [r[7] for r in rows] == [RUNNING]  # running, after id .. heartbeat_at
    assert rows[0][8] is not None  # the oldest claim
    # Running jobs under ids without a worker row: read through the running jobs' index.
    plans, rows = _explain(table, neutral_query("health_orphans", SCHEMA), {}, mode)
    _assert_never_scans_jobs(plans, "health_orphans")
    assert rows == []


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("bucket", [60, 7])
def test_throughput_never_scans_jobs(table: str, mode: str, bucket: int) -> None:
    """Minute buckets read only the finished minutes, never jobs; 7-second buckets cut
    every minute, so they read the window's finished jobs through the completed_at
    indexes (about 8,300 of the 180,000 finished over the day), not the table."""
    with psycopg.connect(table, autocommit=True) as conn:
        [(since,)] = conn.execute(
            "SELECT date_bin('1 minute', now(), 'epoch') - interval '1 hour'"
        ).fetchall()
    params = bucket_params(since, timedelta(seconds=bucket))
    plans, rows = _explain(table, neutral_query("finished_counts", SCHEMA), params, mode)
    expected = _recount(
        table,
        f"SELECT date_bin(interval '{bucket} s', completed_at, '{since.isoformat()}'), kind,"
        " status, count(*) FROM skiplock.jobs WHERE status IN ('succeeded', 'failed', 'dead',"
        f" 'cancelled') AND completed_at >= '{since.isoformat()}' GROUP BY 1, 2, 3",
    )
    assert sorted(rows) == sorted(expected)
    assert len({r[1] for r in rows}) == 4  # per kind
    window = sum(r[3] for r in expected)
    assert window > 5_000
    _assert_never_scans_jobs(plans, "finished_counts", BOUND if bucket == 60 else 2 * window)
    read_jobs = sum(
        _rows_read(node)
        for plan in plans
        for node in _nodes(plan)
        if node.get("Relation Name") == "jobs"
    )
    assert (read_jobs == 0) == (bucket == 60)


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_the_queue_sample_never_scans_jobs(table: str, mode: str) -> None:
    """A roll-up that takes the minute's samples: the pending groups' probes and the
    claim latency of at most PICKUP_SAMPLE jobs of the minute before (about 110 of the
    day's 160,000 successes finished in any minute here)."""
    params = roll_up_params(lock_key(SCHEMA, "counts"))
    plans, rows = _explain(table, neutral_query("roll_up_counts", SCHEMA), params, mode)
    _assert_never_scans_jobs(plans, "sample_queues")
    [(folded, sampled)] = rows
    assert folded > 0  # the claims and scheduled jobs left unfolded
    assert sampled == 5  # four kinds and their sum
    with psycopg.connect(table) as conn, conn.transaction(force_rollback=True):
        conn.execute("SELECT skiplock.sample_queues(%(bound)s, %(pickups)s, %(keep)s)", params)
        got = conn.execute(
            "SELECT kind, pending, due, running, claims FROM skiplock.queue_samples"
        ).fetchall()
        expected = conn.execute(
            """
            SELECT coalesce(kind, ''), count(*) FILTER (WHERE status = 'pending'),
                count(*) FILTER (WHERE status = 'pending' AND available_at <= now()),
                count(*) FILTER (WHERE status = 'running'),
                least(count(*) FILTER (WHERE status = 'succeeded' AND completed_at
                    >= date_bin('1 minute', now(), 'epoch') - interval '1 minute'
                    AND completed_at < date_bin('1 minute', now(), 'epoch')), %s)
            FROM skiplock.jobs GROUP BY ROLLUP (kind)
            """,
            [PICKUP_SAMPLE],
        ).fetchall()
    assert sorted(got) == sorted(expected)
    assert sum(r[4] for r in got if r[0]) == dict((r[0], r[4]) for r in got)[""] > 50
