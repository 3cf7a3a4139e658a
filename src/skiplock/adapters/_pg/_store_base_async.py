"""The base of the one PostgreSQL job store (async source; twin generated).

:class:`AsyncPgStoreBase` holds what every role of :class:`~._store_async.AsyncPgJobStore`
runs on: the driver and its connections (pooled, the caller's ``connection=``, operator
reads under ``read_timeout``), the audited change (J10), statement timeouts, the
lifecycle (open, close) and the schema (its check, status and migrations). The role
mixins (one module per role, listed in ``_store_async.py``) implement the port's methods
over it. Imports no driver.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from skiplock._compat import no_deadline
from skiplock._compat_async import Lock, held
from skiplock.core import DatabaseUnavailableError, ValidationError, validate_identifier

from ._driver_async import TX, C
from ._indexes import (
    IndexState,
    add_index_steps,
    drop_index_steps,
    index_status_steps,
    search_index,
)
from ._migrate import Progress, Rows, SchemaStatus, Step, apply_steps, check_version, status_steps
from ._rows import AuditNote
from ._sql import Query, channel_name, convert_cached, queries

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator, Mapping

    from skiplock.ports import AsyncAudit

    from ._driver_async import AsyncPgDriver

T = TypeVar("T")

# An audit sink runs behind a savepoint where its failure must not take the transaction
# with it: a worker's change stands, a caller's change in the caller's transaction is
# undone back to where the call began (J10).
_SAVEPOINT = "SAVEPOINT skiplock_audit"
_RELEASE = "RELEASE SAVEPOINT skiplock_audit"
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT skiplock_audit; RELEASE SAVEPOINT skiplock_audit"


#: The default connect timeout (seconds) of a store's own connections (``connect_timeout``
#: of the psycopg and asyncpg stores).
CONNECT_TIMEOUT = 5.0

#: The default statement timeout (seconds) of the operator reads on the store's own
#: connections (``read_timeout`` of the stores).
READ_TIMEOUT = 10.0

#: SQLSTATE of a statement cancelled by ``statement_timeout`` (or pg_cancel_backend).
_QUERY_CANCELED = "57014"


def is_statement_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver's error, or SQLAlchemy's wrapping one) is a cancelled
    statement (SQLSTATE 57014)."""
    seen: BaseException | None = exc
    for _ in range(4):  # the error, SQLAlchemy's ``orig``, their causes
        if seen is None:
            return False
        if getattr(seen, "sqlstate", None) == _QUERY_CANCELED:
            return True
        orig = getattr(seen, "orig", None)
        seen = orig if isinstance(orig, BaseException) else seen.__cause__
    return False


