"""Liveness and readiness probes of the FastAPI and Flask bindings (issue 29, point 6):
no authorization, nothing revealed, readiness bounded by its timeout while the store
hangs or fails, and one check at a time on a sync store."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from flask import Flask

from skiplock import AsyncEngine, Engine
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.core import ValidationError
from skiplock.integrations.fastapi import create_probes_router, mount
from skiplock.integrations.flask import create_probes_blueprint

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from datetime import datetime

#: Generous bound on a probe that must give up after its own (short) timeout.
DEADLINE = 10.0


class Answers(Exception):
    """What the failing store raises: never shown to a caller."""


class SyncFaulty(InMemoryJobStore):
    """A store whose clock read fails, or hangs until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "ok"
        self.release = threading.Event()
        self.calls = 0

    def now(self) -> datetime:
        self.calls += 1
        if self.mode == "fail":
            raise Answers("password authentication failed for user secret_admin")
        if self.mode == "hang":
            self.release.wait(DEADLINE)
        return super().now()


class AsyncFaulty(AsyncInMemoryJobStore):
    def __init__(self) -> None:
        super().__init__()
        self.mode = "ok"

    async def now(self) -> datetime:
        if self.mode == "fail":
            raise Answers("password authentication failed for user secret_admin")
        if self.mode == "hang":
            await asyncio.sleep(DEADLINE)
        return await super().now()


Get = tuple[int, bytes, dict[str, str]]


def lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


@pytest.fixture(params=["fastapi-async", "fastapi-sync", "flask"])
def probe(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Callable[[str], Get]]]:
    """A store and GET on an app with the probes mounted under /health."""
    flavour: str = request.param
    if flavour == "flask":
        store: Any = SyncFaulty()
        app = Flask(__name__)
        app.register_blueprint(
            create_probes_blueprint(Engine(store), url_prefix="/health", timeout=0.2)
        )
        client = app.test_client()

        def get_flask(path: str) -> Get:
            response = client.get(path)
            return response.status_code, response.data, lower(response.headers)

        yield store, get_flask
        store.release.set()
        return
    store = AsyncFaulty() if flavour == "fastapi-async" else SyncFaulty()
    engine: AsyncEngine | Engine = (
        AsyncEngine(store) if flavour == "fastapi-async" else Engine(store)
    )
    api = FastAPI()
    mount(api, create_probes_router(engine, prefix="/health", timeout=0.2))
    with TestClient(api) as test_client:

        def get_fastapi(path: str) -> Get:
            response = test_client.get(path)
            return response.status_code, response.content, lower(response.headers)

        yield store, get_fastapi
        if isinstance(store, SyncFaulty):
            store.release.set()


def test_live_and_ready_without_credentials(probe: tuple[Any, Callable[[str], Get]]) -> None:
    _, get = probe
    for path in ("/health/livez", "/health/readyz"):
        status, body, headers = get(path)
        assert (status, body) == (200, b"ok\n")
        assert headers["content-type"].startswith("text/plain")
        assert headers["cache-control"] == "no-store"


def test_a_failing_store_is_not_ready_and_nothing_leaks(
    probe: tuple[Any, Callable[[str], Get]], caplog: pytest.LogCaptureFixture
) -> None:
    store, get = probe
    store.mode = "fail"
    assert get("/health/readyz")[:2] == (503, b"unavailable\n")
    assert get("/health/livez")[:2] == (200, b"ok\n")  # the process itself is fine
    assert "secret_admin" not in caplog.text  # only the error's type is logged
    assert "readiness: the store did not answer (Answers)" in caplog.text


def test_a_hanging_store_is_not_ready_within_the_timeout(
    probe: tuple[Any, Callable[[str], Get]],
) -> None:
    store, get = probe
    store.mode = "hang"
    status, body, _ = get("/health/readyz")
    assert (status, body) == (503, b"unavailable\n")


def test_a_hanging_sync_store_gets_one_check_at_a_time() -> None:
    store = SyncFaulty()
    app = Flask(__name__)
    app.register_blueprint(create_probes_blueprint(Engine(store), timeout=0.05))
    client = app.test_client()
    store.mode = "hang"
    try:
        for _ in range(3):
            assert client.get("/readyz").status_code == 503
        assert store.calls == 1  # later probes waited for the hanging check
    finally:
        store.release.set()
    store.mode = "ok"
    pause = threading.Event()
    for _ in range(int(DEADLINE / 0.05)):  # the hung check ends (or a new one answers)
        if client.get("/readyz").status_code == 200:
            break
        pause.wait(0.05)
    else:
        pytest.fail("readiness never recovered")
    assert store.calls in (1, 2)


def test_probes_check_their_arguments() -> None:
    with pytest.raises(ValidationError, match="timeout"):
        create_probes_router(Engine(InMemoryJobStore()), timeout=0)
    with pytest.raises(TypeError, match="expected a skiplock Engine or AsyncEngine"):
        create_probes_router(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Flask needs a sync skiplock Engine"):
        create_probes_blueprint(AsyncEngine(AsyncInMemoryJobStore()))  # type: ignore[arg-type]


def test_probes_stay_out_of_the_openapi_document() -> None:
    api = FastAPI()
    mount(api, create_probes_router(Engine(InMemoryJobStore())))
    assert api.openapi()["paths"] == {}
