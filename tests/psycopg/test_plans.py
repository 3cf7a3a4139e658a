"""Plans of the hot statements do not depend on statistics (docs/performance.md).

A jobs table of 50,000 due jobs, the last 20,000 in claim order running under one
worker, plus 20,000 jobs that succeeded two days ago, with no statistics (filled by a
bulk insert, never analyzed) or stale ones (analyzed while empty, while every job had
succeeded, or while every job was pending): each claim, each completion and each
retention batch, in a custom and in a generic plan, reads rows in proportion to its
batch, never to the table. EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) shows the statement's
plan, auto_explain the plan of the index walk inside ``claim_candidates`` and
``purge_candidates`` (loading it takes a superuser, as the fixtures' server user is).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import attrs
import psycopg
import pytest

from skiplock.adapters._pg._ops import claim_steps, purge_audit_batch_steps, purge_batch_steps
from skiplock.adapters._pg._rows_jobs import (
    complete_one_params,
    complete_params,
    lease_params,
)
from skiplock.adapters._pg._rows_reads import bucket_params
from skiplock.adapters._pg._sql import convert, neutral_query
from skiplock.core import ClaimRequest, Completion, Lease, Retry, Succeeded
from tests.pgfixtures import create_database, drop_database

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

SCHEMA = "skiplock"
JOBS = 50_000
RUNNING = 20_000  # the last ones in claim order run under WORKER
WORKER = "w"
CLAIM_BATCH = 80
COMPLETE_BATCH = 100
OLD = 20_000  # succeeded two days ago: what a purge of jobs older than a day deletes
PURGE_BATCH = 100
#: A plan reads O(batch) rows if no node reads this many times its batch or more.
FACTOR = 10

# Four kinds and ten tenants, interleaved, each job due a millisecond after the previous.
_FILL = """
    INSERT INTO skiplock.jobs (kind, tenant_id, status, available_at)
    SELECT 'k' || mod(g, 4), 't' || mod(g, 10), %(status)s,
        now() - interval '1 hour' + g * interval '1 millisecond'
    FROM generate_series(1, %(n)s) AS g
"""

# Succeeded jobs completed two days ago, oldest first, a millisecond apart.
_FILL_OLD = """
    INSERT INTO skiplock.jobs (kind, tenant_id, status, available_at, completed_at)
    SELECT 'k' || mod(g, 4), 't' || mod(g, 10), 'succeeded', now() - interval '3 days',
        now() - interval '2 days' + g * interval '1 millisecond'
    FROM generate_series(1, %(n)s) AS g
"""

# Jobs that finished within the last hour (succeeded, then dead), spread over it, and dead
# jobs two days old: what throughput over the last hour counts, and what it must skip.
RECENT_SUCCEEDED = 300
RECENT_DEAD = 30
OLD_DEAD = 5_000
_FILL_FINISHED = """
    INSERT INTO skiplock.jobs (kind, tenant_id, status, available_at, completed_at)
    SELECT 'k' || mod(g, 4), 't' || mod(g, 10), %(status)s, now() - %(age)s::interval,
        now() - %(age)s::interval + g * (%(span)s::interval / %(n)s)
    FROM generate_series(0, %(n)s - 1) AS g
