"""The apps the browser tests drive: the dashboard mounted at ``/dashboard`` in a FastAPI
app (``AsyncEngine``) and in a Flask app (``Engine``), both on a PostgreSQL database,
behind an authorization hook reading the host app's session cookie; and the jobs they
show."""

from __future__ import annotations

from contextlib import asynccontextmanager
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any

from skiplock import AsyncEngine, Engine, JobContext, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore, PsycopgJobStore
from skiplock.integrations.dashboard import Forbidden, Permission, Request

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

MOUNT = "/dashboard"
#: How often the overview reloads itself (seconds): short, for the live refresh test.
REFRESH = 2
#: The session cookie the host app would set at sign-in: its value names the user.
SESSION = "app_session"
#: session token -> (user, permissions): "admin" reads and writes, "viewer" only reads.
SESSIONS = {
    "s-admin-0123456789": ("admin", {Permission.READ, Permission.WRITE}),
    "s-viewer-0123456789": ("viewer", {Permission.READ}),
}


def authorize(request: Request, permission: Permission) -> str | None:
    """The user of the app's session cookie (None: 401), 403 for a reader asking to
    write."""
    cookies: SimpleCookie = SimpleCookie()
    cookies.load(request.header("cookie") or "")
    morsel = cookies.get(SESSION)
    session = None if morsel is None else SESSIONS.get(morsel.value)
    if session is None:
        return None
    user, permissions = session
    if permission not in permissions:
        raise Forbidden(f"{user} may only read")
    return user


def fastapi_app(dsn: str) -> Any:
    """The dashboard in a FastAPI app on an AsyncEngine (the store opens in the lifespan)."""
    from fastapi import FastAPI

    from skiplock.integrations.fastapi import create_dashboard_router, mount

    store = AsyncPsycopgJobStore(dsn)
    engine = AsyncEngine(store, Settings(audit=True))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with store:
            yield

    app = FastAPI(lifespan=lifespan)
    # cache=0: the tests change jobs and look at once (the shared summaries' second of
    # age has tests of its own, tests/integrations/test_dashboard_cache.py).
    router = create_dashboard_router(engine, authorize=authorize, refresh=REFRESH, cache=0)
    mount(app, router, prefix=MOUNT)
    return app


def flask_app(dsn: str) -> tuple[Any, PsycopgJobStore]:
    """The dashboard in a Flask app on a sync Engine; close the store afterwards."""
    from flask import Flask

    from skiplock.integrations.flask import create_dashboard_blueprint

    store = PsycopgJobStore(dsn)
    engine = Engine(store, Settings(audit=True))
    app = Flask(__name__)
    blueprint = create_dashboard_blueprint(engine, authorize=authorize, refresh=REFRESH, cache=0)
    app.register_blueprint(blueprint, url_prefix=MOUNT)
    return app, store


def seed(dsn: str) -> None:
    """Jobs in every state: email.send succeeded and pending, webhook.deliver dead,
    report.build pending (some scheduled), cancelled and marked failed."""
    with PsycopgJobStore(dsn) as store:
        engine = Engine(store, Settings(audit=True))

        @engine.processor("email.send")
        def send(payload: Any, ctx: JobContext) -> None:
            pass

        @engine.processor("webhook.deliver", max_attempts=1)
        def deliver(payload: Any, ctx: JobContext) -> None:
            raise ConnectionError(f"{payload['url']} refused the connection")

        for n in range(7):
            engine.enqueue("email.send", {"to": f"user{n}@example.com"})
        for n in range(4):
            engine.enqueue("webhook.deliver", {"url": f"https://hooks{n}.example/<in>"})
        engine.worker().run_until_idle()
        engine.declare_kind("report.build")  # enqueued only: no worker here runs it
        for n in range(2):
            engine.enqueue("email.send", {"to": f"later{n}@example.com"}, tenant="acme")
        for n in range(5):
            engine.enqueue("report.build", {"n": n}, delay=3600 if n < 2 else None)
        engine.cancel_job(engine.enqueue("report.build", {"n": 10}).id)
        engine.fail_job(engine.enqueue("report.build", {"n": 11}).id)


def replay(dsn: str, job_id: int) -> None:
    """Another operator replays ``job_id`` (through the engine, audited)."""
    with PsycopgJobStore(dsn) as store:
        Engine(store, Settings(audit=True)).operator("someone-else").retry_job(job_id)
