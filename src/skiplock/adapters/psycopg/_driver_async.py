"""The psycopg 3 driver of the PostgreSQL store (async source; twin generated)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from skiplock.adapters._pg._driver_async import AsyncPgDriver
from skiplock.core import StoreError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query, Style


class AsyncPsycopgDriver(AsyncPgDriver[AsyncConnection[Any], AsyncConnection[Any]]):
    """Connections from a psycopg_pool pool: one the driver makes from a connection string
    (autocommit connections, closed with the store) or the caller's open pool."""

    style: ClassVar[Style] = "pyformat"

    def __init__(
        self,
        conninfo_or_pool: str | AsyncConnectionPool[Any],
        *,
        name: str,
        min_size: int,
        max_size: int,
        timeout_ms: int | None,
        timeout: float,
    ) -> None:
        self._timeout_ms = timeout_ms
        self.timeout = timeout
        self.connect_kwargs: dict[str, Any] = {}
        self.conninfo: str | None
        self.pool: AsyncConnectionPool[Any]
        given: object = conninfo_or_pool  # checked at runtime: callers may pass anything
        if isinstance(given, str):
            self.conninfo = given
            self.pool = AsyncConnectionPool(
                given,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True},
                configure=self._configure if timeout_ms is not None else None,
                open=False,
                timeout=timeout,
                name=name,
            )
            self._owns_pool = True
        elif isinstance(given, AsyncConnectionPool):
            self.pool = given
            pool_conninfo = given.conninfo
            self.conninfo = pool_conninfo if isinstance(pool_conninfo, str) else None
            if isinstance(given.kwargs, dict):
                self.connect_kwargs = dict(given.kwargs)
            self._owns_pool = False
        else:
            expected = AsyncConnectionPool.__name__
            raise TypeError(
                f"conninfo_or_pool must be a connection string or a {expected}, "
                f"got {type(given).__name__}"
            )
        self._ready = not self._owns_pool

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            "SELECT set_config('statement_timeout', %s, false)", [f"{self._timeout_ms}ms"]
        )

    # ---- the connection source ----------------------------------------------------------

    def is_open(self) -> bool:
        return self._ready

    async def open(self) -> None:
        # No wait=True: a pool that cannot fill in time closes for good, while a worker
        # should survive a database that comes up a little later.
        await self.pool.open()
        self._ready = True

    async def close(self) -> None:
        if self._owns_pool:
            await self.pool.close()
            self._ready = False

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[AsyncConnection[Any]]:
        try:
            conn = await self.pool.getconn()
        except PoolTimeout as exc:
            raise StoreError(f"no PostgreSQL connection within {self.timeout} s: {exc}") from exc
        try:
            async with conn:  # commit or roll back like pool.connection()
                yield conn
        finally:
            await self.pool.putconn(conn)

    @asynccontextmanager
    async def lent(self, conn: AsyncConnection[Any], *, autocommit: bool) -> AsyncIterator[None]:
        # A caller's pool may hand out connections outside autocommit mode.
        switch = autocommit and not conn.autocommit
        if switch:
            await conn.set_autocommit(True)
        try:
            yield
        finally:
            if switch:
                await conn.set_autocommit(False)

    async def connect(self) -> AsyncConnection[Any] | None:
        if self.conninfo is None:  # e.g. a callable conninfo: only the pool can connect
            return None
        try:
            return await AsyncConnection.connect(
                self.conninfo, **(self.connect_kwargs | {"autocommit": True})
            )
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot get a PostgreSQL connection: {exc}") from exc

    async def disconnect(self, conn: AsyncConnection[Any], *, broken: bool) -> None:
        await conn.close()

    def is_closed(self, conn: AsyncConnection[Any]) -> bool:
        return conn.closed

    def is_disconnect(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.OperationalError)

    # ---- transactions -------------------------------------------------------------------

    def begin(self, conn: AsyncConnection[Any]) -> Any:
        return conn.transaction()

    @asynccontextmanager
    async def transaction(self, conn: AsyncConnection[Any]) -> AsyncIterator[AsyncConnection[Any]]:
        async with conn.transaction():
            yield conn

    async def adopt(self, connection: Any) -> AsyncConnection[Any]:
        if isinstance(connection, AsyncConnection):
            return connection
        expected = AsyncConnection.__name__
        raise TypeError(
            f"connection= must be a psycopg {expected} (what transaction() yields), "
            f"got {type(connection).__name__}"
        )

    def commits_each_statement(self, conn: AsyncConnection[Any]) -> bool:
        # Without autocommit psycopg opens a transaction itself (the caller commits it).
        return conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE

    # ---- statements ---------------------------------------------------------------------

    async def fetch(
        self, conn: AsyncConnection[Any], query: Query, params: Mapping[str, Any]
    ) -> Rows:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query.text, params)
            if cur.description is None:
                return []
            return await cur.fetchall()

    async def script(self, conn: AsyncConnection[Any], text: str) -> None:
        async with conn.cursor() as cur:
            # A script may hold several statements; without parameters psycopg sends it
            # as is (no placeholder parsing, no prepared statement).
            await cur.execute(text, prepare=False)

    async def copy(
        self,
        conn: AsyncConnection[Any],
        schema: str,
        table: str,
        columns: Sequence[str],
        rows: Sequence[tuple[Any, ...]],
    ) -> None:
        statement = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
            sql.Identifier(schema),
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
        )
        async with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                await copy.write_row(row)
