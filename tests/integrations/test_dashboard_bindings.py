"""The dashboard's FastAPI router and Flask blueprint on the in-memory store: no mount
without a hook, the engine each accepts, routes and names, a coroutine hook, the sync
engine under FastAPI, and the OpenAPI document left alone (the browser tests drive both
bindings on PostgreSQL)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from flask import Flask

from skiplock import AsyncEngine, Engine
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.integrations._mounts import MountConflict
from skiplock.integrations.fastapi import (
    create_dashboard_router,
    create_metrics_router,
    create_probes_router,
    create_router,
    mount,
)
from skiplock.integrations.flask import (
    create_blueprint,
    create_dashboard_blueprint,
    create_metrics_blueprint,
    create_probes_blueprint,
)

if TYPE_CHECKING:
    from skiplock.integrations.rest import Permission, Request

MOUNT = "/ops/dashboard"


def authorize(request: Request, permission: Permission) -> str | None:
    return "ops" if request.header("x-user") == "ops" else None


async def authorize_async(request: Request, permission: Permission) -> str | None:
    return authorize(request, permission)


def test_no_router_or_blueprint_without_a_hook() -> None:
    with pytest.raises(TypeError, match="denies by default"):
        create_dashboard_router(AsyncEngine(AsyncInMemoryJobStore()), authorize=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="denies by default"):
        create_dashboard_blueprint(Engine(InMemoryJobStore()), authorize=None)  # type: ignore[arg-type]


def test_flask_needs_a_sync_engine_and_fastapi_an_engine() -> None:
    with pytest.raises(TypeError, match="sync skiplock Engine"):
        create_dashboard_blueprint(AsyncEngine(AsyncInMemoryJobStore()), authorize=authorize)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Engine or AsyncEngine"):
        create_dashboard_router(object(), authorize=authorize)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs an AsyncEngine"):
        create_dashboard_router(Engine(InMemoryJobStore()), authorize=authorize_async)


@pytest.mark.parametrize(
    ("engine", "hook"),
    [
        (AsyncEngine(AsyncInMemoryJobStore()), authorize_async),
        (Engine(InMemoryJobStore()), authorize),
    ],
    ids=["async", "sync"],
)
def test_the_fastapi_router_serves_every_page_outside_the_openapi_document(
    engine: Any, hook: Any
) -> None:
    app = FastAPI()
    mount(app, create_dashboard_router(engine, authorize=hook), prefix=MOUNT)
    rest = create_router(engine, authorize=hook, include_in_schema=True)
    mount(app, rest, prefix="/ops/api")
    with TestClient(app) as client:
        ops = {"x-user": "ops"}
        assert client.get(f"{MOUNT}/").status_code == 401
        page = client.get(f"{MOUNT}/", headers=ops)
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert f'href="{MOUNT}/static/dashboard.css"' in page.text
        assert client.get(f"{MOUNT}/dead", headers=ops).status_code == 200
        assert client.get(f"{MOUNT}/jobs/1", headers=ops).status_code == 404
        assert client.get(f"{MOUNT}/static/dashboard.css").status_code == 200
        refused = client.post(f"{MOUNT}/jobs/1/retry", headers=ops)
        assert refused.status_code == 403  # no form, no token, no origin
        paths = client.get("/openapi.json").json()["paths"]
    assert paths
    assert not [path for path in paths if path.startswith(MOUNT)]


def test_the_flask_blueprint_serves_every_page_under_its_route_names() -> None:
    app = Flask(__name__)
    blueprint = create_dashboard_blueprint(Engine(InMemoryJobStore()), authorize=authorize)
    app.register_blueprint(blueprint, url_prefix=MOUNT)
    names = {rule.endpoint for rule in app.url_map.iter_rules()}
    pages = {"overview", "dead", "job", "retry", "delete", "static"}
    assert {f"skiplock_dashboard.{page}" for page in pages} <= names
    client = app.test_client()
    ops = {"x-user": "ops"}
    assert client.get(f"{MOUNT}/").status_code == 401
    page = client.get(f"{MOUNT}/", headers=ops)
    assert page.status_code == 200
    assert "Queue depth by kind and state" in page.text
    assert client.get(f"{MOUNT}/jobs/1", headers=ops).status_code == 404
    assert client.get(f"{MOUNT}/static/dashboard.css").status_code == 200
    assert client.post(f"{MOUNT}/jobs/1/delete", headers=ops).status_code == 403


# ---- mount safety (issue 32, item 2) ------------------------------------------------------


def _fastapi_mounts(mounts: list[tuple[str, str]]) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    doors = (create_router, create_dashboard_router, create_probes_router, create_metrics_router)
    app = FastAPI()
    for door, prefix in mounts:
        mount(app, _door(doors, door, engine, authorize_async), prefix=prefix)


def _flask_mounts(mounts: list[tuple[str, str]]) -> None:
    engine = Engine(InMemoryJobStore())
    doors = (
        create_blueprint,
        create_dashboard_blueprint,
        create_probes_blueprint,
        create_metrics_blueprint,
    )
    app = Flask(__name__)
    for n, (door, prefix) in enumerate(mounts):
        blueprint = _door(doors, door, engine, authorize)
        app.register_blueprint(blueprint, url_prefix=prefix, name=f"{door}{n}")


def _door(makers: tuple[Any, ...], door: str, engine: Any, hook: Any) -> Any:
    """A skiplock router or blueprint: ``makers`` are the REST API's, the dashboard's,
    the probes' and the metrics' functions of one binding."""
    rest, dashboard, probes, metrics = makers
    if door in ("rest", "dashboard"):
        return (rest if door == "rest" else dashboard)(engine, authorize=hook)
    return (probes if door == "probes" else metrics)(engine)


OVERLAPS = [
    # As docs/dashboard.md once showed it: the job page answered with the REST JSON.
    (
        [("rest", "/admin/jobs"), ("dashboard", "/admin/jobs")],
        "the dashboard mounted at '/admin/jobs' overlaps the REST API mounted at '/admin/jobs'",
    ),
    (
        [("dashboard", "/admin/jobs/ui"), ("rest", "/admin/jobs")],
        "the REST API mounted at '/admin/jobs' overlaps the dashboard mounted at '/admin/jobs/ui'",
    ),
    ([("rest", ""), ("probes", "")], "the probes mounted at '/livez' overlaps the REST API"),
    ([("dashboard", "/ops"), ("metrics", "/ops")], "the metrics mounted at '/ops/metrics'"),
    (
        [("metrics", ""), ("metrics", "")],
        "the metrics mounted at '/metrics' overlaps the metrics mounted at '/metrics'",
    ),
]
APART = [
    ("rest", "/admin/jobs"),
    ("dashboard", "/admin/dashboard"),
    ("probes", ""),
    ("metrics", ""),
    ("rest", "/admin/jobs-v2"),  # a prefix of another only by characters, not segments
]


@pytest.mark.parametrize("binding", [_fastapi_mounts, _flask_mounts], ids=["fastapi", "flask"])
@pytest.mark.parametrize(("mounts", "message"), OVERLAPS)
def test_overlapping_skiplock_mounts_raise_at_mount_time_naming_both(
    binding: Any, mounts: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(MountConflict, match=re.escape(message)):
        binding(mounts)


@pytest.mark.parametrize("binding", [_fastapi_mounts, _flask_mounts], ids=["fastapi", "flask"])
def test_distinct_prefixes_mount_side_by_side(binding: Any) -> None:
    binding(APART)


def test_other_paths_under_the_dashboard_are_html_pages_after_the_hook() -> None:
    app = Flask(__name__)
    blueprint = create_dashboard_blueprint(Engine(InMemoryJobStore()), authorize=authorize)
    app.register_blueprint(blueprint, url_prefix=MOUNT)
    client = app.test_client()
    ops = {"x-user": "ops"}
    assert client.options(f"{MOUNT}/dead").status_code == 401  # OPTIONS asks the hook
    options = client.options(f"{MOUNT}/dead", headers=ops)
    assert (options.status_code, options.headers["Allow"]) == (204, "GET, HEAD, OPTIONS")
    missing = client.get(f"{MOUNT}/nothing", headers=ops)
    assert (missing.status_code, missing.content_type) == (404, "text/html; charset=utf-8")
    assert f'href="{MOUNT}/static/dashboard.css"' in missing.text
    wrong = client.put(f"{MOUNT}/jobs/1/retry", headers=ops)
    assert (wrong.status_code, wrong.headers["Allow"]) == (405, "POST, OPTIONS")


# ---- pauses and limits (issue 32, item 6) -------------------------------------------------

#: "admin" reads and writes, "viewer" only reads.
WRITERS = {"admin": True, "viewer": False}


def authorize_writes(request: Request, permission: Permission) -> str | None:
    from skiplock.integrations.dashboard import Forbidden, Permission

    user = request.header("x-user")
    if user not in WRITERS:
        return None
    if permission is Permission.WRITE and not WRITERS[user]:
        raise Forbidden(f"{user} may only read")
    return user


class _Client:
    """A dashboard under FastAPI or Flask behind one interface: GET a page (keeping the
    CSRF cookie the client was given), POST a form."""

    def __init__(self, binding: str) -> None:
        self.engine = Engine(InMemoryJobStore())
        self.engine.enqueue("report.build", {}, tenant="acme")
        if binding == "fastapi":
            app = FastAPI()
            # No shared read cache: the tests change jobs through the engine and look at
            # the page at once (the cache's own tests are in test_dashboard_cache.py).
            router = create_dashboard_router(self.engine, authorize=authorize_writes, cache=0)
            mount(app, router, prefix=MOUNT)
            self._client: Any = TestClient(
                app, base_url="http://jobs.example", follow_redirects=False
            )
        else:
            flask_app = Flask(__name__)
            blueprint = create_dashboard_blueprint(self.engine, authorize=authorize_writes, cache=0)
            flask_app.register_blueprint(blueprint, url_prefix=MOUNT)
            self._client = flask_app.test_client()

    def page(self, user: str) -> tuple[int, str, str]:
        """The controls page's status, text and form token."""
        response = self._client.get(f"{MOUNT}/controls", headers={"x-user": user})
        match = re.search(r'name="csrf_token" value="([^"]+)"', response.text)
        return response.status_code, response.text, match.group(1) if match else ""

    def post(self, page: str, user: str, site: str = "same-origin", **form: str) -> Any:
        headers = {"x-user": user, "sec-fetch-site": site}
        return self._client.post(f"{MOUNT}/controls/{page}", data=form, headers=headers)


