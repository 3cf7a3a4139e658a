"""The jobs role of the PostgreSQL job store (async source; twin generated).

:class:`AsyncPgJobsRole` implements ``skiplock.ports.AsyncJobsRole``: the store's clock,
the caller's transactions (``transaction()``, ``autocommit()``), enqueue (one statement,
or COPY for large batches), claim, start, complete and get. Contract kit
(``skiplock.testing.contract``): ``AsyncEnqueueContract``, ``AsyncIdempotencyContract``
(whose retention half, keys remembered by ``purge``, is the upkeep role's),
``AsyncClaimContract``, ``AsyncRateContract``, ``AsyncTransactionContract``,
``AsyncAtomicityContract``, ``AsyncStatementTimeoutContract``,
``AsyncCompletionContract``, ``AsyncLifecycleContract`` (which also covers the workers
role's re-registration and recovery of held jobs) and ``AsyncResultsContract``.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from itertools import repeat
from typing import TYPE_CHECKING, Any

from skiplock.core import EnqueueBatch, EnqueueResult
from skiplock.core.store import ClaimedJobs

from ._driver_async import TX, C
from ._ops import claim_needs_transaction, claim_steps, enqueue_needs_transaction, enqueue_steps
from ._rows import job_from_row, utc
from ._rows_jobs import (
    audit_enqueued_params,
    complete_one_params,
    complete_params,
    copy_rows,
    enqueued_events,
    lease_params,
)
from ._store_base_async import AsyncPgStoreBase, statement_timeout_ms

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from datetime import datetime

    from skiplock.core import (
        ClaimRequest,
        Completion,
        EnqueueRequest,
        Job,
        Lease,
    )
    from skiplock.ports import AsyncAudit

    from ._migrate import Rows
    from ._rows import AuditNote


#: From this many jobs without idempotency keys, enqueue uses COPY. Below it one
#: ``INSERT ... SELECT`` of the batch sent as one JSON parameter is faster (one round trip,
#: no ids to reserve, no transaction to open); from about 5,000 jobs COPY's streaming wins.
COPY_THRESHOLD = 5000


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


class AsyncPgJobsRole(AsyncPgStoreBase[C, TX]):
    """``AsyncJobsRole`` of the PostgreSQL store (see the module)."""

    async def now(self) -> datetime:
        """The database's ``now()``."""
        async with self._pooled() as conn, self._lost_as_store_error():
            rows = await self._execute(conn, "now", {})
        return utc(rows[0]["now"])

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
