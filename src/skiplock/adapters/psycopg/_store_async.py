"""The psycopg 3 job store (async source; ``_store.py`` is generated from it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from psycopg import AsyncConnection

from skiplock.adapters._pg._pgbouncer import listen_dsn as listen_dsn_of
from skiplock.adapters._pg._pgbouncer import statement_timeout_refused
from skiplock.adapters._pg._store_async import (
    CONNECT_TIMEOUT,
    READ_TIMEOUT,
    AsyncPgJobStore,
    statement_timeout_ms,
)
from skiplock.adapters._pg._store_async import COPY_THRESHOLD as COPY_THRESHOLD  # re-export
from skiplock.core import ValidationError

from ._connections import connect_kwargs
from ._driver_async import AsyncPsycopgDriver
from ._notify_async import AsyncPsycopgNotifier

if TYPE_CHECKING:
    from datetime import timedelta

    from psycopg_pool import AsyncConnectionPool


def _prepares(pool: object) -> bool:
    """Whether a caller's pool makes connections that prepare statements (psycopg's
    default ``prepare_threshold`` of 5), which transaction pooling cannot carry."""
    kwargs = getattr(pool, "kwargs", None) or {}
    return isinstance(kwargs, dict) and kwargs.get("prepare_threshold", 5) is not None


class AsyncPsycopgJobStore(AsyncPgJobStore[AsyncConnection[Any], AsyncConnection[Any]]):
    """Jobs in PostgreSQL through psycopg 3 and psycopg_pool.

    ``conninfo_or_pool`` is a connection string (the store creates, owns and closes its
    pool of ``min_size``..``max_size`` autocommit connections) or an
    :class:`~psycopg_pool.AsyncConnectionPool` the caller owns (it must be open; the store
    never closes it). ``statement_timeout`` bounds every statement on an owned pool.
    :meth:`transaction` and :meth:`autocommit` yield pooled ``AsyncConnection`` objects.

    ``timeout`` bounds the wait for a pooled connection while every one is in use.
    ``connect_timeout`` (seconds, default 5; libpq counts whole seconds, at least 2)
    bounds opening one connection, unless the connection string sets ``connect_timeout``.
    While the server cannot be reached a call does not wait ``timeout``: it raises
    :class:`~skiplock.DatabaseUnavailableError` as soon as the pool's next connection
    attempt fails (the pool retries at least once a second, so it reconnects within
    about a second of the server accepting connections again). ``read_timeout``
    (default 10 s, None: no limit) is the statement timeout of the operator reads on
    the store's own connections (lists, counts, throughput, health, the audit trail).

    Size the pool for the workers that share it: a worker needs one connection per
    running transactional or autocommit job plus two (claims, completions); the default
    ``max_size`` of 10 fits the default concurrency of 4 (use concurrency + 4 with many
    slots). Heartbeats and the LISTEN connection are outside the pool.

    ``connection=`` (R0) takes a psycopg ``AsyncConnection`` (or what :meth:`transaction`
    yields); the operation runs in that connection's open transaction and never commits
    or rolls back. A connection in autocommit mode outside a ``transaction()`` block has
    no open transaction: each statement then commits on its own.

    A pooled connection lent to user code (:meth:`transaction`, :meth:`autocommit`, the
    processors' ``ctx.connection``) goes back as it came out: psycopg's settings restored
    and, on an owned pool, its session reset (``SET``, ``SET ROLE``, ``LISTEN``, advisory
    locks, temporary tables). Pooled connections the server ended are dropped when taken
    from the pool; one lost during an operation raises StoreError.

    Heartbeats and worker registration use one dedicated connection, so a busy job pool
    never starves them. The first use checks the schema version (SchemaVersionError on an
    older schema: run ``skiplock schema apply``).

    ``pgbouncer=True`` is for PgBouncer in transaction pooling mode: no prepared
    statements (``prepare_threshold=None`` on the store's connections; a caller's pool
    must be made with ``kwargs={"prepare_threshold": None}``), no session reset of lent
    connections, no ``statement_timeout`` (refused: it is a session setting). Advisory
    locks are transaction-level everywhere. ``listen_dsn`` (default
    ``$SKIPLOCK_LISTEN_DSN``) is where the notifier's LISTEN connects (PostgreSQL
    directly, not through the pooler); with ``pgbouncer=True`` and none, there is no
    notifier and workers poll.
    """

    #: The driver the store builds: a subclass may take more kinds of ``connection=``
    #: (the Django integration's takes Django's connection and runs through its cursors).
    driver_class: ClassVar[type[AsyncPsycopgDriver]] = AsyncPsycopgDriver

    def __init__(
        self,
        conninfo_or_pool: str | AsyncConnectionPool[Any],
        *,
        schema: str = "skiplock",
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout: timedelta | float | None = None,
        timeout: float = 30.0,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: timedelta | float | None = READ_TIMEOUT,
        pgbouncer: bool = False,
        listen_dsn: str | None = None,
    ) -> None:
        if pgbouncer:
            if statement_timeout is not None:
                raise statement_timeout_refused()
            if not isinstance(conninfo_or_pool, str) and _prepares(conninfo_or_pool):
                raise ValidationError(
                    "a pool behind PgBouncer (pgbouncer=True) must not prepare statements: "
                    "make it with kwargs={'prepare_threshold': None}"
                )
        self._psycopg = self.driver_class(
            conninfo_or_pool,
            name=f"skiplock-{schema}",
            min_size=min_size,
            max_size=max_size,
            timeout_ms=statement_timeout_ms(statement_timeout),
            timeout=timeout,
            connect_timeout=connect_timeout,
            pgbouncer=pgbouncer,
        )
        super().__init__(self._psycopg, schema=schema, read_timeout=read_timeout)
        self._listen_dsn = listen_dsn_of(listen_dsn)
        self._connect_timeout = connect_timeout

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool (owned or the caller's)."""
        return self._psycopg.pool

    @property
    def pgbouncer(self) -> bool:
        """Whether the store runs in PgBouncer (transaction pooling) mode."""
        return self._psycopg.pgbouncer

    def notifier(self) -> AsyncPsycopgNotifier | None:
        """A LISTEN notifier on its own connection: to ``listen_dsn`` if given, else to
        the pool's conninfo. None (workers poll) with ``pgbouncer=True`` and no
        ``listen_dsn``, or if the pool's conninfo is not a string (e.g. a callable)."""
        if self._listen_dsn is not None:
            kwargs = connect_kwargs(self._listen_dsn, {}, self._connect_timeout)
            return AsyncPsycopgNotifier(
                self._listen_dsn, channel=self.channel, connect_kwargs=kwargs
            )
        conninfo = self._psycopg.conninfo
        if conninfo is None or self.pgbouncer:
            return None
        return AsyncPsycopgNotifier(
            conninfo, channel=self.channel, connect_kwargs=self._psycopg.connect_kwargs
        )
