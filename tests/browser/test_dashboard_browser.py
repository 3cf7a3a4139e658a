"""The dashboard in a real headless chromium, through each binding (FastAPI on an
AsyncEngine, Flask on a sync Engine) on PostgreSQL: the pages load, the depths shown are
the table's, retrying a dead job from the DLQ page makes it pending, a reader cannot
retry, an unknown caller is refused; and the screenshots of docs/dashboard.md and
docs/dashboard-pages.md.

Set ``SKIPLOCK_DASHBOARD_SCREENSHOTS=docs/images`` to write the screenshots there (the
test always takes them, in a temporary folder otherwise).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import Engine, Settings
from skiplock.adapters.psycopg import PsycopgJobStore
from tests.pgfixtures import create_database, drop_database, execute, fetch

from .apps import MOUNT, REFRESH, SESSION, SESSIONS, fastapi_app, flask_app, replay, seed
from .conftest import serve_asgi, serve_wsgi

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, BrowserContext, Page

pytestmark = pytest.mark.postgres

STATES = ("pending", "running", "succeeded", "failed", "dead", "cancelled")


class Site:
    """A dashboard being served: its URL, its database."""

    def __init__(self, url: str, dsn: str) -> None:
        self.url = url
        self.dsn = dsn

    def page(self, path: str = "/") -> str:
        return f"{self.url}{MOUNT}{path}"


@pytest.fixture(params=["fastapi", "flask"])
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    """The seeded database, served by the binding the parameter names."""
    name, dsn = create_database(with_schema=True)
    try:
        seed(dsn)
        if request.param == "fastapi":
            with serve_asgi(fastapi_app(dsn)) as url:
                yield Site(url, dsn)
        else:
            app, store = flask_app(dsn)
            try:
                with serve_wsgi(app) as url:
                    yield Site(url, dsn)
            finally:
                store.close()
    finally:
        drop_database(name)


@pytest.fixture
def as_user(browser: Browser, site: Site) -> Iterator[Any]:
    """``as_user(name)``: a page of a fresh browser context signed in to the site as
    ``name`` (None: nobody)."""
    contexts: list[BrowserContext] = []
    base_url = site.url

    def open_page(user: str | None) -> Page:
        context = browser.new_context()
        contexts.append(context)
        if user is not None:
            [token] = [token for token, (name, _) in SESSIONS.items() if name == user]
            context.add_cookies([{"name": SESSION, "value": token, "url": base_url}])
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def _table_counts(dsn: str) -> dict[tuple[str, str], int]:
    rows = fetch(dsn, "SELECT kind, status, count(*) FROM skiplock.jobs GROUP BY 1, 2")
    return {(kind, status): int(n) for kind, status, n in rows}


def _dead_ids(dsn: str) -> list[int]:
    rows = fetch(dsn, "SELECT id FROM skiplock.jobs WHERE status = 'dead' ORDER BY id")
    return [int(row[0]) for row in rows]


def _state(dsn: str, job_id: int) -> str:
    [(state,)] = fetch(dsn, f"SELECT status FROM skiplock.jobs WHERE id = {job_id}")
    return str(state)


def test_an_unknown_caller_is_refused(site: Site, as_user: Any) -> None:
    page = as_user(None)
    for path in ("/", "/dead", f"/jobs/{_dead_ids(site.dsn)[0]}"):
        response = page.goto(site.page(path))
        assert response is not None
        assert response.status == 401, path
        assert response.headers["www-authenticate"] == 'Bearer realm="skiplock"'
        assert page.get_by_test_id("error").inner_text() == "missing or invalid credentials"
        assert "webhook.deliver" not in page.content()


def test_the_overview_shows_the_depths_of_the_table(site: Site, as_user: Any) -> None:
    page = as_user("viewer")
    response = page.goto(site.page("/"))
    assert response is not None
    assert response.status == 200
    assert page.title() == "Overview · skiplock"
    truth = _table_counts(site.dsn)
    kinds = sorted({kind for kind, _ in truth})
    assert kinds == ["email.send", "report.build", "webhook.deliver"]
    shown_kinds = page.locator("table.depths tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.kind)"
    )
    assert shown_kinds == kinds
    for kind in kinds:
        row = page.locator(f'tr[data-kind="{kind}"]')
        cells = {state: row.locator(f'td[data-state="{state}"]') for state in STATES}
        shown = {state: int(cell.inner_text()) for state, cell in cells.items()}
        assert shown == {state: truth.get((kind, state), 0) for state in STATES}, kind
    totals = {
        state: sum(n for (_, s), n in truth.items() if s == state) for state in ("pending", "dead")
    }
    assert int(page.get_by_test_id("total-pending").inner_text()) == totals["pending"] == 7
    assert int(page.get_by_test_id("total-dead").inner_text()) == totals["dead"] == 4
    assert int(page.get_by_test_id("window-succeeded").inner_text()) == 7
    assert int(page.get_by_test_id("window-failures").inner_text()) == 5  # 4 dead, 1 failed
    assert page.locator("figure.chart svg rect.ok").count() >= 1
    assert page.get_by_test_id("identity").inner_text() == "viewer (read only)"
    # The stylesheet came from the package (no other request left the page's origin).
    assert page.locator("header.top").evaluate("e => getComputedStyle(e).display") == "flex"


def test_retrying_a_dead_job_from_the_dlq_page_makes_it_pending(
    site: Site, as_user: Any, screen: dict[str, int]
) -> None:
    page = as_user("admin")
    page.set_viewport_size(screen)
    page.goto(site.page("/dead"))
    _fits(page, screen["width"])
    dead = _dead_ids(site.dsn)
    rows = page.locator("table.jobs tbody tr")
    assert rows.evaluate_all("rows => rows.map(r => Number(r.dataset.job))") == dead
    assert "refused the connection" in rows.first.inner_text()
    target = dead[1]
    page.get_by_test_id(f"retry-{target}").click()
    page.wait_for_url(re.compile(r"/dashboard/dead\?done=retried"))
    notice = page.get_by_test_id("notice").inner_text()
    assert notice == f"Job {target} retried: it is pending again."
    assert _state(site.dsn, target) == "pending"
    assert _dead_ids(site.dsn) == [i for i in dead if i != target]
    assert page.locator(f'tr[data-job="{target}"]').count() == 0
    [(_action, actor)] = fetch(
        site.dsn,
        f"SELECT action, actor FROM skiplock.audit WHERE job_id = {target} "
        "AND action = 'job_replay'",
    )
    assert actor == "admin"
    # Its page shows the replay in the audit trail.
    page.goto(site.page(f"/jobs/{target}"))
    assert page.get_by_test_id("job-state").inner_text() == "pending"
    audit = page.get_by_test_id("audit").inner_text()
    assert "job_dlq" in audit
    assert re.search(r"job_replay\s+admin", audit)  # a row, or a card on a phone


def test_discarding_a_dead_job_from_its_page_deletes_it(site: Site, as_user: Any) -> None:
    page = as_user("admin")
    target = _dead_ids(site.dsn)[0]
    page.goto(site.page(f"/jobs/{target}"))
    assert "https://hooks0.example/<in>" in page.get_by_test_id("payload").inner_text()
    page.get_by_test_id(f"discard-{target}").click()  # asks first
    assert fetch(site.dsn, f"SELECT count(*) FROM skiplock.jobs WHERE id = {target}") == [(1,)]
    page.get_by_test_id(f"confirm-discard-{target}").click()
    page.wait_for_url(re.compile(r"/dashboard/dead\?done=discarded"))
    assert fetch(site.dsn, f"SELECT count(*) FROM skiplock.jobs WHERE id = {target}") == [(0,)]


def test_a_stale_discard_is_a_409_that_shows_the_job_as_it_is(
    site: Site, as_user: Any, screen: dict[str, int]
) -> None:
    """Issue 32's defect: operator B loaded the DLQ, operator A replayed a job since; B's
    Discard must not delete the job, now pending."""
    page = as_user("admin")
    page.set_viewport_size(screen)
    page.goto(site.page("/dead"))
    target = _dead_ids(site.dsn)[0]
    replay(site.dsn, target)  # operator A, elsewhere
    page.get_by_test_id(f"discard-{target}").click()
    with page.expect_navigation() as navigation:
        page.get_by_test_id(f"confirm-discard-{target}").click()
    response = navigation.value
    assert response is not None
    assert response.status == 409
    assert page.get_by_test_id("current-state").inner_text() == "pending"
    assert "changed since this page was loaded" in page.get_by_test_id("error").inner_text()
    assert _state(site.dsn, target) == "pending"
    _fits(page, screen["width"])
    page.get_by_role("link", name="Back").click()
    assert page.get_by_test_id("job-state").inner_text() == "pending"


#: The buttons that act on jobs (not the live bar's pause switch, every reader's).
ACTIONS = "button:not([data-live-toggle]), summary"


def test_a_reader_cannot_retry(site: Site, as_user: Any) -> None:
    page = as_user("viewer")
    page.goto(site.page("/dead"))
    dead = _dead_ids(site.dsn)
    assert page.locator("table.jobs tbody tr").count() == len(dead)
    assert page.locator(ACTIONS).count() == 0
    page.goto(site.page(f"/jobs/{dead[0]}"))
    assert page.locator(ACTIONS).count() == 0
    # A form posted anyway, with the viewer's own valid CSRF token: the hook refuses.
    [cookie] = [c for c in page.context.cookies() if c["name"] == "skiplock_csrf"]
    with page.expect_navigation() as navigation:
        page.evaluate(
            """([action, token]) => {
                const form = document.createElement("form");
                form.method = "post";
                form.action = action;
                const field = document.createElement("input");
                field.name = "csrf_token";
                field.value = token;
                form.appendChild(field);
                document.body.appendChild(form);
                form.submit();
            }""",
            [f"{MOUNT}/jobs/{dead[0]}/retry", cookie["value"]],
        )
    response = navigation.value
    assert response is not None
    assert response.status == 403
    assert "viewer may only read" in page.get_by_test_id("error").inner_text()
    assert _dead_ids(site.dsn) == dead


#: The two screens of the acceptance tests: a laptop's and a phone's.
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(params=list(VIEWPORTS))
def screen(request: pytest.FixtureRequest) -> dict[str, int]:
    return VIEWPORTS[request.param]


def _ids(dsn: str, where: str) -> list[int]:
    rows = fetch(dsn, f"SELECT id FROM skiplock.jobs WHERE {where} ORDER BY id")
    return [int(row[0]) for row in rows]


def _shown(page: Page) -> list[int]:
    rows = page.locator("table.jobs tbody tr")
    return [int(i) for i in rows.evaluate_all("rows => rows.map(r => r.dataset.job)")]


def _fits(page: Page, width: int) -> None:
    """Nothing scrolls sideways, and every button and link of the page lies within the
    screen's width."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width, page.url
    outside = page.evaluate(
        """width => [...document.querySelectorAll('button, summary, main a, input, select')]
            .filter(e => e.offsetParent !== null)
            .map(e => e.getBoundingClientRect())
            .filter(r => r.left < 0 || r.right > width + 0.5).length""",
        width,
    )
    assert outside == 0, page.url


