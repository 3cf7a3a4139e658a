"""What a PostgreSQL job store needs from a driver (async source; twin generated).

:class:`~._store_async.AsyncPgJobStore` is written once over an :class:`AsyncPgDriver`:
psycopg, asyncpg and SQLAlchemy each supply one (composition, as httpx's transports), and
their public store classes only build it. Imports no driver.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
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
        """Whether ``exc`` means the connection is gone (reconnect), not a failed query."""

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