@pytest.mark.parametrize("binding", ["fastapi", "flask"])
def test_pause_resume_and_limits_from_the_dashboard_with_the_caller_as_actor(
    binding: str,
) -> None:
    client = _Client(binding)
    status, text, token = client.page("admin")
    assert status == 200
    assert 'data-kind="report.build"' in text
    assert 'data-tenant="acme"' in text
    assert 'data-testid="pause-kind-report.build"' in text
    paused = client.post("pause", "admin", kind="report.build", reason="db", csrf_token=token)
    assert paused.status_code == 303
    assert paused.headers["Location"] == f"{MOUNT}/controls?done=paused"
    [pause] = client.engine.paused()
    assert (pause.kind, pause.tenant, pause.reason, pause.actor) == (
        "report.build",
        None,
        "db",
        "admin",
    )
    text = client.page("admin")[1]
    assert 'data-testid="resume-kind-report.build"' in text
    limited = client.post(
        "limit", "admin", kind="report.build", tenant="acme", rps="2.5", burst="5", csrf_token=token
    )
    assert limited.status_code == 303
    [limit] = client.engine.limits()
    assert (limit.kind, limit.tenant, limit.limit.rps, limit.limit.burst, limit.actor) == (
        "report.build",
        "acme",
        2.5,
        5,
        "admin",
    )
    assert 'data-limit="report.build/acme/*"' in client.page("admin")[1]
    bad = client.post(
        "limit", "admin", kind="report.build", rps="fast", burst="1", csrf_token=token
    )
    assert bad.status_code == 400
    cleared = client.post("unlimit", "admin", kind="report.build", tenant="acme", csrf_token=token)
    assert cleared.status_code == 303
    assert client.engine.limits() == []
    resumed = client.post("resume", "admin", kind="report.build", csrf_token=token)
    assert resumed.status_code == 303
    assert client.engine.paused() == []


