"""Job search reads in proportion to its page or to its matches, never to the table
(issue 45, item 2; docs/search.md, "The search filters").

A jobs table of 100,000 jobs, filled by a bulk insert and never analyzed: a job in 50
failed (its errors recorded), a job in 10 has an idempotency key. An idempotency key is
read through its unique index; an error text walks the jobs that ever failed; a payload
filter walks the primary key, bounded, unless the opt-in GIN index exists: then a
selective filter reads its matches through it and a non-selective one (more than the
probe's cap) is bounded again; so does an error text with the opt-in trigram index
(jobs_error_search_idx, migration 0023). Plans as in tests/psycopg/test_list_plans.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from skiplock.adapters._pg._rows import filter_params
from skiplock.adapters._pg._rows_reads import job_page_from_rows, page_params
from skiplock.adapters._pg._sql import convert, neutral_query
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core import JobFilter, JobPage, Page
from tests.pgfixtures import create_database, drop_database
from tests.psycopg.test_plans import _explain, _nodes, _outline, _rows_read

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

SCHEMA = "skiplock"
JOBS = 100_000
LIMIT = 50
#: What a bounded page may read: its walk's budget, plus the lanes' own few rows.
BOUND = (JobPage.READ_FACTOR + 5) * LIMIT
#: The probe's cap in list_job_page (migration 0022).
SEARCH_CAP = 5_000
#: The opt-in payload index (docs/search.md, "The opt-in search indexes").
PAYLOAD_INDEX = (
    "CREATE INDEX jobs_payload_search_idx ON skiplock.jobs USING gin (payload jsonb_path_ops)"
)

_FILL = """
    INSERT INTO skiplock.jobs (kind, status, payload, last_error, errors, idempotency_key,
        completed_at)
    SELECT 'k' || mod(g, 4),
        CASE WHEN mod(g, 50) = 0 THEN 'dead' ELSE 'succeeded' END,
        jsonb_build_object('user_id', g, 'plan', CASE WHEN mod(g, 2) = 0 THEN 'pro'
            ELSE 'free' END),
        CASE WHEN mod(g, 50) = 0 THEN 'Timeout ' || g END,
        CASE WHEN mod(g, 50) = 0 THEN jsonb_build_array(jsonb_build_object(
            'attempt', 1, 'worker_id', 'w', 'claimed_at', null,
            'failed_at', '2026-01-01T00:00:00+00:00', 'error', 'KeyError u' || g)) END,
        CASE WHEN mod(g, 10) = 0 THEN 'key-' || g END,
        now()
    FROM generate_series(1, %(n)s) AS g
