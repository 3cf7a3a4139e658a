"""The SQLAlchemy store with sessions: enqueue in the caller's transaction (R0), processors
writing through ``ctx.session`` (R10), a web-endpoint style unit of work, schema tools.

The async store runs on asyncpg and psycopg; the generated sync twin on psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import skiplock
from skiplock import JobState, SchemaVersionError
from skiplock.adapters._pg import migrations
from skiplock.adapters.sqlalchemy import AsyncSessionJobStore
from skiplock.adapters.sqlalchemy._classes import AsyncConnection, AsyncEngine, AsyncSession
from skiplock.core import EnqueueRequest

if True:  # ASYNC
    from sqlalchemy.ext.asyncio import create_async_engine as create_engine

    DRIVERS = ["asyncpg", "psycopg"]
else:
    from sqlalchemy import create_engine

    DRIVERS = ["psycopg"]

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from sqlalchemy.engine import URL

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


class Base(DeclarativeBase):
    pass


class Order(Base):
    """Written by the "endpoint" together with its job."""

    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]


class Receipt(Base):
    """Written by a processor through ``ctx.session``."""

    __tablename__ = "receipts"

    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[int]


class Boom(Exception):
    """Raised on purpose after the writes."""


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    """The DBAPI driver under SQLAlchemy."""
    name: str = request.param
    return name


@pytest.fixture
async def engine(sa_url: URL, driver: str) -> AsyncIterator[AsyncEngine]:
    """The application's engine on the emptied test database."""
    engine = create_engine(sa_url.set(drivername=f"postgresql+{driver}"))
    yield engine
    await engine.dispose()


@pytest.fixture
async def store(engine: AsyncEngine) -> AsyncIterator[AsyncSessionJobStore]:
    store = AsyncSessionJobStore(engine)
    yield store
    await store.close()


@pytest.fixture
def jobs(store: AsyncSessionJobStore) -> skiplock.AsyncEngine:
    """The skiplock engine with the processors of these tests."""
    jobs = skiplock.AsyncEngine(store)
    jobs.declare_kind("order.placed")
    jobs.declare_kind("order.confirm")
    return jobs


async def _count(engine: AsyncEngine, table: str) -> int:
    async with engine.connect() as conn:
        value = await conn.scalar(sa.text(f"SELECT count(*) FROM {table}"))
    return int(value or 0)


async def _job_count(engine: AsyncEngine) -> int:
    return await _count(engine, "skiplock.jobs")


# ---- R0: enqueue joins the caller's transaction ------------------------------------------


