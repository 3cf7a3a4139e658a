"""The store port's reads role (async source; the sync twin is generated).

What the admin reads, the dashboard, the exporter and the health report take: a store
over a read replica can serve this role alone. The other roles, every role at once
(``AsyncJobStore``) and the conventions of the port are in :mod:`._store_async`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from skiplock.core import (
        AuditEvent,
        FinishedCount,
        HealthSnapshot,
        Job,
        JobFilter,
        JobPage,
        Page,
        StateCount,
    )
    from skiplock.core.store import Controls, QueueSample, Retention


class AsyncReadsRole(Protocol):
    """Reads and history: what the admin reads, the dashboard and the exporter need;
    never changes anything, so a store over a read replica can serve it alone."""

    async def now(self) -> datetime:
        """As :meth:`AsyncJobsRole.now`."""
        ...

    async def get(self, job_id: int, *, connection: Any = None) -> Job | None:
        """As :meth:`AsyncJobsRole.get`."""
        ...

    async def list_jobs(self, filter: JobFilter, page: Page) -> JobPage:
        """Jobs matching ``filter`` ordered by id (keyset page).

        Reads rows in proportion to ``page.limit``, never to the table: a filter that no
        index serves in id order may stop the search after ``JobPage.READ_FACTOR`` rows per
        job asked for, with the page's ``resume_after`` saying where it stopped (the page
        then holds every match before that id, possibly fewer than the limit)."""
        ...

    async def counts(self) -> list[StateCount]:
        """Number of jobs per (state, kind, tenant), zero counts omitted; a pending group
        also says how long its earliest due job has been due (``oldest_due_age``, on the
        store's clock). One query: metrics scrapes call it (R5)."""
        ...

    async def finished_counts(self, since: datetime, bucket: timedelta) -> list[FinishedCount]:
        """How many jobs finished (succeeded, failed, dead, cancelled: their
        ``completed_at``) at or after ``since``, per final state and bucket: a row's
        ``start`` is ``since + n * bucket``, the start of the bucket its jobs finished in;
        zero counts omitted. ``bucket`` is a whole number of seconds. Each row names the
        jobs' ``kind`` (per-kind throughput; a store that leaves it None is counted as one
        unknown kind). Reads the jobs that finished since ``since``, not the whole table
        (the dashboard calls it often)."""
        ...

    async def queue_samples(self, since: datetime, bucket: timedelta) -> list[QueueSample]:
        """The queue samples (``skiplock.core.store.QueueSample``) taken at or after
        ``since``, folded per bucket (from ``since``) and kind by ``fold_samples``' rule,
        by bucket, then kind: at most buckets x kinds rows. :meth:`roll_up_counts` takes
        the samples: when the minute holding the store's now has none yet, one per kind by
        ``take_samples``' rule, and it removes those older than ``SAMPLE_RETENTION``.
        Never reads the jobs table."""
        ...

    async def health_snapshot(self) -> HealthSnapshot:
        """What the health report needs (R9), read in one operation: the store's now;
        every registered worker with its heartbeat, the kinds and tenants it claims and
        how many jobs run under its id; per (kind, tenant) with any, the pending jobs due
        now and later, the earliest due time among the due ones, and the running and dead
        jobs; and the schema's version (None for a store without a versioned schema).

        Never raises for a schema that is missing or older than the code: it reports it
        (a missing schema has no workers or jobs to read).
        """
        ...

    async def controls(self) -> Controls:
        """As :meth:`AsyncControlsRole.controls`."""
        ...

    async def audit_trail(self, job_id: int, *, connection: Any = None) -> list[AuditEvent]:
        """The events of ``job_id`` in the store's own audit table, oldest first ([] for
        none: also for a job deleted since, whose events stay until retention)."""
        ...

    async def retention(self, *, jobs: timedelta | None, audit: timedelta | None) -> Retention:
        """The retention view (``skiplock.core.store.Retention``) for the windows given
        (None: that purge is off, nothing due): the succeeded jobs completed before
        ``now - jobs`` and the audit events recorded before ``now - audit`` (what the next
        ``purge`` and ``purge_audit`` remove), and the last run each recorded. Bounded
        cost whatever the tables' size: a count past what can be read cheaply may be an
        estimate, flagged ``estimated``."""
        ...
