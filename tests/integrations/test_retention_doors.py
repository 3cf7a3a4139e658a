"""The retention view in the REST API (``GET /retention``, in the OpenAPI document) and on
the dashboard's Retention page (issue 45, point 7)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from skiplock import Engine, Settings
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core import ClaimRequest, Completion, Succeeded
from skiplock.integrations.dashboard import Dashboard, Permission, Request
from tests.integrations.rest_support import client_for
from tests.pgfixtures import execute

if TYPE_CHECKING:
    from skiplock.testing import FakeClock


def _succeed(engine: Engine, kind: str, count: int) -> None:
    for _ in range(count):
        engine.enqueue(kind, {})
    claimed = engine.store.claim(ClaimRequest(worker_id="w", limit=count, kinds=frozenset({kind})))
    engine.store.complete([Completion(j.lease, Succeeded()) for j in claimed])


@pytest.mark.parametrize("flavour", ["fastapi-async", "fastapi-sync", "flask"])
def test_rest_serves_the_retention_view(pg_dsn: str, flavour: str) -> None:
    settings = Settings(retention=timedelta(hours=1), audit_retention=None)
    store = PsycopgJobStore(pg_dsn, max_size=2)
    try:
        arrange = Engine(store, settings)
        _succeed(arrange, "report.build", 2)
        execute(pg_dsn, ["UPDATE skiplock.jobs SET completed_at = now() - interval '2 hours'"])
        assert store.purge(older_than=timedelta(days=1), archive=False, batch_size=5) == 0
        _succeed(arrange, "report.build", 1)  # within the window
        with client_for(flavour, pg_dsn, settings=settings) as client:
            reply = client.get("/retention")
            assert reply.status == 200, reply.body
            jobs, audit = reply.body["windows"]
            assert jobs["name"] == "jobs"
            assert (jobs["window"], jobs["due"], jobs["estimated"]) == (3600.0, 2, False)
            assert jobs["last_run"]["removed"] == 0
            assert audit == {
                "name": "audit",
                "window": None,
                "due": None,
                "estimated": False,
                "last_run": None,
            }
            document = client.get("/openapi.json").body
            operation = document["paths"]["/retention"]["get"]
            assert operation["operationId"] == "getRetention"
            assert "Retention" in document["components"]["schemas"]
    finally:
        store.close()


def _allow(request: Request, permission: Permission) -> str:
    return "admin"


def test_the_dashboard_shows_the_retention_page(clock: FakeClock) -> None:
    store = InMemoryJobStore(clock=clock)
    engine = Engine(store, Settings(retention=timedelta(hours=1)), clock=clock)
    _succeed(engine, "report.build", 3)
    clock.advance(timedelta(hours=2))
    _succeed(engine, "report.build", 1)
    dashboard = Dashboard(engine, authorize=_allow)
    page = dashboard.handle("retention", Request("GET", "/admin/retention", headers={"host": "h"}))
    assert page.status == 200
    text = page.body.decode()
    assert 'data-testid="due-jobs">3<' in text
    assert 'data-testid="last-jobs">never<' in text
    assert 'data-testid="due-audit">0<' in text  # 90 days by default, no event that old
    assert 'href="/admin/retention" aria-current="page"' in text
    assert store.purge(older_than=timedelta(hours=1), archive=False, batch_size=10) == 3
    dashboard = Dashboard(engine, authorize=_allow)
    text = dashboard.handle(
        "retention", Request("GET", "/admin/retention", headers={"host": "h"})
    ).body.decode()
    assert 'data-testid="due-jobs">0<' in text
    assert 'data-testid="last-jobs">never<' not in text
