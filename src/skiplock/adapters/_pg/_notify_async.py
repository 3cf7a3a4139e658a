"""The driver-neutral half of a LISTEN notifier (async source; twin generated).

Reconnecting with jittered exponential backoff, the catch-up wakeup after a reconnect,
idle pings (which also leave a server that answers read-only) and a safe ``close`` are
the same for every driver; a subclass supplies the connection: connect and LISTEN,
receive, ping, disconnect. Imports no driver.
"""

from __future__ import annotations

import logging
import random
import time
from abc import ABC, abstractmethod
from datetime import timedelta
from typing import TypedDict

from skiplock._compat_async import sleep
from skiplock.core import RetryPolicy
from skiplock.core.rules import next_delay

#: Reconnect delays grow like retry delays (the core's backoff); the jitter keeps nodes
#: from reconnecting in lockstep after a server restart.
_RECONNECT_FACTOR = 2.0
_RECONNECT_JITTER = 0.5

#: The ping: true when the server answers read-only, a standby or a primary demoted in
#: place (``default_transaction_read_only``; autocommit, so each ping is a transaction
#: of its own and sees a reloaded setting). Jobs are written elsewhere then, so nothing
#: will NOTIFY here: the notifier reconnects through its DSN (to the new primary with
#: ``target_session_attrs=read-write``).
READ_ONLY_QUERY = "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'"


class ReadOnlyServerError(ConnectionError):
    """The LISTEN connection's server answers read-only (see :data:`READ_ONLY_QUERY`)."""


class ListenOptions(TypedDict, total=False):
    """How every driver's notifier keeps its connection: ``ping_interval`` (seconds,
    default 30) between pings of an idle connection; reconnect delays from
    ``backoff_base`` (default 0.1 s) doubling up to ``backoff_cap`` (default 1 s)."""

    ping_interval: float
    backoff_base: float
    backoff_cap: float


class AsyncPgNotifierBase(ABC):
    """Wakes a worker when the jobs trigger NOTIFYs ``channel``.

    Listens on its own connection (never one from the job pool). When the connection is
    lost it reconnects with jittered exponential backoff, LISTENs again and reports one
    wakeup, because notifications sent meanwhile are lost: the worker then polls once
    to catch up. The worker's fallback poll runs regardless. An idle connection is pinged
    every ``ping_interval`` seconds so a dead server is noticed; the ping also asks
    whether the server answers read-only (a primary demoted in place after a failover,
    which keeps the session but will never NOTIFY again), and then reconnects. Reconnect
    delays follow :func:`~skiplock.core.rules.next_delay`: ``backoff_base`` doubling up to
    ``backoff_cap`` (seconds), plus up to 50% jitter.

    Subclasses set :attr:`_lost_errors` (the driver's errors that mean "connection
    trouble") and implement :meth:`_connect`, :meth:`_receive`, :meth:`_ping`,
    :meth:`_disconnect`, :meth:`_holds_connection` and :attr:`connected`.
    """

    #: Errors of connect/receive/ping after which the notifier reconnects.
    _lost_errors: tuple[type[BaseException], ...] = (OSError,)

    def __init__(
        self,
        *,
        channel: str,
        ping_interval: float = 30.0,
        backoff_base: float = 0.1,
        backoff_cap: float = 1.0,
        logger: logging.Logger | None = None,
    ) -> None:
        self._channel = channel
        self._ping_interval = ping_interval
        self._backoff = RetryPolicy(
            base=timedelta(seconds=backoff_base),
            factor=_RECONNECT_FACTOR,
            cap=timedelta(seconds=backoff_cap),
            jitter=_RECONNECT_JITTER,
        )
        self._logger = logger or logging.getLogger("skiplock.adapters")
        self._started = False
        self._closed = False
        self._waiting = False
        self._failures = 0
        self._next_attempt = 0.0
        self._last_ping = time.monotonic()

    # ---- driver hooks -------------------------------------------------------------------

    @property
    @abstractmethod
    def connected(self) -> bool:
        """True while the LISTEN connection is up."""

    @abstractmethod
    async def _connect(self) -> None:
        """Open the connection and LISTEN; on failure release it and raise."""

    @abstractmethod
    async def _receive(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for notifications; True if some arrived (drain the rest
        that already arrived, so a burst wakes once). Raise on a lost connection."""

    @abstractmethod
    async def _ping(self) -> bool:
        """Run :data:`READ_ONLY_QUERY` on the connection: its answer (raises if the
        connection is dead)."""

    @abstractmethod
    async def _disconnect(self) -> None:
        """Release the connection, if any; never raises for a broken one."""

    @abstractmethod
    def _holds_connection(self) -> bool:
        """True if a connection (maybe a broken one) is held."""

    # ---- the port ---------------------------------------------------------------------------

    @property
    def channel(self) -> str:
        """The channel listened to."""
        return self._channel

    async def start(self) -> None:
        """Connect and LISTEN. Idempotent; if the server is unreachable, :meth:`wait`
        keeps retrying with backoff."""
        if self._started or self._closed:
            return
        self._started = True
        try:
            await self._connect()
            self._connected()
        except self._lost_errors as exc:
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
                await self._disconnect()

    async def close(self) -> None:
        """Stop listening and close the connection.

        If another task or thread is inside :meth:`wait`, that wait closes the connection
        when it returns (within its timeout): closing a socket under a waiter is unsafe.
        """
        self._closed = True
        if not self._waiting:
            await self._disconnect()

    # ---- reconnecting -----------------------------------------------------------------------

    def _is_closed(self) -> bool:
        return self._closed

    def _connected(self) -> None:
        self._failures = 0
        self._next_attempt = 0.0
        self._last_ping = time.monotonic()

    async def _wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if not self._holds_connection():
            return await self._reconnect(deadline)
        lost: tuple[type[BaseException], ...] = (*self._lost_errors, ReadOnlyServerError)
        try:
            if await self._receive(timeout):
                self._last_ping = time.monotonic()
                return True
            if time.monotonic() - self._last_ping >= self._ping_interval:
                if await self._ping():
                    raise ReadOnlyServerError("its server answers read-only (a standby?)")
                self._last_ping = time.monotonic()
            return False
        except lost as exc:
            if self._is_closed():
                return False
            await self._disconnect()
            self._schedule_retry(exc, immediately=True)
            return await self._reconnect(deadline)

    def _schedule_retry(self, exc: BaseException, *, immediately: bool = False) -> None:
        if immediately:
            self._next_attempt = 0.0
            self._logger.warning("skiplock listener lost its connection: %s; reconnecting", exc)
            return
        self._failures += 1
        delay = next_delay(self._backoff, self._failures, random.random()).total_seconds()
        self._next_attempt = time.monotonic() + delay
        self._logger.warning(
            "skiplock listener cannot connect (%s); retrying in %.2f s", exc, delay
        )

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
            except self._lost_errors as exc:
                self._schedule_retry(exc)
                continue
            self._connected()
            if self._is_closed():
                return False
            self._logger.info("skiplock listener reconnected to channel %s", self._channel)
            return True
        return False
