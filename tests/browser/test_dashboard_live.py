"""Live pages in a real headless chromium (issue 45, items 3 and 1), at 1280 and 390 px
through each binding: a list, the job page and the overview refresh in place when a job
changes (no reload: the page's own objects survive), keeping the scroll position, the
ticked boxes and the focus, and holding a region whose ticked job changed; the pause
switch stops the refreshing, also after a reload; every page works with JavaScript off;
and a pending job's page says why it is waiting, refreshed in place when a pause holds it.

The pages' timers run on Playwright's clock (``page.clock``): a test moves time on by a
refresh interval, then waits on a condition with a deadline; nothing sleeps.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

import pytest

from skiplock import Engine, Settings
from skiplock.adapters.psycopg import PsycopgJobStore
from tests.pgfixtures import fetch

from .apps import REFRESH, SESSION, SESSIONS, replay
from .test_dashboard_browser import VIEWPORTS, Site, _dead_ids, _fits, _shown, as_user, site

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, Locator, Page, ViewportSize

pytestmark = pytest.mark.postgres

# The fixtures this module shares with test_dashboard_browser.py.
__all__ = ["as_user", "site"]

#: How long a condition may take once the clock has moved on (a fetch and a swap).
DEADLINE_MS = 15_000


@pytest.fixture(params=list(VIEWPORTS))
def screen(request: pytest.FixtureRequest) -> ViewportSize:
    return cast("ViewportSize", VIEWPORTS[request.param])


@pytest.fixture
def live_page(as_user: Any, screen: ViewportSize) -> Iterator[Any]:
    """``live_page(user, url)``: a page at ``screen``'s size on Playwright's clock, loaded,
    its live bar shown; it fails the test on a Content-Security-Policy violation."""
    violations: list[str] = []

    def open_page(user: str, url: str) -> Page:
        page: Page = as_user(user)
        page.set_viewport_size(screen)
        page.on(
            "console",
            lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
        )
        page.clock.install()
        page.goto(url)
        page.get_by_test_id("live-bar").wait_for(state="visible")
        page.evaluate("window.notReloaded = true")  # gone if the page ever reloads
        return page

    yield open_page
    assert violations == []


def _tick(page: Page, updates: int) -> int:
    """Move the page's clock on by a refresh interval; wait until its live bar counts
    one more update than ``updates``; return the count."""
    page.clock.run_for(REFRESH * 1000)
    page.wait_for_function(
        "n => Number(document.querySelector('[data-live-bar]').dataset.updates) > n",
        arg=updates,
        timeout=DEADLINE_MS,
        polling=50,
    )
    count = int(page.get_by_test_id("live-bar").get_attribute("data-updates") or 0)
    assert page.evaluate("window.notReloaded") is True  # in place, not a reload
    return count


def _wait_gone(page: Page, job: int) -> None:
    """Wait until the row of ``job`` has left the page (a function, not a string: the
    page's Content-Security-Policy forbids eval, which a string predicate needs)."""
    page.wait_for_function(
        'id => !document.querySelector(`tr[data-job="${id}"]`)',
        arg=job,
        timeout=DEADLINE_MS,
        polling=50,
    )


def _bar_state(page: Page) -> str:
    return page.get_by_test_id("live-bar").get_attribute("data-state") or ""


def _top(locator: Locator) -> float:
    """Where ``locator``'s element is on the screen (its top, in CSS pixels)."""
    box = locator.bounding_box()
    assert box is not None
    return float(box["y"])


def test_a_list_refreshes_in_place_keeping_ticks_focus_and_scroll(
    site: Site, live_page: Any, screen: ViewportSize
) -> None:
    page = live_page("admin", site.page("/jobs?state=dead"))
    dead = _dead_ids(site.dsn)
    assert _shown(page) == dead
    _fits(page, screen["width"])
    # ``leaving`` is listed above ``kept``: its row goes, ``kept``'s must stay in place.
    leaving, other, kept = dead[0], dead[1], dead[-1]
    page.get_by_test_id(f"select-{kept}").check()  # a bulk selection in progress
    page.get_by_test_id("bulk-action").select_option("discard")
    page.get_by_test_id(f"select-{kept}").focus()
    # Room to scroll at any size (CSSOM, which the page's CSP allows), then scroll the
    # ticked row to 100 px from the top of the screen.
    page.evaluate("document.body.style.paddingBottom = '3000px'")
    row = page.locator(f'tr[data-job="{kept}"]')
    page.evaluate("top => window.scrollBy(0, top - 100)", _top(row))
    assert float(page.evaluate("window.scrollY")) > 0
    assert abs(_top(row) - 100) < 2
    replay(site.dsn, leaving)  # another operator: the job leaves the dead list
    updates = _tick(page, 0)
    _wait_gone(page, leaving)
    assert _shown(page) == [i for i in dead if i != leaving]
    assert page.get_by_test_id(f"select-{kept}").is_checked()
    assert page.evaluate("document.activeElement.dataset.testid") == f"select-{kept}"
    assert page.get_by_test_id("bulk-action").input_value() == "discard"
    assert abs(_top(row) - 100) < 2  # what the operator looks at did not move
    assert _bar_state(page) == "live"
    # The state tabs' counts are a region too: one dead job fewer.
    dead_tab = page.get_by_test_id("state-dead").inner_text()
    assert dead_tab == f"dead ({len(dead) - 1})"
    _fits(page, screen["width"])
    # The ticked job itself changes: its tick has no place in the new list, so the list
    # is held as it is (the selection is not clobbered) and the bar says why.
    replay(site.dsn, kept)
    replay(site.dsn, other)
    updates = _tick(page, updates)
    assert _bar_state(page) == "held"
    assert "ticked job changed" in page.get_by_test_id("live-bar").inner_text()
    assert page.get_by_test_id(f"select-{kept}").is_checked()
    assert page.locator(f'tr[data-job="{other}"]').count() == 1  # held: not swapped
    # Unticked, the next refresh swaps the list.
    page.get_by_test_id(f"select-{kept}").uncheck()
    _tick(page, updates)
    _wait_gone(page, kept)
    assert _shown(page) == [i for i in dead if i not in {kept, leaving, other}]
    assert _bar_state(page) == "live"


def test_an_open_confirmation_holds_its_region(site: Site, live_page: Any) -> None:
    page = live_page("admin", site.page("/dead"))
    dead = _dead_ids(site.dsn)
    target, leaving = dead[0], dead[1]
    page.get_by_test_id(f"discard-{target}").click()  # opens the confirmation box
    confirm = page.get_by_test_id(f"confirm-discard-{target}")
    assert confirm.is_visible()
    replay(site.dsn, leaving)
    updates = _tick(page, 0)
    assert _bar_state(page) == "held"
    assert confirm.is_visible()
    assert page.locator(f'tr[data-job="{leaving}"]').count() == 1
    page.get_by_test_id(f"discard-{target}").click()  # closes it
    _tick(page, updates)
    _wait_gone(page, leaving)


def test_the_pause_switch_stops_the_refreshing_until_resumed(
    site: Site, live_page: Any, screen: ViewportSize
) -> None:
    page = live_page("viewer", site.page("/dead"))
    toggle = page.get_by_test_id("live-toggle")
    assert toggle.inner_text() == "Pause"
    _fits(page, screen["width"])
    toggle.click()
    assert _bar_state(page) == "paused"
    assert toggle.get_attribute("aria-pressed") == "true"
    assert toggle.inner_text() == "Resume live updates"
    leaving = _dead_ids(site.dsn)[0]
    replay(site.dsn, leaving)
    fetches: list[str] = []
    page.on(
        "request", lambda r: fetches.append(r.url) if r.headers.get("x-skiplock-live") else None
    )
    page.clock.run_for(REFRESH * 1000 * 5)  # five intervals: no refresh starts
    bar = page.get_by_test_id("live-bar")
    assert bar.get_attribute("aria-busy") is None  # set the moment a refresh starts
    assert bar.get_attribute("data-updates") == "0"
    assert page.locator(f'tr[data-job="{leaving}"]').count() == 1
    # The switch is kept (localStorage): after a reload the page is still paused.
    page.reload()
    bar.wait_for(state="visible")
    assert _bar_state(page) == "paused"
    page.evaluate("window.notReloaded = true")
    page.clock.run_for(REFRESH * 1000 * 5)
    assert bar.get_attribute("data-updates") == "0"
    assert fetches == []
    # Resumed: it refreshes at once.
    toggle.click()
    _wait_gone(page, leaving)
    assert _bar_state(page) == "live"
    assert len(fetches) >= 1
    assert page.evaluate("window.notReloaded") is True


def test_the_job_page_says_why_it_waits_and_refreshes_in_place(
    site: Site, live_page: Any, screen: ViewportSize
) -> None:
    """Issue 45, item 1 in the browser: a pending job's "Why is it waiting?" list, the
    engine's reasons; a pause set elsewhere shows up in place."""
    [(job,)] = fetch(
        site.dsn,
        "SELECT min(id) FROM skiplock.jobs WHERE kind = 'report.build' AND status = 'pending' "
        "AND available_at <= now()",
    )
    page = live_page("viewer", site.page(f"/jobs/{job}"))
    assert page.get_by_test_id("job-state").inner_text() == "pending"
    with PsycopgJobStore(site.dsn) as store:
        engine = Engine(store, Settings(audit=True))
        codes = [r.code for r in engine.why(job).reasons]
    shown = page.get_by_test_id("wait-reasons").locator("li")
    assert shown.evaluate_all("items => items.map(i => i.dataset.code)") == codes
    assert "no_worker" in codes  # no worker serves report.build here
    assert all(text.strip() for text in shown.all_inner_texts())
    _fits(page, screen["width"])
    with PsycopgJobStore(site.dsn) as store:  # another operator pauses the kind
        Engine(store, Settings(audit=True)).operator("someone-else").pause(
            kind="report.build", allow_unknown_kind=True
        )
    _tick(page, 0)
    paused = page.locator('[data-testid="wait-reasons"] li[data-code="paused"]')
    paused.wait_for(timeout=DEADLINE_MS)
    assert "someone-else" in paused.inner_text()
    _fits(page, screen["width"])


def test_the_overview_refreshes_in_place(site: Site, live_page: Any) -> None:
    page = live_page("viewer", site.page("/"))
    dead = _dead_ids(site.dsn)
    assert int(page.get_by_test_id("total-dead").inner_text()) == len(dead)
    replay(site.dsn, dead[0])
    _tick(page, 0)
    page.wait_for_function(
        "n => document.querySelector('[data-testid=\"total-dead\"]').innerText === n",
        arg=str(len(dead) - 1),
        timeout=DEADLINE_MS,
        polling=50,
    )
    assert page.locator('meta[http-equiv="refresh"]').count() == 0  # no reload with a script


def _finish_jobs(dsn: str, count: int) -> None:
    """``count`` jobs of a new kind enqueued and run to success."""
    with PsycopgJobStore(dsn) as store:
        engine = Engine(store, Settings(audit=True))

        @engine.processor("image.resize")
        def resize(payload: Any, ctx: Any) -> None:
            pass

        for n in range(count):
            engine.enqueue("image.resize", {"n": n})
        engine.worker(kinds=["image.resize"]).run_until_idle()


def test_the_charts_refresh_in_place(site: Site, live_page: Any, screen: ViewportSize) -> None:
    page = live_page("viewer", site.page("/charts"))
    figure = page.get_by_test_id("throughput-by-kind")
    caption = figure.locator("figcaption")
    finished = int(re.search(r"(\d+) finished", caption.inner_text())[1])  # type: ignore[index]
    assert "image.resize" not in caption.inner_text()
    _finish_jobs(site.dsn, 30)
    _tick(page, 0)
    caption.filter(has_text=f"{finished + 30} finished").wait_for(timeout=DEADLINE_MS)
    assert "image.resize" in caption.inner_text()
    # The value axis follows: its top covers the new bar of 30 and more.
    top = figure.get_by_test_id("y-scale").locator("li").first.inner_text()
    assert int(top.replace(",", "")) >= 30
    _fits(page, screen["width"])


@pytest.fixture
def no_script(browser: Browser, site: Site, screen: ViewportSize) -> Iterator[Page]:
    """A page of a browser context with JavaScript off, signed in as ``admin``."""
    context = browser.new_context(java_script_enabled=False, viewport=screen)
    [token] = [token for token, (name, _) in SESSIONS.items() if name == "admin"]
    context.add_cookies([{"name": SESSION, "value": token, "url": site.url}])
    try:
        yield context.new_page()
    finally:
        context.close()


def test_every_page_works_without_javascript(
    site: Site, no_script: Page, screen: ViewportSize
) -> None:
    page = no_script
    dead = _dead_ids(site.dsn)
    pending = fetch(site.dsn, "SELECT min(id) FROM skiplock.jobs WHERE status = 'pending'")[0][0]
    for path in (
        "/",
        "/jobs",
        "/dead",
        f"/jobs/{dead[0]}",
        f"/jobs/{pending}",
        "/charts",
        "/controls",
    ):
        response = page.goto(site.page(path))
        assert response is not None
        assert response.status == 200, path
        assert not page.get_by_test_id("live-bar").is_visible(), path  # the script's switch
        _fits(page, screen["width"])
    page.goto(site.page(f"/jobs/{pending}"))
    assert page.get_by_test_id("wait-reasons").locator("li").count() >= 1
    # The overview reloads itself, with its own switch.
    page.goto(site.page("/"))
    assert page.locator(f'meta[http-equiv="refresh"][content="{REFRESH}"]').count() == 1
    page.get_by_test_id("live-off").click()
    page.wait_for_url(re.compile(r"live=off"))
    assert page.locator('meta[http-equiv="refresh"]').count() == 0
    # A list's forms post as they always did: tick, bulk action, confirmation.
    page.goto(site.page("/jobs?state=dead"))
    assert _shown(page) == dead
    page.get_by_test_id(f"select-{dead[0]}").check()
    page.get_by_test_id("bulk-action").select_option("retry")
    page.get_by_test_id("bulk-selected").click()
    assert "Retry 1 selected job" in page.get_by_test_id("bulk-count").inner_text()
