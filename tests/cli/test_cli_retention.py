"""``skiplock retention``: the retention view on the command line (issue 45, point 7)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.cli.admin_helpers import engine_on, enqueue
from tests.cli.test_cli_admin import Run, needs_psycopg, run  # noqa: F401  (fixture)
from tests.pgfixtures import execute


@needs_psycopg
@pytest.mark.postgres
def test_retention_shows_what_each_purge_removes_next_and_its_last_run(
    run: Run,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SKIPLOCK_RETENTION", "1h")
    monkeypatch.setenv("SKIPLOCK_AUDIT_RETENTION", "none")
    ids = enqueue(run.dsn, "email", 3)
    execute(
        run.dsn,
        [
            "UPDATE skiplock.jobs SET status = 'succeeded', attempts = 1, "
            f"completed_at = now() - interval '2 hours' WHERE id IN ({ids[0]}, {ids[1]})"
        ],
    )
    assert run("retention") == 0
    header, jobs, audit = run.lines[1:]
    assert header.split() == ["PURGE", "WINDOW", "DUE", "NOW", "LAST", "RUN", "TOOK", "REMOVED"]
    assert jobs.split()[:4] == ["jobs", "1h", "2", "never"]
    assert audit.split()[:3] == ["audit", "off", "-"]
    with engine_on(run.dsn) as engine:
        assert engine.store.purge(older_than=timedelta(hours=1), archive=False, batch_size=10) == 2
    answer = run.json("retention")
    jobs_view, audit_view = answer["windows"]
    assert (jobs_view["name"], jobs_view["window"], jobs_view["due"]) == ("jobs", 3600.0, 0)
    assert jobs_view["last_run"]["removed"] == 2
    assert jobs_view["last_run"]["seconds"] >= 0
    assert audit_view == {
        "name": "audit",
        "window": None,
        "due": None,
        "estimated": False,
        "last_run": None,
    }