BROWSE = {
    "pending": "status = 'pending' AND available_at <= now()",
    "scheduled": "status = 'pending' AND available_at > now()",
    "running": "status = 'running'",
    "succeeded": "status = 'succeeded'",
    "failed": "status = 'failed'",
    "dead": "status = 'dead'",
    "cancelled": "status = 'cancelled'",
}


def test_browsing_every_state(site: Site, as_user: Any, screen: dict[str, int]) -> None:
    page = as_user("viewer")
    page.set_viewport_size(screen)
    page.goto(site.page("/jobs"))
    _fits(page, screen["width"])
    for state, where in BROWSE.items():
        page.get_by_test_id(f"state-{state}").click()
        page.wait_for_url(re.compile(rf"state={state}"))
        assert _shown(page) == _ids(site.dsn, where), state
        _fits(page, screen["width"])
    job = _ids(site.dsn, BROWSE["dead"])[0]
    page.goto(site.page(f"/jobs/{job}"))
    assert "refused the connection" in page.get_by_test_id("attempts").inner_text()
    _fits(page, screen["width"])


def test_filtering_and_searching(site: Site, as_user: Any, screen: dict[str, int]) -> None:
    page = as_user("viewer")
    page.set_viewport_size(screen)
    page.goto(site.page("/jobs"))
    page.get_by_test_id("filter-kind").fill("email.send")
    page.get_by_test_id("filter-tenant").fill("acme")
    page.get_by_test_id("apply-filter").click()
    page.wait_for_url(re.compile(r"kind=email.send"))
    assert _shown(page) == _ids(site.dsn, "kind = 'email.send' AND tenant_id = 'acme'")
    page.goto(site.page("/jobs"))
    page.get_by_test_id("filter-q").fill("hooks2.example")
    page.get_by_test_id("apply-filter").click()
    page.wait_for_url(re.compile(r"q=hooks2.example"))
    [job] = _shown(page)
    assert "hooks2.example" in page.locator(f'tr[data-job="{job}"]').inner_text()
    # The search box searches payloads too (issue 45): PATH=VALUE terms.
    page.get_by_test_id("filter-q").fill("to=later1@example.com")
    page.get_by_test_id("apply-filter").click()
    page.wait_for_url(re.compile(r"q=to%3Dlater1"))
    [later] = _shown(page)
    assert [later] == _ids(site.dsn, 'payload @> \'{"to": "later1@example.com"}\'')
    page.get_by_test_id("filter-q").fill("hooks2.example")
    page.get_by_test_id("apply-filter").click()
    page.wait_for_url(re.compile(r"q=hooks2.example"))
    page.get_by_test_id("filter-id").fill(str(job))
    page.get_by_test_id("apply-filter").click()
    page.wait_for_url(re.compile(rf"/jobs/{job}$"))
    assert page.get_by_test_id("job-state").inner_text() == "dead"
    _fits(page, screen["width"])


