"""psycopg's pool and connections as the psycopg driver uses them (async source; twin
generated): the pool the driver makes from a connection string (capped reconnection
waits, callers failed at once while the server cannot be reached), its connections (the
driver's cursors, statements ended at a web request's deadline), and the client settings
a connection lent to user code gets back.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from psycopg import AsyncConnection, AsyncCursor, IsolationLevel
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from skiplock._compat import deadline_error, remaining
from skiplock.adapters.psycopg._connections import (
    WAIT_INTERVAL,
    CappedBackoff,
    DeadlineExpired,
    idle,
    is_unreachable,
    until_deadline,
)
from skiplock.core import DatabaseUnavailableError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from psycopg.abc import PQGen
    from psycopg_pool.base import AttemptWithBackoff

    from skiplock.adapters._pg._migrate import Rows
    from skiplock.adapters._pg._sql import Query

RV = TypeVar("RV")


class ClientSettings(NamedTuple):
    """The Python-side settings of a connection that user code may change."""

    autocommit: bool
    isolation_level: IsolationLevel | None
    read_only: bool | None
    deferrable: bool | None
    row_factory: Any
    prepare_threshold: int | None

    @classmethod
    def of(cls, conn: AsyncConnection[Any]) -> ClientSettings:
        return cls(
            conn.autocommit,
            conn.isolation_level,
            conn.read_only,
            conn.deferrable,
            conn.row_factory,
            conn.prepare_threshold,
        )

    async def restore(self, conn: AsyncConnection[Any]) -> None:
        # psycopg sends isolation_level/read_only/deferrable with every BEGIN, also of the
        # store's own transactions: they must not outlive the loan.
        if conn.autocommit != self.autocommit:
            await conn.set_autocommit(self.autocommit)
        if conn.isolation_level != self.isolation_level:
            await conn.set_isolation_level(self.isolation_level)
        if conn.read_only != self.read_only:
            await conn.set_read_only(self.read_only)
        if conn.deferrable != self.deferrable:
            await conn.set_deferrable(self.deferrable)
        conn.row_factory = self.row_factory
        conn.prepare_threshold = self.prepare_threshold


class OwnedConnection(AsyncConnection[Any]):
    """A connection of a pool the driver made. The driver's marks live on it, and a cursor
    for each use, made once: a cursor per statement costs more Python than sending the
    statement does (every store call and the two ends of a lent transaction use one)."""

    # In a transaction() block the driver opened itself (user code holds it).
    lent_transaction = False
    # Its session was reset with the COMMIT of that block: lent() owes no reset.
    reset_by_commit = False
    _rows: AsyncCursor[dict[str, Any]] | None = None
    _plain: AsyncCursor[Any] | None = None

    def rows_cursor(self) -> AsyncCursor[dict[str, Any]]:
        """The driver's cursor for statements whose rows it reads (as dicts)."""
        if self._rows is None:
            self._rows = self.cursor(row_factory=dict_row)
        return self._rows

    def plain_cursor(self) -> AsyncCursor[Any]:
        """The driver's cursor for scripts (no rows read)."""
        if self._plain is None:
            self._plain = self.cursor()
        return self._plain

    async def wait(
        self, gen: PQGen[RV], interval: float = WAIT_INTERVAL, timeout: float | None = None
    ) -> RV:
        """psycopg's wait for ``gen``'s I/O, ended at the web request's deadline
        (``skiplock._compat.request_deadline``): a server that does not answer in time gets the
        session closed (its state is unknown; the pool replaces it) and the call raises
        DatabaseUnavailableError. Without a deadline (workers) psycopg's own wait."""
        left = remaining()
        # psycopg < 3.3 has no ``timeout`` (its own callers pass none there).
        extra = () if timeout is None else (timeout,)
        if left is None:
            return await super().wait(gen, interval, *extra)
        if left <= 0:  # nothing sent: an idle session stays usable
            if not idle(self):
                # Inside a transaction: closed, so that nothing waits on it to roll back
                # (psycopg, the pool and the store skip a closed connection).
                self.pgconn.finish()
            raise deadline_error()
        try:
            gen = until_deadline(gen, time.monotonic() + left)
            return await super().wait(gen, min(interval, left), *extra)
        except DeadlineExpired:
            self.pgconn.finish()
            raise deadline_error("no answer to a statement") from None


async def rows_of(
    cur: AsyncCursor[dict[str, Any]], query: Query, params: Mapping[str, Any]
) -> Rows:
    await cur.execute(query.text, params)
    if cur.description is None:
        return []
    return await cur.fetchall()


async def run_script(cur: AsyncCursor[Any], text: str) -> None:
    # A script may hold several statements; without parameters psycopg sends it as is
    # (no placeholder parsing, no prepared statement).
    await cur.execute(text, prepare=False)


class OwnedPool(AsyncConnectionPool[Any]):
    """The pool a driver makes from a connection string: psycopg_pool's, with two changes
    for a server that goes away (see docs/health.md, "When the database goes away").

    - Reconnection waits are capped (:class:`~._connections.CappedBackoff`): the pool
      reconnects within about a second of the server accepting connections again.
    - A failed connection attempt (the server down or restarting, or refusing the login:
      :func:`~._connections.is_unreachable`) fails every caller waiting for a connection
      at once (DatabaseUnavailableError), instead of letting them wait the pool's
      ``timeout`` for a connection that cannot come; and :attr:`unreachable` says why
      until an attempt succeeds. A caller that comes meanwhile waits for the next
      attempt (at most about a second).
    """

    #: Why the last connection attempt failed, while the server cannot be reached.
    unreachable: str | None = None

    async def _connect(self, timeout: float | None = None) -> AsyncConnection[Any]:
        try:
            conn: AsyncConnection[Any] = await super()._connect(timeout)
        except Exception as exc:
            if is_unreachable(exc):
                self.unreachable = " ".join(str(exc).split()) or type(exc).__name__
                await self._fail_waiting()
            raise
        self.unreachable = None
        return conn

    async def _fail_waiting(self) -> None:
        # As psycopg_pool's close() fails its waiting clients.
        async with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        for client in waiting:
            await client.fail(DatabaseUnavailableError.unreachable(self.unreachable))

    async def _add_connection(
        self, attempt: AttemptWithBackoff | None, growing: bool = False
    ) -> None:
        await super()._add_connection(
            attempt or CappedBackoff(timeout=self.reconnect_timeout), growing
        )
