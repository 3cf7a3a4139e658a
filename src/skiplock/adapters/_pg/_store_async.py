"""The one PostgreSQL job store, over a driver object (async source; twin generated).

:class:`AsyncPgJobStore` implements every port method, the rules for the caller's
connection, the worker-bookkeeping connection, statement timeouts, migrations and the
schema check once, over an :class:`~._driver_async.AsyncPgDriver` that supplies
connections and the few calls that differ between drivers. The public psycopg, asyncpg
and SQLAlchemy stores only build their driver. Imports no driver.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from itertools import repeat
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from skiplock._compat import no_deadline
from skiplock._compat_async import Lock, held
from skiplock.core import (
    AuditAction,
    AuditEvent,
    ClaimRequest,
    Completion,
    DatabaseUnavailableError,
    EnqueueBatch,
    EnqueueRequest,
    EnqueueResult,
    Event,
    FinishedCount,
    HealthSnapshot,
    Job,
    JobFilter,
    JobPage,
    Lease,
    NextDue,
    Page,
    StateCount,
    StoreError,
    ValidationError,
    WorkerInfo,
    check_operator_event,
    validate_identifier,
)
from skiplock.core.store import ClaimedJobs, Controls, Limit, Pause, control_event

from ._driver_async import TX, C
from ._migrate import (
    Progress,
    Rows,
    SchemaStatus,
    Step,
    apply_steps,
    check_version,
    schema_info,
    status_steps,
)
from ._ops import (
    claim_needs_transaction,
    claim_steps,
    enqueue_needs_transaction,
    enqueue_steps,
    purge_audit_batch_steps,
    purge_batch_steps,
    recover_steps,
)
from ._rows import (
    COUNTS_MIGRATION,
    RATES_MIGRATION,
    ROLLUP_BACKLOG,
    AuditNote,
    apply_params,
    audit_enqueued_params,
    audit_event_from_row,
    backlog_of,
    bucket_params,
    bucket_states,
    complete_one_params,
    complete_params,
    controls_from_rows,
    copy_rows,
    enqueued_events,
    filter_params,
    finished_count_from_row,
    health_queues_params,
    heartbeat_params,
    job_from_row,
    job_page_from_rows,
    lease_params,
    limit_from_row,
    limit_params,
    maintenance_params,
    operator_audit_params,
    orphaned_jobs_from_row,
    page_params,
    pause_from_row,
    pause_params,
    queue_sample_from_row,
    queue_stats_from_row,
    roll_up_params,
    state_counts_from_rows,
    utc,
    worker_params,
    worker_status_from_row,
)
from ._sql import Query, channel_name, convert_cached, lock_key, queries

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence

    from skiplock.core.store import QueueSample
    from skiplock.ports import AsyncAudit

    from ._driver_async import AsyncPgDriver

T = TypeVar("T")

logger = logging.getLogger("skiplock.store")

#: From this many jobs without idempotency keys, enqueue uses COPY. Below it one
#: ``INSERT ... SELECT`` of the batch sent as one JSON parameter is faster (one round trip,
#: no ids to reserve, no transaction to open); from about 5,000 jobs COPY's streaming wins.
COPY_THRESHOLD = 5000

# An audit sink runs behind a savepoint where its failure must not take the transaction
# with it: a worker's change stands, a caller's change in the caller's transaction is
# undone back to where the call began (J10).
_SAVEPOINT = "SAVEPOINT skiplock_audit"
_RELEASE = "RELEASE SAVEPOINT skiplock_audit"
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT skiplock_audit; RELEASE SAVEPOINT skiplock_audit"


def _applied(rows: Rows, n: int) -> list[bool]:
    """Per input row (1-based ``ord`` in ``rows``), whether the statement applied it."""
    applied = {int(r["ord"]) for r in rows}
    return [i + 1 in applied for i in range(n)]


def _applied_batch(rows: Rows, n: int) -> list[bool]:
    """:func:`_applied` for ``complete``'s one row of positions (``applied``)."""
    ords = rows[0]["applied"] or ()
    if len(ords) == n:  # the common case: every outcome was written
        return [True] * n
    applied = {int(o) for o in ords}
    return [i + 1 in applied for i in range(n)]


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