def test_a_bulk_retry_asks_first_then_retries_every_match(
    site: Site, as_user: Any, screen: dict[str, int]
) -> None:
    page = as_user("admin")
    page.set_viewport_size(screen)
    page.goto(site.page("/jobs?state=dead"))
    dead = _ids(site.dsn, "status = 'dead'")
    assert _shown(page) == dead
    _fits(page, screen["width"])
    page.get_by_test_id("bulk-action").select_option("retry")
    page.get_by_test_id("bulk-all").click()
    count = page.get_by_test_id("bulk-count").inner_text()
    assert count.startswith(f"Retry {len(dead)} jobs matching the filter state=dead")
    assert _ids(site.dsn, "status = 'dead'") == dead  # asked, not done
    _fits(page, screen["width"])
    page.get_by_test_id("bulk-confirm").click()
    done = page.get_by_test_id("bulk-done").inner_text()
    assert done.startswith(f"{len(dead)} of the {len(dead)} confirmed jobs retried.")
    _fits(page, screen["width"])
    assert _ids(site.dsn, "status = 'dead'") == []
    actors = fetch(
        site.dsn,
        "SELECT count(*) FROM skiplock.audit WHERE action = 'job_replay' AND actor = 'admin'",
    )
    assert actors == [(len(dead),)]


