"""The dashboard's search box on PostgreSQL (docs/dashboard.md, "Search"): a search over
the whole table, and a non-selective one whose page stops at its read budget, says so
and continues."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import Engine
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core import JobPage
from skiplock.integrations.dashboard import Dashboard, Permission, Request

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

ROOT = "/admin/dashboard"


def _authorize(request: Request, permission: Permission) -> str:
    return "viewer"


@pytest.fixture
def engine(pg_dsn: str) -> Iterator[Engine]:
    store = PsycopgJobStore(pg_dsn, max_size=2)
    yield Engine(store)
    store.close()


def _search(dashboard: Dashboard, **query: str) -> tuple[list[int], str]:
    """The job ids a search page lists, and its HTML."""
    request = Request(
        "GET",
        ROOT + "/jobs",
        query={name: [value] for name, value in query.items()},
        headers={"host": "jobs.example"},
    )
    response = dashboard.handle("jobs", request)
    html = response.body.decode()
    assert response.status == 200, html
    return [int(i) for i in re.findall(r'<tr data-job="(\d+)">', html)], html


def test_the_search_box_finds_jobs_anywhere_in_the_table(engine: Engine) -> None:
    dashboard = Dashboard(engine, authorize=_authorize, page_size=5)
    for n in range(3 * JobPage.READ_FACTOR * 5):
        engine.enqueue("bulk.filler", {"n": n})
    wanted = engine.enqueue("user.sync", {"user_id": 42}, idempotency_key="sync-42").id
    assert _search(dashboard, q="key:sync-42")[0] == [wanted]


def test_a_non_selective_search_page_is_partial_and_continues(engine: Engine) -> None:
    dashboard = Dashboard(engine, authorize=_authorize, page_size=1)
    for n in range(2 * JobPage.READ_FACTOR + 5):
        engine.enqueue("bulk.filler", {"n": n})
    rare = engine.enqueue("user.sync", {"user_id": 42}).id
    # No payload index: the walk stops after READ_FACTOR rows per job the page asks for.
    first, html = _search(dashboard, q="user_id=42")
    assert first == []
    assert 'data-testid="partial-page"' in html
    following = re.search(r'href="[^"?]*\?([^"]*)" data-testid="next-page"', html)
    assert following is not None
    query: dict[str, Any] = dict(
        pair.split("=", 1) for pair in following.group(1).replace("&amp;", "&").split("&")
    )
    assert query["q"] == "user_id%3D42"
    rest, html = _search(dashboard, q="user_id=42", after=query["after"])
    assert rest == [rare]
    assert 'data-testid="partial-page"' not in html
