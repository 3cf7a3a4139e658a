"""The asyncpg driver of the PostgreSQL store, and the dedicated (non-pool) connections
for heartbeats and LISTEN that it shares with the notifier."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import asyncpg
from asyncpg.pool import Pool, PoolConnectionProxy

from skiplock.adapters._pg._driver_async import SESSION_RESET, AsyncPgDriver, KeptConnection
from skiplock.core import DatabaseUnavailableError, StoreError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query, Style

#: Errors that mean the connection (or the server) is gone, not that a query was wrong.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,  # e.g. pg_terminate_backend
    asyncpg.exceptions.CannotConnectNowError,
    # The server's FATAL arrived but not yet the end of the stream: the protocol is stuck.
    asyncpg.exceptions.InternalClientError,
)


class Connector:
    """Opens the dedicated connections of a store (heartbeats, LISTEN).

    From a DSN it connects outside the job pool, so a busy pool never starves them.
    Given only the caller's pool, it holds connections acquired from that pool.
    """

    def __init__(
        self, *, dsn: str | None, pool: Pool | None, connect_kwargs: Mapping[str, Any]
    ) -> None:
        if dsn is None and pool is None:
            raise ValueError("a connector needs a DSN or a pool")
        self._dsn = dsn
        self._pool = pool
        self._kwargs = dict(connect_kwargs)

    async def open(self) -> Any:
        """A new connection (raises one of :data:`CONNECTION_ERRORS` if unreachable)."""
        if self._dsn is not None:
            return await asyncpg.connect(self._dsn, **self._kwargs)
        assert self._pool is not None
        return await self._pool.acquire()

    async def close(self, conn: Any, *, broken: bool = False) -> None:
        """Release ``conn``; a ``broken`` one is terminated, never waited for."""
        if broken or conn.is_closed():
            conn.terminate()
        if self._dsn is None:
            assert self._pool is not None
            with contextlib.suppress(*CONNECTION_ERRORS):  # the pool replaced it already
                await self._pool.release(conn)
            return
        if conn.is_closed():
            return
        try:
            await conn.close(timeout=5)
        except CONNECTION_ERRORS:
            conn.terminate()


#: The statement asyncpg's ``Transaction`` commits with.
_ASYNCPG_COMMIT = "COMMIT;"


def connect_error(exc: BaseException) -> DatabaseUnavailableError:
    """The error raised when no connection could be had."""
    return DatabaseUnavailableError.unreachable(
        f"cannot get a PostgreSQL connection: {type(exc).__name__}: {exc}"
    )


def settings_error(exc: ValueError) -> StoreError:
    """The error raised for connection settings asyncpg refuses: it parses the DSN when it
    first connects, and raises a plain ValueError for some malformed ones (a port that is
    not a number); the others are ClientConfigurationError, a connection error."""
    return StoreError(f"invalid connection settings (DSN): {exc}")


def _gone(conn: Any) -> bool:
    """Whether a pooled connection is closed: also when the pool took it back on its own
    (asyncpg releases a connection the server closed, and its proxy then raises)."""
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        return True


async def _keep_session(conn: Any) -> None:
    """Pool reset of owned pools: asyncpg still rolls back an open transaction, but the
    session-level reset (UNLISTEN, RESET ALL, advisory unlock) is skipped: the store
    sets no session state, connections lent to user code are reset on their return, and
    behind PgBouncer the reset would hit whichever server connection it picks."""


class ResettingConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg is untyped
    """The connections of a pool the store creates: their :meth:`reset` sends
    :data:`SESSION_RESET` (a superset of asyncpg's own reset query: it also ends SET
    ROLE/SESSION AUTHORIZATION and drops temporary tables) in one round trip, after
    asyncpg's client-side reset (listener callbacks, an open transaction).

    After :meth:`reset_with_commit` the reset travels with the transaction's ``COMMIT``
    instead, in the same round trip, and the next :meth:`reset` sends no query.
    """

    _commit_resets = False  # the next COMMIT carries SESSION_RESET
    _session_reset = False  # it did: reset() has no query to send

    def reset_with_commit(self) -> None:
        """Send :data:`SESSION_RESET` with the ``COMMIT`` that ends the open transaction
        (asyncpg's ``Transaction`` sends it through :meth:`execute`). Should asyncpg
        commit some other way, the reset simply stays with :meth:`reset`."""
        self._commit_resets = True

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        if self._commit_resets and query == _ASYNCPG_COMMIT and not args:
            self._commit_resets = False
            # A failed COMMIT (a deferred constraint) skips the rest: reset() sends it.
            status: str = await super().execute(f"COMMIT; {SESSION_RESET}", timeout=timeout)
            self._session_reset = True
            return status
        result: str = await super().execute(query, *args, timeout=timeout)
        return result

    def get_reset_query(self) -> str:
        return "" if self._session_reset else SESSION_RESET

    async def reset(self, *, timeout: float | None = None) -> None:
        try:
            await super().reset(timeout=timeout)
        finally:
            self._commit_resets = self._session_reset = False


async def _checkout(pool: Pool, timeout: float) -> Any:
    """A connection from ``pool`` within ``timeout`` (else StoreError)."""
    try:
        # asyncio.timeout, not acquire(timeout=): asyncpg's wait_for runs the acquire in a
        # task of its own, an event loop turn more per checkout.
        async with asyncio.timeout(timeout):
            return await pool.acquire()
    except CONNECTION_ERRORS as exc:
        raise connect_error(exc) from exc


class _PoolSource:
    """Checkouts from one asyncpg pool for its :class:`KeptConnection`."""

    def __init__(self, pool: Pool, timeout: float) -> None:
        self._pool = pool
        self._timeout = timeout

    async def checkout(self) -> Any:
        return await _checkout(self._pool, self._timeout)

    async def give_back(self, conn: Any) -> None:
        # The pool resets it (a rollback), or replaces it if the server ended it.
        await self._pool.release(conn, timeout=self._timeout)

    def reusable(self, conn: Any) -> bool:
        return not _gone(conn) and not conn.is_in_transaction()

    def ended(self, conn: Any) -> bool:
        # The server ended it while it was kept (a restart): replaced, as the pool would.
        return _gone(conn)


class AsyncpgDriver(AsyncPgDriver[Any, Any]):
    """Connections from an asyncpg pool: one the driver creates on first use from a DSN
    (closed with the store) or the caller's; dedicated ones through a :class:`Connector`."""

    style: ClassVar[Style] = "numeric"

    def __init__(
        self,
        pool_or_dsn: str | Pool,
        *,
        pgbouncer: bool,
        min_size: int,
        max_size: int,
        timeout: float,
        connect_kwargs: Mapping[str, Any],
    ) -> None:
        given: object = pool_or_dsn  # checked at runtime: callers may pass anything
        self._dsn: str | None
        self.pool: Pool | None
        if isinstance(given, str):
            self._dsn, self.pool, self._owns_pool = given, None, True
            self._pool_sizes = (min_size, max_size)
        elif isinstance(given, Pool):
            self._dsn, self.pool, self._owns_pool = None, given, False
            self._pool_sizes = (given.get_min_size(), given.get_max_size())
        else:
            raise TypeError(
                f"pool_or_dsn must be a DSN string or an asyncpg.Pool, got {type(given).__name__}"
            )
        self.pgbouncer = pgbouncer
        # Whether lent transactions send the session reset with their COMMIT (open()).
        self._resets_with_commit = False
        # PgBouncer: a session setting would land on whichever server connection it picks.
        self.session_settings = not pgbouncer
        self._timeout = timeout
        self._connect_kwargs = dict(connect_kwargs)
        self.connector = Connector(dsn=self._dsn, pool=self.pool, connect_kwargs=connect_kwargs)
        # An owned pool's connection kept for single statements (see acquire_statement).
        self._kept: KeptConnection[Any] | None = None

    # ---- the connection source ----------------------------------------------------------

    def is_open(self) -> bool:
        return self.pool is not None

    async def open(self) -> None:
        min_size, max_size = self._pool_sizes
        # No session reset on release (asyncpg's default costs a round trip per checkout,
        # a third of a single enqueue): the store's own statements leave no session state,
        # and the connections lent to user code (transaction(), autocommit()) are reset
        # when they come back (see lent()).
        extra: dict[str, Any] = {"reset": _keep_session}
        if "connection_class" not in self._connect_kwargs:
            # A lent connection's reset is then one round trip, not two (see lent()),
            # and after a transaction none of its own.
            extra["connection_class"] = ResettingConnection
            self._resets_with_commit = not self.pgbouncer
        # One connection more than asked for: the one acquire_statement() keeps, so that
        # max_size connections stay for everything else.
        pool = asyncpg.create_pool(
            self._dsn, min_size=min_size, max_size=max_size + 1, **extra, **self._connect_kwargs
        )
        try:
            await pool
        except (*CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
            # Nothing to keep: the next use tries again (the server, or the database, may
            # come up later).
            pool.terminate()
            raise connect_error(exc) from exc
        except ValueError as exc:
            pool.terminate()
            raise settings_error(exc) from exc
        self.pool = pool
        self._kept = KeptConnection(_PoolSource(pool, self._timeout))

    async def close(self) -> None:
        if self._owns_pool and self.pool is not None:
            pool, self.pool = self.pool, None
            kept, self._kept = self._kept, None
            if kept is not None:
                # (A busy one goes back when its statement ends.)
                await kept.close()
            await pool.close()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        pool = self.pool
        assert pool is not None, "the store opens the pool first"
        conn = await _checkout(pool, self._timeout)
        try:
            yield conn
        finally:
            # The release's reset (a rollback) keeps the bound acquire(timeout=) gave it.
            await pool.release(conn, timeout=self._timeout)

    def acquire_statement(self) -> AbstractAsyncContextManager[Any]:
        """A connection for the store's own statements outside a transaction: on a pool
        the store owns, the one kept for them when it is free
        (:class:`~skiplock.adapters._pg._driver_async.KeptConnection`), else (in use, or
        the caller's pool) a pooled one. Never lent to user code. Keeping it skips
        asyncpg's checkout and return, whose release runs in a task of its own: about a
        third of a single enqueue's client CPU."""
        if self._kept is None:
            return self.acquire()
        return self._kept.use(self.acquire)

    @asynccontextmanager
    async def lent(self, conn: Any, *, autocommit: bool) -> AsyncIterator[None]:
        """Reset the session state user code may have left on a lent connection before it
        goes back to an owned pool: asyncpg's reset (an open transaction, listener
        callbacks) with :data:`SESSION_RESET` as its query (SET, SET ROLE, SET SESSION
        AUTHORIZATION, LISTEN, advisory locks, temporary tables), one round trip for the
        pool's :class:`ResettingConnection`, none after a transaction whose ``COMMIT``
        carried it (see :meth:`transaction`). A connection that cannot be reset is
        terminated (the pool replaces it); never raises, so the processor's outcome
        stands."""
        try:
            yield
        finally:
            if self._owns_pool and not self.pgbouncer and not conn.is_closed():
                try:
                    await conn.reset()
                    if conn.get_reset_query() != SESSION_RESET:
                        # A connection class of the caller's: asyncpg's reset ran its
                        # own query, the rest of ours follows.
                        await conn.execute(SESSION_RESET)
                except (*CONNECTION_ERRORS, asyncpg.PostgresError):
                    conn.terminate()

    async def connect(self) -> Any:
        try:
            return await self.connector.open()
        except CONNECTION_ERRORS as exc:
            raise connect_error(exc) from exc
        except ValueError as exc:
            raise settings_error(exc) from exc

    async def disconnect(self, conn: Any, *, broken: bool) -> None:
        await self.connector.close(conn, broken=broken)

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.is_closed())

    def is_disconnect(self, exc: BaseException) -> bool:
        # Read-only (SQLSTATE 25006): a demoted primary, or a standby; see discard().
        return isinstance(exc, (*CONNECTION_ERRORS, asyncpg.ReadOnlySQLTransactionError))

    async def discard(self, conn: Any) -> None:
        # The pool replaces a terminated connection when it comes back.
        if not _gone(conn):
            conn.terminate()

    # ---- transactions -------------------------------------------------------------------

    def begin(self, conn: Any) -> Any:
        return conn.transaction()

    @asynccontextmanager
    async def transaction(self, conn: Any) -> AsyncIterator[Any]:
        async with conn.transaction():
            yield conn
            if self._resets_with_commit:
                # lent() owes a session reset: it travels with the COMMIT.
                conn.reset_with_commit()

    async def adopt(self, connection: Any) -> Any:
        # A connection, or a pool's proxy of one (what ``pool.acquire()`` yields).
        if isinstance(connection, asyncpg.Connection | PoolConnectionProxy):
            return connection
        raise TypeError(
            "connection= must be an asyncpg Connection (or what transaction() yields), "
            f"got {type(connection).__name__}"
        )

    def commits_each_statement(self, conn: Any) -> bool:
        return not conn.is_in_transaction()

    # ---- statements ---------------------------------------------------------------------

    async def fetch(self, conn: Any, query: Query, params: Mapping[str, Any]) -> Rows:
        records = await conn.fetch(query.text, *query.args(params))
        return [dict(r.items()) for r in records]

    async def script(self, conn: Any, text: str) -> None:
        # Without arguments asyncpg uses the simple protocol, which accepts several
        # statements and prepares nothing.
        await conn.execute(text)

    async def copy(
        self,
        conn: Any,
        schema: str,
        table: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
    ) -> None:
        await conn.copy_records_to_table(
            table, records=rows, columns=list(columns), schema_name=schema
        )
