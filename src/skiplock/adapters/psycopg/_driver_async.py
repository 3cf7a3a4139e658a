"""The psycopg 3 driver of the PostgreSQL store (async source; twin generated)."""

from __future__ import annotations

import logging
import select
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from skiplock._compat import bounded, deadline_error
from skiplock.adapters._pg._driver_async import SESSION_RESET, AsyncPgDriver, KeptConnection
from skiplock.adapters.psycopg._connections import (
    connect_kwargs,
    ended_error,
    idle,
    in_transaction,
    is_unreachable,
)
from skiplock.core import DatabaseUnavailableError, StoreError

from ._pool_async import ClientSettings, OwnedConnection, OwnedPool, rows_of, run_script

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query, Style

logger = logging.getLogger("skiplock.adapters.psycopg")


def has_input(conn: AsyncConnection[Any]) -> bool:
    """Whether something waits to be read on an idle connection: when the server ended the
    session (pg_terminate_backend, a restart), its goodbye and the end of the stream; on a
    listening one, more notifications. One poll() tells, without a round trip."""
    try:
        fd = conn.fileno()
    except psycopg.Error:  # closed
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))  # POLLHUP and POLLERR are always reported too
    readable, _, broken = select.select([fd], [], [fd], 0)  # Windows
    return bool(readable or broken)


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
        connect_timeout: float,
        pgbouncer: bool = False,
    ) -> None:
        self._timeout_ms = timeout_ms
        # PgBouncer's transaction pooling (see _pg/_pgbouncer.py): no named prepared
        # statements, no session reset or session setting (another client's server
        # connection would get it).
        self.pgbouncer = pgbouncer
        self.session_settings = not pgbouncer
        unprepared = {"prepare_threshold": None} if pgbouncer else {}
        self.timeout = timeout
        self.connect_kwargs: dict[str, Any] = {}
        self.conninfo: str | None
        self.pool: AsyncConnectionPool[Any]
        given: object = conninfo_or_pool  # checked at runtime: callers may pass anything
        if isinstance(given, str):
            self.conninfo = given
            self.connect_kwargs = connect_kwargs(given, unprepared, connect_timeout)
            self.pool = OwnedPool(
                given,
                connection_class=OwnedConnection,
                min_size=min_size,
                # One connection more than asked for: the one kept for the store's own
                # statements (acquire_statement), so max_size stay for everything else.
                max_size=max_size + 1,
                kwargs={**self.connect_kwargs, "autocommit": True},
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
            if self.conninfo is not None:
                self.connect_kwargs = connect_kwargs(
                    self.conninfo, self.connect_kwargs, connect_timeout
                )
            self._owns_pool = False
        else:
            expected = AsyncConnectionPool.__name__
            raise TypeError(
                f"conninfo_or_pool must be a connection string or a {expected}, "
                f"got {type(given).__name__}"
            )
        self._ready = not self._owns_pool
        self._kept: KeptConnection[AsyncConnection[Any]] | None = None
        if self._owns_pool:
            self._kept = KeptConnection(self)

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
            if self._kept is not None:
                await self._kept.close()
            await self.pool.close()
            self._ready = False

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[AsyncConnection[Any]]:
        conn = await self._checkout()
        try:
            yield conn
            # What leaving ``async with conn`` does (commit; roll back on error), without
            # its lock and generator when no transaction is open: the usual case, an
            # autocommit connection. A caller's pool may lend one that is not.
            if in_transaction(conn):
                await conn.commit()
        except BaseException:
            if in_transaction(conn):
                try:
                    await conn.rollback()
                except psycopg.Error as exc:  # the pool discards a broken connection
                    logger.warning("error ignored in rollback on %s: %s", conn, exc)
            raise
        finally:
            await self.pool.putconn(conn)

    def acquire_statement(self) -> AbstractAsyncContextManager[AsyncConnection[Any]]:
        """On a pool the driver made, the connection kept for the store's own statements
        (:class:`~skiplock.adapters._pg._driver_async.KeptConnection`) when it is free;
        else a pooled one."""
        if self._kept is None:
            return self.acquire()
        return self._kept.use(self.acquire)

    async def checkout(self) -> AsyncConnection[Any]:
        return await self._checkout()

    def reusable(self, conn: AsyncConnection[Any]) -> bool:
        return not conn.closed and not in_transaction(conn)

    def ended(self, conn: AsyncConnection[Any]) -> bool:
        # The server's goodbye waits to be read (as _checkout tells for a pooled one).
        return conn.closed or has_input(conn)

    async def give_back(self, conn: AsyncConnection[Any]) -> None:
        if in_transaction(conn):
            try:
                await conn.rollback()
            except psycopg.Error as exc:  # the pool discards a broken connection
                logger.warning("error ignored in rollback on %s: %s", conn, exc)
        await self.pool.putconn(conn)

    async def _checkout(self) -> AsyncConnection[Any]:
        """A pooled connection whose session the server has not ended.

        psycopg_pool hands out idle connections unchecked (its ``check`` callback costs a
        round trip per checkout, and a failed check backs off for seconds). A connection
        the server ended while it sat in the pool has input waiting (:func:`has_input`);
        only such a one is checked with an empty query, and if that fails it is closed and
        given back (the pool opens a replacement) and the next one is taken. So after
        pg_terminate_backend or a restart no operation fails on a dead pooled connection;
        one that dies silently (a network partition) still fails its next statement.
        """
        pool = self.pool
        for _ in range(pool.max_size + 1):
            # A web request waits no longer than its deadline (``_compat.request_deadline``).
            wait = bounded(self.timeout)
            try:
                conn: AsyncConnection[Any] = await pool.getconn(wait)
            except PoolTimeout as exc:
                down = getattr(pool, "unreachable", None)
                if down is not None:
                    raise DatabaseUnavailableError.unreachable(down) from exc
                if wait is not None and wait < self.timeout:
                    raise deadline_error("no pooled connection came") from exc
                raise DatabaseUnavailableError(
                    f"no PostgreSQL connection within {self.timeout} s (every pooled "
                    f"connection was in use): {exc}"
                ) from exc
            if not has_input(conn):
                return conn
            try:
                await AsyncConnectionPool.check_connection(conn)
            except psycopg.Error as exc:
                logger.info("dropping a pooled connection the server ended: %s", exc)
                await conn.close()
                await pool.putconn(conn)
                continue
            except BaseException:
                await pool.putconn(conn)
                raise
            return conn  # a notice or a parameter change, not a goodbye
        raise StoreError("no working PostgreSQL connection: every pooled one was ended")

    @asynccontextmanager
    async def lent(self, conn: AsyncConnection[Any], *, autocommit: bool) -> AsyncIterator[None]:
        """Lend ``conn`` to user code, then give it back to the pool as it came out: its
        Python-side settings restored and, on a pool the driver made, its session reset
        (:data:`SESSION_RESET`, then the store's statement timeout again).

        A caller's pool keeps its own reset policy (its ``configure`` may have set what
        a reset would undo): give it a ``reset`` callback.
        """
        settings = ClientSettings.of(conn)
        if autocommit and not conn.autocommit:
            # A caller's pool may hand out connections outside autocommit mode.
            await conn.set_autocommit(True)
        try:
            yield
        finally:
            await self._take_back(conn, settings)

    async def _take_back(self, conn: AsyncConnection[Any], settings: ClientSettings) -> None:
        # Never raises, so the processor's outcome stands: a connection that cannot be
        # reset is closed, and the pool replaces it.
        if conn.closed:
            return
        try:
            if in_transaction(conn):
                await conn.rollback()  # e.g. a BEGIN left open in an autocommit() block
            await settings.restore(conn)
            if isinstance(conn, OwnedConnection) and not self.pgbouncer:
                if conn.reset_by_commit:
                    conn.reset_by_commit = False
                else:
                    await self.script(conn, SESSION_RESET)
                if self._timeout_ms is not None:
                    await self._configure(conn)
        except psycopg.Error as exc:
            logger.warning("closing a pooled connection that could not be reset: %s", exc)
            await conn.close()

    async def connect(self) -> AsyncConnection[Any] | None:
        if self.conninfo is None:  # e.g. a callable conninfo: only the pool can connect
            return None
        try:
            return await AsyncConnection.connect(
                self.conninfo, **(self.connect_kwargs | {"autocommit": True})
            )
        except psycopg.OperationalError as exc:
            if is_unreachable(exc):
                raise DatabaseUnavailableError.unreachable(str(exc)) from exc
            raise StoreError(f"cannot get a PostgreSQL connection: {exc}") from exc

    async def disconnect(self, conn: AsyncConnection[Any], *, broken: bool) -> None:
        await conn.close()

    def is_closed(self, conn: AsyncConnection[Any]) -> bool:
        return conn.closed

    def is_disconnect(self, exc: BaseException) -> bool:
        return is_unreachable(exc)

    async def discard(self, conn: AsyncConnection[Any]) -> None:
        await conn.close()

    # ---- transactions -------------------------------------------------------------------

    def begin(self, conn: AsyncConnection[Any]) -> Any:
        return conn.transaction()

    @asynccontextmanager
    async def transaction(self, conn: AsyncConnection[Any]) -> AsyncIterator[AsyncConnection[Any]]:
        if not isinstance(conn, OwnedConnection) or self.pgbouncer:  # no session reset
            async with conn.transaction():
                yield conn
            return
        # On a pool the driver made, the session reset that lent() owes travels with the
        # COMMIT, one round trip instead of two. psycopg's transaction() sends its COMMIT
        # alone, so the block is opened and ended here; a conn.transaction() inside it
        # still nests as a savepoint (psycopg sees the open block on the server).
        await self.script(conn, "BEGIN")
        conn.lent_transaction = True
        try:
            yield conn
        except BaseException:
            if in_transaction(conn):
                try:
                    await conn.rollback()
                except psycopg.Error as exc:  # lent() closes a connection it cannot reset
                    logger.info("could not roll back a lent connection: %s", exc)
            raise
        finally:
            conn.lent_transaction = False
        if idle(conn):
            raise ended_error()  # and lent() resets on its own
        # A failed COMMIT (a deferred constraint) skips the reset and raises here, and
        # lent() resets; the reset itself cannot fail on a live session.
        await self.script(conn, f"COMMIT; {SESSION_RESET}")
        conn.reset_by_commit = True

    async def adopt(self, connection: Any) -> AsyncConnection[Any]:
        if isinstance(connection, AsyncConnection):
            if (
                isinstance(connection, OwnedConnection)
                and connection.lent_transaction
                and idle(connection)
            ):
                raise ended_error()  # before the store writes outside that transaction
            return connection
        expected = AsyncConnection.__name__
        raise TypeError(
            f"connection= must be a psycopg {expected} (what transaction() yields), "
            f"got {type(connection).__name__}"
        )

    def commits_each_statement(self, conn: AsyncConnection[Any]) -> bool:
        # Without autocommit psycopg opens a transaction itself (the caller commits it).
        return conn.autocommit and idle(conn)

    # ---- statements ---------------------------------------------------------------------

    async def fetch(
        self, conn: AsyncConnection[Any], query: Query, params: Mapping[str, Any]
    ) -> Rows:
        if isinstance(conn, OwnedConnection):
            return await rows_of(conn.rows_cursor(), query, params)
        async with conn.cursor(row_factory=dict_row) as cur:
            return await rows_of(cur, query, params)

    async def script(self, conn: AsyncConnection[Any], text: str) -> None:
        if isinstance(conn, OwnedConnection):
            await run_script(conn.plain_cursor(), text)
            return
        async with conn.cursor() as cur:
            await run_script(cur, text)

    async def copy(
        self,
        conn: AsyncConnection[Any],
        schema: str,
        table: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
    ) -> None:
        statement = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
            sql.Identifier(schema),
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
        )
        async with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                await copy.write_row(row)
