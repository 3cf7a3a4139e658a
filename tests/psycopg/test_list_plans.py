"""Operator lists read rows in proportion to their page, never to the table (issue 29).

A jobs table of 200,000 jobs in a production mix (80 % succeeded, 10 % dead, 10 %
pending, four kinds, eight tenants; a few running, failed and cancelled ones), filled by a
bulk insert and never analyzed: every page of ``list_jobs`` (the store read behind
``list_jobs``/``dead_jobs``, the REST API, the dashboard and the CLI), whatever its
filters, reads jobs only through index scans, and no node reads more than a small factor
times the page size. EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) shows the statement's plan,
auto_explain the plans of the walks inside ``list_job_page`` (tests/psycopg/test_plans.py
explains how).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from skiplock.adapters._pg._rows import filter_params
from skiplock.adapters._pg._rows_reads import job_page_from_rows, page_params
from skiplock.adapters._pg._sql import neutral_query
from skiplock.core import JobFilter, JobPage, JobState, Page
from tests.pgfixtures import create_database, drop_database
from tests.psycopg.test_plans import _explain, _nodes, _outline, _rows_read, _statistics

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

SCHEMA = "skiplock"
JOBS = 200_000
LIMIT = 50
#: No page reads more rows of jobs than this many times its limit (the walk's budget of
#: JobPage.READ_FACTOR rows per job asked for, plus what the lanes of exact indexes read).
FACTOR = JobPage.READ_FACTOR + 5

# The mix, interleaved by id: of every 10 jobs 8 succeeded, 1 dead, 1 pending; then a few
# running, failed and cancelled ones spread over the table.
_FILL = """
    INSERT INTO skiplock.jobs (kind, tenant_id, status, priority, created_at, available_at,
        completed_at)
    SELECT 'k' || mod(g, 4), 't' || mod(g / 4, 8),
        CASE mod(g, 10) WHEN 8 THEN 'dead' WHEN 9 THEN 'pending' ELSE 'succeeded' END,
        mod(g, 3), now() - interval '1 day' + g * interval '100 milliseconds',
        now() - interval '1 day' + g * interval '100 milliseconds',
        CASE WHEN mod(g, 10) <> 9 THEN now() - interval '1 hour' END
    FROM generate_series(1, %(n)s) AS g
"""
_SPRINKLE = """
    UPDATE skiplock.jobs SET status = %(status)s
    WHERE id IN (SELECT g * %(step)s FROM generate_series(1, %(n)s) AS g)