def test_a_bulk_discard_of_selected_jobs(site: Site, as_user: Any, screen: dict[str, int]) -> None:
    page = as_user("admin")
    page.set_viewport_size(screen)
    page.goto(site.page("/jobs?state=cancelled"))
    [cancelled] = _shown(page)
    page.get_by_test_id(f"select-{cancelled}").check()
    page.get_by_test_id("bulk-action").select_option("discard")
    page.get_by_test_id("bulk-selected").click()
    assert "Discard 1 selected job" in page.get_by_test_id("bulk-count").inner_text()
    page.get_by_test_id("bulk-confirm").click()
    assert (
        page.get_by_test_id("bulk-done")
        .inner_text()
        .startswith("1 of the 1 confirmed job discarded.")
    )
    assert fetch(site.dsn, f"SELECT count(*) FROM skiplock.jobs WHERE id = {cancelled}") == [(0,)]


def test_a_bulk_discard_whose_jobs_changed_after_the_confirmation_is_a_409(
    site: Site, as_user: Any, screen: dict[str, int]
) -> None:
    # Issue 41, item 1: the confirmation said "Discard 1 job?"; another operator's change
    # meanwhile made 2 match: the confirmation is refused with the new count, and nothing
    # is discarded until the operator confirms the 2.
    page = as_user("admin")
    page.set_viewport_size(screen)
    page.goto(site.page("/jobs?state=failed"))
    [failed] = _shown(page)
    page.get_by_test_id("bulk-action").select_option("discard")
    page.get_by_test_id("bulk-all").click()
    assert (
        page.get_by_test_id("bulk-count")
        .inner_text()
        .startswith("Discard 1 job matching the filter state=failed")
    )
    older = _ids(site.dsn, f"status = 'pending' AND id < {failed}")[0]
    with PsycopgJobStore(site.dsn) as store:  # another operator, meanwhile
        Engine(store, Settings(audit=True)).operator("someone-else").fail_job(older)
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.get_by_test_id("bulk-confirm").click()
    assert answer.value.status == 409
    assert page.get_by_test_id("bulk-changed").inner_text() == (
        f"1 job was confirmed; 2 match now (up to job {failed}). Nothing was done."
    )
    assert _ids(site.dsn, "status = 'failed'") == [older, failed]  # nothing discarded
    _fits(page, screen["width"])
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.get_by_test_id("bulk-confirm").click()  # "Discard 2 jobs", the new count
    assert answer.value.status == 200
    assert (
        page.get_by_test_id("bulk-done")
        .inner_text()
        .startswith("2 of the 2 confirmed jobs discarded.")
    )
    assert _ids(site.dsn, "status = 'failed'") == []


