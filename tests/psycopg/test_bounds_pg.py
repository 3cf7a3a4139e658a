"""Bounds on PostgreSQL (issue 9): admin arguments never reach the driver, the due-time
CHECK constraint, the archive keeps one copy per id, system schema names are refused."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from skiplock import Engine
from skiplock.adapters.psycopg import PsycopgJobStore, apply_schema
from skiplock.core import (
    ClaimRequest,
    Completion,
    JobNotFoundError,
    Succeeded,
    ValidationError,
)
from tests.pgfixtures import store_fixture
from tests.pghelpers import sql

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.postgres


store = store_fixture(PsycopgJobStore, max_size=2)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda e: e.get_job(2**63), "job_id must be within"),
        (lambda e: e.get_job("1; DROP TABLE skiplock.jobs"), "job_id must be an int, got str"),
        (lambda e: e.cancel_job("1; DROP TABLE skiplock.jobs"), "job_id must be an int"),
        (lambda e: e.retry_job(True), "job_id must be an int, got bool"),
        (lambda e: e.delete_job(-(2**63) - 1), "job_id must be within"),
        (lambda e: e.list_jobs(priority_min=2**40), "priority_min must be within"),
        (lambda e: e.list_jobs(priority_max=-(2**15) - 1), "priority_max must be within"),
        (lambda e: e.list_jobs(after_id=2**63), "after_id must be within"),
        (lambda e: e.list_jobs(limit=2**63), "limit must be within"),
        (lambda e: e.list_jobs(tenant="a\x00"), "tenant filter must not contain NUL"),
        (lambda e: e.list_jobs(kind="\ud800"), "kind filter is not valid text"),
        (lambda e: e.list_jobs(state="x" * 10_000), "unknown job state 'xxx"),
        (
            lambda e: e.list_jobs(created_since=datetime(2024, 1, 1)),
            "created_since must be timezone-aware",
        ),
        (
            lambda e: e.list_jobs(available_before="2024-01-01"),
            "available_before must be a datetime, got str",
        ),
        (
            lambda e: e.list_jobs(
                created_before=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
            ),
            "created_before out of range",
        ),
    ],
)
def test_admin_arguments_are_validated_before_the_driver(
    store: PsycopgJobStore, call: Callable[[Engine], Any], fragment: str
) -> None:
    engine = Engine(store)
    with pytest.raises(ValidationError, match=fragment.replace("(", r"\(")) as info:
        call(engine)
    assert len(str(info.value)) < 300
    with pytest.raises(JobNotFoundError):
        engine.get_job(2**63 - 1)  # in range: an ordinary miss


@pytest.mark.parametrize("when", ["0001-01-02 23:59:59+00", "9999-12-29 00:00:01+00"])
def test_a_due_time_that_could_not_be_read_back_is_refused_by_the_table(
    pg_dsn: str, when: str
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_available_at_check"):
        sql(pg_dsn, "INSERT INTO skiplock.jobs (kind, available_at) VALUES ('k', %s)", when)


def test_an_id_archived_again_keeps_one_copy_the_latest(
    pg_dsn: str, store: PsycopgJobStore
) -> None:
    def succeed(expected: int) -> None:
        [job] = store.claim(ClaimRequest(worker_id="w", limit=1))
        assert job.id == expected
        outcome = Succeeded(result={"from": job.payload["run"]})
        assert store.complete([Completion(lease=job.lease, outcome=outcome)]) == [True]

    engine = Engine(store)
    job_id = engine.enqueue("archive.job", {"run": 1}).id
    succeed(job_id)
    assert store.purge(older_than=timedelta(0), archive=True, batch_size=10) == 1
    # Restored from the archive with its old id, run again and purged again.
    sql(
        pg_dsn,
        "INSERT INTO skiplock.jobs (id, kind, payload) "
        "SELECT id, kind, '{\"run\": 2}'::jsonb FROM skiplock.jobs_archive WHERE id = %s",
        job_id,
    )
    succeed(job_id)
    assert store.purge(older_than=timedelta(0), archive=True, batch_size=10) == 1
    rows = sql(pg_dsn, "SELECT id, payload, result FROM skiplock.jobs_archive")
    assert rows == [(job_id, {"run": 2}, {"from": 2})]


@pytest.mark.parametrize("schema", ["information_schema", "pg_catalog", "pg_toast", "pg_x"])
def test_system_schema_names_are_refused(pg_dsn: str, schema: str) -> None:
    with pytest.raises(ValidationError, match="system catalogs"):
        apply_schema(pg_dsn, schema)
    with pytest.raises(ValidationError, match="system catalogs"):
        PsycopgJobStore(pg_dsn, schema=schema)
