"""LISTEN/NOTIFY wakeups over psycopg (async source; ``_notify.py`` is generated)."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Unpack

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict

from skiplock.adapters._pg._notify_async import READ_ONLY_QUERY, AsyncPgNotifierBase
from skiplock.adapters.psycopg._driver_async import has_input

if TYPE_CHECKING:
    from collections.abc import Mapping

    from skiplock.adapters._pg._notify_async import ListenOptions

logger = logging.getLogger("skiplock.adapters.psycopg")

# TCP keepalives so a silently dead server is noticed even between pings.
_DEFAULT_CONNECT_KWARGS: Mapping[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


class AsyncPsycopgNotifier(AsyncPgNotifierBase):
    """Wakes a worker when the jobs trigger NOTIFYs ``channel`` (reconnects, the catch-up
    wakeup and idle pings: see the base class).

    Listens on its own connection (never one from the job pool), with TCP keepalives so
    a silently dead server is noticed even between pings.
    """

    _lost_errors = (psycopg.Error,)

    def __init__(
        self,
        conninfo: str,
        *,
        channel: str,
        connect_kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[ListenOptions],
    ) -> None:
        super().__init__(channel=channel, logger=logger, **options)
        self._conninfo = conninfo
        given = conninfo_to_dict(conninfo) | dict(connect_kwargs or {})
        defaults = {k: v for k, v in _DEFAULT_CONNECT_KWARGS.items() if k not in given}
        self._kwargs: dict[str, Any] = {**(connect_kwargs or {}), **defaults}
        self._kwargs["autocommit"] = True
        self._conn: AsyncConnection[Any] | None = None

    @property
    def connected(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._conn is not None and not self._conn.closed

    @property
    def backend_pid(self) -> int | None:
        """The listening server process (for monitoring and tests), or None."""
        return self._conn.info.backend_pid if self._conn is not None else None

    def _holds_connection(self) -> bool:
        return self._conn is not None

    async def _receive(self, timeout: float) -> bool:
        conn = self._conn
        assert conn is not None
        got = False
        async for _ in conn.notifies(timeout=timeout, stop_after=1):
            got = True
        if got and has_input(conn):
            # Drain what already arrived so a burst wakes the worker once, not N times.
            # Only when the socket has more: the drain is a wait of its own (a turn of
            # the event loop when async) that a lone wakeup, the pickup of one job,
            # would otherwise pay before its claim.
            async for _ in conn.notifies(timeout=0):
                pass
        return got

    async def _ping(self) -> bool:
        assert self._conn is not None
        cur = await self._conn.execute(READ_ONLY_QUERY)
        row = await cur.fetchone()
        return bool(row and row[0])

    async def _connect(self) -> None:
        conn = await AsyncConnection.connect(self._conninfo, **self._kwargs)
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except BaseException:
            await conn.close()
            raise
        self._conn = conn

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # already broken: nothing to release
                await conn.close()
