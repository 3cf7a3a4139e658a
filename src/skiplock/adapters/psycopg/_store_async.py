"""The psycopg 3 job store (async source; ``_store.py`` is generated from it)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from skiplock._compat_async import Lock
from skiplock.adapters._pg._migrate import (
    Rows,
    SchemaStatus,
    Step,
    check_version,
    status_steps,
)
from skiplock.adapters._pg._ops import (
    claim_needs_transaction,
    claim_steps,
    enqueue_needs_transaction,
    enqueue_steps,
    purge_batch_steps,
    recover_steps,
)
from skiplock.adapters._pg._rows import (
    COPY_COLUMNS,
    apply_params,
    complete_params,
    copy_rows,
    filter_params,
    job_from_row,
    page_params,
    state_count_from_row,
    utc,
    worker_params,
)
from skiplock.adapters._pg._sql import Query, channel_name, queries
from skiplock.core import (
    ClaimRequest,
    Completion,
    EnqueueRequest,
    EnqueueResult,
    Event,
    Job,
    JobFilter,
    Page,
    StateCount,
    StoreError,
    ValidationError,
    WorkerInfo,
    validate_identifier,
)

from ._driver_async import apply_migrations, execute, read_status, run_steps
from ._notify_async import AsyncPsycopgNotifier

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator, Mapping, Sequence

T = TypeVar("T")

#: Batches at least this large (and without idempotency keys) are enqueued with COPY.
COPY_THRESHOLD = 500

#: Events an operator may apply through :meth:`AsyncPsycopgJobStore.apply`.
OPERATOR_EVENTS = frozenset({Event.CANCEL, Event.MARK_FAILED, Event.REPLAY})


class AsyncPsycopgJobStore:
    """Jobs in PostgreSQL through psycopg 3 and psycopg_pool.

    ``conninfo_or_pool`` is a connection string (the store creates, owns and closes its
    pool of ``min_size``..``max_size`` autocommit connections) or an
    :class:`~psycopg_pool.AsyncConnectionPool` the caller owns (it must be open; the store
    never closes it). ``statement_timeout`` bounds every statement on an owned pool.

    ``timeout`` bounds the wait for a pooled connection (and for the first connection:
    an unreachable server raises StoreError).

    ``connection=`` (R0) takes a psycopg ``AsyncConnection`` (or what :meth:`transaction`
    yields); the operation runs in that connection's open transaction and never commits
    or rolls back. A connection in autocommit mode outside a ``transaction()`` block has
    no open transaction: each statement then commits on its own.

    Heartbeats and worker registration use one dedicated connection, so a busy job pool
    never starves them. The first use checks the schema version (SchemaVersionError on an
    older schema: run ``skiplock schema apply``).
    """

    def __init__(
        self,
        conninfo_or_pool: str | AsyncConnectionPool[Any],
        *,
        schema: str = "skiplock",
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout: timedelta | float | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._schema = validate_identifier(schema)
        self._q: Mapping[str, Query] = queries(schema, "pyformat")
        self._copy_sql = sql.SQL("COPY {}.jobs ({}) FROM STDIN").format(
            sql.Identifier(schema), sql.SQL(", ").join(map(sql.Identifier, COPY_COLUMNS))
        )
        self._timeout_ms = _milliseconds(statement_timeout)
        self._timeout = timeout
        self._connect_kwargs: dict[str, Any] = {}
        self._conninfo: str | None
        self._pool: AsyncConnectionPool[Any]
        given: object = conninfo_or_pool  # checked at runtime: callers may pass anything
        if isinstance(given, str):
            self._conninfo = given
            self._pool = AsyncConnectionPool(
                given,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True},
                configure=self._configure if self._timeout_ms is not None else None,
                open=False,
                timeout=timeout,
                name=f"skiplock-{schema}",
            )
            self._owns_pool = True
        elif isinstance(given, AsyncConnectionPool):
            self._pool = given
            pool_conninfo = given.conninfo
            self._conninfo = pool_conninfo if isinstance(pool_conninfo, str) else None
            if isinstance(given.kwargs, dict):
                self._connect_kwargs = dict(given.kwargs)
            self._owns_pool = False
        else:
            expected = AsyncConnectionPool.__name__
            raise TypeError(
                f"conninfo_or_pool must be a connection string or a {expected}, "
                f"got {type(given).__name__}"
            )
        self._lock = Lock()
        self._pool_ready = not self._owns_pool
        self._schema_checked = False
        self._closed = False
        self._aux: AsyncConnection[Any] | None = None
        self._aux_lock = Lock()

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the tables."""
        return self._schema

    @property
    def channel(self) -> str:
        """The NOTIFY channel the trigger signals."""
        return channel_name(self._schema)

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool (owned or the caller's)."""
        return self._pool

    # ---- lifecycle ----------------------------------------------------------------

    async def _configure(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            "SELECT set_config('statement_timeout', %s, false)", [f"{self._timeout_ms}ms"]
        )

    async def open(self) -> None:
        """Open the pool (if owned) and check the schema version. Idempotent.

        Called on first use; call it explicitly to fail fast at startup.
        """
        await self._ensure_pool()
        await self._ensure_schema(None)

    # Plain reads through methods: the double-checked flags below change while a task
    # waits for the lock (a type checker would otherwise assume they cannot).
    def _is_pool_ready(self) -> bool:
        return self._pool_ready

    def _is_schema_checked(self) -> bool:
        return self._schema_checked

    async def _ensure_pool(self) -> None:
        if self._is_pool_ready():
            return
        async with self._lock:
            if self._is_pool_ready():
                return
            if self._closed:
                raise RuntimeError("the store is closed")
            # No wait=True: a pool that cannot fill in time closes for good, while a
            # worker should survive a database that comes up a little later.
            await self._pool.open()
            self._pool_ready = True

    async def _ensure_schema(self, conn: AsyncConnection[Any] | None) -> None:
        if self._is_schema_checked():
            return
        async with self._lock:
            if self._is_schema_checked():
                return
            if conn is None:
                async with self._pool_connection() as own:
                    status = await run_steps(own, status_steps(self._schema))
            else:
                status = await run_steps(conn, status_steps(self._schema))
            check_version(status)
            self._schema_checked = True

    async def check_schema(self) -> SchemaStatus:
        """The schema's migration status; raises SchemaVersionError if it is older."""
        status = await self.schema_status()
        check_version(status)
        return status

    async def schema_status(self) -> SchemaStatus:
        """Applied and pending migrations (never raises for an old schema)."""
        await self._ensure_pool()
        async with self._pool_connection() as conn:
            return await read_status(conn, self._schema)

    async def apply_schema(self) -> list[str]:
        """Apply pending migrations (safe to run concurrently); returns the names applied."""
        await self._ensure_pool()
        async with self._pool_connection() as conn:
            applied = await apply_migrations(conn, self._schema)
        self._schema_checked = False
        return applied

    async def close(self) -> None:
        """Close the heartbeat connection and the pool if the store owns it."""
        self._closed = True
        async with self._aux_lock:
            if self._aux is not None:
                await self._aux.close()
                self._aux = None
        if self._owns_pool:
            await self._pool.close()
            self._pool_ready = False

    async def __aenter__(self) -> AsyncPsycopgJobStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---- connections ----------------------------------------------------------------

    def _caller_connection(self, connection: Any) -> AsyncConnection[Any]:
        if isinstance(connection, AsyncConnection):
            return connection
        expected = AsyncConnection.__name__
        raise TypeError(
            f"connection= must be a psycopg {expected} (what transaction() yields), "
            f"got {type(connection).__name__}"
        )

    @asynccontextmanager
    async def _pool_connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        try:
            conn = await self._pool.getconn()
        except PoolTimeout as exc:
            raise StoreError(f"no PostgreSQL connection within {self._timeout} s: {exc}") from exc
        try:
            async with conn:  # commit or roll back like pool.connection()
                yield conn
        finally:
            await self._pool.putconn(conn)

    @asynccontextmanager
    async def _pooled(self) -> AsyncIterator[AsyncConnection[Any]]:
        await self._ensure_pool()
        await self._ensure_schema(None)
        async with self._pool_connection() as conn:
            yield conn

    @asynccontextmanager
    async def _use(
        self, connection: Any, *, atomic: bool = False
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """The caller's connection as is, or a pooled one (in a transaction if ``atomic``)."""
        if connection is not None:
            conn = self._caller_connection(connection)
            await self._ensure_schema(conn)
            yield conn
        elif atomic:
            async with self._pooled() as conn, conn.transaction():
                yield conn
        else:
            async with self._pooled() as conn:
                yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection inside a transaction: commit on exit, rollback on error."""
        async with self._pooled() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection in autocommit mode (e.g. CREATE INDEX CONCURRENTLY)."""
        async with self._pooled() as conn:
            if conn.autocommit:
                yield conn
                return
            await conn.set_autocommit(True)
            try:
                yield conn
            finally:
                await conn.set_autocommit(False)

    async def _run(self, conn: AsyncConnection[Any], steps: Generator[Step, Rows, T]) -> T:
        return await run_steps(conn, steps)

    async def _execute(
        self, conn: AsyncConnection[Any], name: str, params: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        return await execute(conn, self._q[name], params)

    # ---- jobs -------------------------------------------------------------------------

    async def now(self) -> datetime:
        """The database's ``now()``."""
        async with self._pooled() as conn:
            rows = await self._execute(conn, "now", {})
        return utc(rows[0]["now"])

    async def enqueue(
        self, requests: Sequence[EnqueueRequest], *, connection: Any = None
    ) -> list[EnqueueResult]:
        """Insert jobs in one multi-row statement; existing idempotency keys resolve.

        Large batches without idempotency keys go through COPY (several times faster).
        """
        if not requests:
            return []
        if len(requests) >= COPY_THRESHOLD and not enqueue_needs_transaction(requests):
            async with self._use(connection, atomic=True) as conn:
                return await self._copy_enqueue(conn, requests)
        atomic = enqueue_needs_transaction(requests)
        async with self._use(connection, atomic=atomic) as conn:
            return await self._run(conn, enqueue_steps(self._schema, requests))

    async def _copy_enqueue(
        self, conn: AsyncConnection[Any], requests: Sequence[EnqueueRequest]
    ) -> list[EnqueueResult]:
        # Ids are reserved first so results follow the request order; due times are
        # computed from the transaction's now(), the value column defaults would use.
        [reserved] = await self._execute(conn, "reserve_ids", {"n": len(requests)})
        ids: list[int] = reserved["ids"]
        now: datetime = reserved["now"]
        async with conn.cursor() as cur, cur.copy(self._copy_sql) as copy:
            for job_id, row in zip(ids, copy_rows(requests, now), strict=True):
                await copy.write_row((job_id, *row))
        return [EnqueueResult(id=job_id, created=True) for job_id in ids]

    async def claim(self, request: ClaimRequest) -> list[Job]:
        """Claim due jobs in one statement (a transaction with advisory locks for kinds
        with a cluster limit)."""
        if request.limit <= 0:
            return []
        atomic = claim_needs_transaction(request)
        async with self._use(None, atomic=atomic) as conn:
            return await self._run(conn, claim_steps(self._schema, request))

    async def complete(
        self, completions: Sequence[Completion], *, connection: Any = None
    ) -> list[bool]:
        """Record outcomes in one fenced statement; False where the lease was lost."""
        if not completions:
            return []
        async with self._use(connection) as conn:
            rows = await self._execute(conn, "complete", complete_params(completions))
        applied = {int(r["ord"]) for r in rows}
        return [i + 1 in applied for i in range(len(completions))]

    async def get(self, job_id: int, *, connection: Any = None) -> Job | None:
        """One job, or None."""
        async with self._use(connection) as conn:
            rows = await self._execute(conn, "get_job", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    async def list_jobs(self, filter: JobFilter, page: Page) -> list[Job]:
        """Jobs matching ``filter``, ordered by id, one keyset page."""
        name = "list_jobs_desc" if page.descending else "list_jobs_asc"
        async with self._use(None) as conn:
            rows = await self._execute(conn, name, filter_params(filter) | page_params(page))
        return [job_from_row(r) for r in rows]

    async def counts(self) -> list[StateCount]:
        """Jobs per (state, kind, tenant)."""
        async with self._use(None) as conn:
            rows = await self._execute(conn, "counts", {})
        return [state_count_from_row(r) for r in rows]

    async def apply(
        self,
        filter: JobFilter,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
    ) -> list[int]:
        """Operator transition of every matching job whose state allows ``event``."""
        if event not in OPERATOR_EVENTS:
            raise ValidationError(
                f"{event.value!r} is not an operator event "
                f"(allowed: {', '.join(sorted(e.value for e in OPERATOR_EVENTS))})"
            )
        params = filter_params(filter) | apply_params(event, reset_attempts=reset_attempts)
        async with self._use(connection) as conn:
            rows = await self._execute(conn, "apply", params)
        return sorted(int(r["id"]) for r in rows)

    async def delete(self, filter: JobFilter, *, connection: Any = None) -> list[Job]:
        """Delete matching jobs that are not running; returns them."""
        async with self._use(connection) as conn:
            rows = await self._execute(conn, "delete", filter_params(filter))
        return sorted((job_from_row(r) for r in rows), key=lambda j: j.id)

    # ---- workers and maintenance ------------------------------------------------------

    async def _aux_execute(self, name: str, params: Mapping[str, Any]) -> None:
        """Run on the dedicated worker connection (reconnecting once if it broke)."""
        if self._conninfo is None:
            async with self._pooled() as conn:
                await self._execute(conn, name, params)
            return
        # A worker registers first: refuse an old schema before anything runs.
        await self._ensure_pool()
        await self._ensure_schema(None)
        async with self._aux_lock:
            for attempt in range(2):
                if self._aux is None or self._aux.closed:
                    self._aux = await AsyncConnection.connect(
                        self._conninfo, **(self._connect_kwargs | {"autocommit": True})
                    )
                try:
                    await self._execute(self._aux, name, params)
                    return
                except psycopg.OperationalError:
                    await self._aux.close()
                    self._aux = None
                    if attempt:
                        raise

    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert or refresh the worker's row (heartbeat = the database's now)."""
        await self._aux_execute("register_worker", worker_params(info))

    async def heartbeat(self, worker_id: str) -> None:
        """Refresh the worker's heartbeat to the database's now."""
        await self._aux_execute("heartbeat", {"id": worker_id})

    async def unregister_worker(self, worker_id: str) -> None:
        """Remove the worker's row."""
        await self._aux_execute("unregister_worker", {"id": worker_id})

    async def recover_stale(
        self, *, default_ttl: timedelta, ttls: Mapping[str, timedelta]
    ) -> list[int]:
        """Recover claims of workers that stopped heart-beating; [] if another node is
        running the recovery right now."""
        async with self._use(None, atomic=True) as conn:
            return await self._run(conn, recover_steps(self._schema, default_ttl, ttls))

    async def purge(self, *, older_than: timedelta, archive: bool, batch_size: int) -> int:
        """Delete (or archive) old succeeded jobs in batches of ``batch_size``, one
        transaction each; 0 if another node is purging right now."""
        if batch_size < 1:
            raise ValidationError(f"batch_size must be >= 1, got {batch_size}")
        total = 0
        while True:
            async with self._use(None, atomic=True) as conn:
                count = await self._run(
                    conn,
                    purge_batch_steps(
                        self._schema,
                        older_than=older_than,
                        archive=archive,
                        batch_size=batch_size,
                    ),
                )
            if count is None:
                return total
            total += count
            if count < batch_size:
                return total

    def notifier(self) -> AsyncPsycopgNotifier | None:
        """A LISTEN notifier on its own connection (None if the pool's conninfo is not a
        string, e.g. a callable: then workers poll)."""
        if self._conninfo is None:
            return None
        return AsyncPsycopgNotifier(
            self._conninfo, channel=self.channel, connect_kwargs=self._connect_kwargs
        )


def _milliseconds(value: timedelta | float | None) -> int | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise ValidationError(f"statement_timeout must be > 0, got {value!r}")
    return max(1, round(seconds * 1000))
