"""The markup of the dashboard's live pages (issue 45, item 3) on the in-memory store: the
one script, served without the hook and allowed by the pages' Content-Security-Policy (no
inline script, no eval); every read page marks its live regions and says how often they
refresh; ``refresh=None`` turns it all off; without JavaScript the overview reloads
itself. The script's behaviour is tested in a browser (tests/browser/test_dashboard_live.py).
"""

from __future__ import annotations

import re

import pytest

from skiplock import Engine
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.integrations.dashboard import Dashboard, Permission, Request

ROOT = "/x"

#: A response's headers.
Headers = dict[str, str]


def authorize(request: Request, permission: Permission) -> str | None:
    return request.header("x-user")


@pytest.fixture
def engine() -> Engine:
    engine = Engine(InMemoryJobStore())
    engine.declare_kind("email.send")
    engine.enqueue("email.send", {"to": "a@example.com"})
    return engine


def _get(dashboard: Dashboard, page: str, path: str, **params: str) -> tuple[int, str, Headers]:
    path, _, query = path.partition("?")
    values = {name: [value] for name, _, value in (p.partition("=") for p in query.split("&") if p)}
    request = Request(
        "GET", ROOT + path, query=values, headers={"x-user": "ops"}, path_params=params
    )
    response = dashboard.handle(page, request)
    return response.status, response.body.decode(), dict(response.headers)


#: Every read page, its path and its path parameters.
PAGES = {
    "overview": ("/", {}),
    "jobs": ("/jobs", {}),
    "dead": ("/dead", {}),
    "job": ("/jobs/1", {"job_id": "1"}),
    "charts": ("/charts", {}),
    "controls": ("/controls", {}),
}


def test_the_script_is_served_without_asking_the_hook(engine: Engine) -> None:
    dashboard = Dashboard(engine, authorize=authorize)
    response = dashboard.handle("script", Request("GET", f"{ROOT}/static/dashboard.js"))
    assert (response.status, response.content_type) == (200, "text/javascript; charset=utf-8")
    script = response.body.decode()
    assert "data-live" in script
    assert "localStorage" in script
    # Nothing the page's policy refuses: no eval, no inline handlers, no other origin.
    assert not re.search(r"\beval\(|new Function|innerHTML\s*=|https?://", script)


@pytest.mark.parametrize("page", list(PAGES))
def test_every_read_page_marks_its_live_regions(engine: Engine, page: str) -> None:
    dashboard = Dashboard(engine, authorize=authorize, refresh=7)
    path, params = PAGES[page]
    status, html, headers = _get(dashboard, page, path, **params)
    assert status == 200
    directives = (d.strip().partition(" ") for d in headers["Content-Security-Policy"].split(";"))
    policy = {name: value for name, _, value in directives}
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"
    assert policy["connect-src"] == "'self'"
    # One script, the package's, loaded from the dashboard (no inline one).
    assert re.findall(r"<script[^>]*>", html) == [
        f'<script src="{ROOT}/static/dashboard.js" defer>'
    ]
    assert re.search(r"<[^>]*\son\w+=", html) is None  # no inline event handler
    main = html[html.index("<main") : html.index("</main>")]
    assert re.match(rf'<main data-page="{page}" data-refresh="7">', main)
    regions = re.findall(r'data-live="([^"]+)"', main)
    assert regions
    assert len(regions) == len(set(regions))  # a name is a region's, once per page
    assert 'data-testid="live-toggle"' in main
    assert re.search(r'<div class="live-bar"[^>]* hidden>', main)  # the script shows it


def test_refresh_none_turns_the_live_pages_off(engine: Engine) -> None:
    dashboard = Dashboard(engine, authorize=authorize, refresh=None)
    for page, (path, params) in PAGES.items():
        status, html, _ = _get(dashboard, page, path, **params)
        assert status == 200
        assert "<script" not in html, page
        assert "data-refresh" not in html, page
        assert "live-bar" not in html, page
        assert 'http-equiv="refresh"' not in html, page


def test_without_javascript_only_the_overview_reloads_itself(engine: Engine) -> None:
    dashboard = Dashboard(engine, authorize=authorize, refresh=7)
    _, html, _ = _get(dashboard, "overview", "/")
    # Parsed as elements only with scripts off: with them, the script refreshes in place.
    assert '<noscript><meta http-equiv="refresh" content="7"></noscript>' in html
    assert re.search(r'<noscript><p class="live" data-testid="live">.*?live=off', html)
    _, html, _ = _get(dashboard, "overview", "/?live=off")
    assert 'http-equiv="refresh"' not in html
    assert 'data-refresh="7"' in html  # the script's own switch is the pause then
    for page in ("jobs", "dead", "job", "charts", "controls"):
        path, params = PAGES[page]
        assert 'http-equiv="refresh"' not in _get(dashboard, page, path, **params)[1], page
