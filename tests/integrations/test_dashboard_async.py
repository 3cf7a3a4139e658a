"""The dashboard's framework-neutral pages (sync twin generated) on the in-memory store:
authorization (deny by default, read vs write, the caller as audit actor), CSRF, what
each page shows, escaping, errors."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import attrs
import pytest

from skiplock import AsyncEngine, AsyncOperator, JobState, Settings, ValidationError
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.core import Job, JobPage, WorkerInfo
from skiplock.integrations.dashboard import (
    CSRF_COOKIE,
    AsyncDashboard,
    Forbidden,
    Permission,
    Request,
    Response,
    _browse,
    _csrf,
    mount_root,
)
from skiplock.integrations.dashboard._render import version
from skiplock.integrations.rest._support import RETRY_AFTER

if TYPE_CHECKING:
    from collections.abc import Mapping

    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio

ROOT = "/admin/dashboard"
#: The key of the forms' tokens.
SECRET = "a-secret-of-the-tests-0123456789"
HOST = "jobs.example"
#: Who may do what: "admin" reads and writes, "viewer" only reads.
USERS = {"admin": {Permission.READ, Permission.WRITE}, "viewer": {Permission.READ}}


def authorize(request: Request, permission: Permission) -> str | None:
    user = request.header("x-user")
    if user not in USERS:
        return None
    if permission not in USERS[user]:
        raise Forbidden(f"{user} may not {permission.value}")
    return user


@pytest.fixture
async def engine(clock: FakeClock) -> AsyncEngine:
    engine = AsyncEngine(
        AsyncInMemoryJobStore(clock=clock), clock=clock, settings=Settings(audit=True)
    )

    @engine.processor("report.build")
    async def build(payload: Any) -> None:
        pass

    @engine.processor("webhook.send", max_attempts=1)
    async def send(payload: Any) -> None:
        raise ConnectionError(f"<script>alert({payload['n']})</script> refused")

    for n in range(3):
        await engine.enqueue("report.build", {"n": n}, tenant="acme" if n else None)
        await engine.enqueue("webhook.send", {"n": n, "html": "<b>bold</b>"})
    await engine.worker().run_until_idle()
    await engine.enqueue("report.build", {"n": 9})
    await engine.enqueue("report.build", {"n": 10}, delay=3600)
    return engine


@pytest.fixture
def dashboard(engine: AsyncEngine) -> AsyncDashboard:
    return AsyncDashboard(engine, authorize=authorize, csrf_secret=SECRET)


def _get(page: str, path: str, user: str | None = "admin", **params: str) -> Request:
    headers = {"host": HOST} | ({"x-user": user} if user else {})
    path, _, query = path.partition("?")
    values: dict[str, list[str]] = {}
    for pair in filter(None, query.split("&")):
        name, _, value = pair.partition("=")
        values.setdefault(name, []).append(value)
    return Request("GET", ROOT + path, query=values, headers=headers, path_params=params)


async def _page(
    dashboard: AsyncDashboard, page: str, path: str, user: str | None = "admin", **params: str
) -> tuple[Response, str]:
    response = await dashboard.handle(page, _get(page, path, user, **params))
    return response, response.body.decode()


def _token(response: Response) -> str:
    match = re.match(rf"{CSRF_COOKIE}=([^;]+);", response.headers["Set-Cookie"])
    assert match is not None
    return match.group(1)


def _post(
    action: str,
    job: Job,
    user: str | None = "admin",
    *,
    token: str | None = "",
    form_token: str | None = None,
    site: str | None = "same-origin",
    origin: str | None = None,
    next_page: str = "dead",
) -> Request:
    headers = {"host": HOST, "content-type": "application/x-www-form-urlencoded"}
    if user:
        headers["x-user"] = user
    if token == "":  # the token a page gave this user
        token = _csrf.new_token(SECRET.encode(), user or "")
    if token:
        headers["cookie"] = f"theme=dark; {CSRF_COOKIE}={token}"
    if site:
        headers["sec-fetch-site"] = site
    if origin:
        headers["origin"] = origin
    job_id = job.id
    form = {"next": next_page, "state": job.state.value, "version": version(job)}
    form |= {"csrf_token": form_token or token} if token else {}
    return Request(
        "POST",
        f"{ROOT}/jobs/{job_id}/{action}",
        headers=headers,
        body=urlencode(form).encode(),
        path_params={"job_id": str(job_id)},
    )


async def _dead_ids(engine: AsyncEngine) -> list[int]:
    return [job.id for job in await engine.dead_jobs()]


# ---- deny by default ------------------------------------------------------------------


async def test_no_dashboard_without_a_hook(engine: AsyncEngine) -> None:
    with pytest.raises(TypeError, match="denies by default"):
        AsyncDashboard(engine, authorize=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a callable"):
        AsyncDashboard(engine, authorize="admin")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"page_size": 0}, "page_size must be"),
        ({"refresh": 0}, "refresh must be"),
        ({"window": 0}, "window must be > 0"),
        ({"bucket": 0.5}, "bucket must be a whole number of seconds"),
        ({"window": 86400 * 2}, "at most 1440 buckets"),
    ],
)
async def test_bad_options_are_refused_at_once(
    engine: AsyncEngine, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        AsyncDashboard(engine, authorize=authorize, **options)


@pytest.mark.parametrize(
    ("page", "path", "params"),
    [("overview", "/", {}), ("dead", "/dead", {}), ("job", "/jobs/2", {"job_id": "2"})],
)
async def test_an_unknown_caller_gets_401_and_sees_nothing(
    dashboard: AsyncDashboard, page: str, path: str, params: dict[str, str]
) -> None:
    response, html = await _page(dashboard, page, path, None, **params)
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="skiplock"'
    assert response.content_type == "text/html; charset=utf-8"
    assert "Authentication required" in html
    assert "webhook.send" not in html
    assert "Set-Cookie" not in response.headers


async def test_a_hook_returning_anything_but_an_identity_refuses_the_request(
    engine: AsyncEngine,
) -> None:
    dashboard = AsyncDashboard(engine, authorize=lambda request, permission: True)  # type: ignore[arg-type]
    response, html = await _page(dashboard, "overview", "/")
    assert response.status == 500
    assert "webhook.send" not in html


async def test_a_reader_sees_no_buttons_and_cannot_retry(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    response, html = await _page(dashboard, "dead", "/dead", "viewer")
    assert response.status == 200
    assert "viewer (read only)" in html
    assert "<form" not in html
    dead = await _dead_ids(engine)
    assert len(dead) == 3
    refused = await dashboard.handle(
        "retry", _post("retry", await engine.get_job(dead[0]), "viewer")
    )
    assert refused.status == 403
    assert "viewer may not write" in refused.body.decode()
    assert await _dead_ids(engine) == dead


# ---- the pages ------------------------------------------------------------------------


async def test_the_overview_shows_depth_by_kind_and_state(dashboard: AsyncDashboard) -> None:
    response, html = await _page(dashboard, "overview", "/")
    assert response.status == 200
    for name in ("Content-Security-Policy", "X-Content-Type-Options", "Cache-Control"):
        assert name in response.headers
    cells = dict(
        re.findall(
            r'<tr data-kind="([^"]+)">\s*<th scope="row">[^<]*</th>\s*(.*?)</tr>', html, re.S
        )
    )
    rows = {
        kind: dict(re.findall(r'data-state="(\w+)">(?:<a [^>]*>)?([^<]*)<', row))
        for kind, row in cells.items()
    }
    assert rows["report.build"] == {
        "pending": "2",
        "running": "0",
        "succeeded": "3",
        "failed": "0",
        "dead": "0",
        "cancelled": "0",
        "oldest": "0ms",  # the due job was enqueued now (the other is due in an hour)
    }
    assert rows["webhook.send"]["dead"] == "3"
    assert rows["webhook.send"]["oldest"] == "\u2013"  # no pending job
    assert re.search(r'data-testid="total-pending">2<', html)
    assert re.search(r'data-testid="total-dead">3<', html)
    assert re.search(r'data-testid="window-succeeded">3<', html)
    assert re.search(r'data-testid="window-failures">3<', html)
    assert "No registered worker." in html
    assert response.headers["Set-Cookie"].endswith(f"Path={ROOT}; HttpOnly; SameSite=Strict")


async def test_the_charts_page_draws_throughput_per_kind_backlog_failures_and_latency(
    dashboard: AsyncDashboard, engine: AsyncEngine, clock: FakeClock
) -> None:
    # The fixture's jobs finished now; the next minute's sample reads their claims.
    clock.advance(60)
    await engine.store.roll_up_counts()
    response, html = await _page(dashboard, "charts", "/charts")
    assert response.status == 200
    assert 'aria-current="page">Charts<' in html
    throughput = _figure(html, "throughput-by-kind")
    # report.build: 3 succeeded; webhook.send: 3 dead, in the same bucket, stacked.
    assert re.search(r"<title>[^<]*: 3 report\.build, 3 webhook\.send</title>", throughput)
    assert len(re.findall(r'<rect class="s[01]"', throughput)) == 2
    assert "6 finished" in throughput
    backlog = _figure(html, "backlog")
    assert re.search(r'<polyline class="s\d" data-series="report\.build"', backlog)
    assert "top of the scale 1" in backlog  # one report.build due (the other in an hour)
    rate = _figure(html, "failure-rate")
    assert 'data-series="failure rate"' in rate
    assert "top of the scale 50 %" in rate  # 3 dead of 6 decided
    latency = _figure(html, "claim-latency")
    assert 'data-series="p50"' in latency
    assert 'data-series="p99"' in latency


async def test_the_charts_page_offers_windows_and_refuses_others(
    dashboard: AsyncDashboard,
) -> None:
    html = (await _page(dashboard, "charts", "/charts?window=24h"))[1]
    assert '<strong aria-current="true">24h</strong>' in html
    assert "per 15m" in html
    assert f'href="{ROOT}/charts?window=1h"' in html
    assert "No job finished in this window." not in html
    response, html = await _page(dashboard, "charts", "/charts?window=7d")
    assert response.status == 422
    assert "window must be one of 1h, 6h, 24h, got &#39;7d&#39;" in html
    response, _ = await _page(dashboard, "charts", "/charts", user=None)
    assert response.status == 401


def _figure(html: str, testid: str) -> str:
    match = re.search(rf'<figure[^>]*data-testid="{testid}">(.*?)</figure>', html, re.S)
    assert match is not None, f"no {testid} chart"
    return match.group(1)


async def test_the_oldest_pending_age_and_live_workers(
    dashboard: AsyncDashboard, engine: AsyncEngine, clock: FakeClock
) -> None:
    clock.advance(125)
    info = WorkerInfo(id="w-1", host="box", pid=7, kinds=frozenset({"other.kind"}))
    await engine.store.register_worker(info)
    await engine.store.register_worker(WorkerInfo(id="w-0", host="old", pid=8))
    clock.advance(3600)
    await engine.store.heartbeat("w-1")
    html = (await _page(dashboard, "overview", "/"))[1]
    assert re.search(r'data-testid="oldest-pending">1h2m<', html)
    assert re.search(r'data-testid="live-workers">1<', html)
    live, stale = re.findall(r'<tr data-worker="([^"]+)"( class="stale")?>', html)
    assert (live, stale) == (("w-1", ""), ("w-0", ' class="stale"'))
    assert '<td data-label="Kinds">other.kind</td>' in html
    assert '<td data-label="Kinds">all</td>' in html


async def test_the_dead_letter_page_lists_dead_jobs_escaped(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    response, html = await _page(dashboard, "dead", "/dead")
    assert response.status == 200
    for job_id in await _dead_ids(engine):
        assert f'<tr data-job="{job_id}">' in html
        assert f'data-testid="retry-{job_id}"' in html
        assert f'action="{ROOT}/jobs/{job_id}/delete"' in html
    assert "<script>" not in html
    assert "&lt;script&gt;alert(0)&lt;/script&gt; refused" in html
    token = _token(response)
    assert html.count(f'name="csrf_token" value="{token}"') == 6


async def test_the_dead_letter_page_filters_by_kind_and_pages(engine: AsyncEngine) -> None:
    dashboard = AsyncDashboard(engine, authorize=authorize, page_size=2)
    dead = await _dead_ids(engine)
    html = (await _page(dashboard, "dead", "/dead?kind=webhook.send"))[1]
    assert [int(i) for i in re.findall(r'<tr data-job="(\d+)">', html)] == dead[:2]
    assert f'href="{ROOT}/dead?kind=webhook.send&amp;after={dead[1]}"' in html
    html = (await _page(dashboard, "dead", f"/dead?kind=webhook.send&after={dead[1]}"))[1]
    assert [int(i) for i in re.findall(r'<tr data-job="(\d+)">', html)] == dead[2:]
    assert "next-page" not in html
    html = (await _page(dashboard, "dead", "/dead?kind=report.build"))[1]
    assert 'data-testid="no-dead"' in html


async def test_a_dead_letter_page_whose_search_stopped_early_says_so(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store may cut a page's search short (docs/admin.md, "Lists at any size"): the
    # page says how far it searched and its link continues the search.
    from skiplock.engine import AsyncOperator

    async def stopped(*_args: Any, **_options: Any) -> JobPage:
        return JobPage(resume_after=4000)

    monkeypatch.setattr(AsyncOperator, "dead_jobs", stopped)
    html = (await _page(AsyncDashboard(engine, authorize=authorize), "dead", "/dead?kind=k"))[1]
    assert 'data-testid="partial-page"' in html
    assert "Searched up to job 4000" in html
    assert 'data-testid="no-dead"' not in html
    assert f'href="{ROOT}/dead?kind=k&amp;after=4000" data-testid="next-page">Continue' in html


async def test_a_job_page_shows_the_job_and_its_audit_trail(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job_id = (await _dead_ids(engine))[0]
    response, html = await _page(dashboard, "job", f"/jobs/{job_id}", job_id=str(job_id))
    assert response.status == 200
    assert 'data-testid="job-state">dead<' in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html  # the payload, escaped
    assert "<b>bold</b>" not in html
    assert "job_enqueued" in html
    assert "job_dlq" in html
    assert f'data-testid="retry-{job_id}"' in html


async def test_a_job_page_without_audit_events_says_whether_the_trail_is_off(
    engine: AsyncEngine,
) -> None:
    engine.configure(Settings(audit=False))
    job = await engine.enqueue("report.build", {"n": 99})
    dashboard = AsyncDashboard(engine, authorize=authorize)
    html = (await _page(dashboard, "job", f"/jobs/{job.id}", job_id=str(job.id)))[1]
    assert "the audit trail is off" in html
    assert "retry-" not in html  # a pending job: nothing to replay


async def test_a_pending_job_page_says_why_it_waits(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job = await engine.enqueue("report.build", {"n": 98}, delay=3600)
    await engine.operator("alice").pause(kind="report.build", reason="<maintenance>")
    html = (await _page(dashboard, "job", f"/jobs/{job.id}", job_id=str(job.id)))[1]
    assert 'data-testid="wait-reasons"' in html
    assert '<li data-code="due_later">' in html
    assert '<li data-code="paused">' in html
    assert "is paused by alice" in html
    assert "&lt;maintenance&gt;" in html  # the reason, escaped
    dead_id = (await _dead_ids(engine))[0]
    html = (await _page(dashboard, "job", f"/jobs/{dead_id}", job_id=str(dead_id)))[1]
    assert "wait-reasons" not in html  # not pending: no reasons


@pytest.mark.parametrize("job_id", ["999", "0", "x1", "99999999999999999999", "\u0661"])
async def test_an_unknown_job_is_a_404_page(dashboard: AsyncDashboard, job_id: str) -> None:
    response, html = await _page(dashboard, "job", f"/jobs/{job_id}", job_id=job_id)
    assert response.status == 404
    assert "no job with id" in html


async def test_the_stylesheet_is_served_without_asking_the_hook(
    dashboard: AsyncDashboard,
) -> None:
    request = Request("GET", f"{ROOT}/static/dashboard.css")
    response = await dashboard.handle("static", request)
    assert (response.status, response.content_type) == (200, "text/css; charset=utf-8")
    assert b".tiles" in response.body


# ---- the buttons -------------------------------------------------------------------------


async def test_retry_moves_a_dead_job_to_pending_with_the_caller_as_actor(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job_id = (await _dead_ids(engine))[0]
    response = await dashboard.handle("retry", _post("retry", await engine.get_job(job_id)))
    assert response.status == 303
    assert response.headers["Location"] == f"{ROOT}/dead?done=retried&job={job_id}"
    assert (await engine.get_job(job_id)).state is JobState.PENDING
    replay = (await engine.audit_trail(job_id))[-1]
    assert (replay.action.value, replay.actor) == ("job_replay", "admin")
    html = (await _page(dashboard, "dead", f"/dead?done=retried&job={job_id}"))[1]
    assert f"Job {job_id} retried: it is pending again." in html
    assert f'<tr data-job="{job_id}">' not in html


async def test_retry_from_a_job_page_returns_to_it(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job_id = (await _dead_ids(engine))[0]
    response = await dashboard.handle(
        "retry", _post("retry", await engine.get_job(job_id), next_page="job")
    )
    assert response.headers["Location"] == f"{ROOT}/jobs/{job_id}?done=retried"


async def test_discard_deletes_a_dead_job_with_the_caller_as_actor(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job_id = (await _dead_ids(engine))[1]
    response = await dashboard.handle(
        "delete", _post("delete", await engine.get_job(job_id), next_page="job")
    )
    assert response.status == 303
    assert response.headers["Location"] == f"{ROOT}/dead?done=discarded&job={job_id}"
    assert job_id not in await _dead_ids(engine)
    discard = (await engine.audit_trail(job_id))[-1]
    assert (discard.action.value, discard.actor) == ("job_discard", "admin")


async def test_retrying_a_job_that_is_not_dead_is_a_409_page(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    pending = (await engine.list_jobs(state="pending"))[0]
    response = await dashboard.handle("retry", _post("retry", pending))
    assert response.status == 409
    assert f'href="{ROOT}/dead"' in response.body.decode()
    assert (await engine.get_job(pending.id)).state is JobState.PENDING


# ---- safe concurrent actions (issue 32, item 1) ----------------------------------------


async def test_a_stale_discard_of_a_job_replayed_since_is_a_409_and_deletes_nothing(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    # Operator B loaded the DLQ page; operator A replays the job; B clicks Discard.
    shown = await engine.get_job((await _dead_ids(engine))[0])
    await engine.retry_job(shown.id)
    response = await dashboard.handle("delete", _post("delete", shown))
    html = response.body.decode()
    assert response.status == 409
    assert f"Job {shown.id} changed since this page was loaded: it is pending now" in html
    assert 'data-testid="current-state">pending<' in html
    assert f'href="{ROOT}/jobs/{shown.id}"' in html
    assert (await engine.get_job(shown.id)).state is JobState.PENDING


async def test_a_button_for_a_job_that_went_round_to_the_same_state_is_a_409(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    # Dead when the page was rendered, replayed, run and dead again: same state, another
    # version.
    shown = await engine.get_job((await _dead_ids(engine))[0])
    await engine.retry_job(shown.id)
    await engine.worker().run_until_idle()
    assert (await engine.get_job(shown.id)).state is JobState.DEAD
    response = await dashboard.handle("delete", _post("delete", shown))
    assert response.status == 409
    assert (await engine.get_job(shown.id)).state is JobState.DEAD


async def test_discard_deletes_only_in_the_state_it_was_offered_for(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    # A pending job's page offers Discard (it is rendered pending): that deletes it...
    pending = (await engine.list_jobs(state="pending"))[0]
    assert (await dashboard.handle("delete", _post("delete", pending))).status == 303
    # ...but a form that claims another state than the job's is refused and changes nothing.
    other = (await engine.list_jobs(state="pending"))[0]
    forged = attrs.evolve(other, state=JobState.DEAD)
    response = await dashboard.handle("delete", _post("delete", forged))
    assert response.status == 409
    assert (await engine.get_job(other.id)).state is JobState.PENDING


@pytest.mark.parametrize(("page", "state"), [("retry", "pending"), ("cancel", "dead")])
async def test_a_route_acts_only_on_the_states_its_button_is_offered_for(
    dashboard: AsyncDashboard, engine: AsyncEngine, page: str, state: str
) -> None:
    job = (await engine.list_jobs(state=state))[0]
    response = await dashboard.handle(page, _post(page, job))
    assert response.status == 409
    assert "is not offered for" in response.body.decode()
    assert (await engine.get_job(job.id)).state is job.state


async def test_a_form_without_the_state_it_was_rendered_for_is_refused(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job = await engine.get_job((await _dead_ids(engine))[0])
    request = _post("delete", job)
    bare = attrs.evolve(request, body=request.body.replace(b"state=dead", b"state=x"))
    assert (await dashboard.handle("delete", bare)).status == 400
    assert (await engine.get_job(job.id)).state is JobState.DEAD


async def test_cancel_and_mark_failed_from_a_job_page(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    first, second = (await engine.list_jobs(state="pending"))[:2]
    html = (await _page(dashboard, "job", f"/jobs/{first.id}", job_id=str(first.id)))[1]
    assert f'data-testid="cancel-{first.id}"' in html
    assert f'data-testid="confirm-discard-{first.id}"' in html
    assert f'data-testid="retry-{first.id}"' not in html
    response = await dashboard.handle("cancel", _post("cancel", first, next_page="job"))
    assert response.headers["Location"] == f"{ROOT}/jobs/{first.id}?done=cancelled"
    assert (await engine.get_job(first.id)).state is JobState.CANCELLED
    assert (await dashboard.handle("fail", _post("fail", second))).status == 303
    assert (await engine.get_job(second.id)).state is JobState.FAILED
    marked = (await engine.audit_trail(second.id))[-1]
    assert (marked.action.value, marked.actor) == ("job_failed_manually", "admin")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"token": None}, "the form has expired"),
        ({"form_token": "u" * 43}, "the form has expired"),
        ({"token": "short"}, "the form has expired"),
        # A well-formed token of another caller (planted through a sibling subdomain):
        (
            {"token": _csrf.new_token(SECRET.encode(), "viewer")},
            "the form was made for someone else",
        ),
        ({"token": _csrf.new_token(b"another-secret-0123456789", "admin")}, "someone else"),
        ({"site": "cross-site"}, "cross-site request refused"),
        ({"site": "same-site"}, "cross-site request refused"),
        ({"site": None}, "no Origin header"),
        ({"site": None, "origin": "https://evil.example"}, "cross-site request refused"),
        ({"site": None, "origin": "null"}, "no Origin header"),
    ],
)
async def test_a_forged_or_stale_form_is_refused_and_changes_nothing(
    dashboard: AsyncDashboard, engine: AsyncEngine, options: dict[str, Any], message: str
) -> None:
    dead = await _dead_ids(engine)
    response = await dashboard.handle(
        "retry", _post("retry", await engine.get_job(dead[0]), **options)
    )
    assert response.status == 403
    assert message in response.body.decode()
    assert await _dead_ids(engine) == dead


async def test_the_csrf_cookie_is_bound_to_the_caller_and_secure_over_https(
    dashboard: AsyncDashboard,
) -> None:
    response = (await _page(dashboard, "overview", "/"))[0]
    token = _token(response)
    assert _csrf.valid_for(token, SECRET.encode(), "admin")
    assert not _csrf.valid_for(token, SECRET.encode(), "viewer")
    assert "Secure" not in response.headers["Set-Cookie"]
    # The viewer's browser holding the admin's token gets a token of its own.
    headers = {"host": HOST, "x-user": "viewer", "cookie": f"{CSRF_COOKIE}={token}"}
    again = await dashboard.handle("overview", Request("GET", ROOT + "/", headers=headers))
    assert _csrf.valid_for(_token(again), SECRET.encode(), "viewer")
    secure = Request("GET", ROOT + "/", headers={"x-user": "admin"}, scheme="https")
    assert (await dashboard.handle("overview", secure)).headers["Set-Cookie"].endswith("; Secure")
    with pytest.raises(ValidationError, match="at least 16 bytes"):
        AsyncDashboard(dashboard.engine, authorize=authorize, csrf_secret="short")


async def test_a_form_from_the_same_origin_without_fetch_metadata_is_accepted(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job_id = (await _dead_ids(engine))[0]
    request = _post("retry", await engine.get_job(job_id), site=None, origin=f"http://{HOST}")
    assert (await dashboard.handle("retry", request)).status == 303
    assert (await engine.get_job(job_id)).state is JobState.PENDING


async def test_a_post_that_is_not_the_form_is_refused(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job_id = (await _dead_ids(engine))[0]
    form = _post("retry", await engine.get_job(job_id))
    json_post = Request(
        form.method,
        form.path,
        headers=dict(form.headers) | {"content-type": "application/json"},
        body=b"{}",
        path_params=form.path_params,
    )
    assert (await dashboard.handle("retry", json_post)).status == 403
    assert (await engine.get_job(job_id)).state is JobState.DEAD


async def test_a_reader_asking_to_write_is_refused_before_the_csrf_check(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    job_id = (await _dead_ids(engine))[0]
    response = await dashboard.handle(
        "delete", _post("delete", await engine.get_job(job_id), None, token=None)
    )
    assert response.status == 401
    assert (await engine.get_job(job_id)).state is JobState.DEAD


# ---- the job browser and bulk actions (issue 32, items 3 and 4) -------------------------


def _rows(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-job="(\d+)">', html)]


@pytest.mark.parametrize(
    ("query", "payloads"),
    [
        ("state=pending", [{"n": 9}]),  # due now
        ("state=scheduled", [{"n": 10}]),  # due in an hour
        ("state=succeeded", [{"n": 0}, {"n": 1}, {"n": 2}]),
        ("state=succeeded&tenant=acme", [{"n": 1}, {"n": 2}]),
        ("kind=report.build&state=running", []),
    ],
)
async def test_the_job_browser_lists_every_state_with_filters(
    dashboard: AsyncDashboard, engine: AsyncEngine, query: str, payloads: list[Any]
) -> None:
    response, html = await _page(dashboard, "jobs", f"/jobs?{query}")
    assert response.status == 200
    assert [(await engine.get_job(i)).payload for i in _rows(html)] == payloads
    if not payloads:
        assert 'data-testid="no-jobs"' in html


async def test_the_job_browser_searches_the_last_error_and_jumps_to_an_id(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    dead = await _dead_ids(engine)
    html = (await _page(dashboard, "jobs", "/jobs?q=ALERT(1)"))[1]
    assert _rows(html) == [dead[1]]
    html = (await _page(dashboard, "jobs", "/jobs?state=dead&since=2000-01-01T00:00"))[1]
    assert _rows(html) == dead
    html = (await _page(dashboard, "jobs", "/jobs?before=2000-01-01T00:00"))[1]
    assert _rows(html) == []
    response = (await _page(dashboard, "jobs", f"/jobs?id={dead[0]}"))[0]
    assert (response.status, response.headers["Location"]) == (303, f"{ROOT}/jobs/{dead[0]}")
    for bad in ("state=exploded", "since=yesterday", "id=2_0"):
        assert (await _page(dashboard, "jobs", f"/jobs?{bad}"))[0].status == 422, bad


def _bulk(user: str = "admin", fields: Mapping[str, Any] | None = None, **more: Any) -> Request:
    headers = {
        "host": HOST,
        "content-type": "application/x-www-form-urlencoded",
        "x-user": user,
        "sec-fetch-site": "same-origin",
    }
    token = _csrf.new_token(SECRET.encode(), user)
    headers["cookie"] = f"{CSRF_COOKIE}={token}"
    body = urlencode({"csrf_token": token, **(fields or {}), **more}, doseq=True).encode()
    return Request("POST", f"{ROOT}/bulk", headers=headers, body=body)


def _hidden(html: str, form: str = "bulk-confirm-form") -> dict[str, list[str]]:
    """The hidden fields of the page's form ``form`` (by its test id; the confirmation:
    the form with ``confirm=yes``), CSRF token left out."""
    if form == "bulk-confirm-form":
        inner = r'((?:(?!</form>).)*name="confirm" value="yes"(?:(?!</form>).)*)'
        match = re.search(rf"<form [^>]*>{inner}</form>", html, re.S)
    else:
        match = re.search(rf'<form [^>]*data-testid="{form}">(.*?)</form>', html, re.S)
    assert match is not None, f"no {form} in the page"
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', match[1]):
        if name != "csrf_token":
            fields.setdefault(name, []).append(value)
    return fields


async def test_a_bulk_retry_of_every_match_counts_first_then_retries_each_audited(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    dead = await _dead_ids(engine)
    ask = await dashboard.handle("bulk", _bulk(action="retry", scope="all", state="dead"))
    html = ask.body.decode()
    assert ask.status == 200
    assert re.search(r'data-testid="bulk-count">Retry <strong>3</strong> jobs matching', html)
    assert await _dead_ids(engine) == dead  # nothing yet
    confirm = _hidden(html)
    assert confirm.pop("confirm") == ["yes"]
    done = await dashboard.handle("bulk", _bulk(fields=confirm, confirm="yes"))
    html = done.body.decode()
    assert done.status == 200
    assert "3 of the 3 confirmed jobs retried." in html
    assert re.findall(r'/jobs/(\d+)">\1</a>', html.split('data-testid="bulk-changed-ids"')[1]) == [
        str(i) for i in dead
    ]
    assert "bulk-skipped" not in html
    assert await _dead_ids(engine) == []
    for job_id in dead:
        replay = (await engine.audit_trail(job_id))[-1]
        assert (replay.action.value, replay.actor) == ("job_replay", "admin")


async def test_a_bulk_action_over_a_filter_is_held_to_the_confirmed_jobs(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    # Issue 41, item 1: "Discard 1 job?" confirmed; another operator's change made 2
    # match meanwhile: a 409 with the new count, and nothing is deleted.
    pending = [j.id for j in await engine.list_jobs(state="pending")]
    await engine.cancel_job(pending[1])
    ask = await dashboard.handle("bulk", _bulk(action="discard", scope="all", state="cancelled"))
    assert "Discard <strong>1</strong> job matching" in ask.body.decode()
    confirm = _hidden(ask.body.decode())
    await engine.cancel_job(pending[0])  # an older job joins the filter's matches
    refused = await dashboard.handle("bulk", _bulk(fields=confirm))
    html = refused.body.decode()
    assert refused.status == 409
    assert "1 job was confirmed; 2 match now" in html
    assert "Nothing was done." in html
    assert [j.id for j in await engine.list_jobs(state="cancelled")] == pending[:2]
    # A job created after the confirmation is never part of it, whatever its state.
    later = (await engine.enqueue("report.build", {"n": 11})).id
    await engine.cancel_job(later)
    again = _hidden(html)  # the 409 page confirms the jobs that match now (up to the bound)
    assert again["count"] == ["2"]
    done = await dashboard.handle("bulk", _bulk(fields=again))
    assert done.status == 200
    assert "2 of the 2 confirmed jobs discarded." in done.body.decode()
    assert [j.id for j in await engine.list_jobs(state="cancelled")] == [later]


async def test_a_confirmation_whose_jobs_changed_state_is_a_409(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    dead = await _dead_ids(engine)
    ask = await dashboard.handle("bulk", _bulk(action="fail", scope="all", kind="webhook.send"))
    confirm = _hidden(ask.body.decode())
    assert confirm["count"] == ["3"]
    # As many match, but not as they were confirmed: two were replayed meanwhile (still
    # jobs "Mark failed" applies to, now pending).
    await engine.retry_job(dead[0])
    await engine.retry_job(dead[1])
    refused = await dashboard.handle("bulk", _bulk(fields=confirm))
    assert refused.status == 409, refused.body.decode()
    assert "3 jobs were confirmed; 3 match now" in refused.body.decode()
    assert [(await engine.get_job(i)).state for i in dead] == [JobState.PENDING] * 2 + [
        JobState.DEAD
    ]


async def test_a_bulk_action_on_selected_jobs_is_refused_when_one_changed_since(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    dead = await _dead_ids(engine)
    chosen = [f"{i}.dead" for i in dead[:2]]
    ask = await dashboard.handle("bulk", _bulk(action="discard", scope="selected", job=chosen))
    assert "<strong>2</strong> selected jobs" in ask.body.decode()
    confirm = _hidden(ask.body.decode())
    assert confirm["job"] == chosen
    await engine.retry_job(dead[0])  # someone else, since the confirmation was shown
    refused = await dashboard.handle("bulk", _bulk(fields=confirm))
    assert refused.status == 409
    assert "2 jobs were confirmed; 1 matches now. Nothing was done." in refused.body.decode()
    assert (await engine.get_job(dead[0])).state is JobState.PENDING
    assert await _dead_ids(engine) == dead[1:]  # nothing discarded
    chosen = [f"{i}.dead" for i in dead[1:]]
    ask = await dashboard.handle("bulk", _bulk(action="discard", scope="selected", job=chosen))
    done = await dashboard.handle("bulk", _bulk(fields=_hidden(ask.body.decode())))
    assert "2 of the 2 confirmed jobs discarded." in done.body.decode()
    assert await _dead_ids(engine) == []


async def test_the_result_page_names_the_jobs_skipped_and_why(
    dashboard: AsyncDashboard, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = await _dead_ids(engine)
    ask = await dashboard.handle("bulk", _bulk(action="discard", scope="all", state="dead"))
    store: Any = engine.store
    delete = store.delete

    async def racing_delete(*args: Any, **options: Any) -> Any:
        # Another operator replays a job between the check and the change.
        monkeypatch.setattr(store, "delete", delete)
        await engine.retry_job(dead[1])
        return await delete(*args, **options)

    monkeypatch.setattr(store, "delete", racing_delete)
    done = await dashboard.handle("bulk", _bulk(fields=_hidden(ask.body.decode())))
    html = done.body.decode()
    assert "2 of the 3 confirmed jobs discarded; 1 skipped" in html
    skipped = html.split('data-testid="bulk-skipped"')[1]
    assert f'<tr data-skipped="{dead[1]}">' in skipped
    assert "it is pending now, not dead" in skipped
    assert (await engine.get_job(dead[1])).state is JobState.PENDING


async def test_a_job_that_changes_after_the_search_is_a_409_without_an_offer(
    dashboard: AsyncDashboard, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = await _dead_ids(engine)
    ask = await dashboard.handle("bulk", _bulk(action="discard", scope="all", state="dead"))
    act = AsyncOperator.act_as_confirmed

    async def racing(self: AsyncOperator, *args: Any, **options: Any) -> Any:
        await engine.retry_job(dead[2])  # after the search, before the check
        return await act(self, *args, **options)

    monkeypatch.setattr(AsyncOperator, "act_as_confirmed", racing)
    refused = await dashboard.handle("bulk", _bulk(fields=_hidden(ask.body.decode())))
    html = refused.body.decode()
    assert refused.status == 409
    assert "3 jobs were confirmed; 2 match now (up to job" in html
    assert 'name="confirm"' not in html  # count again from the list
    assert await _dead_ids(engine) == dead[:2]


async def test_a_bulk_search_reads_a_bounded_number_of_jobs_and_continues(
    dashboard: AsyncDashboard, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 41, item 11: a text search that matches nothing read the whole table in one
    # request. It reads at most BULK_LIMIT jobs, says where it stopped and continues.
    monkeypatch.setattr(_browse, "BULK_BATCH", 4)
    monkeypatch.setattr(_browse, "BULK_LIMIT", 6)
    for n in range(20):
        await engine.enqueue("report.build", {"n": 100 + n}, delay=3600)
    store: Any = engine.store
    list_jobs = store.list_jobs
    read: list[int] = []

    async def counting(*args: Any, **options: Any) -> Any:
        page = await list_jobs(*args, **options)
        read.extend(job.id for job in page)
        return page

    monkeypatch.setattr(store, "list_jobs", counting)
    ask = await dashboard.handle("bulk", _bulk(action="cancel", scope="all", q="zzz-nothing"))
    html = ask.body.decode()
    assert ask.status == 200
    assert len(read) <= 8  # two reads of BULK_BATCH, not the 28 jobs
    stopped = max(read)
    assert f"Searched up to job {stopped}" in html
    assert "Nothing to do up to job" in html
    assert "bulk-confirm-form" not in html
    following = _hidden(html, "bulk-continue-form")
    assert following["after"] == [str(stopped)]
    read.clear()
    rest = await dashboard.handle("bulk", _bulk(fields=following))
    assert rest.status == 200
    assert min(read) > stopped
    assert len(read) <= 8

    # A search that matches: the confirmation holds what it counted; the result page
    # offers to continue after its bound.
    read.clear()
    ask = await dashboard.handle("bulk", _bulk(action="cancel", scope="all", state="scheduled"))
    html = ask.body.decode()
    confirm = _hidden(html)
    assert confirm["count"] == ["6"]
    assert "more" in confirm
    done = await dashboard.handle("bulk", _bulk(fields=confirm))
    html = done.body.decode()
    assert "6 of the 6 confirmed jobs cancelled." in html
    following = _hidden(html, "bulk-continue-form")
    assert following["after"] == confirm["through"]
    rest = await dashboard.handle("bulk", _bulk(fields=following))
    assert "Cancel <strong>6</strong> jobs" in rest.body.decode()


async def test_a_reader_cannot_run_a_bulk_action(
    dashboard: AsyncDashboard, engine: AsyncEngine
) -> None:
    request = _bulk("viewer", action="retry", scope="all", confirm="yes")
    assert (await dashboard.handle("bulk", request)).status == 403
    assert len(await _dead_ids(engine)) == 3
    html = (await _page(dashboard, "jobs", "/jobs", "viewer"))[1]
    assert "bulk-form" not in html


# ---- mounting -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "path", "params", "root"),
    [
        ("overview", "/ops/jobs/", {}, "/ops/jobs"),
        ("overview", "/ops/jobs", {}, "/ops/jobs"),
        ("overview", "/", {}, ""),
        ("dead", "/ops/dead", {}, "/ops"),
        ("job", "/x/jobs/7", {"job_id": "7"}, "/x"),
        ("retry", "/x/jobs/7/retry", {"job_id": "7"}, "/x"),
        ("static", "/x/static/dashboard.css", {}, "/x"),
    ],
)
def test_the_mount_point_comes_from_the_path(
    page: str, path: str, params: dict[str, str], root: str
) -> None:
    assert mount_root(page, Request("GET", path, path_params=params)) == root


# ---- the database down ------------------------------------------------------------------

#: A server nobody listens on: the database is down.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/postgres"


async def test_with_the_database_down_every_page_is_a_503_that_says_so_at_once() -> None:
    store = AsyncPsycopgJobStore(UNREACHABLE)
    try:
        down = AsyncDashboard(AsyncEngine(store), authorize=authorize)
        for page, path, params in [
            ("overview", "/", {}),
            ("dead", "/dead", {}),
            ("job", "/jobs/1", {"job_id": "1"}),
        ]:
            began = time.monotonic()
            response, html = await _page(down, page, path, **params)
            assert time.monotonic() - began < 2.0  # issue 29: not the pool's 30 s
            assert response.status == 503, html
            assert response.headers["Retry-After"] == str(RETRY_AFTER)
            assert "503 Job store unavailable" in html
            assert "the database is unreachable" in html
    finally:
        await store.close()
