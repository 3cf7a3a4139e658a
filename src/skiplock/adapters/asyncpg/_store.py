"""The asyncpg job store (async only: asyncpg has no sync API, so no twin)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.adapters._pg._pgbouncer import listen_dsn as listen_dsn_of
from skiplock.adapters._pg._pgbouncer import statement_timeout_refused
from skiplock.adapters._pg._store_async import (
    CONNECT_TIMEOUT,
    READ_TIMEOUT,
    AsyncPgJobStore,
    statement_timeout_ms,
)

from ._driver import AsyncpgDriver, Connector
from ._notify import AsyncpgNotifier

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import timedelta

    from asyncpg.pool import Pool


class AsyncpgJobStore(AsyncPgJobStore[Any, Any]):
    """Jobs in PostgreSQL through asyncpg.

    ``pool_or_dsn`` is a DSN (the store creates, owns and closes a pool of
    ``min_size``..``max_size`` connections on first use, plus one it keeps for its own
    statements outside a transaction) or an :class:`asyncpg.Pool`
    the caller owns (the store never closes it). ``statement_timeout`` bounds every
    statement on an owned pool's connections. ``timeout`` bounds the wait for a pooled
    connection, ``connect_timeout`` (default 5 s; ``connect_kwargs["timeout"]`` wins)
    opening one; asyncpg connects on demand, so while the server is down every call
    raises :class:`~skiplock.DatabaseUnavailableError` at once, and the first call after
    it is back connects. ``read_timeout`` (default 10 s, None: no limit) is the
    statement timeout of the operator reads on the store's own connections (lists,
    counts, throughput, health).
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
    LISTEN through it. Advisory locks are transaction-level everywhere, so they work
    through PgBouncer either way. ``listen_dsn`` (default ``$SKIPLOCK_LISTEN_DSN``) is
    where the notifier's LISTEN connects (PostgreSQL directly, not through the pooler,
    with ``connect_kwargs``); with ``pgbouncer=True`` and none, :meth:`notifier` returns
    None and workers poll.

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
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: timedelta | float | None = READ_TIMEOUT,
        listen_dsn: str | None = None,
    ) -> None:
        self._listen_dsn = listen_dsn_of(listen_dsn)
        timeout_ms = statement_timeout_ms(statement_timeout)
        kwargs: dict[str, Any] = {"timeout": connect_timeout, **(connect_kwargs or {})}
        if pgbouncer:
            kwargs["statement_cache_size"] = 0
        if timeout_ms is not None:
            if pgbouncer:
                # PgBouncer refuses unknown startup parameters; SET would leak to others.
                raise statement_timeout_refused()
            settings = dict(kwargs.get("server_settings") or {})
            settings["statement_timeout"] = str(timeout_ms)
            kwargs["server_settings"] = settings
        # The listener's own connection may prepare: it goes to PostgreSQL directly.
        self._listen_kwargs = {k: v for k, v in kwargs.items() if k != "statement_cache_size"}
        self._asyncpg = AsyncpgDriver(
            pool_or_dsn,
            pgbouncer=pgbouncer,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            connect_kwargs=kwargs,
        )
        super().__init__(self._asyncpg, schema=schema, read_timeout=read_timeout)

    @property
    def pool(self) -> Pool | None:
        """The connection pool (None until an owned pool is first opened)."""
        return self._asyncpg.pool

    @property
    def pgbouncer(self) -> bool:
        """Whether the store runs in PgBouncer (transaction pooling) mode."""
        return self._asyncpg.pgbouncer

    def notifier(self) -> AsyncpgNotifier | None:
        """A LISTEN notifier on its own connection: to ``listen_dsn`` if given, else as
        the store's own connections. None with ``pgbouncer=True`` and no ``listen_dsn``
        (LISTEN needs a session: workers poll)."""
        if self._listen_dsn is not None:
            connector = Connector(
                dsn=self._listen_dsn, pool=None, connect_kwargs=self._listen_kwargs
            )
            return AsyncpgNotifier(connector, channel=self.channel)
        if self.pgbouncer:
            return None
        return AsyncpgNotifier(self._asyncpg.connector, channel=self.channel)