class AsyncPgJobStore(Generic[C, TX]):
    """Port methods of a PostgreSQL job store, written once over a driver.

    ``C`` is the driver's connection type, ``TX`` what :meth:`transaction` yields.
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
                    self._raise_if_lost(exc)
                    raise
        else:
            await self._ready(check)
            async with driver.acquire_statement() as conn:
                try:
                    yield conn, False
                except Exception as exc:
                    self._raise_if_lost(exc)
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

    # ---- the port's connections -----------------------------------------------------------

    @asynccontextmanager
    async def transaction(self, *, statement_timeout: float | None = None) -> AsyncIterator[TX]:
        """A transaction on a pooled connection: commit on exit, rollback on error. Yields
        the driver's handle (the connection; a session with SQLAlchemy).

        ``statement_timeout`` (seconds) is ``SET LOCAL`` in the transaction.
        """
        ms = statement_timeout_ms(statement_timeout)
        driver = self._driver
        async with (
            self._pooled() as conn,
            driver.lent(conn, autocommit=False),
            driver.transaction(conn) as handle,
        ):
            if ms is not None:
                await self._execute(
                    conn, "set_statement_timeout", {"value": f"{ms}ms", "local": True}
                )
            yield handle

    @asynccontextmanager
    async def autocommit(self, *, statement_timeout: float | None = None) -> AsyncIterator[C]:
        """A pooled connection outside any transaction (e.g. CREATE INDEX CONCURRENTLY).

        ``statement_timeout`` (seconds) is set on the connection for the block and the
        previous value restored before it goes back to the pool (where the driver allows
        session settings; else it is validated only).
        """
        ms = statement_timeout_ms(statement_timeout)
        driver = self._driver
        async with self._pooled(autocommit=True) as conn, driver.lent(conn, autocommit=True):
            if ms is None or not driver.session_settings:
                yield conn
                return
            [row] = await self._execute(conn, "swap_statement_timeout", {"value": f"{ms}ms"})
            try:
                yield conn
            finally:
                await self._execute(
                    conn, "set_statement_timeout", {"value": row["previous"], "local": False}
                )

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

    # ---- jobs -------------------------------------------------------------------------------

    async def now(self) -> datetime:
        """The database's ``now()``."""
        async with self._pooled() as conn, self._lost_as_store_error():
            rows = await self._execute(conn, "now", {})
        return utc(rows[0]["now"])

    async def next_due(
        self, kinds: frozenset[str] | None, tenants: frozenset[str] | None
    ) -> NextDue | None:
        """When the next pending job of ``kinds`` and ``tenants`` (None: any) that is not
        due yet falls due, on the database's clock: one bounded read (the ``next_due``
        query); None if there is none."""
        params = {
            "kinds": None if kinds is None else sorted(kinds),
            "tenants": None if tenants is None else sorted(tenants),
        }
        async with self._pooled() as conn, self._lost_as_store_error():
            rows = await self._execute(conn, "next_due", params)
        at = rows[0]["at"] if rows else None
        return None if at is None else NextDue(at=utc(at), now=utc(rows[0]["now"]))

    async def enqueue(
        self,
        requests: Sequence[EnqueueRequest],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[EnqueueResult]:
        """Insert jobs in one multi-row statement; existing idempotency keys resolve.

        Large batches without idempotency keys go through COPY. With ``audit`` each job
        created is audited in the same statement (J10).
        """
        if not requests:
            return []
        keyed = enqueue_needs_transaction(requests)
        copy = len(requests) >= COPY_THRESHOLD and not keyed
        atomic = copy or keyed
        if audit is None:
            # _scoped, not _use: one context manager less on every enqueue.
            async with self._scoped(connection, atomic=atomic) as (conn, _):
                if copy:
                    return await self._copy_enqueue(conn, requests)
                return await self._run(conn, enqueue_steps(self._schema, requests))
        async with self._audited(connection, audit, kept=False, atomic=atomic) as (conn, note):
            if copy:
                results = await self._copy_enqueue(conn, requests, note)
            else:
                results = await self._run(conn, enqueue_steps(self._schema, requests, note))
        return results

    async def _copy_enqueue(
        self, conn: C, requests: Sequence[EnqueueRequest], audit: AuditNote | None = None
    ) -> list[EnqueueResult]:
        # Ids are reserved first so results follow the request order; due times are
        # computed from the transaction's now(), the value column defaults would use.
        # The engine's requests come as columns (EnqueueBatch): no object per job here.
        batch = EnqueueBatch.of(requests)
        [reserved] = await self._execute(conn, "reserve_ids", {"n": len(batch)})
        ids: list[int] = list(reserved["ids"])
        now: datetime = reserved["now"]
        columns, rows = copy_rows(ids, batch, now)
        await self._driver.copy(conn, self._schema, "jobs", columns, rows)
        if audit is not None and audit.table:
            params = audit_enqueued_params(ids, batch, now, audit.actor)
            await self._execute(conn, "audit_enqueued", params)
        elif audit is not None:
            audit.events.extend(enqueued_events(ids, batch, now, audit.actor))
        return list(map(EnqueueResult, ids, repeat(True)))

    async def claim(self, request: ClaimRequest, *, audit: AsyncAudit | None = None) -> ClaimedJobs:
        """Claim due jobs in one statement (a transaction with advisory locks for kinds
        with a cluster limit); a claim that takes jobs refreshes its worker's heartbeat.
        Rows that cannot become a job are moved to ``dead`` by a further statement
        (audited with ``audit``; with a sink the claim runs in a transaction)."""
        if request.limit <= 0:
            return ClaimedJobs()
        atomic = claim_needs_transaction(request)
        if audit is None:
            async with self._use(None, atomic=atomic) as conn:
                return await self._run(conn, claim_steps(self._schema, request))
        async with self._audited(None, audit, kept=True, atomic=atomic) as (conn, note):
            jobs = await self._run(conn, claim_steps(self._schema, request, note))
        return jobs

    async def start(self, leases: Sequence[Lease]) -> list[bool]:
        """Begin held jobs in one fenced statement (attempts += 1); False where the lease
        was lost."""
        if not leases:
            return []
        async with self._use(None) as conn:
            rows = await self._execute(conn, "start", lease_params(leases))
        return _applied(rows, len(leases))

    async def complete(
        self,
        completions: Sequence[Completion],
        *,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[bool]:
        """Record outcomes in one fenced statement; False where the lease was lost. With
        ``audit`` the statement audits successes and moves to dead (with a sink it runs
        in a transaction)."""
        if not completions:
            return []
        if audit is not None:
            async with self._audited(connection, audit, kept=True) as (conn, note):
                params = complete_params(completions) | note.params()
                rows = await self._execute(conn, "complete_audited", params)
                note.collect(rows)
            return _applied(rows, len(completions))
        async with self._use(connection) as conn:
            # One completion (a transactional job's own) needs no batch to build.
            if len(completions) == 1:
                rows = await self._execute(
                    conn, "complete_one", complete_one_params(completions[0])
                )
                return _applied(rows, 1)
            rows = await self._execute(conn, "complete", complete_params(completions))
        return _applied_batch(rows, len(completions))

    async def get(self, job_id: int, *, connection: Any = None) -> Job | None:
        """One job, or None; UndecodableRowError for a row that cannot become a job."""
        async with self._use(connection) as conn:
            rows = await self._execute(conn, "get_job", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    async def list_jobs(self, filter: JobFilter, page: Page) -> JobPage:
        """Jobs matching ``filter``, ordered by id, one keyset page read by index walks
        of at most ``JobPage.READ_FACTOR`` rows per job asked for (``list_job_page``,
        migration 0012); UndecodableRowError if a row of the page cannot become a job."""
        async with self._reading() as conn:
            rows = await self._execute(conn, "list_jobs", filter_params(filter) | page_params(page))
        return job_page_from_rows(rows)

    async def counts(self) -> list[StateCount]:
        """Jobs per (state, kind, tenant) from the running totals (migration 0011): one
        statement over the folded totals and the unfolded deltas, an index probe per
        pending group for its oldest job; never a scan of jobs."""
        async with self._reading() as conn:
            rows = await self._execute(conn, "counts", {})
        await self._roll_up_if_behind(backlog_of(rows))
        return state_counts_from_rows(rows)

    async def roll_up_counts(self) -> int:
        """Fold the count deltas into the totals (one transaction under an advisory lock;
        0 while another session folds) and take this minute's queue samples unless taken
        (``sample_queues``, migration 0017)."""
        async with self._use(None) as conn:
            [row] = await self._execute(
                conn, "roll_up_counts", roll_up_params(lock_key(self._schema, "counts"))
            )
        return int(row["folded"] or 0)

    async def _roll_up_if_behind(self, backlog: int) -> None:
        """After a read that found more than ``ROLLUP_BACKLOG`` unfolded deltas (no worker
        folds them: none runs, or it cannot keep up): fold them, best effort (a read-only
        role or replica cannot; the read was exact anyway)."""
        if backlog <= ROLLUP_BACKLOG:
            return
        try:
            await self.roll_up_counts()
        except Exception:
            logger.warning("skiplock: folding %d count deltas failed", backlog, exc_info=True)

    async def finished_counts(self, since: datetime, bucket: timedelta) -> list[FinishedCount]:
        """The jobs finished since ``since`` per bucket, kind and final state, from the
        finished minutes (``finished_kind_counts``, migration 0017)."""
        async with self._reading() as conn:
            rows = await self._execute(conn, "finished_counts", bucket_params(since, bucket))
        return [finished_count_from_row(r) for r in rows]

    async def queue_samples(self, since: datetime, bucket: timedelta) -> list[QueueSample]:
        """The queue samples taken since ``since``, folded per bucket and kind in the
        database (``queue_samples``, migration 0017)."""
        async with self._reading() as conn:
            rows = await self._execute(conn, "queue_samples", bucket_params(since, bucket))
        return [queue_sample_from_row(r) for r in rows]

    async def health_snapshot(self) -> HealthSnapshot:
        """The schema's version, the workers and the per-kind queues (R9), read in one
        transaction (one ``now()``); a missing or older schema is reported, not
        refused (a missing one has nothing else to read)."""
        async with self._reading(atomic=True, check=False) as conn:
            status = await self._run(conn, status_steps(self._schema))
            [row] = await self._execute(conn, "now", {})
            now = utc(row["now"])
            if not status.installed:
                return HealthSnapshot(now=now, schema=schema_info(status))
            # A schema without the running totals (its report names the migrations to
            # apply) has no queues to report: reading them would fail.
            queues = []
            if status.version >= COUNTS_MIGRATION:
                queues = await self._execute(conn, "health_queues", health_queues_params())
            workers = await self._execute(conn, "health_workers", {})
            orphans = await self._execute(conn, "health_orphans", {})
            buckets: list[dict[str, Any]] = []
            if status.version >= RATES_MIGRATION:
                everything = {"kinds": None, "providers": None}
                buckets = await self._execute(conn, "rate_buckets", everything)
        await self._roll_up_if_behind(backlog_of(queues))
        return HealthSnapshot(
            now=now,
            workers=tuple(worker_status_from_row(r) for r in workers),
            queues=tuple(queue_stats_from_row(r) for r in queues if r["kind"] is not None),
            schema=schema_info(status),
            buckets=bucket_states(buckets) if buckets else (),
            orphaned=tuple(orphaned_jobs_from_row(r) for r in orphans),
        )

    async def apply(
        self,
        filter: JobFilter,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        """Operator transition of every matching job whose state allows ``event``
        (each audited in the same statement with ``audit``)."""
        rows = await self._apply("apply", filter, event, reset_attempts, connection, audit)
        return sorted(int(r["id"]) for r in rows)

    async def apply_job(
        self,
        job_id: int,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> Job | None:
        """:meth:`apply` of one job in one statement that returns the job as
        :meth:`get` reads it (audited in it with ``audit``); None if nothing changed.
        A changed row that cannot become a job raises UndecodableRowError (the change
        stands)."""
        one = JobFilter(ids=frozenset({job_id}))
        rows = await self._apply("apply_job", one, event, reset_attempts, connection, audit)
        return job_from_row(rows[0]) if rows else None

    async def _apply(
        self,
        name: str,
        filter: JobFilter,
        event: Event,
        reset_attempts: bool,
        connection: Any,
        audit: AsyncAudit | None,
    ) -> Rows:
        """Run the operator transition ``name`` (its ``_audited`` twin with ``audit``)."""
        check_operator_event(event)
        params = filter_params(filter) | apply_params(event, reset_attempts=reset_attempts)
        if audit is None:
            async with self._use(connection) as conn:
                return await self._execute(conn, name, params)
        params |= operator_audit_params(event, reset_attempts=reset_attempts)
        async with self._audited(connection, audit, kept=False) as (conn, note):
            rows = await self._execute(conn, f"{name}_audited", params | note.params())
            note.collect(rows)
        return rows

    async def delete(
        self, filter: JobFilter, *, connection: Any = None, audit: AsyncAudit | None = None
    ) -> list[Job]:
        """Delete matching jobs that are not running (each audited, with its payload, in
        the same statement with ``audit``); returns them. A deleted row that cannot
        become a job raises UndecodableRowError (it is deleted all the same)."""
        if audit is None:
            async with self._use(connection) as conn:
                rows = await self._execute(conn, "delete", filter_params(filter))
        else:
            async with self._audited(connection, audit, kept=False) as (conn, note):
                rows = await self._execute(
                    conn, "delete_audited", filter_params(filter) | note.params()
                )
                note.collect(rows)
        return sorted((job_from_row(r) for r in rows), key=lambda j: j.id)

    async def audit_trail(self, job_id: int, *, connection: Any = None) -> list[AuditEvent]:
        """The job's events in the audit table, oldest first."""
        async with self._use(connection) as conn:
            rows = await self._execute(conn, "audit_trail", {"id": job_id})
        return [audit_event_from_row(r) for r in rows]

    # ---- run-time controls (issue 30) -----------------------------------------------------

    async def controls(self) -> Controls:
        """Every pause and limit, in one statement over the two small tables (0014)."""
        async with self._reading() as conn:
            rows = await self._execute(conn, "controls", {})
        return controls_from_rows(rows)

    async def pause(self, pause: Pause, *, audit: AsyncAudit | None = None) -> Pause:
        """Upsert the pause (audited in the same statement with ``audit``)."""
        params = pause_params(pause.kind, pause.tenant, pause.reason, pause.actor)
        [row] = await self._control("pause", params, AuditAction.PAUSED, audit)
        return pause_from_row(row)

    async def resume(
        self, kind: str | None, tenant: str | None, *, audit: AsyncAudit | None = None
    ) -> Pause | None:
        """Delete the pause of exactly ``(kind, tenant)`` (audited with ``audit``)."""
        actor = None if audit is None else audit.actor
        params = pause_params(kind, tenant, None, actor)
        rows = await self._control("resume", params, AuditAction.RESUMED, audit)
        return pause_from_row(rows[0]) if rows else None

    async def set_limit(self, limit: Limit, *, audit: AsyncAudit | None = None) -> Limit:
        """Upsert the limit (audited in the same statement with ``audit``)."""
        params = limit_params(limit.kind, limit.tenant, limit.provider, limit.limit, limit.actor)
        [row] = await self._control("set_limit", params, AuditAction.LIMIT_SET, audit)
        return limit_from_row(row)

    async def clear_limit(
        self,
        kind: str | None,
        tenant: str | None,
        provider: str | None,
        *,
        audit: AsyncAudit | None = None,
    ) -> Limit | None:
        """Delete the limit of exactly ``(kind, tenant)`` or ``provider`` (audited with
        ``audit``)."""
        actor = None if audit is None else audit.actor
        params = limit_params(kind, tenant, provider, None, actor)
        rows = await self._control("clear_limit", params, AuditAction.LIMIT_CLEARED, audit)
        return limit_from_row(rows[0]) if rows else None

    async def _control(
        self, name: str, params: dict[str, Any], action: AuditAction, audit: AsyncAudit | None
    ) -> Rows:
        """Run the control change ``name``; with ``audit`` its event is written by the
        statement (the store's table) or given to the sink in its transaction."""
        params |= {"action": action.value, "audit_table": audit is not None and audit.sink is None}
        if audit is None or audit.sink is None:
            async with self._use(None) as conn:
                return await self._execute(conn, name, params)
        async with self._audited(None, audit, kept=False) as (conn, note):
            rows = await self._execute(conn, name, params)
            for row in rows:
                control = pause_from_row(row) if "reason" in row else limit_from_row(row)
                note.events.append(control_event(action, control, params["actor"], utc(row["at"])))
        return rows

    # ---- workers and maintenance ----------------------------------------------------------

    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert or refresh the worker's row (heartbeat = the database's now) and, in
        the same statement, release the jobs an earlier life of this id left running."""
        await self._aux_execute("register_worker", worker_params(info))

    async def heartbeat(self, worker_id: str, running: Sequence[int] = ()) -> list[int] | None:
        """Refresh the worker's heartbeat to the database's now, in one statement; None if
        the worker row is gone, else the ids among ``running`` no longer running under
        this worker (ascending)."""
        rows = await self._aux_execute("heartbeat", heartbeat_params(worker_id, running))
        if not rows:
            return None
        return [int(job_id) for job_id in rows[0]["gone"]]

    async def unregister_worker(self, worker_id: str) -> list[int]:
        """Remove the worker's row and, in the same statement, release the jobs still
        running under its id; returns their ids (ascending)."""
        rows = await self._aux_execute("unregister_worker", {"id": worker_id})
        return [int(row["id"]) for row in rows]

    async def recover_stale(
        self,
        *,
        default_ttl: timedelta,
        ttls: Mapping[str, timedelta],
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        """Recover claims of workers that stopped heart-beating, then delete the rows of
        workers silent for longer than every TTL; [] if another node is running the
        recovery right now. With ``audit`` each job moved to dead is audited."""
        if audit is None:
            async with self._use(None, atomic=True) as conn:
                return await self._run(conn, recover_steps(self._schema, default_ttl, ttls))
        async with self._audited(None, audit, kept=True, atomic=True) as (conn, note):
            ids = await self._run(conn, recover_steps(self._schema, default_ttl, ttls, note))
        return ids

    async def try_maintenance(self, name: str, every: timedelta) -> bool:
        """Take the right to run maintenance task ``name`` now, once per ``every`` across
        the cluster (one upsert on the ``maintenance`` table, database clock)."""
        async with self._use(None) as conn:
            rows = await self._execute(conn, "try_maintenance", maintenance_params(name, every))
        return bool(rows)

    async def purge(
        self,
        *,
        older_than: timedelta,
        archive: bool,
        batch_size: int,
        key_window: timedelta | None = None,
    ) -> int:
        """Delete (or archive) old succeeded jobs in batches of ``batch_size``, one
        transaction each; returns the number of jobs, 0 if another node is purging right
        now."""
        _check_batch(batch_size)
        schema = self._schema
        return await self._purge_batches(
            lambda: purge_batch_steps(
                schema,
                older_than=older_than,
                archive=archive,
                batch_size=batch_size,
                key_window=key_window,
            ),
            batch_size,
        )

    async def purge_audit(self, *, older_than: timedelta, batch_size: int) -> int:
        """Delete the audit events older than ``older_than`` (J10) in batches of
        ``batch_size``, one transaction each, through the ``at`` index; returns how many,
        0 if another node is purging right now."""
        _check_batch(batch_size)
        schema = self._schema
        return await self._purge_batches(
            lambda: purge_audit_batch_steps(schema, older_than=older_than, batch_size=batch_size),
            batch_size,
        )

    async def _purge_batches(
        self, batch: Callable[[], Generator[Step, Rows, int | None]], batch_size: int
    ) -> int:
        """Run retention batches, one transaction each, until one comes back short (or
        another node holds the lock); returns how many rows they deleted."""
        total = 0
        while True:
            async with self._use(None, atomic=True) as conn:
                count = await self._run(conn, batch())
            if count is None:
                return total
            total += count
            if count < batch_size:
                return total

    # ---- the worker-bookkeeping connection ----------------------------------------------

    async def _aux_execute(self, name: str, params: Mapping[str, Any]) -> Rows:
        """Run a named query on the dedicated bookkeeping connection (heartbeats), so a busy
        pool never starves it; reconnect once if it broke."""
        # A worker registers first: refuse an old schema before anything runs.
        await self.open()
        driver = self._driver
        async with self._aux_lock:
            for attempt in range(2):
                if self._aux is None or driver.is_closed(self._aux):
                    await self._drop_aux(broken=True)
                    self._aux = await driver.connect()
                if self._aux is None:  # the driver has no connection outside the pool
                    break
                try:
                    return await self._execute(self._aux, name, params)
                except Exception as exc:
                    if not driver.is_disconnect(exc):
                        raise
                    await self._drop_aux(broken=True)
                    if attempt:
                        raise StoreError(f"lost the PostgreSQL connection: {exc}") from exc
        async with self._scoped(None) as (conn, _):
            return await self._execute(conn, name, params)

    async def _drop_aux(self, *, broken: bool) -> None:
        aux, self._aux = self._aux, None
        if aux is not None:
            await self._driver.disconnect(aux, broken=broken)


def _check_batch(batch_size: int) -> None:
    if batch_size < 1:
        raise ValidationError(f"batch_size must be >= 1, got {batch_size}")
