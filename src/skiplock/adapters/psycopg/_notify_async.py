"""LISTEN/NOTIFY wakeups over psycopg (async source; ``_notify.py`` is generated)."""

from __future__ import annotations

import contextlib
import logging
import random
import time
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict

from skiplock._compat_async import sleep

if TYPE_CHECKING:
    from collections.abc import Mapping

logger = logging.getLogger("skiplock.adapters.psycopg")

# TCP keepalives so a silently dead server is noticed even between pings.
_DEFAULT_CONNECT_KWARGS: Mapping[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


class AsyncPsycopgNotifier:
    """Wakes a worker when the jobs trigger NOTIFYs ``channel``.

    Listens on its own connection (never one from the job pool). When the connection is
    lost it reconnects with jittered exponential backoff, LISTENs again and reports one
    wakeup, because notifications sent meanwhile are lost: the worker then polls once
    to catch up. The worker's fallback poll runs regardless. An idle connection is pinged
    every ``ping_interval`` seconds so a dead server is noticed.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        channel: str,
        connect_kwargs: Mapping[str, Any] | None = None,
        ping_interval: float = 30.0,
        backoff_base: float = 0.1,
        backoff_cap: float = 10.0,
    ) -> None:
        self._conninfo = conninfo
        self._channel = channel
        given = conninfo_to_dict(conninfo) | dict(connect_kwargs or {})
        defaults = {k: v for k, v in _DEFAULT_CONNECT_KWARGS.items() if k not in given}
        self._kwargs: dict[str, Any] = {**(connect_kwargs or {}), **defaults}
        self._kwargs["autocommit"] = True
        self._ping_interval = ping_interval
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._conn: AsyncConnection[Any] | None = None
        self._started = False
        self._closed = False
        self._waiting = False
        self._failures = 0
        self._next_attempt = 0.0
        self._last_ping = time.monotonic()

    @property
    def channel(self) -> str:
        """The channel listened to."""
        return self._channel

    @property
    def connected(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._conn is not None and not self._conn.closed

    @property
    def backend_pid(self) -> int | None:
        """The listening server process (for monitoring and tests), or None."""
        return self._conn.info.backend_pid if self._conn is not None else None

    async def start(self) -> None:
        """Connect and LISTEN. Idempotent; if the server is unreachable, :meth:`wait`
        keeps retrying with backoff."""
        if self._started or self._closed:
            return
        self._started = True
        try:
            await self._connect()
        except psycopg.Error as exc:
            self._schedule_retry(exc)

    async def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True on a notification or after a reconnect."""
        if self._closed:
            return False
        if not self._started:
            await self.start()
        self._waiting = True
        try:
            return await self._wait(max(timeout, 0.0))
        finally:
            self._waiting = False
            if self._is_closed():  # close() ran meanwhile and left the connection to us
                await self._drop()

    async def _wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        conn = self._conn
        if conn is None:
            return await self._reconnect(deadline)
        try:
            if await self._receive(conn, timeout):
                return True
            if time.monotonic() - self._last_ping >= self._ping_interval:
                await conn.execute("SELECT 1")
                self._last_ping = time.monotonic()
            return False
        except psycopg.Error as exc:
            if self._is_closed():
                return False
            await self._drop()
            self._schedule_retry(exc, immediately=True)
            return await self._reconnect(deadline)

    def _is_closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Stop listening and close the connection.

        If another task or thread is inside :meth:`wait`, that wait closes the connection
        when it returns (within its timeout): closing a socket under a waiter is unsafe.
        """
        self._closed = True
        if not self._waiting:
            await self._drop()

    async def _receive(self, conn: AsyncConnection[Any], timeout: float) -> bool:
        got = False
        async for _ in conn.notifies(timeout=timeout, stop_after=1):
            got = True
        if got:
            # Drain what already arrived so a burst wakes the worker once, not N times.
            async for _ in conn.notifies(timeout=0):
                pass
            self._last_ping = time.monotonic()
        return got

    async def _connect(self) -> None:
        conn = await AsyncConnection.connect(self._conninfo, **self._kwargs)
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self._failures = 0
        self._next_attempt = 0.0
        self._last_ping = time.monotonic()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # already broken: nothing to release
                await conn.close()

    def _schedule_retry(self, exc: BaseException, *, immediately: bool = False) -> None:
        if immediately:
            self._next_attempt = 0.0
            logger.warning("skiplock listener lost its connection: %s; reconnecting", exc)
            return
        self._failures += 1
        delay = min(self._backoff_cap, self._backoff_base * 2 ** (self._failures - 1))
        delay *= 0.5 + random.random() / 2  # jitter: nodes do not reconnect in lockstep
        self._next_attempt = time.monotonic() + delay
        logger.warning("skiplock listener cannot connect (%s); retrying in %.2f s", exc, delay)

    async def _reconnect(self, deadline: float) -> bool:
        """Reconnect before ``deadline``; True once connected (catch-up poll)."""
        while not self._closed:
            now = time.monotonic()
            if self._next_attempt > now:
                if self._next_attempt >= deadline:
                    await sleep(max(0.0, deadline - now))
                    return False
                await sleep(self._next_attempt - now)
            try:
                await self._connect()
            except psycopg.Error as exc:
                self._schedule_retry(exc)
                continue
            if self._is_closed():
                return False
            logger.info("skiplock listener reconnected to channel %s", self._channel)
            return True
        return False
