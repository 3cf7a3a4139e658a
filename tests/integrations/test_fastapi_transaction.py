"""FastAPI end to end on PostgreSQL: an endpoint writes an application row and enqueues a
job in the request's transaction (``transaction(engine)``): an error leaves neither, a
failed commit is the client's 500 with neither, success leaves both and the app's
embedded worker runs the job. With the psycopg and the SQLAlchemy async stores, and a
sync engine."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from skiplock import AsyncEngine, Engine
from skiplock.adapters.psycopg import AsyncPsycopgJobStore, PsycopgJobStore
from skiplock.adapters.sqlalchemy import AsyncSessionJobStore
from skiplock.integrations.fastapi import transaction, worker_lifespan
from tests.pgfixtures import execute, fetch

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.postgres

DEADLINE = 15.0


@pytest.fixture
def orders(pg_dsn: str) -> str:
    """An application table; its unique item is checked at commit (deferred)."""
    execute(
        pg_dsn,
        [
            "DROP TABLE IF EXISTS public.orders",
            "CREATE TABLE public.orders (item text, confirmed boolean NOT NULL DEFAULT false,"
            " CONSTRAINT one_per_item UNIQUE (item) DEFERRABLE INITIALLY DEFERRED)",
        ],
    )
    return pg_dsn


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {DEADLINE} s")
        time.sleep(0.02)


def rows(dsn: str) -> list[tuple[Any, ...]]:
    return fetch(dsn, "SELECT item, confirmed FROM public.orders ORDER BY item")


def jobs(dsn: str) -> list[tuple[Any, ...]]:
    return fetch(dsn, "SELECT payload->>'item', status FROM skiplock.jobs ORDER BY id")


def async_app(engine: AsyncEngine, insert: Callable[[Any, str], Any]) -> FastAPI:
    """The shop: POST /orders/{item} writes the order and enqueues its confirmation in
    the request's transaction; ``?fail=1`` raises after both."""

    @engine.processor("order.confirm", transactional=True)
    async def confirm(payload: dict[str, str], ctx: Any) -> None:
        await _run(
            ctx.connection,
            "UPDATE public.orders SET confirmed = true WHERE item = :item",
            payload["item"],
        )

    worker = worker_lifespan(engine, concurrency=2)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with worker(app):
            yield
        await engine.store.close()

    app = FastAPI(lifespan=lifespan)
    # As a default value: an Annotated alias local to a function is not resolvable by
    # FastAPI under ``from __future__ import annotations``.
    in_transaction = transaction(engine)

    @app.post("/orders/{item}")
    async def order(item: str, conn: Any = in_transaction, fail: bool = False) -> dict[str, int]:
        await insert(conn, item)
        job = await engine.enqueue("order.confirm", {"item": item}, connection=conn)
        if fail:
            raise HTTPException(409, "refused after the writes")
        return {"job": job.id}

    return app


async def _run(conn: Any, sql: str, item: str) -> None:
    """``sql`` with ``:item`` on a psycopg connection or a SQLAlchemy session."""
    if hasattr(conn, "cursor"):
        await conn.execute(sql.replace(":item", "%s"), [item])
    else:
        await conn.execute(text(sql), {"item": item})


async def _insert(conn: Any, item: str) -> None:
    await _run(conn, "INSERT INTO public.orders (item) VALUES (:item)", item)


def check_the_shop(client: TestClient, dsn: str) -> None:
    ok = client.post("/orders/lamp")
    assert ok.status_code == 200, ok.text
    # The response came after the commit: both are there already (the worker may have
    # confirmed the order by now).
    assert [item for item, _ in rows(dsn)] == ["lamp"]
    assert [item for item, _ in jobs(dsn)] == ["lamp"]
    eventually(lambda: rows(dsn) == [("lamp", True)], "confirmation by the worker")
    assert jobs(dsn) == [("lamp", "succeeded")]

    refused = client.post("/orders/desk", params={"fail": True})
    assert refused.status_code == 409
    assert rows(dsn) == [("lamp", True)]
    assert jobs(dsn) == [("lamp", "succeeded")]

    # The insert and the enqueue pass, the commit fails (deferred unique): a 500, and
    # nothing of the request is left.
    duplicate = client.post("/orders/lamp")
    assert duplicate.status_code == 500
    assert rows(dsn) == [("lamp", True)]
    assert jobs(dsn) == [("lamp", "succeeded")]


def test_psycopg_async_store(orders: str) -> None:
    engine = AsyncEngine(AsyncPsycopgJobStore(orders, max_size=4))
    with TestClient(async_app(engine, _insert), raise_server_exceptions=False) as client:
        check_the_shop(client, orders)


def test_sqlalchemy_async_session(orders: str) -> None:
    sa_engine = create_async_engine(orders.replace("postgresql://", "postgresql+psycopg://", 1))
    engine = AsyncEngine(AsyncSessionJobStore(sa_engine))

    async def insert(session: Any, item: str) -> None:
        assert type(session).__name__ == "AsyncSession"
        await _insert(session, item)

    with TestClient(async_app(engine, insert), raise_server_exceptions=False) as client:
        check_the_shop(client, orders)
    asyncio.run(sa_engine.dispose())


def test_sync_engine_in_a_sync_endpoint(orders: str) -> None:
    store = PsycopgJobStore(orders, max_size=4)
    engine = Engine(store)

    @engine.processor("order.confirm", transactional=True)
    def confirm(payload: dict[str, str], ctx: Any) -> None:
        ctx.connection.execute(
            "UPDATE public.orders SET confirmed = true WHERE item = %s", [payload["item"]]
        )

    app = FastAPI(lifespan=worker_lifespan(engine))
    in_transaction = transaction(engine)

    @app.post("/orders/{item}")
    def order(item: str, conn: Any = in_transaction, fail: bool = False) -> dict[str, int]:
        conn.execute("INSERT INTO public.orders (item) VALUES (%s)", [item])
        job = engine.enqueue("order.confirm", {"item": item}, connection=conn)
        if fail:
            raise HTTPException(409, "refused after the writes")
        return {"job": job.id}

    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            check_the_shop(client, orders)
    finally:
        store.close()


def test_transaction_rejects_what_is_no_engine() -> None:
    with pytest.raises(TypeError, match="Engine or AsyncEngine"):
        transaction(object())  # type: ignore[arg-type]
