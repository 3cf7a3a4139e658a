"""What a PostgreSQL job store needs from a driver (async source; twin generated).

:class:`~._store_async.AsyncPgJobStore` is written once over an :class:`AsyncPgDriver`:
psycopg, asyncpg and SQLAlchemy each supply one (composition, as httpx's transports), and
their public store classes only build it. Imports no driver.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import asynccontextmanager
from threading import Lock
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from ._migrate import Rows
    from ._sql import Query, Style

#: The driver's connection type.
C = TypeVar("C")
#: What ``transaction()`` yields to user code (the connection, or e.g. an ORM session).
TX = TypeVar("TX")

#: Undoes what user code may leave in the session of a lent connection (``SET``, ``SET
#: ROLE``, ``SET SESSION AUTHORIZATION``, cursors, ``LISTEN``, session advisory locks,
#: temporary tables, sequence caches) in one round trip: ``DISCARD ALL`` without its
#: ``DEALLOCATE ALL`` and ``DISCARD PLANS``, so the drivers' prepared statements (the
#: store's hot queries) survive. Settings return to the session's defaults, those of the
#: connection string included. ``RESET ALL`` alone keeps a ``SET ROLE``.
SESSION_RESET = (
    "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; "
    "SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES"
)


class KeptSource(Protocol[C]):
    """Where a :class:`KeptConnection` comes from and goes back to (the driver)."""

    async def checkout(self) -> C:
        """A connection from the pool (StoreError if none comes in time)."""
        ...

    async def give_back(self, conn: C) -> None:
        """Return ``conn`` to the pool (rolled back if in a transaction)."""
        ...

    def reusable(self, conn: C) -> bool:
        """After a statement: whether ``conn`` may be kept (open, outside a transaction)."""
        ...

    def ended(self, conn: C) -> bool:
        """Before a statement: whether the server ended the kept ``conn`` meanwhile."""
        ...


class KeptConnection(Generic[C]):
    """One connection of a pool the driver made, kept for the store's own single
    statements outside a transaction and never lent to user code: checking a connection
    out of the pool and back for each statement was about a tenth (psycopg) to a third
    (asyncpg) of a single enqueue's client CPU.

    One statement uses it at a time (a lock taken without waiting: a statement that finds
    it busy uses the pool, as do all statements once :meth:`close` ran). It goes back to
    the pool (which resets or replaces it) when a statement on it raised or was
    cancelled, or left it not ``usable`` (closed, in a transaction), and when a kept one
    is found not ``usable`` before a statement (the server ended it): the next statement
    keeps another. ``source`` (the driver) checks connections out and gives them back.
    """

    def __init__(self, source: KeptSource[C]) -> None:
        self._source = source
        self._lock = Lock()
        self._kept: C | None = None
        self._closed = False

    @property
    def connection(self) -> C | None:
        """The connection kept now (None: none, e.g. after a failed statement)."""
        return self._kept

    @asynccontextmanager
    async def use(self, pooled: Callable[[], AbstractAsyncContextManager[C]]) -> AsyncIterator[C]:
        """The kept connection, or one from ``pooled()`` while it is busy or closed."""
        if self._closed or not self._lock.acquire(blocking=False):
            async with pooled() as conn:
                yield conn
            return
        try:
            kept = self._kept
            if kept is not None and self._source.ended(kept):
                self._kept = None
                await self._source.give_back(kept)
                kept = None
            if kept is None:
                kept = await self._source.checkout()
                self._kept = kept
            keep = False
            try:
                yield kept
                keep = self._source.reusable(kept)
            finally:
                if not keep or self._closed:
                    self._kept = None
                    await self._source.give_back(kept)
        finally:
            self._lock.release()

    async def close(self) -> None:
        """Give the kept connection back; from now on every statement uses the pool (a
        statement on it now gives it back when it ends)."""
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                conn, self._kept = self._kept, None
                if conn is not None:
                    await self._source.give_back(conn)
            finally:
                self._lock.release()


class AsyncPgDriver(ABC, Generic[C, TX]):
    """Connections and the few calls that differ between PostgreSQL drivers.

    A driver owns the connection source (a pool it made or the caller's) and knows its
    driver's calls; everything else -- the port methods, the caller's connection rules,
    the bookkeeping connection, statement timeouts, migrations -- lives in the store.
    """

    #: Parameter style of the driver's queries (see :func:`~._sql.convert`).
    style: ClassVar[Style]
    #: Whether session settings (``statement_timeout`` of ``autocommit()``) may be set on
    #: a pooled connection; not behind PgBouncer, where they would outlive the block.
    session_settings: bool = True

    # ---- the connection source ----------------------------------------------------------

    def is_open(self) -> bool:
        """Whether :meth:`acquire` works without :meth:`open` (default: always)."""
        return True

    async def open(self) -> None:
        """Make the pool usable; the store calls it once, under a lock, until
        :meth:`is_open`. Raise StoreError if the server cannot be reached."""

    async def close(self) -> None:
        """Release what the driver owns (an owned pool); a caller's pool stays open."""

    @abstractmethod
    def acquire(self) -> AbstractAsyncContextManager[C]:
        """A pooled connection outside a transaction (StoreError if none comes in time)."""

    def acquire_autocommit(self) -> AbstractAsyncContextManager[C]:
        """A pooled connection for single statements (default: :meth:`acquire`)."""
        return self.acquire()

    def acquire_statement(self) -> AbstractAsyncContextManager[C]:
        """A connection for the store's own statements outside a transaction, never lent
        to user code (default: :meth:`acquire_autocommit`)."""
        return self.acquire_autocommit()

    @asynccontextmanager
    async def lent(self, conn: C, *, autocommit: bool) -> AsyncIterator[None]:
        """Wrap the time a pooled ``conn`` is lent to user code (``transaction()`` or, if
        ``autocommit``, ``autocommit()``): prepare it, and clean up what user code may
        have left before it goes back. Default: nothing to do."""
        yield

    @abstractmethod
    async def connect(self) -> C | None:
        """A dedicated autocommit connection for the worker bookkeeping (heartbeats), or
        None when there is no way to open one outside the pool (a pooled one is used)."""

    @abstractmethod
    async def disconnect(self, conn: C, *, broken: bool) -> None:
        """Release a connection from :meth:`connect` (``broken``: never wait for it)."""

    @abstractmethod
    def is_closed(self, conn: C) -> bool:
        """Whether a connection from :meth:`connect` is known to be unusable."""

    @abstractmethod
    def is_disconnect(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the connection is gone (reconnect), not a failed query:
        also a server that answers read-only (SQLSTATE 25006: a demoted primary, or a
        standby reached through a DSN that no longer points at the primary)."""

    async def discard(self, conn: C) -> None:
        """Close a pooled ``conn`` after :meth:`is_disconnect` said so, before it goes
        back: the pool replaces it with a new connection (through a multi-host DSN's
        ``target_session_attrs=read-write``, to the primary), where a connection to a
        server answering read-only would otherwise be handed out again. Default:
        nothing (the driver's pool tells by itself)."""

    # ---- transactions -------------------------------------------------------------------

    @abstractmethod
    def begin(self, conn: C) -> AbstractAsyncContextManager[Any]:
        """A transaction on ``conn`` (a pooled connection, or the caller's when
        :meth:`commits_each_statement`): commit on exit, roll back on error."""

    @abstractmethod
    def transaction(self, conn: C) -> AbstractAsyncContextManager[TX]:
        """A transaction on the pooled ``conn`` and the handle ``transaction()`` yields."""

    @abstractmethod
    async def adopt(self, connection: Any) -> C:
        """The driver connection behind a caller's ``connection=`` (TypeError if it is
        not one this driver takes)."""

    @abstractmethod
    def commits_each_statement(self, conn: C) -> bool:
        """True if no transaction is open on the caller's ``conn`` and each statement
        would commit on its own (autocommit mode, outside a transaction block)."""

    # ---- statements ---------------------------------------------------------------------

    @abstractmethod
    async def fetch(self, conn: C, query: Query, params: Mapping[str, Any]) -> Rows:
        """Run one converted query; its rows as dicts (empty when it returns none)."""

    @abstractmethod
    async def script(self, conn: C, text: str) -> None:
        """Run a parameterless script of one or more statements."""

    @abstractmethod
    async def copy(
        self,
        conn: C,
        schema: str,
        table: str,
        columns: Sequence[str],
        rows: Iterable[tuple[Any, ...]],
    ) -> None:
        """COPY ``rows`` (read once) into ``schema.table`` on ``conn``."""
