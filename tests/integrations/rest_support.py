"""The REST API behind each binding, on PostgreSQL, with one client interface: the
FastAPI router over an ``AsyncEngine`` and over a sync ``Engine``, and the Flask
blueprint. Tokens: ``admin-token`` may read and write, ``viewer-token`` only read."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

import attrs
from fastapi import FastAPI
from fastapi.testclient import TestClient
from flask import Flask

from skiplock import AsyncEngine, Engine, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore, PsycopgJobStore
from skiplock.integrations.fastapi import create_router, mount
from skiplock.integrations.flask import create_blueprint
from skiplock.integrations.rest import Forbidden, Permission, Request
from tests.pgfixtures import fetch

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

#: Where every test app mounts the API.
PREFIX = "/admin/skiplock"
#: The bindings under test.
FLAVOURS = ("fastapi-async", "fastapi-sync", "flask")

ADMIN = "admin-token"
VIEWER = "viewer-token"
_GRANTS: dict[str, tuple[str, frozenset[Permission]]] = {
    ADMIN: ("ops@example.com", frozenset({Permission.READ, Permission.WRITE})),
    VIEWER: ("viewer@example.com", frozenset({Permission.READ})),
}


def authorize(request: Request, permission: Permission) -> str | None:
    """The tests' hook: a bearer token names the caller and what it may do."""
    grant = _GRANTS.get(request.bearer_token or "")
    if grant is None:
        return None
    name, permissions = grant
    if permission not in permissions:
        raise Forbidden(f"{name} may not {permission.value}")
    return name


async def authorize_async(request: Request, permission: Permission) -> str | None:
    """The same hook as a coroutine function (the async API awaits it)."""
    return authorize(request, permission)


@attrs.frozen
class Reply:
    status: int
    headers: Mapping[str, str]
    body: Any

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


class Client:
    """One binding's test client: ``call()`` sends a request with a bearer token."""

    def __init__(self, flavour: str, raw: Any, engine: AsyncEngine | Engine) -> None:
        self.flavour = flavour
        self.raw = raw
        self.engine = engine

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = ADMIN,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        url = PREFIX + path
        if self.flavour == "flask":
            options: dict[str, Any] = {"headers": sent, "query_string": params or {}}
            if json is not None:
                options["json"] = json
            if content is not None:
                options["data"] = content
            response = self.raw.open(url, method=method, **options)
            body = response.get_json(silent=True) if response.data else None
            return Reply(
                response.status_code, {k.lower(): v for k, v in response.headers.items()}, body
            )
        response = self.raw.request(
            method, url, headers=sent, params=params, json=json, content=content
        )
        body = response.json() if response.content else None
        return Reply(
            response.status_code, {k.lower(): v for k, v in response.headers.items()}, body
        )

    def get(self, path: str, **options: Any) -> Reply:
        return self.call("GET", path, **options)

    def post(self, path: str, **options: Any) -> Reply:
        return self.call("POST", path, **options)

    def delete(self, path: str, **options: Any) -> Reply:
        return self.call("DELETE", path, **options)


def fastapi_app(engine: AsyncEngine | Engine, hook: Callable[..., Any] = authorize) -> FastAPI:
    """A FastAPI app with the router under :data:`PREFIX`; its lifespan closes an async
    store in the loop that opened it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if isinstance(engine, AsyncEngine):
            await engine.store.close()

    app = FastAPI(lifespan=lifespan)
    router = create_router(engine, authorize=hook, include_in_schema=True)
    mount(app, router, prefix=PREFIX)
    return app


def flask_app(engine: Engine, hook: Callable[..., Any] = authorize) -> Flask:
    app = Flask("rest_test_app")
    app.register_blueprint(create_blueprint(engine, authorize=hook), url_prefix=PREFIX)
    return app


@contextmanager
def client_for(
    flavour: str,
    dsn: str,
    *,
    settings: Settings | None = None,
    hook: Callable[..., Any] | None = None,
) -> Iterator[Client]:
    """A client of ``flavour``'s app on ``dsn``, its engine with ``settings``."""
    if flavour == "fastapi-async":
        engine: Any = AsyncEngine(AsyncPsycopgJobStore(dsn, max_size=4), settings)
        with TestClient(fastapi_app(engine, hook or authorize_async)) as test_client:
            yield Client(flavour, test_client, engine)
        return
    store = PsycopgJobStore(dsn, max_size=4)
    engine = Engine(store, settings)
    try:
        if flavour == "fastapi-sync":
            with TestClient(fastapi_app(engine, hook or authorize)) as test_client:
                yield Client(flavour, test_client, engine)
        else:
            yield Client(flavour, flask_app(engine, hook or authorize).test_client(), engine)
    finally:
        store.close()


def snapshot(dsn: str) -> list[tuple[Any, ...]]:
    """Every job row and worker row, to show that a request changed nothing."""
    return fetch(dsn, "SELECT * FROM skiplock.jobs ORDER BY id") + fetch(
        dsn, "SELECT id, heartbeat_at FROM skiplock.workers ORDER BY id"
    )
