"""Doors as data (issue 42, item 6): each door's routes are a static table, listed without
an engine and the same as what a mounted door serves; FastAPI mounts a door explicitly
(``mount``), and a plain ``include_router`` serves the routes unchecked."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException
from fastapi.testclient import TestClient
from flask import Flask

from skiplock import AsyncEngine, Engine
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.integrations._monitor import PROBES, probe_routes
from skiplock.integrations.dashboard import PAGES, AsyncDashboard, Dashboard
from skiplock.integrations.fastapi import (
    MountConflict,
    create_dashboard_router,
    create_probes_router,
    create_router,
    mount,
)
from skiplock.integrations.flask import create_blueprint, create_dashboard_blueprint
from skiplock.integrations.rest import OPERATIONS, AsyncRestApi, RestApi
from skiplock.integrations.rest._routes import ANY_METHOD, FALLBACK_PATH, METHODS, specs

if TYPE_CHECKING:
    from skiplock.integrations.rest import Permission, Request
    from skiplock.integrations.rest._routes import RouteSpec


def authorize(request: Request, permission: Permission) -> str | None:
    return "ops" if request.header("x-user") == "ops" else None


async def authorize_async(request: Request, permission: Permission) -> str | None:
    return authorize(request, permission)


OPS = {"x-user": "ops"}


def test_the_route_tables_are_listed_without_an_engine() -> None:
    # A fresh interpreter that builds no engine (nor store): the tables are class data.
    script = (
        "from skiplock.integrations.rest import RestApi\n"
        "from skiplock.integrations.dashboard import Dashboard\n"
        "import skiplock.engine as e\n"
        "e.Engine.__init__ = e.AsyncEngine.__init__ = None  # no engine may be made\n"
        "print(len(RestApi.ROUTES), [r.name for r in Dashboard.ROUTES][-2:])\n"
    )
    listed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert listed.stdout.split() == [str(len(OPERATIONS) + 2), "['static',", "'fallback']"]
    assert [row.name for row in RestApi.ROUTES] == [
        *(op.id for op in OPERATIONS),
        "openapi",
        "fallback",
    ]
    assert [row.name for row in Dashboard.ROUTES] == [*PAGES, "fallback"]
    for row in Dashboard.ROUTES[:-1]:
        assert (row.path, row.method) == PAGES[row.name][:2]
    assert (Dashboard.ROUTES[-1].method, Dashboard.ROUTES[-1].path) == (ANY_METHOD, FALLBACK_PATH)
    assert [(row.name, row.path) for row in PROBES] == [("livez", "/livez"), ("readyz", "/readyz")]


@pytest.mark.parametrize(
    ("door", "engine", "hook"),
    [
        (RestApi, Engine(InMemoryJobStore()), authorize),
        (AsyncRestApi, AsyncEngine(AsyncInMemoryJobStore()), authorize_async),
        (Dashboard, Engine(InMemoryJobStore()), authorize),
        (AsyncDashboard, AsyncEngine(AsyncInMemoryJobStore()), authorize_async),
    ],
    ids=["rest", "rest-async", "dashboard", "dashboard-async"],
)
def test_a_doors_routes_are_its_table_bound_to_it(door: Any, engine: Any, hook: Any) -> None:
    routes = door(engine, authorize=hook).routes()
    assert specs(routes) == specs(door.ROUTES)
    assert [route.operation for route in routes] == [row.operation for row in door.ROUTES]


def test_the_probes_routes_are_their_table() -> None:
    assert specs(probe_routes(Engine(InMemoryJobStore()))) == specs(PROBES)
    assert specs(probe_routes(AsyncEngine(AsyncInMemoryJobStore()))) == specs(PROBES)


def _served(table: tuple[RouteSpec, ...], prefix: str) -> set[tuple[str, str]]:
    """What a door of ``table`` mounted at ``prefix`` serves: (method, path) with the
    paths in braces, HEAD beside each GET."""
    served = set()
    for row in table:
        methods = METHODS if row.method == ANY_METHOD else (row.method,)
        for method in methods:
            served.add((method, prefix + row.path))
        if row.method == "GET":
            served.add(("HEAD", prefix + row.path))
    return served


@pytest.mark.parametrize(
    ("make", "table"),
    [(create_router, RestApi.ROUTES), (create_dashboard_router, Dashboard.ROUTES)],
    ids=["rest", "dashboard"],
)
def test_a_mounted_fastapi_router_serves_its_doors_table(make: Any, table: Any) -> None:
    app = FastAPI()
    router = make(Engine(InMemoryJobStore()), authorize=authorize)
    mount(app, router, prefix="/ops")
    served = {
        (method, "/ops" + route.path.replace("{path:path}", "{path}"))
        for route in router.routes
        for method in route.methods
    }
    assert served == {
        (method, path.replace("{path:path}", "{path}")) for method, path in _served(table, "/ops")
    }


@pytest.mark.parametrize(
    ("make", "table", "name"),
    [
        (create_blueprint, RestApi.ROUTES, "skiplock"),
        (create_dashboard_blueprint, Dashboard.ROUTES, "skiplock_dashboard"),
    ],
    ids=["rest", "dashboard"],
)
def test_a_registered_flask_blueprint_serves_its_doors_table(
    make: Any, table: Any, name: str
) -> None:
    app = Flask(__name__)
    app.register_blueprint(make(Engine(InMemoryJobStore()), authorize=authorize), url_prefix="/ops")
    rules = [rule for rule in app.url_map.iter_rules() if rule.endpoint.startswith(name + ".")]
    assert {rule.endpoint for rule in rules} == {f"{name}.{row.name}" for row in table}
    served = {(method, rule.rule) for rule in rules for method in rule.methods or ()}
    angle = {(method, "/ops" + row.angle_path()) for row in table for method in row.methods}
    assert served == angle | {
        ("HEAD", "/ops" + row.angle_path()) for row in table if row.method == "GET"
    }


# ---- FastAPI: mounted explicitly ------------------------------------------------------------


def test_mount_adds_the_fallback_under_its_prefix_and_checks_overlaps() -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    app = FastAPI()
    mount(app, create_router(engine, authorize=authorize_async), prefix="/ops/api")
    with pytest.raises(MountConflict, match="overlaps the REST API mounted at '/ops/api'"):
        mount(app, create_dashboard_router(engine, authorize=authorize_async), prefix="/ops/api/x")
    with TestClient(app) as client:
        missing = client.get("/ops/api/nothing", headers=OPS)
        assert (missing.status_code, missing.headers["content-type"]) == (
            404,
            "application/problem+json",
        )
        assert client.get("/ops/api/nothing").status_code == 401  # after the hook
        assert client.get("/ops/api/x/").status_code == 401  # the refused router: absent


def test_mount_into_a_router_of_yours_checks_there_and_passes_options_on() -> None:
    engine = Engine(InMemoryJobStore())

    def guard() -> None:
        raise HTTPException(status_code=418)

    ops = APIRouter()
    mount(ops, create_probes_router(engine), dependencies=[Depends(guard)])
    with pytest.raises(MountConflict, match="overlaps the probes mounted at '/livez'"):
        mount(ops, create_probes_router(engine))
    app = FastAPI()
    app.include_router(ops, prefix="/internal")
    with TestClient(app) as client:
        assert client.get("/internal/livez").status_code == 418  # the dependency ran


def test_a_plain_include_serves_the_routes_unchecked_without_the_fallback() -> None:
    # Documented: only mount() knows where the router goes (no frame inspection).
    engine = Engine(InMemoryJobStore())
    app = FastAPI()
    app.include_router(create_router(engine, authorize=authorize), prefix="/ops/api")
    app.include_router(create_dashboard_router(engine, authorize=authorize), prefix="/ops/api")
    with TestClient(app) as client:
        assert client.get("/ops/api/jobs", headers=OPS).status_code == 200
        assert client.get("/ops/api/nothing", headers=OPS).headers["content-type"] == (
            "application/json"  # FastAPI's own 404
        )


def test_a_router_made_with_its_prefix_has_its_fallback_however_included() -> None:
    app = FastAPI()
    router = create_router(Engine(InMemoryJobStore()), authorize=authorize, prefix="/ops/api")
    app.include_router(router)
    with TestClient(app) as client:
        missing = client.get("/ops/api/nothing", headers=OPS)
        assert missing.headers["content-type"] == "application/problem+json"


def test_mount_takes_only_skiplock_routers() -> None:
    with pytest.raises(TypeError, match=r"a router of skiplock\.integrations\.fastapi"):
        mount(FastAPI(), APIRouter(), prefix="/x")