"""

_AUTO_EXPLAIN = (
    "auto_explain.log_min_duration = 0",
    "auto_explain.log_analyze = on",
    "auto_explain.log_buffers = on",
    "auto_explain.log_nested_statements = on",
    "auto_explain.log_format = json",
    "auto_explain.log_level = notice",
)


@pytest.fixture(scope="module", params=["none", "empty", "succeeded", "pending"])
def table(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database whose jobs table holds JOBS due jobs, RUNNING of them running, then OLD
    old succeeded jobs, with the statistics the parameter names: none, or taken while the
    table was empty, held only succeeded jobs, or held the same due jobs all pending (the
    old jobs came later). Shared by the tests of a module: every statement they run is
    rolled back."""
    stats = request.param
    expected = {"none": None, "empty": None, "succeeded": "succeeded", "pending": "pending"}
    name, dsn = create_database(with_schema=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Autovacuum must not analyze the table while the tests run.
            conn.execute("ALTER TABLE skiplock.jobs SET (autovacuum_enabled = false)")
            if stats == "empty":
                conn.execute("ANALYZE skiplock.jobs")
            elif stats == "succeeded":
                conn.execute(_FILL, {"status": "succeeded", "n": JOBS})
                conn.execute("ANALYZE skiplock.jobs")
                conn.execute("DELETE FROM skiplock.jobs")
            conn.execute(_FILL, {"status": "pending", "n": JOBS})
            if stats == "pending":
                conn.execute("ANALYZE skiplock.jobs")
            conn.execute(
                "UPDATE skiplock.jobs SET status = 'running', claimed_by = %s, claims = 1"
                " WHERE id IN (SELECT id FROM skiplock.jobs ORDER BY id DESC LIMIT %s)",
                [WORKER, RUNNING],
            )
            conn.execute(_FILL_OLD, {"n": OLD})
            for status, age, n in (
                ("dead", "2 days", OLD_DEAD),
                ("succeeded", "59 minutes", RECENT_SUCCEEDED),
                ("dead", "59 minutes", RECENT_DEAD),
            ):
                span = "1 hour" if age == "2 days" else "58 minutes"
                conn.execute(_FILL_FINISHED, {"status": status, "age": age, "n": n, "span": span})
            conn.execute(
                "INSERT INTO skiplock.workers (id, host, pid) VALUES (%s, 'host', 1)", [WORKER]
            )
        before = _statistics(dsn)
        assert before[0] == expected[stats]
        assert (before[1] <= 0) == (stats in ("none", "empty")), before
        yield dsn
        assert _statistics(dsn) == before, "the table was analyzed meanwhile"
    finally:
        drop_database(name)


def _statistics(dsn: str) -> tuple[str | None, float]:
    """What the planner knows of jobs: the most common status (None: no statistics) and
    the row count of the last ANALYZE (-1 or 0 before the first one)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        common = conn.execute(
            "SELECT most_common_vals::text FROM pg_stats"
            " WHERE schemaname = 'skiplock' AND tablename = 'jobs' AND attname = 'status'"
        ).fetchone()
        count = conn.execute(
            "SELECT reltuples FROM pg_class WHERE oid = 'skiplock.jobs'::regclass"
        ).fetchone()
    assert count is not None
    return (None if common is None else str(common[0]).strip("{}"), float(count[0]))


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _rows_read(node: dict[str, Any]) -> float:
    """Rows a node produced or looked at and dropped, over all its loops."""
    seen = sum(
        node.get(key, 0)
        for key in (
            "Actual Rows",
            "Rows Removed by Filter",
            "Rows Removed by Join Filter",
            "Rows Removed by Index Recheck",
        )
    )
    return float(seen * node.get("Actual Loops", 1))


def _explain(
    dsn: str, sql: str, params: dict[str, Any], mode: str
) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
    """Run ``sql`` as a prepared statement under ``plan_cache_mode = mode``: once for its
    rows (which also compiles the functions it calls), then under EXPLAIN for its plan and
    the plans of the statements it ran inside functions. Both runs roll back, so every
    run sees the table as built."""
    query = convert(sql, "numeric")
    args = [params[name] for name in query.params]
    values = f"({', '.join(['%s'] * len(args))})" if args else ""
    notices: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        cur = psycopg.ClientCursor(conn)  # EXECUTE takes its arguments as literals
        # JIT for every plan that costs anything (the function's plan is made and kept in
        # this first run): its generic plan assumes the whole index is read, so on a large
        # table it would be compiled at every call unless the function turns JIT off.
        conn.execute("SET jit_above_cost = 0")
        with conn.transaction(force_rollback=True):
            cur.execute(f"SET LOCAL plan_cache_mode = {mode}")
            cur.execute(f"PREPARE statement AS {query.text}")
            rows = cur.execute(f"EXECUTE statement{values}", args).fetchall()
        with conn.transaction(force_rollback=True):
            cur.execute(f"SET LOCAL plan_cache_mode = {mode}")
            cur.execute("LOAD 'auto_explain'")
            for setting in _AUTO_EXPLAIN:
                cur.execute(f"SET LOCAL {setting}")
            notices.clear()
            explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE statement"
            row = cur.execute(f"{explain}{values}", args).fetchone()
    assert row is not None
    logged = [json.loads(text[text.index("{") :]) for text in notices if '"Plan"' in text]
    # auto_explain logs the statement itself too (by its PREPARE text): EXPLAIN has it.
    # The update trigger's NOTIFY of a retry (SELECT pg_notify(...)) costs nothing: JIT
    # there only because this test sets jit_above_cost to 0.
    inner = [
        entry
        for entry in logged
        if "statement" not in entry["Query Text"] and "pg_notify" not in entry["Query Text"]
    ]
    assert not [entry["JIT"] for entry in inner if "JIT" in entry], "JIT inside a function"
    nested = [entry["Plan"] for entry in inner]
    return [row[0][0]["Plan"], *nested], rows


def _outline(plan: dict[str, Any], depth: int = 0) -> str:
    """The plan as indented lines: node, relation and index, rows read, buffers."""
    where = " ".join(plan[k] for k in ("Relation Name", "Index Name") if k in plan)
    buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    line = f"{'  ' * depth}{plan['Node Type']} {where} read={_rows_read(plan):g} buf={buffers}"
    return "\n".join([line, *(_outline(child, depth + 1) for child in plan.get("Plans", []))])


def _assert_reads_its_batch(plans: list[dict[str, Any]], batch: int, index: str, what: str) -> None:
    """No node reads FACTOR x batch rows; jobs is read only through ``index`` and its
    primary key; nothing spills to disk; shared buffers stay below 30 per row of the
    batch (an updated row writes several index entries)."""
    outline = "\n\n".join(_outline(plan) for plan in plans)
    for node in (node for plan in plans for node in _nodes(plan)):
        assert _rows_read(node) < FACTOR * batch, f"{what} reads O(table):\n{outline}"
        if node.get("Actual Loops") == 0:
            # Never run (a one-time filter held: the heartbeat's release, unless asked).
            continue
        if node.get("Index Name") == "jobs_running_key_idx":
            # A claim reads the running jobs of concurrency keys (migration 0018): an
            # index that holds those only, read through whatever its scan.
            continue
        if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"]:
            assert node["Node Type"] == "Index Scan", f"{what}:\n{outline}"
            assert node["Index Name"] in {index, "jobs_pkey"}, f"{what}:\n{outline}"
    assert all(plan.get("Temp Written Blocks", 0) == 0 for plan in plans), outline
    top = plans[0]
    assert top["Shared Hit Blocks"] + top["Shared Read Blocks"] < 30 * batch, outline
    assert index in {node.get("Index Name") for plan in plans for node in _nodes(plan)}, outline


def _running_leases(dsn: str) -> list[Lease]:
    """Leases of COMPLETE_BATCH running jobs spread over all of them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM skiplock.jobs WHERE status = 'running' ORDER BY id"
            ).fetchall()
        ]
    step = len(ids) // COMPLETE_BATCH
    return [
        Lease(job_id=i, worker_id=WORKER, attempt=0, claim=1) for i in ids[::step][:COMPLETE_BATCH]
    ]


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_claims_read_their_batch_whatever_the_statistics(table: str, mode: str) -> None:
    plain = ClaimRequest(worker_id=WORKER, limit=CLAIM_BATCH, start_now=16)
    capped = ClaimRequest(
        worker_id=WORKER,
        limit=CLAIM_BATCH,
        start_now=16,
        kind_limits={"k1": 5},
        pair_limits={("k2", "t2"): 3},
    )
    # With the jobs' errors (ClaimRequest.with_errors) the walk is the same.
    for request, name in (
        (plain, "claim"),
        (capped, "claim_capped"),
        (attrs.evolve(plain, with_errors=True), "claim_errors"),
        (attrs.evolve(capped, with_errors=True), "claim_capped_errors"),
    ):
        step = next(claim_steps(SCHEMA, request))
        assert step.sql == neutral_query(name, SCHEMA)
        assert step.params is not None
        plans, rows = _explain(table, step.sql, dict(step.params), mode)
        assert len(rows) == CLAIM_BATCH, name
        _assert_reads_its_batch(plans, CLAIM_BATCH, "jobs_claim_idx", name)
        assert plans[0]["Actual Rows"] == CLAIM_BATCH, name


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_completions_find_their_jobs_by_key_whatever_the_statistics(table: str, mode: str) -> None:
    leases = _running_leases(table)
    assert len(leases) == COMPLETE_BATCH
    retry = Retry(delay=timedelta(seconds=5), error="again")
    completions = [
        Completion(lease=lease, outcome=retry if i % 2 else Succeeded())
        for i, lease in enumerate(leases)
    ]
    # Results (X5) travel in one more array, NULL unless some outcome carries one.
    returned = Succeeded(result={"n": 1}, result_json='{"n": 1}')
    with_results = [
        Completion(lease=lease, outcome=retry if i % 2 else returned)
        for i, lease in enumerate(leases)
    ]
    audited: dict[str, Any] = {"actor": WORKER, "audit_table": True}
    statements: list[tuple[str, dict[str, Any], int]] = [
        ("complete", complete_params(completions), COMPLETE_BATCH),
        ("complete", complete_params(with_results), COMPLETE_BATCH),
        # With the audit trail on (J10): the same walk, and one insert for the batch.
        ("complete_audited", complete_params(completions) | audited, COMPLETE_BATCH),
        ("complete_audited", complete_params(with_results) | audited, COMPLETE_BATCH),
        ("complete_one", complete_one_params(completions[0]), 1),
        ("complete_one", complete_one_params(with_results[0]), 1),
        ("start", lease_params(leases), COMPLETE_BATCH),
    ]
    for name, params, batch in statements:
        plans, rows = _explain(table, neutral_query(name, SCHEMA), params, mode)
        _assert_reads_its_batch(plans, batch, "jobs_pkey", name)
        if name == "complete":  # one row: the positions applied
            assert len(rows) == 1, name
            assert sorted(rows[0][0]) == list(range(1, batch + 1)), name
            continue
        assert len(rows) == batch, name
        assert plans[0]["Actual Rows"] == batch, name
    running = [lease.job_id for lease in leases]
    plans, rows = _explain(
        table,
        neutral_query("heartbeat", SCHEMA),
        {"id": WORKER, "running": running, "release": False},
        mode,
    )
    assert rows == [([],)]
    _assert_reads_its_batch(plans, COMPLETE_BATCH, "jobs_pkey", "heartbeat")


