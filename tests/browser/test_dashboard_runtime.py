"""The dashboard's run-time controls of issue 45 in a real headless chromium, through
each binding on PostgreSQL, at 1280 and 390 px: a concurrency limit set and cleared from
the controls page (item 4)."""

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
