"""A server that hangs while the web app's pool holds open connections to it (issue 41,
item 2): statements sent on them get no answer. Every REST call still answers 503 with
``Retry-After`` within the request timeout (the psycopg stores stop waiting for the
statement's answer and close that connection), and the API answers 200 again once the
server does. ``tests.blackhole`` relays to the test server and hangs every connection on
demand, as a stopped server would.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import httpx
import pytest
from fastapi import FastAPI
from flask import Flask
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from skiplock import AsyncEngine, Engine, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore, PsycopgJobStore
from skiplock.integrations.fastapi import create_router, mount
from skiplock.integrations.flask import create_blueprint
from tests.blackhole import Blackhole

if TYPE_CHECKING:
    from collections.abc import Iterator

    from skiplock.integrations.rest import Permission, Request

pytestmark = pytest.mark.postgres

TIMEOUT = 1.0
#: What a loaded test machine may add (see tests/integrations/test_hung_database.py).
SLACK = 0.75
N = 10
SETTINGS = Settings(request_timeout=timedelta(seconds=TIMEOUT))


def authorize(request: Request, permission: Permission) -> str:
    return "ops"


async def authorize_async(request: Request, permission: Permission) -> str:
    return "ops"


@pytest.fixture
def relay(pg_dsn: str) -> Iterator[tuple[Blackhole, str]]:
    """A relay to the test server, and the session database's DSN through it."""
    params = conninfo_to_dict(pg_dsn)
    upstream = (str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    with Blackhole(upstream=upstream) as proxy:
        params.update(host="127.0.0.1", port=str(proxy.port), connect_timeout="2")
        yield proxy, make_conninfo(**params)  # type: ignore[arg-type]


def check(answers: list[tuple[float, int, str | None]]) -> None:
    assert [status for _, status, _ in answers] == [503] * N
    assert {retry for _, _, retry in answers} == {"2"}
    slow = [round(seconds, 2) for seconds, _, _ in answers if seconds > TIMEOUT + SLACK]
    assert not slow, slow


def test_flask_answers_in_time_while_open_connections_hang(relay: tuple[Blackhole, str]) -> None:
    proxy, dsn = relay
    store = PsycopgJobStore(dsn, max_size=4)
    app = Flask(__name__)
    engine = Engine(store, SETTINGS)
    app.register_blueprint(create_blueprint(engine, authorize=authorize), url_prefix="/api")
    try:
        assert app.test_client().get("/api/counts").status_code == 200  # connections open
        proxy.hang()
        answers: list[tuple[float, int, str | None]] = []

        def get() -> None:
            started = time.monotonic()
            response = app.test_client().get("/api/counts")
            answers.append(
                (
                    time.monotonic() - started,
                    response.status_code,
                    response.headers.get("Retry-After"),
                )
            )

        threads = [threading.Thread(target=get) for _ in range(N)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        check(answers)
        proxy.forward()
        deadline = time.monotonic() + 30
        while app.test_client().get("/api/counts").status_code != 200:
            assert time.monotonic() < deadline, "the API did not come back"
            time.sleep(0.1)
    finally:
        proxy.forward()
        store.close()


async def _fastapi_scenario(proxy: Blackhole, store: AsyncPsycopgJobStore) -> None:
    app = FastAPI()
    engine = AsyncEngine(store, SETTINGS)
    mount(app, create_router(engine, authorize=authorize_async), prefix="/api")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/api/counts")).status_code == 200
        proxy.hang()

        async def get() -> tuple[float, int, str | None]:
            started = time.monotonic()
            response = await client.get("/api/counts", timeout=30)
            return (
                time.monotonic() - started,
                response.status_code,
                response.headers.get("retry-after"),
            )

        check(list(await asyncio.gather(*(get() for _ in range(N)))))
        proxy.forward()
        deadline = time.monotonic() + 30
        while (await client.get("/api/counts")).status_code != 200:
            assert time.monotonic() < deadline, "the API did not come back"
            await asyncio.sleep(0.1)


def test_fastapi_answers_in_time_while_open_connections_hang(
    relay: tuple[Blackhole, str],
) -> None:
    proxy, dsn = relay

    async def run() -> None:
        store = AsyncPsycopgJobStore(dsn, max_size=4)
        try:
            await _fastapi_scenario(proxy, store)
        finally:
            proxy.forward()
            await store.close()

    asyncio.run(run())
