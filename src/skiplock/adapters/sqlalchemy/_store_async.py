"""The SQLAlchemy 2 job store (async source; ``_store.py`` is generated from it)."""

from __future__ import annotations

import contextlib
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from skiplock._compat_async import Lock
from skiplock.adapters._pg._store_async import AsyncPgJobStoreBase, statement_timeout_ms
from skiplock.core import StoreError

from ._classes import AsyncConnection, AsyncEngine, AsyncSession
from ._common import logger, run_copy, run_script, text_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query
    from skiplock.ports import AsyncNotifier


class AsyncSessionJobStore(AsyncPgJobStoreBase[AsyncConnection]):
    """Jobs in PostgreSQL through a SQLAlchemy 2 ``AsyncEngine`` (asyncpg or psycopg).

    The store uses the engine's pool and never disposes the engine: it is the caller's.
    Single statements run on autocommit connections, multi-statement operations in a
    transaction.

    ``connection=`` (R0) takes the caller's ``AsyncSession`` or ``AsyncConnection`` (or
    what :meth:`transaction` yields); the operation runs in its open transaction (pending
    ORM changes of a session are flushed first) and never commits or rolls back.

    :meth:`transaction` yields an ``AsyncSession`` in a transaction: processors get it as
    ``ctx.session`` (alias ``ctx.connection``), and their ORM writes commit atomically with
    the job's completion.

    Heartbeats use one dedicated connection taken from the engine's pool. LISTEN/NOTIFY
    uses the psycopg or asyncpg notifier on a connection of its own, opened with the
    engine URL's parameters; with another driver :meth:`notifier` returns None and
    workers poll.
    """

    def __init__(self, engine: AsyncEngine, *, schema: str = "skiplock") -> None:
        given: object = engine  # checked at runtime: callers may pass anything
        if not isinstance(given, AsyncEngine):
            expected = AsyncEngine.__name__  # outside the f-string: unasync renames it
            raise TypeError(f"engine must be a SQLAlchemy {expected}, got {type(given).__name__}")
        if engine.dialect.name != "postgresql":
            raise ValueError(f"skiplock needs PostgreSQL, got a {engine.dialect.name!r} engine")
        super().__init__(schema, "named")
        self._engine = engine
        self._autocommit_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._aux: AsyncConnection | None = None
        self._aux_lock = Lock()

    @property
    def engine(self) -> AsyncEngine:
        """The engine the store runs on."""
        return self._engine

    async def close(self) -> None:
        """Return the heartbeat connection to the pool (the engine stays open)."""
        async with self._aux_lock:
            aux, self._aux = self._aux, None
            if aux is not None:
                await aux.close()

    async def __aenter__(self) -> AsyncSessionJobStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- driver hooks -------------------------------------------------------------------

    async def _open_pool(self) -> None:
        """Nothing to do: the engine's pool connects on demand."""

    async def _connect(self, engine: AsyncEngine) -> AsyncConnection:
        try:
            return await engine.connect()
        except (PoolTimeoutError, DBAPIError, OSError) as exc:
            raise StoreError(f"cannot get a PostgreSQL connection: {exc}") from exc

    @asynccontextmanager
    async def _connection(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        conn = await self._connect(engine)
        try:
            yield conn
        finally:
            await conn.close()

    def _acquire(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        # Not the autocommit engine: _begin() must open a real transaction on it.
        return self._connection(self._engine)

    def _begin(self, conn: AsyncConnection) -> contextlib.AbstractAsyncContextManager[Any]:
        return conn.begin()

    async def _adopt(self, connection: Any) -> AsyncConnection:
        if isinstance(connection, AsyncSession):
            # What autoflush does before a query: the session's pending ORM changes reach
            # the database first, in the same transaction (R10: they commit together).
            await connection.flush()
            return await connection.connection()
        if isinstance(connection, AsyncConnection):
            return connection
        session, conn = AsyncSession.__name__, AsyncConnection.__name__
        raise TypeError(
            f"connection= must be a SQLAlchemy {session} or {conn} (what transaction() "
            f"yields), got {type(connection).__name__}"
        )

    def _acquire_autocommit(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        return self._connection(self._autocommit_engine)

    def _commits_each_statement(self, conn: AsyncConnection) -> bool:
        # SQLAlchemy begins a transaction on first use (a caller's session or connection);
        # an AUTOCOMMIT engine's begin() would not reach the database anyway.
        return False

    async def _fetch(self, conn: AsyncConnection, query: Query, params: Mapping[str, Any]) -> Rows:
        result = await conn.execute(text_of(query.text), dict(params))
        if not result.returns_rows:
            return []
        return [dict(row) for row in result.mappings()]

    async def _script(self, conn: AsyncConnection, sql: str) -> None:
        if True:  # ASYNC
            await conn.run_sync(run_script, sql)
        else:
            run_script(conn, sql)

    async def _copy(
        self,
        conn: AsyncConnection,
        table: str,
        columns: Sequence[str],
        rows: Sequence[tuple[Any, ...]],
    ) -> None:
        if True:  # ASYNC
            await conn.run_sync(run_copy, self._schema, table, columns, rows)
        else:
            run_copy(conn, self._schema, table, columns, rows)

    async def _aux_execute(self, name: str, params: Mapping[str, Any]) -> Rows:
        """Run on the dedicated worker connection (reconnecting once if it broke)."""
        await self._ensure_schema(None)
        async with self._aux_lock:
            for attempt in range(2):
                if self._aux is None:
                    self._aux = await self._connect(self._autocommit_engine)
                try:
                    return await self._execute(self._aux, name, params)
                except DBAPIError as exc:
                    aux, self._aux = self._aux, None
                    with contextlib.suppress(Exception):  # already broken: nothing to release
                        await aux.close()
                    if attempt or not exc.connection_invalidated:
                        raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    # ---- port methods that are not shared -------------------------------------------------

    @asynccontextmanager
    async def transaction(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[AsyncSession]:
        """An ``AsyncSession`` in a transaction: commit on exit, rollback on error.

        ``statement_timeout`` (seconds) is ``SET LOCAL`` in the transaction.
        """
        ms = statement_timeout_ms(statement_timeout)
        await self._ensure_schema(None)
        async with AsyncSession(self._engine, expire_on_commit=False) as session, session.begin():
            if ms is not None:
                query = self._q["set_statement_timeout"]
                await session.execute(text_of(query.text), {"value": f"{ms}ms", "local": True})
            yield session

    @asynccontextmanager
    async def autocommit(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[AsyncConnection]:
        """An ``AsyncConnection`` in autocommit mode (e.g. CREATE INDEX CONCURRENTLY).

        ``statement_timeout`` (seconds) is set on the connection for the block and the
        previous value restored before it goes back to the pool.
        """
        async with self._use(None) as conn, self._limit_session(conn, statement_timeout):
            yield conn

    def notifier(self) -> AsyncNotifier | None:
        """A LISTEN notifier on a connection of its own, or None (workers then poll).

        Available when skiplock has a notifier for the engine's driver (psycopg; for the
        async store also asyncpg) and that adapter's requirements are installed. The
        listener connects with the engine URL's parameters only: the engine's
        ``connect_args`` and connect events do not apply to it.
        """
        driver = self._engine.dialect.driver
        try:
            if driver == "psycopg":
                from skiplock.adapters.psycopg import AsyncPsycopgNotifier

                from ._common import psycopg_conninfo

                conninfo = psycopg_conninfo(self._engine.dialect, self._engine.url)
                return AsyncPsycopgNotifier(conninfo, channel=self.channel)
            if True:  # ASYNC
                if driver == "asyncpg":
                    from skiplock.adapters.asyncpg import AsyncpgNotifier
                    from skiplock.adapters.asyncpg._driver import Connector

                    from ._common import asyncpg_connect_kwargs

                    kwargs = asyncpg_connect_kwargs(self._engine.dialect, self._engine.url)
                    connector = Connector(dsn="", pool=None, connect_kwargs=kwargs)
                    return AsyncpgNotifier(connector, channel=self.channel)
        except ImportError as exc:  # the driver adapter's requirements are missing
            logger.info("no LISTEN/NOTIFY (%s): workers poll", exc)
            return None
        logger.info("no LISTEN/NOTIFY through SQLAlchemy driver %r: workers poll", driver)
        return None
