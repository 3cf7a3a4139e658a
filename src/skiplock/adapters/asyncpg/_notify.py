"""LISTEN/NOTIFY wakeups over asyncpg (``conn.add_listener`` on a dedicated connection)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Unpack

from skiplock._compat_async import sleep, wait_event
from skiplock.adapters._pg._notify_async import READ_ONLY_QUERY, AsyncPgNotifierBase

from ._driver import CONNECTION_ERRORS

if TYPE_CHECKING:
    from skiplock.adapters._pg._notify_async import ListenOptions

    from ._driver import Connector

logger = logging.getLogger("skiplock.adapters.asyncpg")


class ListenerLostError(ConnectionError):
    """The LISTEN connection was closed under the notifier."""


class AsyncpgNotifier(AsyncPgNotifierBase):
    """Wakes a worker when the jobs trigger NOTIFYs ``channel`` (see the base class for
    reconnects and the catch-up wakeup).

    asyncpg delivers notifications to a callback as they arrive, and reports a closed
    connection to a termination callback, so a lost connection is noticed at once.
    Build it with :meth:`AsyncpgJobStore.notifier`.
    """

    _lost_errors = (*CONNECTION_ERRORS, ListenerLostError)

    def __init__(
        self,
        connector: Connector,
        *,
        channel: str,
        **options: Unpack[ListenOptions],
    ) -> None:
        super().__init__(channel=channel, logger=logger, **options)
        self._connector = connector
        self._conn: Any = None
        self._event = asyncio.Event()
        self._lost = False

    @property
    def connected(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._conn is not None and not self._lost and not self._conn.is_closed()

    @property
    def backend_pid(self) -> int | None:
        """The listening server process (for monitoring and tests), or None."""
        return None if self._conn is None else int(self._conn.get_server_pid())

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self._event.set()

    def _on_terminate(self, conn: Any) -> None:
        if conn is self._conn or getattr(self._conn, "_con", None) is conn:
            self._lost = True
            self._event.set()

    async def _connect(self) -> None:
        conn = await self._connector.open()
        try:
            self._lost = False
            conn.add_termination_listener(self._on_terminate)
            # add_listener issues LISTEN with the channel quoted as an identifier.
            await conn.add_listener(self._channel, self._on_notify)
        except BaseException:
            await self._connector.close(conn, broken=True)
            raise
        self._conn = conn

    async def _receive(self, timeout: float) -> bool:
        got = await wait_event(self._event, timeout)
        if self._lost or self._conn is None or self._conn.is_closed():
            raise ListenerLostError("the LISTEN connection was closed")
        if got:
            # Let callbacks of notifications that already arrived run, then clear: a
            # burst wakes the worker once, not once per notification.
            await sleep(0)
            self._event.clear()
        return got

    async def _ping(self) -> bool:
        try:
            return bool(await self._conn.fetchval(READ_ONLY_QUERY, timeout=10))
        except CONNECTION_ERRORS:
            self._lost = True  # do not talk to it again: terminate it
            raise

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        broken = self._lost or (conn is not None and conn.is_closed())
        self._event.clear()
        self._lost = False
        if conn is None:
            return
        conn.remove_termination_listener(self._on_terminate)
        if not broken:
            try:
                await conn.remove_listener(self._channel, self._on_notify)
            except CONNECTION_ERRORS:
                broken = True
        await self._connector.close(conn, broken=broken)

    def _holds_connection(self) -> bool:
        return self._conn is not None
