"""The memory state's ``ReadsRole`` (:mod:`skiplock.ports`): listing, counts, throughput,
queue samples, the health snapshot and the audit trail (``get`` is ``JobsRole``'s,
``controls`` ``ControlsRole``'s).

Tested by the kit's ``AsyncHealthContract``, ``AsyncThroughputContract``,
``AsyncRecountContract``, ``AsyncHistoryContract`` (which spans ``ReadsRole`` and
``UpkeepRole``'s ``roll_up_counts``), the listing and count tests of ``AsyncAdminContract``
(which spans ``AdminRole`` and ``ReadsRole``) and the trail tests of ``AsyncAuditContract``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from skiplock.core import (
    FINISHED_STATES,
    AuditEvent,
    FinishedCount,
    HealthSnapshot,
    JobFilter,
    JobPage,
    JobState,
    Page,
    QueueStats,
    StateCount,
    WorkerStatus,
)
from skiplock.core.store import (
    AUDIT_PURGE,
    JOBS_PURGE,
    PAIR_SCOPE,
    PROVIDER_SCOPE,
    BucketState,
    OrphanedJobs,
    QueueSample,
    Retention,
    RetentionWindow,
    bucket_start,
    fold_samples,
    purgeable,
    refill,
)

from ._base import by_kind, public_job, selected
from ._transaction import Transactions

if TYPE_CHECKING:
    from datetime import datetime, timedelta


class ReadsState(Transactions):
    """What the admin reads, the dashboard and the exporter need; changes nothing."""

    def list_jobs(self, filter: JobFilter, page: Page) -> JobPage:
        """Matching jobs ordered by id, one keyset page (never stopped early: the
        search costs no database reads)."""
        if page.limit <= 0:
            return JobPage()
        with self._lock:
            rows = [job for job in self._jobs.values() if selected(filter, job)]
        if page.after_id is not None:
            cursor = page.after_id
            rows = [j for j in rows if (j.id < cursor if page.descending else j.id > cursor)]
        rows.sort(key=lambda j: j.id, reverse=page.descending)
        return JobPage(public_job(j) for j in rows[: page.limit])

    def counts(self) -> list[StateCount]:
        """Jobs per (state, kind, tenant); zero counts omitted."""
        now = self.now()
        earliest: dict[tuple[str, str | None], datetime] = {}
        with self._lock:
            counter = Counter((j.state, j.kind, j.tenant) for j in self._jobs.values())
            for j in (self._jobs[i] for i in self._by_state[JobState.PENDING]):
                key = (j.kind, j.tenant)
                if key not in earliest or j.available_at < earliest[key]:
                    earliest[key] = j.available_at
        return [
            StateCount(
                state=state,
                kind=kind,
                tenant=tenant,
                count=n,
                oldest_due_age=(
                    max(0.0, (now - earliest[kind, tenant]).total_seconds())
                    if state is JobState.PENDING
                    else None
                ),
            )
            for (state, kind, tenant), n in sorted(
                counter.items(), key=lambda kv: (kv[0][0].value, kv[0][1], kv[0][2] or "")
            )
        ]

    def finished_counts(self, since: datetime, bucket: timedelta) -> list[FinishedCount]:
        """Jobs finished at or after ``since`` per bucket (from ``since``), final state and
        kind."""
        with self._lock:
            counter = Counter(
                (bucket_start(j.completed_at, since, bucket), j.state, j.kind)
                for state in FINISHED_STATES
                for j in (self._jobs[i] for i in self._by_state[state])
                if j.completed_at is not None and j.completed_at >= since
            )
        return [
            FinishedCount(start=start, state=state, count=n, kind=kind)
            for (start, state, kind), n in sorted(counter.items(), key=lambda kv: kv[0])
        ]

    def queue_samples(self, since: datetime, bucket: timedelta) -> list[QueueSample]:
        """The samples taken at or after ``since``, folded per bucket and kind."""
        with self._lock:
            samples = list(self._samples)
        return fold_samples(samples, since, bucket)

    def audit_trail(self, job_id: int, connection: object = None) -> list[AuditEvent]:
        """The job's events in the audit table, oldest first (a transaction also sees
        its own)."""
        with self._lock:
            scope = self._scope(connection)
            events = list(self._audit)
            if scope.tx is not None:
                events += scope.tx._audit
        return [event for event in events if event.job_id == job_id]

    def health_snapshot(self) -> HealthSnapshot:
        """Workers with their running jobs, and per (kind, tenant) the pending (due and
        later), running and dead jobs; no schema."""
        with self._lock:
            now = self.now()
            due: Counter[tuple[str, str | None]] = Counter()
            scheduled: Counter[tuple[str, str | None]] = Counter()
            oldest: dict[tuple[str, str | None], datetime] = {}
            for job_id in self._by_state[JobState.PENDING]:
                job = self._jobs[job_id]
                key = (job.kind, job.tenant)
                if job.available_at > now:
                    scheduled[key] += 1
                    continue
                due[key] += 1
                if key not in oldest or job.available_at < oldest[key]:
                    oldest[key] = job.available_at
            running_jobs = [self._jobs[i] for i in self._by_state[JobState.RUNNING]]
            running = Counter((job.kind, job.tenant) for job in running_jobs)
            per_worker = Counter(job.claimed_by or "" for job in running_jobs)
            oldest_claim: dict[str, datetime] = {}
            for job in running_jobs:
                owner, claimed_at = job.claimed_by or "", job.claimed_at
                if claimed_at is not None and (
                    owner not in oldest_claim or claimed_at < oldest_claim[owner]
                ):
                    oldest_claim[owner] = claimed_at
            dead = Counter(
                (self._jobs[i].kind, self._jobs[i].tenant) for i in self._by_state[JobState.DEAD]
            )
            workers = tuple(
                WorkerStatus(
                    id=worker_id,
                    host=row.info.host,
                    pid=row.info.pid,
                    kinds=row.info.kinds,
                    tenants=row.info.tenants,
                    started_at=row.started_at,
                    heartbeat_at=row.heartbeat_at,
                    running=per_worker[worker_id],
                    oldest_claimed_at=oldest_claim.get(worker_id),
                    slots=row.info.slots,
                    version=row.info.version,
                    request=row.request,
                )
                for worker_id, row in sorted(self._workers.items())
            )
            orphaned = tuple(
                OrphanedJobs(owner, count, oldest_claim.get(owner, now))
                for owner, count in sorted(per_worker.items())
                if owner not in self._workers
            )
        keys = sorted(due.keys() | scheduled.keys() | running.keys() | dead.keys(), key=by_kind)
        queues = tuple(
            _queue_stats(
                kind,
                tenant,
                due=due[kind, tenant],
                scheduled=scheduled[kind, tenant],
                oldest_due_at=oldest.get((kind, tenant)),
                running=running[kind, tenant],
                dead=dead[kind, tenant],
            )
            for kind, tenant in keys
        )
        clock = now.timestamp()
        with self._lock:
            buckets = [
                BucketState(PAIR_SCOPE, kind, tenant, bucket)
                for (kind, tenant), bucket in sorted(
                    self._pair_buckets.items(), key=lambda kv: by_kind(kv[0])
                )
                if refill(bucket, clock).tokens < bucket.limit.burst
            ]
            buckets += [
                BucketState(PROVIDER_SCOPE, name, None, bucket)
                for name, bucket in sorted(self._provider_buckets.items())
                if refill(bucket, clock).tokens < bucket.limit.burst
            ]
        return HealthSnapshot(
            now=now, workers=workers, queues=queues, buckets=tuple(buckets), orphaned=orphaned
        )

    def retention(self, jobs: timedelta | None, audit: timedelta | None) -> Retention:
        """The retention view: the succeeded jobs and audit events older than each window
        now, counted exactly, and the last run of each purge."""
        with self._lock:
            now = self.now()
            jobs_due = None
            if jobs is not None:
                cutoff = now - jobs
                succeeded = self._by_state[JobState.SUCCEEDED]
                jobs_due = sum(purgeable(self._jobs[i], cutoff) for i in succeeded)
            audit_due = None
            if audit is not None:
                audit_due = sum(event.at < now - audit for event in self._audit)
            runs = dict(self._purge_runs)
        return Retention(
            now=now,
            windows=(
                RetentionWindow(JOBS_PURGE, jobs, jobs_due, False, runs.get(JOBS_PURGE)),
                RetentionWindow(AUDIT_PURGE, audit, audit_due, False, runs.get(AUDIT_PURGE)),
            ),
        )


def _queue_stats(
    kind: str,
    tenant: str | None,
    *,
    due: int,
    scheduled: int,
    oldest_due_at: datetime | None,
    running: int,
    dead: int,
) -> QueueStats:
    """A (kind, tenant)'s queue as PostgreSQL reports it: the due/scheduled split from
    the same bounded counts (``skiplock.core.QueueStats.split``)."""
    limit = QueueStats.SPLIT_BOUND + 1
    due, scheduled, bounded = QueueStats.split(
        due + scheduled, min(scheduled, limit), min(due, limit) if scheduled >= limit else None
    )
    return QueueStats(
        kind=kind,
        tenant=tenant,
        due=due,
        scheduled=scheduled,
        oldest_due_at=oldest_due_at,
        running=running,
        dead=dead,
        bounded=bounded,
    )