def test_pausing_then_resuming_a_kind_from_its_row(
    site: Site, as_user: Any, screen: dict[str, int]
) -> None:
    page = as_user("admin")
    page.set_viewport_size(screen)
    page.goto(site.page("/"))
    page.get_by_role("link", name="Pauses and limits").click()
    page.wait_for_url(re.compile(r"/dashboard/controls$"))
    assert page.get_by_test_id("state-kind-email.send").inner_text() == "no"
    _fits(page, screen["width"])
    page.get_by_test_id("pause-kind-email.send").click()
    page.wait_for_url(re.compile(r"/dashboard/controls\?done=paused"))
    assert page.get_by_test_id("notice").inner_text().startswith("Paused")
    assert "by admin" in page.get_by_test_id("state-kind-email.send").inner_text()
    # Its due jobs are listed as held back by the pause (issue 41 item 10).
    held = page.locator('[data-testid="throttled"] tr[data-throttled^="email.send/"]')
    assert held.count() >= 1
    assert held.first.locator('[data-label="Held back by"]').inner_text() == "a pause"
    paused = fetch(site.dsn, "SELECT kind, tenant_id, actor FROM skiplock.pauses")
    assert [tuple(row) for row in paused] == [("email.send", None, "admin")]
    _fits(page, screen["width"])
    page.get_by_test_id("resume-kind-email.send").click()
    page.wait_for_url(re.compile(r"/dashboard/controls\?done=resumed"))
    assert page.get_by_test_id("state-kind-email.send").inner_text() == "no"
    assert fetch(site.dsn, "SELECT kind FROM skiplock.pauses") == []
    assert page.get_by_test_id("no-pauses").is_visible()


def _sample(dsn: str) -> None:
    """A worker's counts roll-up: folds the counts and takes this minute's samples."""
    from skiplock.adapters.psycopg import PsycopgJobStore

    with PsycopgJobStore(dsn) as store:
        store.roll_up_counts()


def test_the_charts_page_draws_and_switches_windows(
    site: Site, as_user: Any, screen: dict[str, int]
) -> None:
    _sample(site.dsn)
    page = as_user("viewer")
    page.set_viewport_size(screen)
    page.goto(site.page("/"))
    page.get_by_role("link", name="Charts").click()
    page.wait_for_url(re.compile(r"/charts$"))
    for chart in ("throughput-by-kind", "backlog", "failure-rate", "claim-latency"):
        assert page.get_by_test_id(chart).is_visible(), chart
    bars = page.locator('[data-testid="throughput-by-kind"] rect')
    assert bars.count() > 0
    assert page.locator('[data-testid="backlog"] polyline').count() > 0
    _fits(page, screen["width"])
    page.get_by_test_id("windows").get_by_role("link", name="24h").click()
    page.wait_for_url(re.compile(r"window=24h"))
    assert page.get_by_test_id("windows").locator("strong").inner_text() == "24h"
    _fits(page, screen["width"])


def test_without_javascript_the_overview_reloads_itself_and_can_be_paused(
    browser: Browser, site: Site, screen: dict[str, int]
) -> None:
    """With scripts off the overview reloads itself (a ``<meta http-equiv="refresh">`` in
    a ``<noscript>``); with them, dashboard.js refreshes it in place instead
    (test_dashboard_live.py)."""
    [token] = [token for token, (name, _) in SESSIONS.items() if name == "viewer"]
    context = browser.new_context(java_script_enabled=False)
    context.add_cookies([{"name": SESSION, "value": token, "url": site.url}])
    try:
        page = context.new_page()
        page.set_viewport_size(screen)  # type: ignore[arg-type,unused-ignore]
        page.goto(site.page("/"))
        _fits(page, screen["width"])
        assert page.locator(f'meta[http-equiv="refresh"][content="{REFRESH}"]').count() == 1
        first = page.locator("footer").inner_text()
        with page.expect_navigation(timeout=REFRESH * 5000):
            pass  # the page reloads itself
        page.locator("footer").filter(has_not_text=first).wait_for(timeout=REFRESH * 5000)
        page.get_by_test_id("live-off").click()
        page.wait_for_url(re.compile(r"live=off"))
        assert page.locator('meta[http-equiv="refresh"]').count() == 0
        assert page.get_by_test_id("live-on").is_visible()
    finally:
        context.close()