@pytest.mark.parametrize("binding", ["fastapi", "flask"])
def test_a_reader_or_a_forged_form_cannot_pause(binding: str) -> None:
    client = _Client(binding)
    status, text, viewer_token = client.page("viewer")
    assert status == 200
    assert "Pauses in force" in text
    assert "/controls/pause" not in text  # no forms for a reader
    refused = client.post("pause", "viewer", kind="report.build", csrf_token=viewer_token)
    assert refused.status_code == 403
    token = client.page("admin")[2]
    assert client.post("pause", "admin", kind="report.build").status_code == 403  # no token
    wrong = client.post("pause", "admin", kind="report.build", csrf_token=token[::-1])
    assert wrong.status_code == 403
    cross = client.post("pause", "admin", "cross-site", kind="report.build", csrf_token=token)
    assert cross.status_code == 403
    assert client.post("pause", "nobody", kind="report.build").status_code == 401
    assert client.engine.paused() == []


@pytest.mark.parametrize("binding", ["fastapi", "flask"])
def test_the_controls_page_refuses_an_unknown_kind_unless_ticked(binding: str) -> None:
    # Issue 41 item 4: the engine knows no kind here, its store knows report.build.
    client = _Client(binding)
    _, text, token = client.page("admin")
    assert 'data-testid="pause-allow-unknown-kind"' in text
    assert 'data-testid="limit-allow-unknown-kind"' in text
    for page, form in (
        ("pause", {"kind": "report.biuld"}),
        ("limit", {"kind": "report.biuld", "rps": "1", "burst": "1"}),
    ):
        refused = client.post(page, "admin", csrf_token=token, **form)
        assert refused.status_code == 422
        assert "unknown kind &#39;report.biuld&#39;" in refused.text
        assert "Did you mean &#39;report.build&#39;?" in refused.text
    assert client.engine.paused() == []
    assert client.engine.limits() == []
    for page, form in (
        ("pause", {"kind": "billing"}),
        ("limit", {"kind": "billing", "rps": "1", "burst": "1"}),
    ):
        done = client.post(page, "admin", csrf_token=token, allow_unknown_kind="1", **form)
        assert done.status_code == 303
    assert [p.kind for p in client.engine.paused()] == ["billing"]
    assert [x.kind for x in client.engine.limits()] == ["billing"]
    # A row's Pause button names a kind the database knows (no typo): it opts in, so a
    # kind of another service can be paused from its row where the engine knows others.
    client.engine.declare_kind("email.send")
    text = client.page("admin")[1]
    row_form = re.search(
        r'<input type="hidden" name="kind" value="report.build">'
        r'<input type="hidden" name="allow_unknown_kind" value="1">',
        text,
    )
    assert row_form is not None
    from_row = client.post(
        "pause", "admin", csrf_token=token, kind="report.build", allow_unknown_kind="1"
    )
    assert from_row.status_code == 303
    assert sorted(p.kind or "" for p in client.engine.paused()) == ["billing", "report.build"]


