"""Every PostgreSQL store against the contract kit through a real PgBouncer in transaction
pooling (tests/pgbouncer.py starts one on a free port), with ``pgbouncer=True``.

The notifier connects to PostgreSQL directly (``listen_dsn``), so the kit's LISTEN/NOTIFY
tests run too; the stores without one are checked to have no notifier. The async stores:
psycopg, asyncpg and SQLAlchemy on asyncpg; the sync twin: psycopg and SQLAlchemy on
psycopg (so SQLAlchemy runs on both drivers; psycopg's SQLAlchemy dialect sends the same
statements from either flavour).

In session pooling (async only) a store needs nothing: the psycopg store runs the kit in
its ordinary mode (its prepared statements, session settings and its notifier's LISTEN
all go through the pooler), and a worker of each driver (asyncpg's statement cache
included) is woken by NOTIFY through it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.engine import make_url

from skiplock import AsyncEngine, JobContext, Settings, ValidationError
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.adapters.sqlalchemy import AsyncSessionJobStore
from skiplock.testing import Capabilities
from skiplock.testing.contract import AsyncJobStoreContract
from tests.contract.pgfaults import PgFaults
from tests.engine.helpers_async import eventually
from tests.pgbouncer import PgBouncer, pgbouncer

if True:  # ASYNC
    from sqlalchemy.ext.asyncio import create_async_engine as create_engine

    from skiplock.adapters.asyncpg import AsyncpgJobStore

    # SQLAlchemy's psycopg dialect runs in the sync twin (the same statements).
    DRIVERS = ["asyncpg"]
else:
    from sqlalchemy import create_engine

    DRIVERS = ["psycopg"]

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: What the stores can do through PgBouncer: everything but a per-connection statement
#: timeout (``autocommit(statement_timeout=)`` would be a session setting; it is
#: validated, not applied; ``transaction(statement_timeout=)`` is ``SET LOCAL``).
THROUGH_PGBOUNCER = Capabilities(
    listen_notify=True, controllable_clock=False, statement_timeouts=False
)

#: What SQLAlchemy's dialects need to prepare nothing (named prepared statements do not
#: survive transaction pooling).
UNPREPARED_ARGS = {
    "psycopg": {"prepare_threshold": None},
    "asyncpg": {"statement_cache_size": 0, "prepared_statement_cache_size": 0},
}


@pytest.fixture(scope="module")
def bouncer() -> Generator[PgBouncer, None, None]:
    """A PgBouncer in transaction pooling in front of the test server."""
    with pgbouncer("transaction") as running:
        yield running


@pytest.fixture
def bounced_dsn(bouncer: PgBouncer, pg_dsn: str) -> str:
    """The test database through the PgBouncer."""
    return bouncer.dsn(pg_dsn)


class _PsycopgSql(PgFaults):
    async def fetch_value(self, handle: Any, query: str) -> object:
        cur = await handle.execute(query)
        row = await cur.fetchone()
        assert row is not None
        return row[0]


class TestAsyncPsycopgThroughPgBouncer(_PsycopgSql, AsyncJobStoreContract):
    capabilities = THROUGH_PGBOUNCER

    @pytest.fixture
    async def store(self, bounced_dsn: str, pg_dsn: str) -> AsyncIterator[AsyncPsycopgJobStore]:
        store = AsyncPsycopgJobStore(bounced_dsn, max_size=12, pgbouncer=True, listen_dsn=pg_dsn)
        yield store
        await store.close()


class TestAsyncSessionThroughPgBouncer(PgFaults, AsyncJobStoreContract):
    capabilities = THROUGH_PGBOUNCER

    @pytest.fixture(params=DRIVERS)
    async def store(
        self, request: pytest.FixtureRequest, bounced_dsn: str, pg_dsn: str
    ) -> AsyncIterator[AsyncSessionJobStore]:
        driver: str = request.param
        url = make_url(bounced_dsn).set(drivername=f"postgresql+{driver}")
        engine = create_engine(url, connect_args=UNPREPARED_ARGS[driver])
        store = AsyncSessionJobStore(engine, pgbouncer=True, listen_dsn=pg_dsn)
        yield store
        await store.close()
        await engine.dispose()

    async def fetch_value(self, handle: Any, query: str) -> object:
        return await handle.scalar(sa.text(query))


if True:  # ASYNC

    class _AsyncpgSql(PgFaults):
        async def fetch_value(self, handle: Any, query: str) -> object:
            return await handle.fetchval(query)

    class TestAsyncpgThroughPgBouncer(_AsyncpgSql, AsyncJobStoreContract):
        capabilities = THROUGH_PGBOUNCER

        @pytest.fixture
        async def store(self, bounced_dsn: str, pg_dsn: str) -> AsyncIterator[AsyncpgJobStore]:
            store = AsyncpgJobStore(bounced_dsn, max_size=12, pgbouncer=True, listen_dsn=pg_dsn)
            yield store
            await store.close()

    @pytest.fixture(scope="module")
    def session_bouncer() -> Generator[PgBouncer, None, None]:
        """A PgBouncer in session pooling in front of the test server."""
        with pgbouncer("session") as running:
            yield running

    @pytest.fixture
    def session_dsn(session_bouncer: PgBouncer, pg_dsn: str) -> str:
        """The test database through the session-pooling PgBouncer."""
        return session_bouncer.dsn(pg_dsn)

    class TestAsyncPsycopgThroughSessionPooling(_PsycopgSql, AsyncJobStoreContract):
        """Session pooling keeps a server connection per client connection: the store
        in its ordinary mode (prepared statements, per-connection statement timeouts),
        its notifier's LISTEN through the pooler too (no ``listen_dsn``)."""

        capabilities = Capabilities(listen_notify=True, controllable_clock=False)

        @pytest.fixture
        async def store(self, session_dsn: str) -> AsyncIterator[AsyncPsycopgJobStore]:
            store = AsyncPsycopgJobStore(session_dsn, max_size=12)
            yield store
            await store.close()

    def _ran(done: list[int], count: int) -> bool:
        return done == list(range(count))

    @pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
    async def test_a_worker_is_woken_by_notify_through_session_pooling(
        driver: str, session_dsn: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """In session pooling LISTEN holds its server connection: a worker whose every
        connection (its notifier's too) goes through PgBouncer picks a new job up on the
        NOTIFY, long before its poll (60 s) would."""
        monkeypatch.delenv("SKIPLOCK_LISTEN_DSN", raising=False)
        store: AsyncpgJobStore | AsyncPsycopgJobStore
        if driver == "asyncpg":
            store = AsyncpgJobStore(session_dsn, max_size=4)
        else:
            store = AsyncPsycopgJobStore(session_dsn, max_size=4)
        notifier = store.notifier()
        assert notifier is not None
        await notifier.close()
        engine = AsyncEngine(store, Settings(poll_interval=60.0))
        done: list[int] = []

        @engine.processor("bounce.session")
        async def run(payload: int, ctx: JobContext) -> None:
            done.append(payload)

        worker = engine.worker(install_signal_handlers=False)
        # in_background() returns once the worker serves: its notifier LISTENs by then.
        async with worker.in_background():
            for n in range(3):
                await engine.enqueue("bounce.session", n)
                await eventually(functools.partial(_ran, done, n + 1), timeout=10.0)
        await store.close()


async def test_without_a_listen_dsn_there_is_no_notifier(
    bounced_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Transaction pooling cannot carry LISTEN: without a listen DSN the stores offer no
    notifier (workers poll); ``$SKIPLOCK_LISTEN_DSN`` gives them one."""
    monkeypatch.delenv("SKIPLOCK_LISTEN_DSN", raising=False)
    store = AsyncPsycopgJobStore(bounced_dsn, pgbouncer=True)
    assert store.notifier() is None
    engine = create_engine(
        make_url(bounced_dsn).set(drivername="postgresql+psycopg"),
        connect_args=UNPREPARED_ARGS["psycopg"],
    )
    assert AsyncSessionJobStore(engine, pgbouncer=True).notifier() is None
    monkeypatch.setenv("SKIPLOCK_LISTEN_DSN", "postgresql://postgres@127.0.0.1/elsewhere")
    assert AsyncPsycopgJobStore(bounced_dsn, pgbouncer=True).notifier() is not None
    assert AsyncSessionJobStore(engine, pgbouncer=True).notifier() is not None
    await engine.dispose()


async def test_a_pool_that_prepares_is_refused(bounced_dsn: str) -> None:
    """A caller's pool behind PgBouncer must not prepare statements; nor may the store
    set a per-connection statement timeout."""
    pool = AsyncConnectionPool(bounced_dsn, open=False)
    with pytest.raises(ValidationError, match="prepare_threshold"):
        AsyncPsycopgJobStore(pool, pgbouncer=True)
    with pytest.raises(ValidationError, match="statement_timeout"):
        AsyncPsycopgJobStore(bounced_dsn, pgbouncer=True, statement_timeout=5)
    unprepared = AsyncConnectionPool(bounced_dsn, open=False, kwargs={"prepare_threshold": None})
    assert AsyncPsycopgJobStore(unprepared, pgbouncer=True).pgbouncer


async def test_a_worker_without_a_notifier_says_it_polls_and_runs_jobs(
    bounced_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Through PgBouncer without a listen DSN a worker finds new jobs by polling, and says
    so when it starts."""
    monkeypatch.delenv("SKIPLOCK_LISTEN_DSN", raising=False)
    store = AsyncPsycopgJobStore(bounced_dsn, pgbouncer=True)
    engine = AsyncEngine(store, Settings(poll_interval=0.1))
    done: list[int] = []

    @engine.processor("bounce.poll", transactional=True)
    async def run(payload: int, ctx: JobContext) -> None:
        done.append(payload)

    worker = engine.worker(install_signal_handlers=False)
    caplog.set_level("INFO", logger="skiplock.worker")
    async with worker.in_background():
        await eventually(lambda: "polls for new jobs every 0.1 s" in caplog.text)
        await engine.enqueue("bounce.poll", 7)
        await eventually(lambda: done == [7])
    await store.close()
