"""The SQLAlchemy 2 driver of the PostgreSQL store (async source; twin generated)."""

from __future__ import annotations

import contextlib
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from skiplock.adapters._pg._driver_async import AsyncPgDriver
from skiplock.core import DatabaseUnavailableError

from ._classes import AsyncConnection, AsyncEngine, AsyncSession
from ._common import READ_ONLY, in_autocommit, run_copy, run_raw, run_script, sqlstate, text_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query, Style


class AsyncSqlAlchemyDriver(AsyncPgDriver[AsyncConnection, AsyncSession]):
    """Connections from the caller's engine (never disposed here): single statements on
    its AUTOCOMMIT variant, transactions and ``transaction()``'s session on the engine."""

    style: ClassVar[Style] = "named"

    def __init__(self, engine: AsyncEngine) -> None:
        given: object = engine  # checked at runtime: callers may pass anything
        if not isinstance(given, AsyncEngine):
            expected = AsyncEngine.__name__  # outside the f-string: unasync renames it
            raise TypeError(f"engine must be a SQLAlchemy {expected}, got {type(given).__name__}")
        if engine.dialect.name != "postgresql":
            raise ValueError(f"skiplock needs PostgreSQL, got a {engine.dialect.name!r} engine")
        self.engine = engine
        self._autocommit_engine = engine.execution_options(isolation_level="AUTOCOMMIT")

    # ---- the connection source ----------------------------------------------------------

    async def _connect(self, engine: AsyncEngine) -> AsyncConnection:
        try:
            return await engine.connect()
        except (PoolTimeoutError, DBAPIError, OSError) as exc:
            raise DatabaseUnavailableError.unreachable(
                f"cannot get a PostgreSQL connection: {exc}"
            ) from exc

    @asynccontextmanager
    async def _connection(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        conn = await self._connect(engine)
        try:
            yield conn
        finally:
            await conn.close()

    def acquire(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        # Not the autocommit engine: begin() opens a SQLAlchemy transaction on it.
        return self._connection(self.engine)

    def acquire_autocommit(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
        return self._connection(self._autocommit_engine)

    async def connect(self) -> AsyncConnection:
        # A connection held from the engine's pool: the engine's connect arguments and
        # events apply to it as to every other.
        return await self._connect(self._autocommit_engine)

    async def disconnect(self, conn: AsyncConnection, *, broken: bool) -> None:
        if not broken:
            await conn.close()
            return
        # Invalidated, not handed back: a connection to a server answering read-only
        # works, and the pool would hand it out again.
        await self.discard(conn)
        with contextlib.suppress(Exception):  # already broken: nothing to release
            await conn.close()

    def is_closed(self, conn: AsyncConnection) -> bool:
        return conn.closed or conn.invalidated

    def is_disconnect(self, exc: BaseException) -> bool:
        if not isinstance(exc, DBAPIError):
            return False
        # SQLAlchemy's own disconnect detection, and a server that answers read-only
        # (a demoted primary, or a standby: see discard()), which it does not count.
        return exc.connection_invalidated or sqlstate(exc) == READ_ONLY

    async def discard(self, conn: AsyncConnection) -> None:
        # Invalidated: the pool replaces it (through a multi-host URL's
        # target_session_attrs=read-write, with a connection to the primary).
        if not conn.invalidated and not conn.closed:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                await conn.invalidate()

    # ---- transactions -------------------------------------------------------------------

    @asynccontextmanager
    async def begin(self, conn: AsyncConnection) -> AsyncIterator[None]:
        if not self.commits_each_statement(conn):
            async with conn.begin():
                yield
            return
        # AUTOCOMMIT: SQLAlchemy's begin() would not reach the server (each statement
        # would still commit on its own), so the transaction block is the driver's.
        await self._raw(conn, "BEGIN")
        try:
            yield
        except BaseException:
            with contextlib.suppress(DBAPIError):  # a broken connection rolls back anyway
                await self._raw(conn, "ROLLBACK")
            raise
        await self._raw(conn, "COMMIT")

    async def _raw(self, conn: AsyncConnection, sql: str) -> None:
        if True:  # ASYNC
            await conn.run_sync(run_raw, sql)
        else:
            run_raw(conn, sql)

    @asynccontextmanager
    async def transaction(self, conn: AsyncConnection) -> AsyncIterator[AsyncSession]:
        # The session owns the transaction on the pooled connection (it begins it now,
        # so that a statement timeout set on ``conn`` lands inside): user code may use it
        # as any session, and its ORM writes commit with the job's completion (R10).
        async with AsyncSession(bind=conn, expire_on_commit=False) as session, session.begin():
            await session.connection()
            yield session

    async def adopt(self, connection: Any) -> AsyncConnection:
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

    def commits_each_statement(self, conn: AsyncConnection) -> bool:
        # Otherwise SQLAlchemy begins a transaction on first use (the caller commits it).
        if True:  # ASYNC
            sync = conn.sync_connection
            return sync is not None and in_autocommit(sync)
        else:
            return in_autocommit(conn)

    # ---- statements ---------------------------------------------------------------------

    async def fetch(self, conn: AsyncConnection, query: Query, params: Mapping[str, Any]) -> Rows:
        result = await conn.execute(text_of(query.text), dict(params))
        if not result.returns_rows:
            return []
        return [dict(row) for row in result.mappings()]

    async def script(self, conn: AsyncConnection, text: str) -> None:
        if True:  # ASYNC
            await conn.run_sync(run_script, text)
        else:
            run_script(conn, text)

    async def copy(
        self,
        conn: AsyncConnection,
        schema: str,
        table: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
    ) -> None:
        if True:  # ASYNC
            await conn.run_sync(run_copy, (schema, table), columns, rows)
        else:
            run_copy(conn, (schema, table), columns, rows)