"""
RUNNING = 40
FAILED = 30
CANCELLED = 20


@pytest.fixture(scope="module")
def table() -> Iterator[str]:
    """The database, its jobs never analyzed (shared by the module's tests, which roll
    back every statement they run)."""
    name, dsn = create_database(with_schema=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE skiplock.jobs SET (autovacuum_enabled = false)")
            conn.execute(_FILL, {"n": JOBS})
            for status, step, n in (
                ("running", 4_999, RUNNING),
                ("failed", 6_661, FAILED),
                ("cancelled", 9_973, CANCELLED),
            ):
                conn.execute(_SPRINKLE, {"status": status, "step": step, "n": n})
        assert _statistics(dsn) == (None, -1)
        yield dsn
        assert _statistics(dsn) == (None, -1), "the table was analyzed meanwhile"
    finally:
        drop_database(name)


def _reference(dsn: str, where: str, args: list[Any]) -> list[int]:
    """Every id the filter matches, in order (a plain scan: the test's own oracle)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id FROM skiplock.jobs AS j WHERE {where} ORDER BY id", args)
        return [r[0] for r in rows.fetchall()]


_FUTURE = datetime(2999, 1, 1, tzinfo=UTC)
_S = JobState

#: (name, filter, SQL of the same filter for the oracle, its arguments).
CASES: list[tuple[str, JobFilter, str, list[Any]]] = [
    ("everything", JobFilter(), "true", []),
    ("failed", JobFilter(states=frozenset({_S.FAILED})), "status = 'failed'", []),
    (
        "failed, no match",
        JobFilter(states=frozenset({_S.FAILED}), kinds=frozenset({"k9"})),
        "false",
        [],
    ),
    ("dead", JobFilter(states=frozenset({_S.DEAD})), "status = 'dead'", []),
    (
        "dead of a tenant without any",
        JobFilter(states=frozenset({_S.DEAD}), tenants=frozenset({"nobody"})),
        "false",
        [],
    ),
    (
        "dead of a kind without any",
        JobFilter(states=frozenset({_S.DEAD}), kinds=frozenset({"none.such"})),
        "false",
        [],
    ),
    (
        "dead of a kind",
        JobFilter(states=frozenset({_S.DEAD}), kinds=frozenset({"k0"})),
        "status = 'dead' AND kind = 'k0'",
        [],
    ),
    (
        "dead of a kind and tenant",
        JobFilter(states=frozenset({_S.DEAD}), kinds=frozenset({"k0"}), tenants=frozenset({"t3"})),
        "status = 'dead' AND kind = 'k0' AND tenant_id = 't3'",
        [],
    ),
    (
        "problems of two kinds",
        JobFilter(
            states=frozenset({_S.DEAD, _S.FAILED, _S.CANCELLED}), kinds=frozenset({"k1", "k2"})
        ),
        "status IN ('dead', 'failed', 'cancelled') AND kind IN ('k1', 'k2')",
        [],
    ),
    ("running", JobFilter(states=frozenset({_S.RUNNING})), "status = 'running'", []),
    (
        "running of a kind",
        JobFilter(states=frozenset({_S.RUNNING}), kinds=frozenset({"k1"})),
        "status = 'running' AND kind = 'k1'",
        [],
    ),
    ("pending", JobFilter(states=frozenset({_S.PENDING})), "status = 'pending'", []),
    (
        "pending of a kind and tenant",
        JobFilter(
            states=frozenset({_S.PENDING}), kinds=frozenset({"k1"}), tenants=frozenset({"t2"})
        ),
        "status = 'pending' AND kind = 'k1' AND tenant_id = 't2'",
        [],
    ),
    ("succeeded", JobFilter(states=frozenset({_S.SUCCEEDED})), "status = 'succeeded'", []),
    ("a kind without any", JobFilter(kinds=frozenset({"none.such"})), "false", []),
    ("a tenant without any", JobFilter(tenants=frozenset({"nobody"})), "false", []),
    (
        "pending due in the future",
        JobFilter(states=frozenset({_S.PENDING}), available_since=_FUTURE),
        "false",
        [],
    ),
    (
        "dead created in the future",
        JobFilter(states=frozenset({_S.DEAD}), created_since=_FUTURE),
        "false",
        [],
    ),
    ("priority", JobFilter(priority_min=2, priority_max=2), "priority = 2", []),
    ("ids", JobFilter(ids=frozenset({5, 77, 150_000, 300_000})), "id IN (5, 77, 150000)", []),
    (
        "dead and pending of a tenant",
        JobFilter(states=frozenset({_S.DEAD, _S.PENDING}), tenants=frozenset({"t5"})),
        "status IN ('dead', 'pending') AND tenant_id = 't5'",
        [],
    ),
]


#: The index a filter's page must be read through (the others: the primary key).
EXPECTED_INDEX = {
    "failed": "jobs_unsuccessful_id_idx",
    "dead": "jobs_unsuccessful_id_idx",
    "dead of a kind": "jobs_unsuccessful_kind_idx",
    "dead of a tenant without any": "jobs_unsuccessful_tenant_idx",
    "dead of a kind and tenant": "jobs_unsuccessful_kind_tenant_idx",
    "problems of two kinds": "jobs_unsuccessful_kind_idx",
    "running of a kind": "jobs_running_kind_idx",
}


def _assert_bounded(plans: list[dict[str, Any]], what: str) -> None:
    """Jobs are read through index scans only; no node reads FACTOR x LIMIT rows, nor do
    all the scans of jobs together."""
    outline = "\n\n".join(_outline(plan) for plan in plans)
    read = 0.0
    for node in (node for plan in plans for node in _nodes(plan)):
        assert _rows_read(node) < FACTOR * LIMIT, f"{what} reads O(table):\n{outline}"
        if node.get("Relation Name") == "jobs":
            assert node["Node Type"] in {"Index Scan", "Index Only Scan"}, f"{what}:\n{outline}"
            read += _rows_read(node)
    assert read < FACTOR * LIMIT, f"{what} reads {read:g} rows:\n{outline}"
    assert all(plan.get("Temp Written Blocks", 0) == 0 for plan in plans), outline


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize(("what", "job_filter", "where", "args"), CASES, ids=[c[0] for c in CASES])
def test_every_list_page_reads_its_page_not_the_table(
    table: str,
    what: str,
    job_filter: JobFilter,
    where: str,
    args: list[Any],
    mode: str,
    descending: bool,
) -> None:
    expected = _reference(table, where, args)
    if descending:
        expected.reverse()
    # The first page, then one from the middle of what matches (or of the table).
    middle = expected[len(expected) // 2] if expected else JOBS // 2
    for after_id in (None, middle):
        page = Page(limit=LIMIT, after_id=after_id, descending=descending)
        params = filter_params(job_filter) | page_params(page)
        plans, rows = _explain(table, neutral_query("list_jobs", SCHEMA), params, mode)
        _assert_bounded(plans, f"{what} after {after_id}")
        if what in EXPECTED_INDEX:
            used = {node.get("Index Name") for plan in plans for node in _nodes(plan)}
            assert EXPECTED_INDEX[what] in used, (what, used)
        got = job_page_from_rows([dict(zip(_COLUMNS, row, strict=True)) for row in rows])
        wanted = [
            i
            for i in expected
            if after_id is None or (i < after_id if descending else i > after_id)
        ]
        ids = [job.id for job in got]
        if got.resume_after is None:  # the page is what the filter has to show
            assert ids == wanted[:LIMIT], what
        else:  # a bounded walk: every match up to where it stopped, then the cursor
            assert len(ids) < LIMIT, what
            assert ids == [
                i
                for i in wanted
                if (i >= got.resume_after if descending else i <= got.resume_after)
            ], what


_COLUMNS: list[str] = []


@pytest.fixture(autouse=True, scope="module")
def _columns(table: str) -> None:
    """The column names of list_jobs (the explain helper returns plain tuples)."""
    from skiplock.adapters._pg._sql import convert

    query = convert(neutral_query("list_jobs", SCHEMA), "pyformat")
    params = filter_params(JobFilter(ids=frozenset({1}))) | page_params(Page(limit=1))
    with psycopg.connect(table, autocommit=True) as conn:
        cur = conn.execute(query.text, params)
        assert cur.description is not None
        _COLUMNS[:] = [c.name for c in cur.description]


def test_dead_letter_pages_by_kind_are_exact(table: str) -> None:
    """The measured slow case (a DLQ page filtered by a kind without dead jobs) is read
    through the dead jobs' index: an empty page that is the last, not a bounded one."""
    params = filter_params(
        JobFilter(states=frozenset({_S.DEAD}), kinds=frozenset({"none.such"}))
    ) | page_params(Page(limit=LIMIT))
    plans, rows = _explain(table, neutral_query("list_jobs", SCHEMA), params, "force_custom_plan")
    used = {node.get("Index Name") for plan in plans for node in _nodes(plan)}
    assert "jobs_unsuccessful_kind_idx" in used, used
    assert rows == []


def test_a_bounded_walk_says_where_it_stopped(table: str) -> None:
    """A kind no job has, with no state: the primary-key walk stops at its budget and the
    page says where; following the cursor moves on by a budget each time."""
    job_filter = JobFilter(kinds=frozenset({"none.such"}))
    params = filter_params(job_filter) | page_params(Page(limit=LIMIT))
    _, rows = _explain(table, neutral_query("list_jobs", SCHEMA), params, "force_custom_plan")
    page = job_page_from_rows([dict(zip(_COLUMNS, row, strict=True)) for row in rows])
    assert page == []
    assert page.resume_after == JobPage.READ_FACTOR * LIMIT  # ids start at 1
    assert page.next_after(LIMIT) == page.resume_after
    later = params | {"after_id": page.resume_after}
    _, rows = _explain(table, neutral_query("list_jobs", SCHEMA), later, "force_custom_plan")
    page = job_page_from_rows([dict(zip(_COLUMNS, row, strict=True)) for row in rows])
    assert page.resume_after == 2 * JobPage.READ_FACTOR * LIMIT