async def test_session_enqueue_then_rollback_leaves_no_job(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    async with AsyncSession(engine) as session:
        session.add(Order(item="book"))
        await jobs.enqueue("order.placed", {"item": "book"}, connection=session)
        await session.rollback()
    assert await _job_count(engine) == 0
    assert await _count(engine, "orders") == 0


async def test_session_enqueue_then_commit_is_processed(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    seen: list[Any] = []

    @jobs.processor("order.shipped")
    async def ship(payload: dict[str, Any]) -> None:
        seen.append(payload)

    async with AsyncSession(engine) as session:
        session.add(Order(item="lamp"))
        result = await jobs.enqueue("order.shipped", {"item": "lamp"}, connection=session)
        # Not visible outside the transaction until the commit.
        assert await _job_count(engine) == 0
        await session.commit()
    assert await _count(engine, "orders") == 1

    assert await jobs.worker(install_signal_handlers=False).run_until_idle() == 1
    assert seen == [{"item": "lamp"}]
    assert (await jobs.get_job(result.id)).state is JobState.SUCCEEDED


async def test_connection_enqueue_joins_its_transaction(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    async with engine.connect() as conn:
        await jobs.enqueue("order.placed", {"n": 1}, connection=conn)
        await conn.rollback()
        assert await _job_count(engine) == 0
        await jobs.enqueue("order.placed", {"n": 2}, connection=conn)
        await conn.commit()
    [job] = await jobs.list_jobs()
    assert job.payload == {"n": 2}


async def test_session_enqueue_flushes_pending_orm_changes_first(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    async with AsyncSession(engine) as session, session.begin():
        order = Order(item="pen")
        session.add(order)
        await jobs.enqueue("order.placed", {"item": "pen"}, connection=session)
        # The flush gave the order its id before the job's INSERT ran.
        assert order.id is not None
    assert await _count(engine, "orders") == 1
    assert await _job_count(engine) == 1


async def test_session_bulk_enqueue_joins_the_transaction(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    # Large batches take the COPY path; it must run in the session's transaction too.
    items = [skiplock.Enqueue("order.placed", {"n": i, "note": "50%"}) for i in range(600)]
    async with AsyncSession(engine) as session:
        await jobs.enqueue_many(items, connection=session)
        await session.rollback()
        assert await _job_count(engine) == 0
        results = await jobs.enqueue_many(items, connection=session)
        await session.commit()
    assert await _job_count(engine) == 600
    job = await jobs.get_job(results[599].id)
    assert job.payload == {"n": 599, "note": "50%"}


async def test_enqueue_rejects_a_foreign_connection_type(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    with pytest.raises(TypeError, match="connection= must be a SQLAlchemy"):
        await jobs.enqueue("order.placed", {}, connection=engine)
    assert await _job_count(engine) == 0


# ---- R10: processors write through ctx.session ---------------------------------------------


async def test_processor_session_writes_commit_with_the_completion(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    sessions: list[Any] = []

    @jobs.processor("receipt.write", transactional=True)
    async def write(payload: dict[str, int], ctx: skiplock.JobContext) -> None:
        sessions.append(ctx.session)
        ctx.session.add(Receipt(order_id=payload["order"]))

    result = await jobs.enqueue("receipt.write", {"order": 7})
    assert await jobs.worker(install_signal_handlers=False).run_until_idle() == 1

    [session] = sessions
    assert isinstance(session, AsyncSession)
    assert (await jobs.get_job(result.id)).state is JobState.SUCCEEDED
    async with AsyncSession(engine) as check:
        receipts = (await check.scalars(sa.select(Receipt))).all()
    assert [r.order_id for r in receipts] == [7]


async def test_processor_failure_rolls_back_its_session_writes(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    @jobs.processor("receipt.write", transactional=True, max_attempts=1)
    async def write(payload: dict[str, int], ctx: skiplock.JobContext) -> None:
        ctx.session.add(Receipt(order_id=payload["order"]))
        await ctx.session.flush()  # the row reached the database, in the job's transaction
        raise Boom("after the write")

    result = await jobs.enqueue("receipt.write", {"order": 8})
    assert await jobs.worker(install_signal_handlers=False).run_until_idle() == 1

    job = await jobs.get_job(result.id)
    assert job.state is JobState.DEAD
    assert job.last_error is not None
    assert "after the write" in job.last_error
    assert await _count(engine, "receipts") == 0


async def test_processor_in_autocommit_gets_a_connection(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    @jobs.processor("receipt.raw", autocommit=True)
    async def raw(payload: dict[str, int], ctx: skiplock.JobContext) -> None:
        assert isinstance(ctx.connection, AsyncConnection)
        await ctx.connection.execute(
            sa.insert(Receipt).values(order_id=payload["order"]),
        )

    await jobs.enqueue("receipt.raw", {"order": 9})
    assert await jobs.worker(install_signal_handlers=False).run_until_idle() == 1
    assert await _count(engine, "receipts") == 1


# ---- a web endpoint's unit of work (FastAPI style, without FastAPI) ------------------------


async def place_order(
    session: AsyncSession, jobs: skiplock.AsyncEngine, item: str, *, fail: bool = False
) -> int:
    """What a route handler does with its request-scoped session: an ORM write and a job."""
    order = Order(item=item)
    session.add(order)
    await session.flush()
    order_id: int = order.id
    await jobs.enqueue("order.confirm", {"order": order_id}, connection=session)
    if fail:
        raise Boom("payment declined")
    return order_id


async def endpoint(engine: AsyncEngine, jobs: skiplock.AsyncEngine, item: str, fail: bool) -> int:
    """The framework's part: one session per request, committed when the handler returns."""
    async with AsyncSession(engine) as session, session.begin():
        return await place_order(session, jobs, item, fail=fail)


async def test_endpoint_failure_after_enqueue_leaves_neither_row_nor_job(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    with pytest.raises(Boom):
        await endpoint(engine, jobs, "chair", fail=True)
    assert await _count(engine, "orders") == 0
    assert await _job_count(engine) == 0


async def test_endpoint_success_leaves_both_and_the_job_runs(
    engine: AsyncEngine, jobs: skiplock.AsyncEngine
) -> None:
    confirmed: list[int] = []

    @jobs.processor("order.confirm", transactional=True)
    async def confirm(payload: dict[str, int], ctx: skiplock.JobContext) -> None:
        order = await ctx.session.get(Order, payload["order"])
        assert order is not None  # committed together with the job
        confirmed.append(order.id)
        ctx.session.add(Receipt(order_id=order.id))

    order_id = await endpoint(engine, jobs, "table", fail=False)
    assert await _count(engine, "orders") == 1
    assert await _job_count(engine) == 1

    assert await jobs.worker(install_signal_handlers=False).run_until_idle() == 1
    assert confirmed == [order_id]
    assert await _count(engine, "receipts") == 1
    [job] = await jobs.list_jobs()
    assert job.state is JobState.SUCCEEDED


# ---- schema tools ----------------------------------------------------------------------------


async def test_apply_schema_on_a_fresh_database_then_no_op(
    make_database: Callable[[], URL], driver: str
) -> None:
    engine = create_engine(make_database().set(drivername=f"postgresql+{driver}"))
    try:
        store = AsyncSessionJobStore(engine, schema="sa_schema")
        with pytest.raises(SchemaVersionError, match="not installed"):
            await store.now()
        assert await store.apply_schema() == [m.name for m in migrations()]
        assert await store.apply_schema() == []
        assert (await store.check_schema()).up_to_date
        [created] = await store.enqueue([EnqueueRequest(kind="k", payload={"pct": "100%"})])
        job = await store.get(created.id)
        assert job is not None
        assert job.payload == {"pct": "100%"}
        await store.close()
    finally:
        await engine.dispose()


def test_store_rejects_a_foreign_engine() -> None:
    with pytest.raises(TypeError, match="engine must be a SQLAlchemy"):
        AsyncSessionJobStore("postgresql://nowhere")  # type: ignore[arg-type]
