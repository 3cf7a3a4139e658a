"""The psycopg 3 job store (async source; ``_store.py`` is generated from it)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from skiplock._compat_async import Lock
from skiplock.adapters._pg._store_async import COPY_THRESHOLD as COPY_THRESHOLD  # re-export
from skiplock.adapters._pg._store_async import AsyncPgJobStoreBase, statement_timeout_ms
from skiplock.core import StoreError

from ._driver_async import execute
from ._notify_async import AsyncPsycopgNotifier

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from datetime import timedelta

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query


class AsyncPsycopgJobStore(AsyncPgJobStoreBase[AsyncConnection[Any]]):
    """Jobs in PostgreSQL through psycopg 3 and psycopg_pool.

    ``conninfo_or_pool`` is a connection string (the store creates, owns and closes its
    pool of ``min_size``..``max_size`` autocommit connections) or an
    :class:`~psycopg_pool.AsyncConnectionPool` the caller owns (it must be open; the store
    never closes it). ``statement_timeout`` bounds every statement on an owned pool.

    ``timeout`` bounds the wait for a pooled connection (and for the first connection:
    an unreachable server raises StoreError).

    Size the pool for the workers that share it: a worker needs one connection per
    running transactional or autocommit job plus two (claims, completions); the default
    ``max_size`` of 10 fits the default concurrency of 4 (use concurrency + 4 with many
    slots). Heartbeats and the LISTEN connection are outside the pool.

    ``connection=`` (R0) takes a psycopg ``AsyncConnection`` (or what :meth:`transaction`
    yields); the operation runs in that connection's open transaction and never commits
    or rolls back. A connection in autocommit mode outside a ``transaction()`` block has
    no open transaction: each statement then commits on its own.

    Heartbeats and worker registration use one dedicated connection, so a busy job pool
    never starves them. The first use checks the schema version (SchemaVersionError on an
    older schema: run ``skiplock schema apply``).
    """

    def __init__(
        self,
        conninfo_or_pool: str | AsyncConnectionPool[Any],
        *,
        schema: str = "skiplock",
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout: timedelta | float | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(schema, "pyformat")
        self._timeout_ms = statement_timeout_ms(statement_timeout)
        self._timeout = timeout
        self._connect_kwargs: dict[str, Any] = {}
        self._conninfo: str | None
        self._pool: AsyncConnectionPool[Any]
        given: object = conninfo_or_pool  # checked at runtime: callers may pass anything
        if isinstance(given, str):
            self._conninfo = given
            self._pool = AsyncConnectionPool(
                given,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True},
                configure=self._configure if self._timeout_ms is not None else None,
                open=False,
                timeout=timeout,
                name=f"skiplock-{schema}",
            )
            self._owns_pool = True
        elif isinstance(given, AsyncConnectionPool):
            self._pool = given
            pool_conninfo = given.conninfo
            self._conninfo = pool_conninfo if isinstance(pool_conninfo, str) else None
            if isinstance(given.kwargs, dict):
                self._connect_kwargs = dict(given.kwargs)
            self._owns_pool = False
        else:
            expected = AsyncConnectionPool.__name__
            raise TypeError(
                f"conninfo_or_pool must be a connection string or a {expected}, "
                f"got {type(given).__name__}"
            )
        self._lock = Lock()
        self._pool_ready = not self._owns_pool
        self._closed = False
        self._aux: AsyncConnection[Any] | None = None
        self._aux_lock = Lock()

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool (owned or the caller's)."""
        return self._pool

    # ---- lifecycle ----------------------------------------------------------------

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            "SELECT set_config('statement_timeout', %s, false)", [f"{self._timeout_ms}ms"]
        )

    # A plain read through a method: the flag changes while a task waits for the lock
    # (a type checker would otherwise assume it cannot).
    def _is_pool_ready(self) -> bool:
        return self._pool_ready

    async def _open_pool(self) -> None:
        if self._is_pool_ready():
            return
        async with self._lock:
            if self._is_pool_ready():
                return
            if self._closed:
                raise RuntimeError("the store is closed")
            # No wait=True: a pool that cannot fill in time closes for good, while a
            # worker should survive a database that comes up a little later.
            await self._pool.open()
            self._pool_ready = True

    async def close(self) -> None:
        """Close the heartbeat connection and the pool if the store owns it."""
        self._closed = True
        async with self._aux_lock:
            if self._aux is not None:
                await self._aux.close()
                self._aux = None
        if self._owns_pool:
            await self._pool.close()
            self._pool_ready = False

    async def __aenter__(self) -> AsyncPsycopgJobStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- connections ----------------------------------------------------------------

    async def _adopt(self, connection: Any) -> AsyncConnection[Any]:
        if isinstance(connection, AsyncConnection):
            return connection
        expected = AsyncConnection.__name__
        raise TypeError(
            f"connection= must be a psycopg {expected} (what transaction() yields), "
            f"got {type(connection).__name__}"
        )

    def _commits_each_statement(self, conn: AsyncConnection[Any]) -> bool:
        # Without autocommit psycopg opens a transaction itself (the caller commits it).
        return conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE

    @asynccontextmanager
    async def _acquire(self) -> AsyncIterator[AsyncConnection[Any]]:
        try:
            conn = await self._pool.getconn()
        except PoolTimeout as exc:
            raise StoreError(f"no PostgreSQL connection within {self._timeout} s: {exc}") from exc
        try:
            async with conn:  # commit or roll back like pool.connection()
                yield conn
        finally:
            await self._pool.putconn(conn)

    @asynccontextmanager
    async def transaction(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection inside a transaction: commit on exit, rollback on error.

        ``statement_timeout`` (seconds) is ``SET LOCAL`` in the transaction.
        """
        async with self._pooled() as conn, conn.transaction():
            await self._limit_transaction(conn, statement_timeout)
            yield conn

    @asynccontextmanager
    async def autocommit(
        self, *, statement_timeout: float | None = None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection in autocommit mode (e.g. CREATE INDEX CONCURRENTLY).

        ``statement_timeout`` (seconds) is set on the connection for the block and the
        previous value restored before it goes back to the pool.
        """
        async with self._pooled() as conn:
            switch = not conn.autocommit
            if switch:
                await conn.set_autocommit(True)
            try:
                async with self._limit_session(conn, statement_timeout):
                    yield conn
            finally:
                if switch:
                    await conn.set_autocommit(False)

    async def _limit_transaction(
        self, conn: AsyncConnection[Any], statement_timeout: float | None
    ) -> None:
        ms = statement_timeout_ms(statement_timeout)
        if ms is not None:
            await conn.execute(
                "SELECT set_config('statement_timeout', %s, true)", [f"{ms}ms"], prepare=False
            )

    def _begin(self, conn: AsyncConnection[Any]) -> Any:
        return conn.transaction()

    async def _fetch(
        self, conn: AsyncConnection[Any], query: Query, params: Mapping[str, Any]
    ) -> Rows:
        return await execute(conn, query, params)

    async def _script(self, conn: AsyncConnection[Any], script: str) -> None:
        async with conn.cursor() as cur:
            # A script may hold several statements; without parameters psycopg sends it
            # as is (no placeholder parsing, no prepared statement).
            await cur.execute(script, prepare=False)

    async def _copy(
        self,
        conn: AsyncConnection[Any],
        table: str,
        columns: Sequence[str],
        rows: Sequence[tuple[Any, ...]],
    ) -> None:
        statement = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
            sql.Identifier(self._schema),
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
        )
        async with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                await copy.write_row(row)

    # ---- workers ----------------------------------------------------------------------

    async def _aux_execute(self, name: str, params: Mapping[str, Any]) -> Rows:
        """Run on the dedicated worker connection (reconnecting once if it broke)."""
        if self._conninfo is None:
            async with self._pooled() as conn:
                return await self._execute(conn, name, params)
        # A worker registers first: refuse an old schema before anything runs.
        await self._open_pool()
        await self._ensure_schema(None)
        async with self._aux_lock:
            for attempt in range(2):
                if self._aux is None or self._aux.closed:
                    self._aux = await AsyncConnection.connect(
                        self._conninfo, **(self._connect_kwargs | {"autocommit": True})
                    )
                try:
                    return await self._execute(self._aux, name, params)
                except psycopg.OperationalError:
                    await self._aux.close()
                    self._aux = None
                    if attempt:
                        raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def notifier(self) -> AsyncPsycopgNotifier | None:
        """A LISTEN notifier on its own connection (None if the pool's conninfo is not a
        string, e.g. a callable: then workers poll)."""
        if self._conninfo is None:
            return None
        return AsyncPsycopgNotifier(
            self._conninfo, channel=self.channel, connect_kwargs=self._connect_kwargs
        )
