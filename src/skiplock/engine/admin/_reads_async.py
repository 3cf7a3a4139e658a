"""The admin reads of an engine (async source; ``_reads.py`` is the sync twin): jobs,
dead letters, counts, throughput, history, the health report (R9) and a job's audit
trail (J10), over the store's reads role alone (:class:`~skiplock.ports.AsyncReadsRole`).
:class:`AsyncReader` serves them without an engine: a dashboard or an exporter over a
read-only store (a replica)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from skiplock.core import (
    AuditEvent,
    HealthReport,
    Job,
    JobFilter,
    JobNotFoundError,
    JobPage,
    JobState,
    JobWait,
    Page,
    StateCount,
)
from skiplock.core.rules import (
    INT8_RANGE,
    LIVE_HEARTBEATS,
    PRIORITY_RANGE,
    WAIT_COUNT_BOUND,
    EffectiveLimits,
    HealthThresholds,
    History,
    Throughput,
    assess_health,
    check_available_at,
    check_bool,
    check_duration,
    check_int,
    check_job_id,
    check_payload_filter,
    check_priority,
    check_search_text,
    explain_wait,
    history_from,
    kind_limits,
    throughput_from,
    throughput_window,
    to_duration,
    unreachable_report,
)
from skiplock.core.store import ConcurrencyLimit, Controls, Limit, Pause, Retention

from .._inputs import as_names, as_states
from ..settings._settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from skiplock.core.store import RateTable
    from skiplock.ports import AsyncReadsRole


class AsyncReadOps:
    """The admin reads, mixed into :class:`AsyncAdminOps` (and so the engine) and
    :class:`AsyncReader`; they provide ``_store`` (the reads role is all they call) and
    ``_settings``. Bad arguments raise :class:`~skiplock.ValidationError` before the
    store is asked."""

    _store: AsyncReadsRole
    _settings: Settings

    async def get_job(self, job_id: int) -> Job:
        """One job, with what its runs recorded (``attempts``, ``last_error``,
        ``started_at``, ``completed_at``, the processor's ``result`` and the failed
        attempts in ``errors``: docs/worker-internals.md, "What a job records");
        JobNotFoundError if absent."""
        job = await self._store.get(check_job_id("job_id", job_id))
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}")
        return job

    async def list_jobs(
        self,
        *,
        state: JobState | str | Iterable[JobState | str] | None = None,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        priority_min: int | None = None,
        priority_max: int | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
        available_since: datetime | None = None,
        available_before: datetime | None = None,
        payload: Mapping[str, Any] | None = None,
        error: str | None = None,
        idempotency_key: str | None = None,
        limit: int = 100,
        after_id: int | None = None,
        descending: bool = False,
    ) -> JobPage:
        """Jobs matching every given filter, ordered by id, one keyset page (each with its
        ``result`` and ``errors``, as :meth:`get_job`): a :class:`~skiplock.core.JobPage`,
        a list of jobs.

        The time ranges take aware datetimes and are half-open: ``created_since <=
        created_at < created_before``, the same for ``available_at``. Pass
        ``page.next_after(limit)`` as ``after_id`` for the next page: the last id of a
        full page, or the page's ``resume_after`` (with ``descending`` the next page holds
        smaller ids). A page reads rows in proportion to ``limit``, whatever the table's
        size: when no index serves the filter in id order (pending or succeeded jobs by
        kind, tenant, priority or time) the search stops after ``JobPage.READ_FACTOR`` rows
        per job asked for, and ``resume_after`` says where (the page holds every match
        before it, possibly fewer than ``limit``, even none).

        The search (docs/search.md, "The search filters") covers the whole table:
        ``payload`` selects the jobs whose payload contains it (a dict: jsonb ``@>``, so
        ``{"user_id": 42}`` finds ``{"user_id": 42, "plan": "pro"}``;
        ``skiplock.core.rules.payload_filter`` builds one from ``PATH=VALUE`` terms),
        ``error`` those whose last error or any recorded attempt's error holds the text
        (lower case compared), ``idempotency_key`` the jobs with that key (global or
        tenant-scoped). A key is read through its index and never stops early; an error
        text walks the jobs that ever failed; a payload filter walks as any filter
        above. Where the opt-in payload or error index exists (``skiplock schema index
        add``), a walk that stopped early is replaced by a read through it when fewer
        than 5,000 jobs match after the cursor (a whole answer; an error text of 3
        characters or more). Other pages may stop at their budget.
        """
        check_int("limit", limit, minimum=1, maximum=INT8_RANGE[1])
        if after_id is not None:
            check_job_id("after_id", after_id)
        check_bool("descending", descending)
        for name, value in (("priority_min", priority_min), ("priority_max", priority_max)):
            if value is not None:
                check_priority(name, value)
        job_filter = JobFilter(
            states=as_states(state),
            kinds=as_names("kind", kind),
            tenants=as_names("tenant", tenant),
            priority_min=priority_min,
            priority_max=priority_max,
            created_since=_instant("created_since", created_since),
            created_before=_instant("created_before", created_before),
            available_since=_instant("available_since", available_since),
            available_before=_instant("available_before", available_before),
            payload=check_payload_filter(payload),
            error=check_search_text("error", error),
            idempotency_key=check_search_text("idempotency_key", idempotency_key),
        )
        page = Page(limit=limit, after_id=after_id, descending=descending)
        return await self._store.list_jobs(job_filter, page)

    async def dead_jobs(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        limit: int = 100,
        after_id: int | None = None,
    ) -> JobPage:
        """The dead-letter view: dead jobs with their last_error, errors, payload and
        tenant (a page of :meth:`list_jobs`; dead jobs by kind and tenant are read through
        their own indexes, so such a page is never cut short: ``resume_after`` is None)."""
        return await self.list_jobs(
            state=JobState.DEAD, kind=kind, tenant=tenant, limit=limit, after_id=after_id
        )

    async def counts(self) -> list[StateCount]:
        """Number of jobs per (state, kind, tenant)."""
        return await self._store.counts()

    async def throughput(
        self,
        *,
        window: timedelta | float = timedelta(hours=1),
        bucket: timedelta | float = timedelta(minutes=1),
    ) -> Throughput:
        """How many jobs finished per ``bucket`` over the last ``window`` (timedeltas or
        seconds): succeeded, dead, marked failed and cancelled, by each job's
        ``completed_at`` on the store's clock. Buckets are aligned on multiples of
        ``bucket`` (a whole number of seconds) and the last one, still filling, holds
        now; at most :data:`~skiplock.core.rules.MAX_BUCKETS` of them. It counts the jobs as
        they are now: a job replayed since, or deleted or purged by retention, no longer
        counts. Bad arguments raise :class:`~skiplock.ValidationError`."""
        now, since, count, step = await self._buckets(window, bucket)
        finished = await self._store.finished_counts(since, step)
        return throughput_from(now, since, step, count, finished)

    async def _buckets(
        self, window: timedelta | float, bucket: timedelta | float
    ) -> tuple[datetime, datetime, int, timedelta]:
        """The store's now, the first bucket's start, how many buckets and their length
        for ``window`` and ``bucket`` (checked)."""
        window = check_duration("window", to_duration(window))
        step = check_duration("bucket", to_duration(bucket))
        now = await self._store.now()
        since, count = throughput_window(now, window, step)
        return now, since, count, step

    async def history(
        self,
        *,
        window: timedelta | float = timedelta(hours=1),
        bucket: timedelta | float = timedelta(minutes=1),
    ) -> History:
        """The queue per ``bucket`` over the last ``window`` (as :meth:`throughput`'s):
        the jobs finished per kind, succeeded and failures (the failure rate), the due
        jobs per kind and the claim latency (p50/p99). The finished jobs are exact; the
        backlog and the latency come from the samples workers take once a minute (every
        running worker's counts loop takes part, one writes), so a bucket without a
        running worker has none. Two reads, whatever the table's size. Bad arguments
        raise :class:`~skiplock.ValidationError`."""
        now, since, count, step = await self._buckets(window, bucket)
        if True:  # ASYNC
            # The two reads are independent: on two connections at once.
            finished, samples = await asyncio.gather(
                self._store.finished_counts(since, step), self._store.queue_samples(since, step)
            )
        else:
            finished = self._store.finished_counts(since, step)
            samples = self._store.queue_samples(since, step)
        return history_from(now, since, step, count, finished, samples)

    async def health(
        self,
        *,
        max_pending_age: timedelta | float | None = None,
        worker_timeout: timedelta | float | None = None,
        max_dead: int | None = None,
    ) -> HealthReport:
        """The health of the queue and its workers (R9), from one store read.

        A worker is live while its last heartbeat is at most ``worker_timeout`` old
        (timedelta or seconds; default three ``heartbeat_interval``, at most ``stale_ttl``).
        The report is unhealthy, with one line per problem, when the store cannot be read,
        its schema is missing or older than the code, due pending jobs have no live worker
        claiming their kind (and tenant), and, when given, when a kind's oldest due job has
        waited longer than ``max_pending_age`` or a kind has more than ``max_dead`` dead
        jobs. The pauses in force are listed (``paused``); due jobs they hold back are not
        reported as uncovered. Never raises for a store failure (a database that is down,
        a timeout): the report says so. Bad thresholds raise :class:`~skiplock.ValidationError`.
        """
        thresholds = self.health_thresholds(
            max_pending_age=max_pending_age, worker_timeout=worker_timeout, max_dead=max_dead
        )
        try:
            snapshot = await self._store.health_snapshot()
        except Exception as exc:  # a health check reports what failed, it does not raise
            return unreachable_report(str(exc) or type(exc).__name__, thresholds)
        try:
            controls = await self._store.controls()
        except Exception:  # a schema before the controls (0014): nothing is paused
            controls = Controls()
        return assess_health(
            snapshot,
            thresholds,
            controls.pauses,
            rates=self._rates(controls),
            cluster_limits=self._cluster_limits(controls),
        )

    def _rates(self, controls: Controls) -> RateTable:
        """The rates the engine's kinds are limited by with ``controls`` (the engine's
        own; here only what ``controls`` sets)."""
        return EffectiveLimits(controls).table({})

    def _cluster_limits(self, controls: Controls) -> Mapping[str, int]:
        """The cluster limits in force of the engine's kinds (the engine's own declared
        ones, none here, under the ones ``controls`` sets at run time)."""
        return kind_limits({}, controls.concurrency, "cluster")

    def health_thresholds(
        self,
        *,
        max_pending_age: timedelta | float | None = None,
        worker_timeout: timedelta | float | None = None,
        max_dead: int | None = None,
    ) -> HealthThresholds:
        """The thresholds :meth:`health` uses for these arguments (validated, defaults
        filled in); for a report made without the store, e.g.
        :func:`skiplock.core.rules.unreachable_report`."""
        if worker_timeout is None:
            settings = self._settings
            beats = timedelta(seconds=LIVE_HEARTBEATS * settings.heartbeat_interval)
            live_for = min(beats, settings.stale_ttl)
        else:
            live_for = check_duration("worker_timeout", to_duration(worker_timeout))
        return HealthThresholds(
            worker_timeout=live_for,
            max_pending_age=None
            if max_pending_age is None
            else check_duration("max_pending_age", to_duration(max_pending_age), allow_zero=True),
            max_dead=None if max_dead is None else check_int("max_dead", max_dead, minimum=0),
        )

    async def audit_trail(self, job_id: int) -> list[AuditEvent]:
        """The job's audit events (J10) in the store's audit table, oldest first;
        ``[]`` for a job without any (also an unknown one). A deleted job's events stay
        until retention purges them."""
        return await self._store.audit_trail(check_job_id("job_id", job_id))

    async def why(self, job_id: int) -> JobWait:
        """Why the job has not started (issue 45): every reason that holds now, from the
        rules a claim applies: due later, paused (by whom, since when), a rate limit or
        provider cap used up (when the next token comes), its concurrency key full (the
        running jobs holding it) or its kind at its cluster limit, no live worker claims
        its kind and tenant, due jobs of its kind a claim takes first (counted up to
        :data:`~skiplock.core.rules.WAIT_COUNT_BOUND`, then "at least"). A job that is not
        pending has the one reason ``not_pending``; JobNotFoundError if absent. A few
        bounded reads, whatever the table's size."""
        job = await self.get_job(job_id)
        snapshot = await self._store.health_snapshot()
        try:
            controls = await self._store.controls()
        except Exception:  # a schema before the controls (0014): nothing is paused
            controls = Controls()
        holders: list[int] = []
        ahead, bounded = 0, False
        if job.state is JobState.PENDING:
            if job.concurrency_key is not None:
                holders = await self._key_holders(job.concurrency_key)
            ahead, bounded = await self._jobs_ahead(job, snapshot.now)
        return explain_wait(
            job,
            snapshot,
            controls,
            rates=self._rates(controls),
            cluster_limits=self._cluster_limits(controls),
            worker_timeout=self.health_thresholds().worker_timeout,
            holders=holders,
            ahead=ahead,
            ahead_bounded=bounded,
        )

    async def _key_holders(self, key: str) -> list[int]:
        """The ids of the running jobs holding concurrency ``key``, among the first
        :data:`WAIT_COUNT_BOUND` running jobs (running jobs are few: workers' slots)."""
        page = await self._store.list_jobs(
            JobFilter(states=frozenset({JobState.RUNNING})), Page(limit=WAIT_COUNT_BOUND)
        )
        return [j.id for j in page if j.concurrency_key == key]

    async def _jobs_ahead(self, job: Job, now: datetime) -> tuple[int, bool]:
        """How many due pending jobs of ``job``'s kind a claim takes before it (higher
        priority, or the same and due earlier, or due at once with a smaller id), and
        whether the count stopped at the bound (then it is a lower bound)."""
        due = now + timedelta(microseconds=1)  # available_before is exclusive
        higher = (
            JobFilter(
                states=frozenset({JobState.PENDING}),
                kinds=frozenset({job.kind}),
                priority_min=job.priority + 1,
                available_before=due,
            )
            if job.priority < PRIORITY_RANGE[1]
            else None
        )
        same = JobFilter(
            states=frozenset({JobState.PENDING}),
            kinds=frozenset({job.kind}),
            priority_min=job.priority,
            priority_max=job.priority,
            available_before=min(due, job.available_at + timedelta(microseconds=1)),
        )
        count = 0
        for job_filter in (higher, same):
            if job_filter is None:
                continue
            after: int | None = None
            # Pages may stop short (JobPage.READ_FACTOR): a bounded number of them.
            for _ in range(WAIT_COUNT_BOUND // 100):
                page = await self._store.list_jobs(
                    job_filter, Page(limit=WAIT_COUNT_BOUND, after_id=after)
                )
                count += sum(
                    1
                    for j in page
                    if job_filter is higher or (j.available_at, j.id) < (job.available_at, job.id)
                )
                if count >= WAIT_COUNT_BOUND:
                    return WAIT_COUNT_BOUND, True
                after = page.next_after(WAIT_COUNT_BOUND)
                if after is None:
                    break
            else:
                return count, True
        return count, False

    async def retention(self) -> Retention:
        """The retention view (issue 45; docs/retention.md): per retention purge (succeeded
        jobs by ``Settings.retention``, audit events by ``Settings.audit_retention``; a
        window of None is a purge that is off), how many rows are older than its window
        now (what its next run removes) and when its last run finished, how long it took
        and what it removed. Bounded cost at any size: on PostgreSQL the jobs are counted
        exactly from the per-minute totals, audit events exactly up to 10,000, then
        estimated (``estimated``)."""
        settings = self._settings
        return await self._store.retention(jobs=settings.retention, audit=settings.audit_retention)

    async def paused(self) -> list[Pause]:
        """Every pause in force."""
        return list((await self._store.controls()).pauses)

    async def limits(self) -> list[Limit]:
        """Every limit set at run time (not the policies' and settings' ones)."""
        return list((await self._store.controls()).limits)

    async def worker_jobs(self) -> dict[str, list[Job]]:
        """The running jobs by the id of the worker that runs them (issue 45: what each
        worker runs now; ``claimed_at`` is since when), oldest claim first; among the
        first :data:`~skiplock.core.rules.WAIT_COUNT_BOUND` running jobs (running jobs
        are few: the workers' slots)."""
        page = await self._store.list_jobs(
            JobFilter(states=frozenset({JobState.RUNNING})), Page(limit=WAIT_COUNT_BOUND)
        )
        by_worker: dict[str, list[Job]] = {}
        for job in sorted(
            page, key=lambda j: (j.claimed_at.timestamp() if j.claimed_at else 0, j.id)
        ):
            if job.claimed_by is not None:
                by_worker.setdefault(job.claimed_by, []).append(job)
        return by_worker

    async def concurrency_limits(self) -> list[ConcurrencyLimit]:
        """Every concurrency limit set at run time (issue 45; not the declared ones)."""
        return list((await self._store.controls()).concurrency)


class AsyncReader(AsyncReadOps):
    """The admin reads of ``store`` without an engine: a store that implements only the
    reads role (:class:`~skiplock.ports.AsyncReadsRole`, e.g. over a read replica) is
    enough. ``settings`` gives the health report's defaults (``heartbeat_interval``,
    ``stale_ttl``). Serves :class:`~skiplock.integrations.dashboard.AsyncDashboard`'s read
    pages and :func:`skiplock.contrib.prometheus.exporter`.
    """

    def __init__(self, store: AsyncReadsRole, settings: Settings | None = None) -> None:
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(f"settings must be skiplock.Settings, got {type(settings).__name__}")
        self._store = store
        self._settings = settings if settings is not None else Settings()

    @property
    def store(self) -> AsyncReadsRole:
        """The store read."""
        return self._store

    @property
    def settings(self) -> Settings:
        """The settings the health report's defaults come from."""
        return self._settings


def _instant(name: str, value: datetime | None) -> datetime | None:
    """``value`` in UTC if it is a time a job may have (else ValidationError naming
    ``name``); None stays None."""
    return None if value is None else check_available_at(value, name)