#: More history for the pictures: 400 jobs that succeeded over the last hour, the dead ones
#: spread over it too, and two live workers.
SCREENSHOT_DATA = [
    """
    INSERT INTO skiplock.jobs (kind, status, payload, attempts, created_at, available_at,
        completed_at)
    SELECT (ARRAY['email.send', 'report.build', 'image.resize'])[1 + g % 3], 'succeeded',
        jsonb_build_object('n', g), 1, now() - interval '2 hours', now() - interval '2 hours',
        now() - ((g * g) % 3540) * interval '1 second'
    FROM generate_series(1, 400) AS g
    """,
    """
    UPDATE skiplock.jobs SET
        completed_at = now() - (id * 7 % 55) * interval '1 minute',
        claimed_at = now() - (id * 7 % 55) * interval '1 minute' - interval '2 seconds',
        created_at = now() - (id * 7 % 55) * interval '1 minute' - interval '3 seconds',
        available_at = now() - (id * 7 % 55) * interval '1 minute' - interval '3 seconds'
    WHERE status IN ('dead', 'failed', 'cancelled')
    """,
    # An hour of the samples a worker's roll-up takes each minute (the charts page).
    """
    INSERT INTO skiplock.queue_samples
        (minute, kind, pending, due, due_bounded, running, claims, claim_p50, claim_p99)
    SELECT date_bin('1 minute', now(), 'epoch') - m * interval '1 minute', k.kind,
        d.due + 5, d.due, false, 2, 40, 0.02 + 0.01 * sin(m / 4.0),
        0.15 + 0.12 * abs(sin(m / 9.0)) + CASE WHEN m BETWEEN 20 AND 24 THEN 1.1 ELSE 0 END
    FROM generate_series(1, 59) AS m
    CROSS JOIN unnest(ARRAY['email.send', 'report.build', 'image.resize']) WITH ORDINALITY
        AS k (kind, i)
    CROSS JOIN LATERAL (
        SELECT greatest(0, round(12 * k.i + 10 * k.i * sin(m / (3.0 + k.i))))::bigint AS due
    ) AS d
    """,
    """
    INSERT INTO skiplock.queue_samples
        (minute, kind, pending, due, due_bounded, running, claims, claim_p50, claim_p99)
    SELECT minute, '', sum(pending), sum(due), false, sum(running), 40, min(claim_p50),
        max(claim_p99)
    FROM skiplock.queue_samples GROUP BY minute
    """,
    """
    INSERT INTO skiplock.workers (id, host, pid, kinds) VALUES
        ('web-1/4412/7f3a9c', 'web-1', 4412, ARRAY['email.send', 'report.build']),
        ('web-2/3150/0b2e41', 'web-2', 3150, NULL)
    """,
]


def test_screenshots_of_the_main_pages(site: Site, as_user: Any, tmp_path: Path) -> None:
    """The pictures of docs/dashboard.md and docs/dashboard-pages.md: the jobs finished
    over the last hour (their completion times spread out), the overview, the job
    browser, the DLQ, a dead job's page, the charts and the pauses and limits at
    1280x800, and the job browser on a phone (390x844)."""
    execute(site.dsn, SCREENSHOT_DATA)
    _sample(site.dsn)
    folder = Path(os.environ.get("SKIPLOCK_DASHBOARD_SCREENSHOTS") or tmp_path)
    page = as_user("admin")
    shots = {
        "overview": ("/?live=off", VIEWPORTS["desktop"]),
        "jobs": ("/jobs?state=dead", VIEWPORTS["desktop"]),
        "dead": ("/dead", VIEWPORTS["desktop"]),
        "job": (f"/jobs/{_dead_ids(site.dsn)[0]}", VIEWPORTS["desktop"]),
        "charts": ("/charts", VIEWPORTS["desktop"]),
        "controls": ("/controls", VIEWPORTS["desktop"]),
        "phone": ("/jobs?state=dead", VIEWPORTS["phone"]),
    }
    for name, (path, screen) in shots.items():
        page.set_viewport_size(screen)
        response = page.goto(site.page(path))
        assert response is not None
        assert response.status == 200
        target = folder / f"dashboard-{name}.png"
        page.screenshot(path=str(target), full_page=name != "phone")
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