#: A table small enough that one scan of it looks cheaper to the planner than a hundred
#: primary-key lookups: the size of a fresh queue after a burst, never analyzed.
SMALL = 20_000


@pytest.fixture(scope="module")
def small_table() -> Iterator[str]:
    """SMALL due jobs, the last COMPLETE_BATCH of them running under WORKER, never
    analyzed (filled by a bulk insert into a new table)."""
    name, dsn = create_database(with_schema=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE skiplock.jobs SET (autovacuum_enabled = false)")
            conn.execute(_FILL, {"status": "pending", "n": SMALL})
            conn.execute(
                "UPDATE skiplock.jobs SET status = 'running', claimed_by = %s, claims = 1"
                " WHERE id IN (SELECT id FROM skiplock.jobs ORDER BY id DESC LIMIT %s)",
                [WORKER, COMPLETE_BATCH],
            )
        assert _statistics(dsn) == (None, -1)
        yield dsn
    finally:
        drop_database(name)


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_completions_find_their_jobs_by_key_in_a_small_new_table(
    small_table: str, mode: str
) -> None:
    # The planner would hash-join a batch it thinks has 100 rows to a scan of the table
    # (two scans' worth of a 20,000-row table cost less than 100 lookups, it reckons),
    # which makes every completion batch of a fresh queue O(table).
    leases = _running_leases(small_table)
    completions = [Completion(lease=lease, outcome=Succeeded()) for lease in leases]
    plans, rows = _explain(
        small_table, neutral_query("complete", SCHEMA), complete_params(completions), mode
    )
    _assert_reads_its_batch(plans, COMPLETE_BATCH, "jobs_pkey", "complete")
    assert sorted(rows[0][0]) == list(range(1, COMPLETE_BATCH + 1))


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_purge_batches_read_their_batch_whatever_the_statistics(table: str, mode: str) -> None:
    for archive in (False, True):
        steps = purge_batch_steps(
            SCHEMA, older_than=timedelta(days=1), archive=archive, batch_size=PURGE_BATCH
        )
        next(steps)  # the maintenance lock
        step = steps.send([{"locked": True}])
        assert step.sql == neutral_query("purge", SCHEMA)
        assert step.params is not None
        plans, rows = _explain(table, step.sql, dict(step.params), mode)
        assert rows == [(PURGE_BATCH,)], archive
        _assert_reads_its_batch(plans, PURGE_BATCH, "jobs_succeeded_completed_idx", "purge")


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_throughput_reads_the_window_whatever_the_statistics(table: str, mode: str) -> None:
    """finished_counts over the last hour, from a since that is not on a minute (so every
    minute of the finished minutes is cut by a bucket edge, migration 0011), reads the
    jobs that finished in it through the two partial indexes on completed_at, never the
    pending, running or old jobs."""
    with psycopg.connect(table, autocommit=True) as conn:
        [row] = conn.execute("SELECT now() - interval '1 hour'").fetchall()
    params = bucket_params(row[0], timedelta(minutes=1))
    plans, rows = _explain(table, neutral_query("finished_counts", SCHEMA), params, mode)
    totals: dict[str, int] = {}
    for _, kind, status, count in rows:
        assert kind
        totals[status] = totals.get(status, 0) + count
    assert totals == {"succeeded": RECENT_SUCCEEDED, "dead": RECENT_DEAD}
    assert len(rows) > 50  # one row per minute, kind and state
    window = RECENT_SUCCEEDED + RECENT_DEAD
    outline = "\n\n".join(_outline(plan) for plan in plans)
    indexes = {"jobs_succeeded_completed_idx", "jobs_unsuccessful_completed_idx"}
    for node in (node for plan in plans for node in _nodes(plan)):
        assert _rows_read(node) < FACTOR * window, f"throughput reads O(table):\n{outline}"
        # The unfolded count deltas are read whole (a worker folds them every second).
        if node.get("Relation Name") != "job_count_deltas":
            assert node["Node Type"] != "Seq Scan", outline
        if "Index Name" in node:
            assert node["Index Name"] in indexes | {"job_finished_minutes_pkey"}, outline
    used = {node.get("Index Name") for plan in plans for node in _nodes(plan)}
    assert indexes <= used, outline


# ---- the audit trail's retention (J10) ----------------------------------------------------

AUDIT_RECENT = 30_000
AUDIT_OLD = 20_000  # two days old, with ids above the recent ones

_FILL_AUDIT = """
    INSERT INTO skiplock.audit (at, job_id, kind, action, actor)
    SELECT now() - %(age)s::interval + g * interval '1 millisecond', g, 'k', 'job_done', 'w'
    FROM generate_series(1, %(n)s) AS g
"""


@pytest.fixture(scope="module", params=["none", "empty", "recent"])
def audit_table(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database whose audit table holds AUDIT_RECENT recent events, then AUDIT_OLD
    events two days old, with no statistics, or statistics taken while it was empty or
    held only recent events."""
    stats = request.param
    name, dsn = create_database(with_schema=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE skiplock.audit SET (autovacuum_enabled = false)")
            if stats == "empty":
                conn.execute("ANALYZE skiplock.audit")
            conn.execute(_FILL_AUDIT, {"age": "1 hour", "n": AUDIT_RECENT})
            if stats == "recent":
                conn.execute("ANALYZE skiplock.audit")
            conn.execute(_FILL_AUDIT, {"age": "2 days", "n": AUDIT_OLD})
        yield dsn
    finally:
        drop_database(name)


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_audit_purge_batches_read_their_batch_whatever_the_statistics(
    audit_table: str, mode: str
) -> None:
    steps = purge_audit_batch_steps(SCHEMA, older_than=timedelta(days=1), batch_size=PURGE_BATCH)
    next(steps)  # the maintenance lock
    step = steps.send([{"locked": True}])
    assert step.sql == neutral_query("purge_audit", SCHEMA)
    assert step.params is not None
    plans, rows = _explain(audit_table, step.sql, dict(step.params), mode)
    assert rows == [(PURGE_BATCH,)]
    outline = "\n\n".join(_outline(plan) for plan in plans)
    for node in (node for plan in plans for node in _nodes(plan)):
        assert _rows_read(node) < FACTOR * PURGE_BATCH, f"the purge reads O(table):\n{outline}"
        if node.get("Relation Name") == "audit" and "Scan" in node["Node Type"]:
            assert node["Node Type"] == "Index Scan", outline
            assert node["Index Name"] in {"audit_at_idx", "audit_pkey"}, outline
    assert "audit_at_idx" in {node.get("Index Name") for plan in plans for node in _nodes(plan)}
