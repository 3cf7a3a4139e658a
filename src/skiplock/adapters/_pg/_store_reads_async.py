"""The reads role of the PostgreSQL job store (async source; twin generated).

:class:`AsyncPgReadsRole` implements the reads of ``skiplock.ports.AsyncReadsRole``: keyset
pages of jobs, counts, throughput, queue samples, the health snapshot and a job's audit
trail, each on a connection whose statements stop after ``read_timeout``. (The role's
``now``, ``get`` and ``controls`` are the jobs' and the controls' mixins'.) Contract kit
(``skiplock.testing.contract``): ``AsyncHealthContract``, ``AsyncThroughputContract``,
``AsyncRecountContract``, ``AsyncHistoryContract`` (which takes its samples through the
upkeep role's ``roll_up_counts``), the listing and counts tests of
``AsyncAdminContract`` (an admin-role mixin otherwise) and ``test_audit_trail_*`` of
``AsyncAuditContract`` (which spans every role that audits).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from skiplock.core import HealthSnapshot

from ._driver_async import TX, C
from ._migrate import schema_info, status_steps
from ._rows import audit_event_from_row, filter_params, utc
from ._rows_reads import (
    COUNTS_MIGRATION,
    RATES_MIGRATION,
    ROLLUP_BACKLOG,
    as_of,
    backlog_of,
    bucket_params,
    bucket_states,
    finished_count_from_row,
    health_queues_params,
    job_page_from_rows,
    orphaned_jobs_from_row,
    page_params,
    queue_sample_from_row,
    queue_stats_from_row,
    replica_status_from_row,
    running_of,
    state_counts_from_rows,
    worker_status_from_row,
)
from ._rows_upkeep import retention_from_rows, retention_params
from ._sql import versioned_query
from ._store_base_async import AsyncPgStoreBase

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from skiplock.core import (
        AuditEvent,
        FinishedCount,
        JobFilter,
        JobPage,
        Page,
        StateCount,
    )
    from skiplock.core.store import QueueSample, Retention


logger = logging.getLogger("skiplock.store")


class AsyncPgReadsRole(AsyncPgStoreBase[C, TX]):
    """``AsyncReadsRole`` of the PostgreSQL store (see the module)."""

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
            [standby] = await self._execute(conn, "replica", {})
            replica = replica_status_from_row(standby)
            now = as_of(utc(row["now"]), replica)
            if not status.installed:
                return HealthSnapshot(now=now, schema=schema_info(status), replica=replica)
            # A schema without the running totals (its report names the migrations to
            # apply) has no queues to report: reading them would fail.
            queues = []
            if status.version >= COUNTS_MIGRATION:
                queues = await self._execute(conn, "health_queues", health_queues_params())
            # The workers' columns of later migrations read as NULLs on an older schema.
            health_workers = versioned_query(
                "health_workers", self._schema, self._driver.style, status.version
            )
            workers = await self._driver.fetch(conn, health_workers, {})
            # Running jobs under no registered worker: a walk of every running job's index
            # entry (with a burst of dead rows, of theirs too), so only when the totals
            # count more running jobs than the workers' own walks found.
            orphans: list[dict[str, Any]] = []
            if running_of(queues) != sum(int(w["running"]) for w in workers):
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
            replica=replica,
        )

    async def audit_trail(self, job_id: int, *, connection: Any = None) -> list[AuditEvent]:
        """The job's events in the audit table, oldest first."""
        async with self._use(connection) as conn:
            rows = await self._execute(conn, "audit_trail", {"id": job_id})
        return [audit_event_from_row(r) for r in rows]

    async def retention(self, *, jobs: timedelta | None, audit: timedelta | None) -> Retention:
        """The retention view (``retention`` and ``purge_runs``, migration 0019, in one
        transaction): succeeded jobs due counted exactly from the finished minutes plus
        one minute's index range; audit events counted up to ``DUE_COUNT_BOUND``, then
        estimated."""
        params = retention_params(self._schema, jobs, audit)
        async with self._reading(atomic=True) as conn:
            [row] = await self._execute(conn, "retention", params)
            runs = await self._execute(conn, "purge_runs", {})
        return retention_from_rows(row, runs, jobs, audit)
