"""HEAD on the skiplock FastAPI routers answers as GET without the body, on every GET
route (REST API, dashboard, probes, metrics), as the Flask binding does, and stays out of
the app's OpenAPI document (docs/fastapi.md)."""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from skiplock import AsyncEngine, Engine
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.integrations.dashboard import AsyncDashboard
from skiplock.integrations.fastapi import (
    create_dashboard_router,
    create_metrics_router,
    create_probes_router,
    create_router,
    mount,
)
from skiplock.integrations.rest import AsyncRestApi
from skiplock.integrations.rest._routes import FALLBACK_PATH
from skiplock.testing import FakeClock

if TYPE_CHECKING:
    from skiplock.integrations.rest import Permission, Request

API, DASHBOARD = "/ops/api", "/ops/dashboard"
HAS_PROMETHEUS = find_spec("prometheus_client") is not None


def authorize(request: Request, permission: Permission) -> str | None:
    return "ops" if request.header("x-user") == "ops" else None


def get_paths(job_id: int) -> list[str]:
    """Every GET route of the REST API and the dashboard, the probes and the metrics."""
    engine = AsyncEngine(AsyncInMemoryJobStore())
    doors = [
        (API, AsyncRestApi(engine, authorize=authorize).routes()),
        (DASHBOARD, AsyncDashboard(engine, authorize=authorize).routes()),
    ]
    paths = [
        prefix + route.path.replace("{job_id}", str(job_id))
        for prefix, routes in doors
        for route in routes
        if route.method == "GET" and route.path != FALLBACK_PATH
    ]
    return [*paths, "/livez", "/readyz", *(["/metrics"] if HAS_PROMETHEUS else [])]


@pytest.mark.parametrize(
    "engine",
    # A clock that stands still: the bodies that carry times and ages (health, a job's
    # page) are then the same from one call to the next, so HEAD's length is GET's.
    [
        AsyncEngine(AsyncInMemoryJobStore(clock=FakeClock())),
        Engine(InMemoryJobStore(clock=FakeClock())),
    ],
    ids=["async", "sync"],
)
def test_head_answers_as_get_without_the_body_on_every_get_route(engine: Any) -> None:
    app = FastAPI()
    mount(app, create_router(engine, authorize=authorize, include_in_schema=True), prefix=API)
    mount(app, create_dashboard_router(engine, authorize=authorize), prefix=DASHBOARD)
    mount(app, create_probes_router(engine))
    if HAS_PROMETHEUS:
        mount(app, create_metrics_router(engine))
    ops = {"x-user": "ops"}
    with TestClient(app) as client:
        job_id = client.post(f"{API}/jobs", json={"kind": "report.build"}, headers=ops).json()["id"]
        paths = get_paths(job_id)
        assert len(paths) > 10
        for path in paths:
            get = client.get(path, headers=ops)
            head = client.head(path, headers=ops)
            assert (path, head.status_code) == (path, get.status_code)
            assert get.status_code in (200, 404) or path == "/readyz", (path, get.status_code)
            assert head.content == b"", path
            assert head.headers["content-type"] == get.headers["content-type"], path
            # The length GET's body has (the pages that show the wall clock aside).
            if path not in ("/metrics", f"{DASHBOARD}/", f"{DASHBOARD}/charts"):
                assert head.headers["content-length"] == str(len(get.content)), path
        # The hook is asked as for GET.
        assert client.head(f"{API}/jobs").status_code == 401
        assert client.head(f"{DASHBOARD}/").status_code == 401
        assert client.head("/livez").status_code == 200
        document = client.get("/openapi.json").json()
    assert not [path for path, methods in document["paths"].items() if "head" in methods]
    assert "get" in document["paths"][f"{API}/jobs"]
