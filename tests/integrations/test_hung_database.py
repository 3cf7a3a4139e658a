"""A hung database (issue 41, item 2): a server that accepts connections and never
answers. Every REST call and dashboard page answers 503 with ``Retry-After`` within the
engine's ``request_timeout``, however many requests wait at once, on every binding and
on the stores a web app uses (psycopg's pool in both flavours, asyncpg, SQLAlchemy over
asyncpg); the readiness probe's timeout is the same setting.

No PostgreSQL is needed: the server is :class:`tests.blackhole.Blackhole`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import FastAPI
from flask import Flask

from skiplock import AsyncEngine, Engine, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore, PsycopgJobStore
from skiplock.integrations.fastapi import create_dashboard_router, create_router, mount
from skiplock.integrations.flask import create_blueprint, create_dashboard_blueprint
from tests.blackhole import Blackhole

if TYPE_CHECKING:
    from collections.abc import Iterator

    from skiplock.integrations.rest import Permission, Request

#: The default request timeout (seconds): the tests of many requests at once use it, so
#: they run as they are on a version without the setting.
TIMEOUT = 2.0
#: What a loaded test machine may add to it (thread and event-loop scheduling, the
#: rendering of 2 x N answers): before the fix requests queued behind the pool's connect
#: timeout (5 s) two at a time, the last ones waiting a minute.
SLACK = 0.75
#: Concurrent REST calls, and as many dashboard overviews, at once.
N = 20

Answer = tuple[float, int, dict[str, str]]


def authorize(request: Request, permission: Permission) -> str:
    return "ops"


async def authorize_async(request: Request, permission: Permission) -> str:
    return "ops"


def settings(timeout: float) -> Settings:
    return Settings(request_timeout=timedelta(seconds=timeout))


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _async_store(flavour: str, dsn: str) -> Any:
    if flavour == "asyncpg":
        from skiplock.adapters.asyncpg import AsyncpgJobStore

        # asyncpg takes a URL; the blackhole's host and port.
        return AsyncpgJobStore(dsn, connect_timeout=2)
    if flavour == "sqlalchemy-asyncpg":
        from sqlalchemy.ext.asyncio import create_async_engine

        from skiplock.adapters.sqlalchemy import AsyncSessionJobStore

        url = dsn.replace("postgresql://", "postgresql+asyncpg://")
        return AsyncSessionJobStore(create_async_engine(url))
    return AsyncPsycopgJobStore(dsn, connect_timeout=2)


def fastapi_answers(engine: AsyncEngine | Engine, paths: list[str]) -> list[Answer]:
    """GET every path at once on a FastAPI app mounting the REST API at /api and the
    dashboard at /dash: (seconds, status, headers) of each."""
    app = FastAPI()
    if isinstance(engine, AsyncEngine):
        mount(app, create_router(engine, authorize=authorize_async), prefix="/api")
        mount(app, create_dashboard_router(engine, authorize=authorize_async), prefix="/dash")
    else:
        mount(app, create_router(engine, authorize=authorize), prefix="/api")
        mount(app, create_dashboard_router(engine, authorize=authorize), prefix="/dash")

    async def run() -> list[Answer]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

            async def get(path: str) -> Answer:
                started = time.monotonic()
                response = await client.get(path, timeout=30)
                return time.monotonic() - started, response.status_code, _lower(response.headers)

            try:
                return await asyncio.gather(*(get(path) for path in paths))
            finally:
                if isinstance(engine, AsyncEngine):
                    await engine.store.close()

    return asyncio.run(run())


def flask_answers(engine: Engine, paths: list[str]) -> list[Answer]:
    """GET every path at once, each from its own thread, on a Flask app (as a threaded
    server serves them)."""
    app = Flask(__name__)
    app.register_blueprint(create_blueprint(engine, authorize=authorize), url_prefix="/api")
    app.register_blueprint(
        create_dashboard_blueprint(engine, authorize=authorize), url_prefix="/dash"
    )
    answers: list[Answer] = []
    start = threading.Barrier(len(paths))

    def get(path: str) -> None:
        client = app.test_client()
        start.wait()
        started = time.monotonic()
        response = client.get(path)
        answers.append((time.monotonic() - started, response.status_code, _lower(response.headers)))

    threads = [threading.Thread(target=get, args=(path,)) for path in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def check_in_time(answers: list[Answer], timeout: float = TIMEOUT) -> None:
    assert len(answers) == 2 * N
    slow = sorted(round(seconds, 2) for seconds, _, _ in answers if seconds > timeout + SLACK)
    assert not slow, f"answered after the request timeout ({timeout} s): {slow}"
    assert {status for _, status, _ in answers} == {503}
    assert all(headers.get("retry-after") == "2" for _, _, headers in answers)


PATHS = ["/api/counts"] * N + ["/dash/"] * N


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    with Blackhole() as hole:
        yield hole


@pytest.mark.parametrize("flavour", ["psycopg", "asyncpg", "sqlalchemy-asyncpg"])
def test_fastapi_async_engine_answers_every_request_in_time(
    blackhole: Blackhole, flavour: str
) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{blackhole.port}/postgres"
    engine = AsyncEngine(_async_store(flavour, dsn))
    check_in_time(fastapi_answers(engine, PATHS))
    assert blackhole.accepted >= 1  # the store did reach the hung server


def test_fastapi_sync_engine_answers_every_request_in_time(blackhole: Blackhole) -> None:
    store = PsycopgJobStore(blackhole.dsn(), connect_timeout=2)
    try:
        check_in_time(fastapi_answers(Engine(store), PATHS))
    finally:
        store.close()


def test_flask_answers_every_request_in_time(blackhole: Blackhole) -> None:
    store = PsycopgJobStore(blackhole.dsn(), connect_timeout=2)
    try:
        check_in_time(flask_answers(Engine(store), PATHS))
    finally:
        store.close()


def test_the_answer_says_what_happened(blackhole: Blackhole) -> None:
    store = PsycopgJobStore(blackhole.dsn(), connect_timeout=2)
    app = Flask(__name__)
    engine = Engine(store, settings(0.5))
    app.register_blueprint(create_blueprint(engine, authorize=authorize), url_prefix="/api")
    try:
        response = app.test_client().get("/api/counts")
    finally:
        store.close()
    assert response.status_code == 503
    problem = response.get_json()
    assert problem["type"] == "urn:skiplock:problem:unavailable"
    assert "did not answer within the request's deadline (0.5 s)" in problem["detail"]


def test_a_later_request_waits_its_own_deadline_not_the_earlier_ones(
    blackhole: Blackhole,
) -> None:
    """Requests arriving one after another each get their full timeout, no more: the
    deadline is measured from each request's start."""
    store = PsycopgJobStore(blackhole.dsn(), connect_timeout=2)
    engine = Engine(store, settings(0.6))
    app = Flask(__name__)
    app.register_blueprint(create_blueprint(engine, authorize=authorize), url_prefix="/api")
    answers: list[Answer] = []

    def get() -> None:
        started = time.monotonic()
        response = app.test_client().get("/api/jobs")
        answers.append((time.monotonic() - started, response.status_code, {}))

    threads = []
    try:
        for _ in range(4):  # staggered by 0.25 s: each overlaps the one before
            threads.append(threading.Thread(target=get))
            threads[-1].start()
            time.sleep(0.25)
        for thread in threads:
            thread.join(30)
    finally:
        store.close()
    assert [status for _, status, _ in answers] == [503] * 4
    assert all(0.3 <= seconds <= 0.6 + SLACK for seconds, _, _ in answers), answers