def statement_timeout_ms(value: timedelta | float | None) -> int | None:
    """A ``statement_timeout`` argument (timedelta or seconds) in whole milliseconds."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise ValidationError(f"statement_timeout must be > 0, got {value!r}")
    return max(1, round(seconds * 1000))


class AsyncPgStoreBase(Generic[C, TX]):
    """What every role of a PostgreSQL job store runs on, written once over a driver:
    the connections, the caller's ``connection=``, audits, the schema, open and close.

    ``C`` is the driver's connection type, ``TX`` what ``transaction()`` yields.
    """

    def __init__(
        self,
        driver: AsyncPgDriver[C, TX],
        *,
        schema: str,
        read_timeout: timedelta | float | None = READ_TIMEOUT,
    ) -> None:
        self._driver = driver
        self._read_timeout_ms = statement_timeout_ms(read_timeout)
        self._schema = validate_identifier(schema)
        self._q: Mapping[str, Query] = queries(self._schema, driver.style)
        self._open_lock = Lock()
        self._closed = False
        self._schema_lock = Lock()
        self._schema_checked = False
        # The schema's latest applied migration, once checked (for __repr__, the logs).
        self._version: str | None = None
        self._aux: C | None = None
        self._aux_lock = Lock()

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the tables."""
        return self._schema

    def __repr__(self) -> str:
        # No DSN: it may hold a password. The version is known once the schema was checked.
        version = "" if self._version is None else f", version={self._version!r}"
        return f"{type(self).__name__}(schema={self._schema!r}{version})"

    @property
    def channel(self) -> str:
        """The NOTIFY channel the trigger signals."""
        return channel_name(self._schema)

    # ---- shared plumbing ------------------------------------------------------------------

    async def _run(self, conn: C, steps: Generator[Step, Rows, T]) -> T:
        """Drive a step generator on ``conn`` (the caller decides about the transaction)."""
        driver = self._driver
        try:
            step = next(steps)
            while True:
                if step.params is None:
                    await driver.script(conn, step.sql)
                    rows: Rows = []
                else:
                    query = convert_cached(step.sql, driver.style)
                    rows = await driver.fetch(conn, query, step.params)
                step = steps.send(rows)
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def _execute(self, conn: C, name: str, params: Mapping[str, Any]) -> Rows:
        return await self._driver.fetch(conn, self._q[name], params)

    # Plain reads through methods: the flags change while a task waits for a lock (a type
    # checker would otherwise assume they cannot).
    def _is_schema_checked(self) -> bool:
        return self._schema_checked

    def _is_closed(self) -> bool:
        return self._closed

    async def _open_pool(self) -> None:
        if self._is_closed():
            raise RuntimeError("the store is closed")
        if self._driver.is_open():
            return
        async with self._open_lock:
            if self._is_closed():
                raise RuntimeError("the store is closed")
            if not self._driver.is_open():
                # A pool opened by a web request outlives it: its tasks must not
                # inherit the request's deadline.
                with no_deadline():
                    await self._driver.open()

    async def _ensure_schema(self, conn: C | None) -> None:
        """Refuse a schema older than the code (SchemaVersionError), once per store."""
        if self._is_schema_checked():
            return
        async with held(self._schema_lock):
            if self._is_schema_checked():
                return
            if conn is None:
                async with self._driver.acquire() as own:
                    status = await self._run(own, status_steps(self._schema))
            else:
                status = await self._run(conn, status_steps(self._schema))
            check_version(status)
            self._version = status.applied[-1] if status.applied else None
            self._schema_checked = True

    def _raise_if_lost(self, exc: Exception) -> None:
        """Raise StoreError (from ``exc``) if ``exc`` says a connection of the store's own
        was lost: the store's fault, not the driver's exception. Other errors (a
        constraint, a timeout) the caller re-raises unchanged."""
        if self._driver.is_disconnect(exc):
            raise DatabaseUnavailableError(f"lost the PostgreSQL connection: {exc}") from exc

    async def _discard_if_lost(self, conn: C, exc: Exception) -> None:
        """:meth:`_raise_if_lost` for a pooled ``conn``, which is discarded first (the
        pool opens another: after a failover, to the new primary)."""
        if self._driver.is_disconnect(exc):
            await self._driver.discard(conn)
            raise DatabaseUnavailableError(f"lost the PostgreSQL connection: {exc}") from exc

    @asynccontextmanager
    async def _lost_as_store_error(self) -> AsyncIterator[None]:
        """:meth:`_raise_if_lost` for the block."""
        try:
            yield
        except Exception as exc:
            self._raise_if_lost(exc)
            raise

    async def _ready(self, check: bool) -> None:
        """The pool open and, if ``check``, the schema checked (each once per store)."""
        await self._open_pool()
        if check:
            await self._ensure_schema(None)

    @asynccontextmanager
    async def _pooled(self, *, autocommit: bool = False, check: bool = True) -> AsyncIterator[C]:
        await self._ready(check)
        driver = self._driver
        async with driver.acquire_autocommit() if autocommit else driver.acquire() as conn:
            yield conn

    @asynccontextmanager
    async def _use(
        self, connection: Any, *, atomic: bool = False, check: bool = True
    ) -> AsyncIterator[C]:
        """The caller's connection (R0: never committed here) or a pooled one, in a
        transaction if ``atomic``; schema checked either way unless not ``check``.

        On a caller's connection that commits each statement (autocommit, no transaction
        open) an ``atomic`` operation opens a short transaction of its own: it is all or
        nothing on every driver. A transaction the caller opened is used as is. A pooled
        connection that is lost raises StoreError; the caller's raises the driver's error.
        """
        async with self._scoped(connection, atomic=atomic, check=check) as (conn, _):
            yield conn

    @asynccontextmanager
    async def _scoped(
        self, connection: Any, *, atomic: bool = False, check: bool = True
    ) -> AsyncIterator[tuple[C, bool]]:
        """:meth:`_use`, yielding also whether the connection is in a transaction the
        caller opened (which the store must neither commit nor roll back)."""
        driver = self._driver
        if connection is not None:
            conn = await driver.adopt(connection)
            if check:
                await self._ensure_schema(conn)
            if driver.commits_each_statement(conn):
                if atomic:
                    async with driver.begin(conn):
                        yield conn, False
                else:
                    yield conn, False
            else:
                yield conn, True
        # The store's own connection: _pooled and _lost_as_store_error written out, one
        # context manager less each (every store call passes here).
        elif atomic:
            await self._ready(check)
            async with driver.acquire() as conn:
                try:
                    async with driver.begin(conn):
                        yield conn, False
                except Exception as exc:
                    await self._discard_if_lost(conn, exc)
                    raise
        else:
            await self._ready(check)
            async with driver.acquire_statement() as conn:
                try:
                    yield conn, False
                except Exception as exc:
                    await self._discard_if_lost(conn, exc)
                    raise

    @asynccontextmanager
    async def _reading(self, *, atomic: bool = False, check: bool = True) -> AsyncIterator[C]:
        """A pooled connection for an operator read (lists, counts, throughput, health):
        in a transaction whose statements stop after ``read_timeout`` (``SET LOCAL``),
        which then raise DatabaseUnavailableError. Without a ``read_timeout``,
        :meth:`_use`'s connection (in a transaction if ``atomic``)."""
        ms = self._read_timeout_ms
        if ms is None:
            async with self._use(None, atomic=atomic, check=check) as conn:
                yield conn
            return
        try:
            async with self._use(None, atomic=True, check=check) as conn:
                await self._execute(
                    conn, "set_statement_timeout", {"value": f"{ms}ms", "local": True}
                )
                yield conn
        except Exception as exc:
            if is_statement_timeout(exc):
                raise DatabaseUnavailableError(
                    f"the database did not answer within the read timeout ({ms} ms): {exc}"
                ) from exc
            raise

    @asynccontextmanager
    async def _audited(
        self, connection: Any, audit: AsyncAudit, *, kept: bool, atomic: bool = False
    ) -> AsyncIterator[tuple[C, AuditNote]]:
        """A connection for a change audited by ``audit`` (J10) and the note its
        statements collect events in.

        Without a sink the statements write the audit table themselves: the connection is
        :meth:`_use`'s. With a sink the change runs in a transaction and the sink is
        called with the events before it ends. A change that is ``kept`` (a worker's or
        maintenance's) stands if the sink raises: the sink's writes are rolled back to a
        savepoint and the error is logged. Otherwise the error propagates and the change
        is undone: the store's own transaction rolls back, the caller's goes back to a
        savepoint taken before the change (and stays usable).
        """
        note = AuditNote(actor=audit.actor, table=audit.sink is None)
        if audit.sink is None:
            async with self._use(connection, atomic=atomic) as conn:
                yield conn, note
            return
        driver = self._driver
        async with self._scoped(connection, atomic=True) as (conn, callers):
            guarded = callers and not kept
            if guarded:
                await driver.script(conn, _SAVEPOINT)
            try:
                yield conn, note
                if note.events and kept:
                    await driver.script(conn, _SAVEPOINT)
                    recorded = await audit.record_kept(note.events, conn)
                    await driver.script(conn, _RELEASE if recorded else _ROLLBACK_TO)
                elif note.events:
                    await audit.sink.record(note.events, conn)
            except Exception:
                if guarded:
                    await driver.script(conn, _ROLLBACK_TO)
                raise
            if guarded:
                await driver.script(conn, _RELEASE)

    # ---- lifecycle and schema -------------------------------------------------------------

    async def open(self) -> None:
        """Open the pool and check the schema version. Idempotent.

        Called on first use; call it explicitly to fail fast at startup.
        """
        await self._open_pool()
        await self._ensure_schema(None)

    async def close(self) -> None:
        """Close the bookkeeping connection, and the pool if the store made it. Idempotent;
        a closed store cannot be used again."""
        self._closed = True
        async with self._aux_lock:
            aux, self._aux = self._aux, None
            if aux is not None:
                await self._driver.disconnect(aux, broken=False)
        async with self._open_lock:
            await self._driver.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def check_schema(self) -> SchemaStatus:
        """The schema's migration status; raises SchemaVersionError if it is older."""
        status = await self.schema_status()
        check_version(status)
        return status

    async def schema_status(self, *, connection: Any = None) -> SchemaStatus:
        """Applied and pending migrations (never raises for an old schema).

        ``connection=``: read them on the caller's connection (as for the port methods).
        """
        async with self._use(connection, atomic=True, check=False) as conn:
            return await self._run(conn, status_steps(self._schema))

    async def apply_schema(
        self, *, connection: Any = None, progress: Progress | None = None
    ) -> list[str]:
        """Apply pending migrations (safe to run concurrently); returns the names applied.

        ``connection=``: apply them in the caller's open transaction, never committed here
        (or, on an autocommit connection, in a transaction of their own). ``progress``:
        called with a line of text as each step starts and ends (``skiplock schema apply``
        prints them).
        """
        async with self._use(connection, atomic=True, check=False) as conn:
            applied = await self._run(conn, apply_steps(self._schema, progress))
        self._schema_checked = False
        return applied

    # ---- the opt-in search indexes (docs/search.md, "The opt-in search indexes") ----------

    async def search_indexes(self, *, connection: Any = None) -> list[IndexState]:
        """Which opt-in search indexes (``payload``, ``error``) the schema has, each
        present, absent or invalid (an interrupted build), with its size."""
        async with self._use(connection, check=False) as conn:
            return await self._run(conn, index_status_steps(self._schema))

    async def add_search_index(
        self,
        name: str,
        *,
        create_extension: bool = False,
        connection: Any = None,
        progress: Progress | None = None,
    ) -> bool:
        """Build the opt-in search index ``name`` (``payload`` or ``error``) with ``CREATE
        INDEX CONCURRENTLY`` (enqueues go on) unless it exists; returns whether it was
        built. Idempotent: an index an interrupted build left invalid is built again.
        The ``error`` index needs the ``pg_trgm`` extension: StoreError naming it if it is
        missing, unless ``create_extension`` (then ``CREATE EXTENSION IF NOT EXISTS``,
        which needs the CREATE privilege on the database). ``connection=``: one in
        autocommit mode outside a transaction (ValidationError otherwise: PostgreSQL
        builds an index concurrently only there). ``progress``: told each step."""
        search_index(name)  # a bad name: before any connection
        steps = add_index_steps(
            self._schema, name, create_extension=create_extension, progress=progress
        )
        async with self._unblocked(connection) as conn:
            return await self._run(conn, steps)

    async def drop_search_index(
        self, name: str, *, connection: Any = None, progress: Progress | None = None
    ) -> bool:
        """Drop the opt-in search index ``name`` concurrently if it exists; returns
        whether one was dropped (``connection=`` as for :meth:`add_search_index`)."""
        search_index(name)
        steps = drop_index_steps(self._schema, name, progress=progress)
        async with self._unblocked(connection) as conn:
            return await self._run(conn, steps)

    @asynccontextmanager
    async def _unblocked(self, connection: Any) -> AsyncIterator[C]:
        """:meth:`_use`'s connection (schema checked), which must be outside a transaction."""
        async with self._scoped(connection) as (conn, callers):
            if callers:
                raise ValidationError(
                    "an index is built or dropped concurrently outside a transaction: pass "
                    "a connection in autocommit mode (Django: a migration with atomic = "
                    "False; Alembic: op.get_context().autocommit_block())"
                )
            yield conn

    # ---- a hook between roles -------------------------------------------------------------

    async def roll_up_counts(self) -> int:
        """The upkeep role's fold (:class:`~._store_upkeep_async.AsyncPgUpkeepRole`),
        which the reads call after finding a backlog of count deltas."""
        raise NotImplementedError
