"""The dashboard's run-time controls of issue 45 in a real headless chromium, through
each binding on PostgreSQL, at 1280 and 390 px: a concurrency limit set and cleared from
the controls page (item 4); the workers page, what a worker runs, Drain and Stop (item 5)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from tests.pgfixtures import fetch

from . import test_dashboard_browser as base
from .test_dashboard_browser import Site, _fits

# The fixtures of the dashboard's browser tests: the served site, a signed-in page, the
# two screens.
site = base.site
as_user = base.as_user
screen = base.screen

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.postgres


def _set_concurrency(page: Page, **fields: str) -> None:
    form = page.get_by_test_id("concurrency-form")
    for name, value in fields.items():
        if name == "scope":
            form.locator('select[name="scope"]').select_option(value)
        else:
            form.locator(f'input[name="{name}"]').fill(value)
    form.get_by_role("button", name="Set concurrency").click()


def test_setting_and_clearing_a_concurrency_limit(
    site: Site, as_user: Any, screen: dict[str, int]
) -> None:
    page = as_user("admin")
    page.set_viewport_size(screen)
    page.goto(site.page("/controls"))
    assert page.get_by_test_id("no-concurrency").is_visible()
    _fits(page, screen["width"])
    _set_concurrency(page, kind="email.send", scope="node", limit="2")
    page.wait_for_url(re.compile(r"/dashboard/controls\?done=concurrency-set"))
    assert page.get_by_test_id("notice").inner_text().startswith("Concurrency limit set.")
    row = page.locator('tr[data-concurrency="email.send/*/node"]')
    assert row.locator('[data-label="At most"]').inner_text() == "2"
    assert row.locator('[data-label="Scope"]').inner_text() == "per worker process"
    assert row.locator('[data-label="By"]').inner_text() == "admin"
    _set_concurrency(page, key="db:main", limit="1")
    page.wait_for_url(re.compile(r"done=concurrency-set"))
    stored = fetch(
        site.dsn,
        "SELECT kind, concurrency_key, scope, max_running, actor FROM skiplock.concurrency_limits "
        "ORDER BY 1 NULLS LAST",
    )
    assert [tuple(r) for r in stored] == [
        ("email.send", None, "node", 2, "admin"),
        (None, "db:main", "cluster", 1, "admin"),
    ]
    audited = fetch(
        site.dsn,
        "SELECT action, actor FROM skiplock.audit WHERE action LIKE 'concurrency%' ORDER BY id",
    )
    assert [tuple(r) for r in audited] == [("concurrency_set", "admin")] * 2
    _fits(page, screen["width"])
    page.get_by_test_id("clear-concurrency-email.send-node").click()
    page.wait_for_url(re.compile(r"done=concurrency-cleared"))
    assert page.locator('tr[data-concurrency="email.send/*/node"]').count() == 0
    page.get_by_test_id("clear-concurrency-db:main-cluster").click()
    page.wait_for_url(re.compile(r"done=concurrency-cleared"))
    assert page.get_by_test_id("no-concurrency").is_visible()
    assert fetch(site.dsn, "SELECT kind FROM skiplock.concurrency_limits") == []
    _fits(page, screen["width"])


def test_draining_then_stopping_a_worker_from_the_workers_page(
    site: Site, as_user: Any, screen: dict[str, int]
) -> None:
    # Issue 45 item 5: a worker with a running job; the requests land on its row.
    from skiplock.adapters.psycopg import PsycopgJobStore
    from skiplock.core import ClaimRequest, WorkerInfo

    worker_id = "pod-7/42/worker"
    with PsycopgJobStore(site.dsn) as store:
        store.register_worker(WorkerInfo(worker_id, "pod-7", 42, slots=3, version="9.1"))
        [job] = store.claim(ClaimRequest(worker_id=worker_id, limit=1))
    page = as_user("admin")
    page.set_viewport_size(screen)
    page.goto(site.page("/"))
    page.get_by_role("link", name="Workers").click()
    page.wait_for_url(re.compile(r"/dashboard/workers$"))
    _fits(page, screen["width"])
    row = page.locator(f'tr[data-worker="{worker_id}"]')
    assert row.get_by_test_id(f"running-{worker_id}").inner_text() == "1 of 3"
    runs = row.get_by_test_id(f"jobs-{worker_id}")
    assert runs.locator(f'a[data-job="{job.id}"]').inner_text() == f"#{job.id} {job.kind}"
    assert "9.1" in row.inner_text()
    page.get_by_test_id(f"drain-{worker_id}").click()
    page.wait_for_url(re.compile(r"/dashboard/workers\?done=worker-drain"))
    assert page.get_by_test_id("notice").inner_text().startswith("Asked the worker to drain")
    assert page.get_by_test_id(f"asked-{worker_id}").inner_text() == "drain by admin"
    stored = fetch(
        site.dsn, f"SELECT request, requested_by FROM skiplock.workers WHERE id = '{worker_id}'"
    )
    assert [tuple(r) for r in stored] == [("drain", "admin")]
    _fits(page, screen["width"])
    page.get_by_test_id(f"stop-{worker_id}").click()
    page.wait_for_url(re.compile(r"done=worker-stop"))
    assert page.get_by_test_id(f"asked-{worker_id}").inner_text() == "stop by admin"
    audited = fetch(
        site.dsn,
        "SELECT action, actor FROM skiplock.audit WHERE action LIKE 'worker_%' ORDER BY id",
    )
    assert [tuple(r) for r in audited] == [("worker_drain", "admin"), ("worker_stop", "admin")]
    _fits(page, screen["width"])


def test_a_reader_sees_workers_without_buttons(site: Site, as_user: Any) -> None:
    from skiplock.adapters.psycopg import PsycopgJobStore
    from skiplock.core import WorkerInfo

    with PsycopgJobStore(site.dsn) as store:
        store.register_worker(WorkerInfo("pod-8/1/w", "pod-8", 1))
    page = as_user("viewer")
    page.goto(site.page("/workers"))
    assert page.locator('tr[data-worker="pod-8/1/w"]').count() == 1
    assert page.get_by_test_id("drain-pod-8/1/w").count() == 0