"""


@pytest.fixture(scope="module")
def table() -> Iterator[str]:
    """The database, its jobs never analyzed (the tests roll back what they run, but
    :func:`payload_index`)."""
    name, dsn = create_database(with_schema=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE skiplock.jobs SET (autovacuum_enabled = false)")
            conn.execute(_FILL, {"n": JOBS})
        yield dsn
    finally:
        drop_database(name)


@pytest.fixture
def payload_index(table: str) -> Iterator[str]:
    with psycopg.connect(table, autocommit=True) as conn:
        conn.execute(PAYLOAD_INDEX)
    yield table
    with psycopg.connect(table, autocommit=True) as conn:
        conn.execute("DROP INDEX skiplock.jobs_payload_search_idx")


@pytest.fixture
def error_index(table: str) -> Iterator[str]:
    """The opt-in error index, added as an operator adds it (pg_trgm created with it)."""
    store = PsycopgJobStore(table)
    try:
        assert store.add_search_index("error", create_extension=True)
        yield table
        assert store.drop_search_index("error")
    finally:
        store.close()


def _reference(dsn: str, where: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id FROM skiplock.jobs AS j WHERE {where} ORDER BY id")
        return [r[0] for r in rows.fetchall()]


def _page(dsn: str, job_filter: JobFilter) -> tuple[JobPage, list[dict[str, Any]]]:
    """The first page of ``job_filter`` and the plans that read it."""
    query = neutral_query("list_jobs", SCHEMA)
    params = filter_params(job_filter) | page_params(Page(limit=LIMIT))
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(convert(query, "pyformat").text, params)
        assert cur.description is not None
        columns = [c.name for c in cur.description]
    plans, rows = _explain(dsn, query, params, "force_custom_plan")
    return job_page_from_rows([dict(zip(columns, row, strict=True)) for row in rows]), plans


def _ids(page: JobPage) -> list[int]:
    return [job.id for job in page]


def _jobs_read(plans: list[dict[str, Any]]) -> tuple[float, set[str], str]:
    """Rows of jobs read by every plan, the indexes used and the outline."""
    read = sum(
        _rows_read(node)
        for plan in plans
        for node in _nodes(plan)
        if node.get("Relation Name") == "jobs"
    )
    used = {node.get("Index Name") or "" for plan in plans for node in _nodes(plan)}
    return read, used, "\n\n".join(_outline(plan) for plan in plans)


def _check(dsn: str, job_filter: JobFilter, where: str) -> tuple[JobPage, float, set[str], str]:
    """The page, checked against a plain scan: exact, or every match up to where it
    stopped; with the rows of jobs it read, the indexes used and the outline."""
    page, plans = _page(dsn, job_filter)
    expected = _reference(dsn, where)
    if page.resume_after is None:
        assert _ids(page) == expected[:LIMIT], where
    else:
        assert _ids(page) == [i for i in expected if i <= page.resume_after], where
    return (page, *_jobs_read(plans))


def test_a_key_is_read_through_its_unique_index(table: str) -> None:
    page, read, used, outline = _check(
        table, JobFilter(idempotency_key="key-4240"), "idempotency_key = 'key-4240'"
    )
    assert (len(page), page.resume_after) == (1, None)
    assert "jobs_idempotency_key_idx" in used, outline
    assert read <= 5, outline


def test_an_error_text_walks_the_jobs_that_failed(table: str) -> None:
    # Selective: the recorded errors of two jobs (not their last errors). The walk reads
    # failed jobs only (1 in 50), at most its budget, and says where it stopped.
    where = "id IN (4200, 42000)"
    page, read, used, outline = _check(table, JobFilter(error="keyerror U4200"), where)
    assert "jobs_errored_idx" in used, outline
    assert read <= BOUND, outline
    assert _ids(page) == [4200, 42000]
    assert page.resume_after == JobPage.READ_FACTOR * LIMIT * 50
    # Non-selective: a full page of failed jobs.
    page, read, _, outline = _check(table, JobFilter(error="timeout"), "last_error IS NOT NULL")
    assert (len(page), page.resume_after) == (LIMIT, None)
    assert read <= BOUND, outline


def test_a_payload_filter_without_its_index_is_a_bounded_walk(table: str) -> None:
    page, read, used, outline = _check(
        table, JobFilter(payload={"user_id": 90_000}), "payload @> '{\"user_id\": 90000}'"
    )
    assert page == []
    assert page.resume_after == JobPage.READ_FACTOR * LIMIT
    assert read <= BOUND, outline
    assert "jobs_pkey" in used, outline


def test_a_selective_payload_filter_reads_its_matches_through_the_opt_in_index(
    payload_index: str,
) -> None:
    where = "payload @> '{\"user_id\": 90000}'"
    page, read, used, outline = _check(payload_index, JobFilter(payload={"user_id": 90_000}), where)
    assert (len(page), page.resume_after) == (1, None)  # found, and the search is whole
    assert "jobs_payload_search_idx" in used, outline
    # The walk's budget first (no full page), then the probe and the lane: its match.
    assert read <= BOUND + 10, outline


def test_a_non_selective_payload_filter_stays_bounded_with_the_index(payload_index: str) -> None:
    # Half the table matches: the walk gives a full page, the index is never probed.
    where = 'payload @> \'{"plan": "pro"}\''
    page, read, used, outline = _check(payload_index, JobFilter(payload={"plan": "pro"}), where)
    assert (len(page), page.resume_after) == (LIMIT, None)
    assert read <= BOUND, outline
    assert "jobs_payload_search_idx" not in used, outline
    # Combined with a rare kind: the probe says "not selective", the walk stops at its
    # budget and says where (partial), never a read of the table.
    rare = JobFilter(payload={"plan": "pro"}, kinds=frozenset({"none.such"}))
    page, read, _, outline = _check(payload_index, rare, "false")
    assert page == []
    assert page.resume_after is not None
    assert read <= SEARCH_CAP + BOUND, outline


def test_a_selective_error_text_reads_its_matches_through_the_opt_in_index(
    error_index: str,
) -> None:
    # The search of test_an_error_text_walks_the_jobs_that_failed: whole at once.
    where = "id IN (4200, 42000)"
    page, read, used, outline = _check(error_index, JobFilter(error="keyerror U4200"), where)
    assert (_ids(page), page.resume_after) == ([4200, 42000], None)
    assert "jobs_error_search_idx" in used, outline
    # The walk's budget first (no full page), then the probe and the lane: its matches.
    assert read <= BOUND + 50, outline


def test_an_error_text_stays_bounded_or_whole_with_the_index(error_index: str) -> None:
    # Many matches: the walk gives a full page, the index is never probed.
    page, read, used, outline = _check(
        error_index, JobFilter(error="timeout"), "last_error IS NOT NULL"
    )
    assert (len(page), page.resume_after) == (LIMIT, None)
    assert read <= BOUND, outline
    assert "jobs_error_search_idx" not in used, outline
    # The same text with a rare kind: the walk stops at its budget, the probe finds
    # fewer matches than its cap (2,000), and the lane reads them all: none, and whole.
    rare = JobFilter(error="timeout", kinds=frozenset({"none.such"}))
    page, read, used, outline = _check(error_index, rare, "false")
    assert (page, page.resume_after) == ([], None)
    assert "jobs_error_search_idx" in used, outline
    assert read <= 2 * SEARCH_CAP + BOUND, outline
    # A text of fewer than 3 characters has no trigram: the bounded walk, as without it.
    page, read, used, outline = _check(error_index, JobFilter(error="zz"), "false")
    assert page == []
    assert page.resume_after is not None
    assert "jobs_error_search_idx" not in used, outline
    assert read <= BOUND, outline
