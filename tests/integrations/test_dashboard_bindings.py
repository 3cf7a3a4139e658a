"""The dashboard's FastAPI router and Flask blueprint on the in-memory store: no mount
without a hook, the engine each accepts, routes and names, a coroutine hook, the sync
engine under FastAPI, and the OpenAPI document left alone (the browser tests drive both
bindings on PostgreSQL)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from flask import Flask

from skiplock import AsyncEngine, Engine
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.integrations.fastapi import create_dashboard_router, create_router
from skiplock.integrations.flask import create_dashboard_blueprint

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
    app.include_router(create_router(engine, authorize=hook), prefix="/ops/api")
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