@pytest.mark.parametrize("binding", ["fastapi", "flask"])
def test_the_controls_page_shows_the_pairs_held_back(binding: str) -> None:
    # Issue 41 item 10: the dashboard showed no throttled pair.
    client = _Client(binding)
    engine = client.engine
    text = client.page("viewer")[1]
    assert 'data-testid="no-throttled"' in text
    engine.processor("report.build")(lambda payload, ctx: None)
    for tenant in ("acme", "acme", "beta"):
        engine.enqueue("report.build", {}, tenant=tenant)
    engine.set_limit(kind="report.build", tenant="acme", rps=0.001, burst=1)
    engine.pause(kind="report.build", tenant="beta")
    assert engine.worker().run_until_idle() == 1  # one token: one acme job ran
    text = client.page("viewer")[1]
    assert 'data-testid="no-throttled"' not in text
    rows = re.findall(
        r'<tr data-throttled="([^"]+)">.*?data-label="Due jobs">(\d+)</td>\s*'
        r'<td data-label="Held back by" data-limit="([^"]+)">([^<]+)</td>',
        text,
        re.S,
    )
    assert rows == [
        ("report.build/acme", "2", "rate_limit", "its rate limit (no token left)"),
        ("report.build/beta", "1", "paused", "a pause"),
    ]