def test_the_timeout_is_a_setting_read_from_the_environment() -> None:
    assert Settings().request_timeout == timedelta(seconds=2)
    env = Settings.from_env({"SKIPLOCK_REQUEST_TIMEOUT": "750ms"})
    assert env.request_timeout == timedelta(milliseconds=750)
    with pytest.raises(ValueError, match="request_timeout"):
        Settings(request_timeout=0)


def test_the_readiness_probe_defaults_to_the_same_timeout(blackhole: Blackhole) -> None:
    from skiplock.integrations.flask import create_probes_blueprint

    store = PsycopgJobStore(blackhole.dsn(), connect_timeout=2)
    app = Flask(__name__)
    app.register_blueprint(create_probes_blueprint(Engine(store, settings(0.3))))
    try:
        started = time.monotonic()
        response = app.test_client().get("/readyz")
        elapsed = time.monotonic() - started
    finally:
        store.close()
    assert response.status_code == 503
    assert elapsed < 0.3 + SLACK


def test_workers_and_the_cli_have_no_deadline() -> None:
    """Outside a web request nothing is bounded by the request timeout."""
    from skiplock._compat import remaining, request_deadline

    assert remaining() is None
    with request_deadline(5.0) as at:
        left = remaining()
        assert left is not None
        assert 4.0 < left <= 5.0
        with request_deadline(60.0) as inner:  # an earlier deadline around it stays
            assert inner == at
    assert remaining() is None
