"""The SQLAlchemy 2 job store (async source; ``_store.py`` is generated from it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skiplock.adapters._pg._pgbouncer import listen_dsn as listen_dsn_of
from skiplock.adapters._pg._store_async import READ_TIMEOUT, AsyncPgJobStore

from ._classes import AsyncConnection, AsyncEngine, AsyncSession
from ._common import logger
from ._driver_async import AsyncSqlAlchemyDriver

if TYPE_CHECKING:
    from datetime import timedelta

    from skiplock.ports import AsyncNotifier


class AsyncSessionJobStore(AsyncPgJobStore[AsyncConnection, AsyncSession]):
    """Jobs in PostgreSQL through a SQLAlchemy 2 ``AsyncEngine`` (asyncpg or psycopg).

    The store uses the engine's pool and never disposes the engine: it is the caller's.
    Single statements run on autocommit connections, multi-statement operations in a
    transaction. :meth:`autocommit` yields an ``AsyncConnection`` of the engine in
    AUTOCOMMIT mode.

    ``connection=`` (R0) takes the caller's ``AsyncSession`` or ``AsyncConnection`` (or
    what :meth:`transaction` yields); the operation runs in its open transaction (pending
    ORM changes of a session are flushed first) and never commits or rolls back. On a
    connection in AUTOCOMMIT mode, a multi-statement operation (e.g. ``enqueue`` with
    idempotency keys) opens a short transaction of its own on the driver's connection:
    all or nothing, as on every driver.

    :meth:`transaction` yields an ``AsyncSession`` in a transaction: processors get it as
    ``ctx.session`` (alias ``ctx.connection``), and their ORM writes commit atomically with
    the job's completion.

    Heartbeats use one dedicated connection taken from the engine's pool. LISTEN/NOTIFY
    uses the psycopg or asyncpg notifier on a connection of its own, opened with the
    engine URL's parameters; with another driver :meth:`notifier` returns None and
    workers poll.

    ``read_timeout`` (default 10 s, None: no limit) is the statement timeout of the
    operator reads (lists, counts, throughput, health). Connect timeouts and the pool's
    wait are the SQLAlchemy engine's (its ``pool_timeout`` and ``connect_args``); a
    lost connection raises :class:`~skiplock.DatabaseUnavailableError`.

    ``pgbouncer=True`` is for an engine that goes through PgBouncer in transaction
    pooling mode: the store sets no session setting (``autocommit(statement_timeout=)``
    is validated, not applied) and LISTENs only through ``listen_dsn``. The engine must
    not prepare statements: psycopg ``connect_args={"prepare_threshold": None}``,
    asyncpg ``connect_args={"statement_cache_size": 0,
    "prepared_statement_cache_size": 0}`` (docs/pgbouncer.md). ``listen_dsn`` (default
    ``$SKIPLOCK_LISTEN_DSN``) is the connection string the notifier connects to instead
    of the engine URL (PostgreSQL directly, not through the pooler).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        schema: str = "skiplock",
        read_timeout: timedelta | float | None = READ_TIMEOUT,
        pgbouncer: bool = False,
        listen_dsn: str | None = None,
    ) -> None:
        driver = AsyncSqlAlchemyDriver(engine)
        # PgBouncer: a session setting would stay on whichever server connection it picked.
        driver.session_settings = not pgbouncer
        super().__init__(driver, schema=schema, read_timeout=read_timeout)
        self._engine = engine
        self._pgbouncer = pgbouncer
        self._listen_dsn = listen_dsn_of(listen_dsn)

    @property
    def pgbouncer(self) -> bool:
        """Whether the store runs in PgBouncer (transaction pooling) mode."""
        return self._pgbouncer

    @property
    def engine(self) -> AsyncEngine:
        """The engine the store runs on."""
        return self._engine

    def notifier(self) -> AsyncNotifier | None:
        """A LISTEN notifier on a connection of its own, or None (workers then poll).

        Available when skiplock has a notifier for the engine's driver (psycopg; for the
        async store also asyncpg) and that adapter's requirements are installed. The
        listener connects with the engine URL's parameters only: the engine's
        ``connect_args`` and connect events do not apply to it. With ``listen_dsn`` it
        connects there instead; with ``pgbouncer=True`` and no ``listen_dsn`` there is
        none.
        """
        driver = self._engine.dialect.driver
        if self._pgbouncer and self._listen_dsn is None:
            return None
        try:
            if driver == "psycopg":
                from skiplock.adapters.psycopg import AsyncPsycopgNotifier

                from ._common import psycopg_conninfo

                conninfo = self._listen_dsn or psycopg_conninfo(
                    self._engine.dialect, self._engine.url
                )
                return AsyncPsycopgNotifier(conninfo, channel=self.channel)
            if True:  # ASYNC
                if driver == "asyncpg":
                    from skiplock.adapters.asyncpg import AsyncpgNotifier
                    from skiplock.adapters.asyncpg._driver import Connector

                    from ._common import asyncpg_connect_kwargs

                    if self._listen_dsn is not None:
                        connector = Connector(dsn=self._listen_dsn, pool=None, connect_kwargs={})
                    else:
                        kwargs = asyncpg_connect_kwargs(self._engine.dialect, self._engine.url)
                        connector = Connector(dsn="", pool=None, connect_kwargs=kwargs)
                    return AsyncpgNotifier(connector, channel=self.channel)
        except ImportError as exc:  # the driver adapter's requirements are missing
            logger.info("no LISTEN/NOTIFY (%s): workers poll", exc)
            return None
        logger.info("no LISTEN/NOTIFY through SQLAlchemy driver %r: workers poll", driver)
        return None
