"""asyncpg specifics shared by the store and the notifier: queries, connection checks and
the dedicated (non-pool) connections for heartbeats and LISTEN."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import asyncpg
from asyncpg.pool import Pool, PoolConnectionProxy

from skiplock.core import StoreError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query

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


async def fetch(conn: Any, query: Query, params: Mapping[str, Any]) -> Rows:
    """Run one ``$n`` query; its rows as dicts (empty when it returns none)."""
    records = await conn.fetch(query.text, *query.args(params))
    return [dict(r.items()) for r in records]


async def script(conn: Any, sql: str) -> None:
    """Run a parameterless script; without arguments asyncpg uses the simple protocol,
    which accepts several statements and prepares nothing."""
    await conn.execute(sql)


def is_connection(value: object) -> bool:
    """An asyncpg connection, or a pool's proxy of one (what ``pool.acquire()`` yields)."""
    return isinstance(value, asyncpg.Connection | PoolConnectionProxy)


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


def connect_error(exc: BaseException) -> StoreError:
    """The StoreError raised when no connection could be had."""
    return StoreError(f"cannot get a PostgreSQL connection: {type(exc).__name__}: {exc}")
