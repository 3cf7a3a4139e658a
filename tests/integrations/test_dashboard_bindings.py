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
    app.include_router(create_dashboard_router(engine, authorize=hook), prefix=MOUNT)
    rest = create_router(engine, authorize=hook, include_in_schema=True)
    app.include_router(rest, prefix="/ops/api")
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
        app.include_router(_door(doors, door, engine, authorize_async), prefix=prefix)


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
