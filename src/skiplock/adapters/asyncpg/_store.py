"""The asyncpg job store (async only: asyncpg has no sync API, so no twin)."""

from __future__ import annotations

import contextlib
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import asyncpg
from asyncpg.pool import Pool

from skiplock._compat_async import Lock
from skiplock.adapters._pg._store_async import AsyncPgJobStoreBase, statement_timeout_ms
from skiplock.core import ValidationError

from ._driver import CONNECTION_ERRORS, Connector, connect_error, fetch, is_connection, script
from ._notify import AsyncpgNotifier

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from datetime import timedelta

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query


async def _keep_session(conn: Any) -> None:
    """Pool reset of owned pools: asyncpg still rolls back an open transaction, but the
    session-level reset (UNLISTEN, RESET ALL, advisory unlock) is skipped: this store
    sets no session state, connections lent to user code are reset on their return, and
    behind PgBouncer the reset would hit whichever server connection it picks."""


class AsyncpgJobStore(AsyncPgJobStoreBase[Any]):
    """Jobs in PostgreSQL through asyncpg.

    ``pool_or_dsn`` is a DSN (the store creates, owns and closes a pool of
    ``min_size``..``max_size`` connections on first use) or an :class:`asyncpg.Pool`
    the caller owns (the store never closes it). ``statement_timeout`` bounds every
    statement on an owned pool's connections. ``timeout`` bounds connecting and the wait
    for a pooled connection (StoreError when exceeded or when the server is down).
    ``connect_kwargs`` go to :func:`asyncpg.create_pool` / :func:`asyncpg.connect`.
    Size the pool for the workers that share it: a worker needs one connection per
    running transactional or autocommit job plus two (claims, completions); the default
    ``max_size`` of 10 fits the default concurrency of 4 (use concurrency + 4 with many
    slots).

    ``connection=`` (R0) takes an :class:`asyncpg.Connection` (or a pool's proxy, or
    what :meth:`transaction` yields). Inside the caller's ``async with
    conn.transaction():`` the operation joins that transaction and never commits it. A
    connection outside a transaction is in autocommit: each statement commits at once
    (a multi-statement operation then gets its own short transaction).

    ``pgbouncer=True`` is for PgBouncer in transaction pooling mode: no prepared
    statement cache (``statement_cache_size=0``), no session reset on release, no
    LISTEN (:meth:`notifier` returns None, workers poll). Advisory locks are
    transaction-level everywhere, so they work through PgBouncer either way.

    Heartbeats and worker registration use one dedicated connection (from a DSN: outside
    the pool; with the caller's pool: one connection held from it). The first use checks
    the schema version (SchemaVersionError on an older schema: run ``skiplock schema
    apply`` or :meth:`apply_schema`).
    """

    def __init__(
        self,
        pool_or_dsn: str | Pool,
        *,
        schema: str = "skiplock",
        pgbouncer: bool = False,
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout: timedelta | float | None = None,
        timeout: float = 30.0,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(schema, "numeric")
        self._pgbouncer = pgbouncer
        self._timeout = timeout
        timeout_ms = statement_timeout_ms(statement_timeout)
        kwargs: dict[str, Any] = {"timeout": timeout, **(connect_kwargs or {})}
        if pgbouncer:
            kwargs["statement_cache_size"] = 0
        if timeout_ms is not None:
            if pgbouncer:
                # PgBouncer refuses unknown startup parameters; SET would leak to others.
                raise ValidationError(
                    "statement_timeout cannot be set per connection through PgBouncer; "
                    "set it on the role or database (ALTER ROLE ... SET statement_timeout)"
                )
            settings = dict(kwargs.get("server_settings") or {})
            settings["statement_timeout"] = str(timeout_ms)
            kwargs["server_settings"] = settings
        self._connect_kwargs = kwargs
        given: object = pool_or_dsn  # checked at runtime: callers may pass anything
        self._dsn: str | None
        self._pool: Pool | None
        if isinstance(given, str):
            self._dsn = given
            self._pool = None
            self._owns_pool = True
            self._pool_sizes = (min_size, max_size)
        elif isinstance(given, Pool):
            self._dsn = None
            self._pool = given
            self._owns_pool = False
            self._pool_sizes = (given.get_min_size(), given.get_max_size())
        else:
            raise TypeError(
                f"pool_or_dsn must be a DSN string or an asyncpg.Pool, got {type(given).__name__}"
            )
        self._connector = Connector(dsn=self._dsn, pool=self._pool, connect_kwargs=kwargs)
        self._pool_lock = Lock()
        self._closed = False
        self._aux: Any = None
        self._aux_lock = Lock()

    @property
    def pool(self) -> Pool | None:
        """The connection pool (None until an owned pool is first opened)."""
        return self._pool

    @property
    def pgbouncer(self) -> bool:
        """Whether the store runs in PgBouncer (transaction pooling) mode."""
        return self._pgbouncer

    # ---- lifecycle ----------------------------------------------------------------------

    # A plain read through a method: it changes while a task waits for the lock.
    def _current_pool(self) -> Pool | None:
        return self._pool

    async def _open_pool(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")
        if self._current_pool() is not None:
            return
        async with self._pool_lock:
            if self._current_pool() is not None:
                return
            min_size, max_size = self._pool_sizes
            # No session reset on release (asyncpg's default costs a round trip per
            # checkout, a third of a single enqueue): the store's own statements leave no
            # session state, and the connections lent to processors (transaction(),
            # autocommit()) are reset when they come back (see _reset_lent).
            extra: dict[str, Any] = {"reset": _keep_session}
            pool = asyncpg.create_pool(
                self._dsn, min_size=min_size, max_size=max_size, **extra, **self._connect_kwargs
            )
            try:
                await pool
            except (*CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
                # Nothing to keep: the next use tries again (the server, or the database,
                # may come up later).
                pool.terminate()
                raise connect_error(exc) from exc
            self._pool = pool

    async def close(self) -> None:
        """Close the heartbeat connection, and the pool if the store owns it. Idempotent."""
        self._closed = True
        async with self._aux_lock:
            if self._aux is not None:
                aux, self._aux = self._aux, None
                await self._connector.close(aux)
        if self._owns_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def __aenter__(self) -> AsyncpgJobStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- driver hooks -------------------------------------------------------------------

    @asynccontextmanager
    async def _acquire(self) -> AsyncIterator[Any]:
        await self._open_pool()
        pool = self._current_pool()
        assert pool is not None
        try:
            conn = await pool.acquire(timeout=self._timeout)
        except CONNECTION_ERRORS as exc:
            raise connect_error(exc) from exc
        try:
            yield conn
        finally:
            await pool.release(conn)

    def _begin(self, conn: Any) -> Any:
        return conn.transaction()

    async def _adopt(self, connection: Any) -> Any:
        if is_connection(connection):
            return connection
        raise TypeError(
            "connection= must be an asyncpg Connection (or what transaction() yields), "
            f"got {type(connection).__name__}"
        )

    def _commits_each_statement(self, conn: Any) -> bool:
        return not conn.is_in_transaction()

    async def _fetch(self, conn: Any, query: Query, params: Mapping[str, Any]) -> Rows:
        return await fetch(conn, query, params)

    async def _script(self, conn: Any, sql: str) -> None:
        await script(conn, sql)

    async def _copy(
        self, conn: Any, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        await conn.copy_records_to_table(
            table, records=rows, columns=list(columns), schema_name=self._schema
        )

    async def _aux_execute(self, name: str, params: Mapping[str, Any]) -> Rows:
        """Run on the dedicated worker connection (reconnecting once if it broke)."""
        await self._open_pool()
        await self._ensure_schema(None)
        async with self._aux_lock:
            for attempt in range(2):
                if self._aux is None or self._aux.is_closed():
                    await self._drop_aux()
                    try:
                        self._aux = await self._connector.open()
                    except CONNECTION_ERRORS as exc:
                        raise connect_error(exc) from exc
                try:
                    return await self._execute(self._aux, name, params)
                except CONNECTION_ERRORS:
                    await self._drop_aux(broken=True)
                    if attempt:
                        raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _drop_aux(self, *, broken: bool = False) -> None:
        aux, self._aux = self._aux, None
        if aux is not None:
            await self._connector.close(aux, broken=broken)

    # ---- the port's connections ---------------------------------------------------------

    @asynccontextmanager
    async def transaction(self, *, statement_timeout: float | None = None) -> AsyncIterator[Any]:
        """A pooled connection inside a transaction: commit on exit, rollback on error.

        ``statement_timeout`` (seconds) is ``SET LOCAL`` in the transaction.
        """
        async with self._pooled() as conn, self._reset_lent(conn), conn.transaction():
            await self._limit_transaction(conn, statement_timeout)
            yield conn

    @asynccontextmanager
    async def autocommit(self, *, statement_timeout: float | None = None) -> AsyncIterator[Any]:
        """A pooled connection outside any transaction (e.g. CREATE INDEX CONCURRENTLY).

        ``statement_timeout`` (seconds) is set on the connection for the block and the
        previous value restored before it goes back to the pool. With
        ``pgbouncer=True`` it is validated but not applied: a session setting would land
        on whichever server connection PgBouncer picks (cancelling the awaiting task
        still cancels the query).
        """
        async with self._pooled() as conn, self._reset_lent(conn):
            if self._pgbouncer:
                statement_timeout_ms(statement_timeout)
                yield conn
                return
            async with self._limit_session(conn, statement_timeout):
                yield conn

    @asynccontextmanager
    async def _reset_lent(self, conn: Any) -> AsyncIterator[None]:
        """Reset the session state user code may have left on a lent connection (SET,
        LISTEN, session advisory locks) before it goes back to an owned pool."""
        try:
            yield
        finally:
            if self._owns_pool and not self._pgbouncer and not conn.is_closed():
                with contextlib.suppress(*CONNECTION_ERRORS):  # the pool replaces it
                    await conn.reset()

    def notifier(self) -> AsyncpgNotifier | None:
        """A LISTEN notifier on its own connection; None with ``pgbouncer=True``
        (LISTEN needs a session: workers poll)."""
        if self._pgbouncer:
            return None
        return AsyncpgNotifier(self._connector, channel=self.channel)
