"""Admin operations of an engine (R13 / J8) (async source; ``_admin.py`` is the sync
twin): read, list, replay, cancel, fail and delete jobs through the store, the health
report (R9) and a job's audit trail (J10)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import attrs

from skiplock.core import (
    AuditEvent,
    Event,
    HealthReport,
    InvalidTransitionError,
    Job,
    JobFilter,
    JobNotFoundError,
    JobPage,
    JobState,
    Page,
    StateCount,
    ValidationError,
    sources,
)
from skiplock.core._controls import Controls, EffectiveLimits
from skiplock.core._health import (
    LIVE_HEARTBEATS,
    HealthThresholds,
    assess_health,
    unreachable_report,
)
from skiplock.core._history import History, history_from
from skiplock.core._throughput import Throughput, throughput_from, throughput_window
from skiplock.core._validation import (
    INT8_RANGE,
    check_actor,
    check_available_at,
    check_bool,
    check_duration,
    check_int,
    check_job_id,
    check_priority,
    to_duration,
)

from .._errors import SelectionChangedError
from .._inputs import action_filter, as_names, as_states, confirmed_jobs
from ._bulk import MAX_CONFIRMED, BulkResult, skipped_job
from ._purge import PURGE_BATCH, DeadPurge, DeadSelection

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from skiplock.core._bucket import RateTable
    from skiplock.ports import AsyncAudit, AsyncJobStore

    from ..settings._settings import Settings


#: At most this many jobs per :meth:`AsyncAdminOps.act_on_jobs` call (one statement).
MAX_ACTION_IDS = 1000


class AsyncAdminOps:
    """The admin API, mixed into :class:`AsyncEngine` (it provides ``_store``,
    ``_settings`` and ``_audit``, the engine's audit of changes without an actor, None
    while it is off).

    Arguments are validated like enqueue arguments: a bad one raises
    :class:`~skiplock.ValidationError` before the store is asked. Every method that
    changes jobs takes ``actor=``: who the audit trail names for the change (J10;
    default ``Settings.audit_actor``; ignored while the audit trail is off).
    """

    _store: AsyncJobStore
    _settings: Settings
    _audit: AsyncAudit | None

    def _audit_by(self, actor: str | None) -> AsyncAudit | None:
        """The audit of a change made by ``actor`` (checked), None when it is off."""
        if actor is not None:
            check_actor("actor", actor)
        audit = self._audit
        if audit is None or actor is None:
            return audit
        return attrs.evolve(audit, actor=actor)

    async def get_job(self, job_id: int) -> Job:
        """One job, with what its runs recorded (``attempts``, ``last_error``,
        ``started_at``, ``completed_at``, the processor's ``result`` and the failed
        attempts in ``errors``: docs/architecture.md, "What a job records");
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
        now; at most :data:`~skiplock.core._throughput.MAX_BUCKETS` of them. It counts the jobs as
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
            cluster_limits=self._cluster_limits(),
        )

    def _rates(self, controls: Controls) -> RateTable:
        """The rates the engine's kinds are limited by with ``controls`` (the engine's
        own; here only what ``controls`` sets)."""
        return EffectiveLimits(controls).table({})

    def _cluster_limits(self) -> Mapping[str, int]:
        """The cluster limits of the engine's kinds (the engine's own; none here)."""
        return {}

    def health_thresholds(
        self,
        *,
        max_pending_age: timedelta | float | None = None,
        worker_timeout: timedelta | float | None = None,
        max_dead: int | None = None,
    ) -> HealthThresholds:
        """The thresholds :meth:`health` uses for these arguments (validated, defaults
        filled in); for a report made without the store, e.g.
        :func:`skiplock.core._health.unreachable_report`."""
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

    async def retry_job(
        self, job_id: int, *, reset_attempts: bool = True, actor: str | None = None
    ) -> Job:
        """Replay a dead, failed or cancelled job: pending and due now. It starts over
        (attempts 0) unless ``reset_attempts=False`` keeps its attempts. Audited as
        ``job_replay``."""
        return await self._apply_one(
            job_id, Event.REPLAY, reset_attempts=reset_attempts, actor=actor
        )

    async def retry_dead(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        reset_attempts: bool = True,
        actor: str | None = None,
        through: int | None = None,
        expected: int | None = None,
    ) -> BulkResult:
        """Replay every dead job matching the filter; returns the ids (a
        :class:`~skiplock.BulkResult`). Each starts over (attempts 0) unless
        ``reset_attempts=False`` keeps its attempts (J8). Audited as ``job_replay`` per
        job.

        Bound it to what an operator confirmed with ``through`` (the largest id they were
        shown: a job that dies later is left alone) and ``expected`` (how many they were
        shown): when the dead jobs matching up to ``through`` are not ``expected`` many,
        it raises :class:`~skiplock.SelectionChangedError` with the count now and changes
        nothing. A bound call takes at most 10,000 jobs (``MAX_CONFIRMED``) and
        acts as :meth:`act_as_confirmed` (a job replayed by someone else meanwhile is in
        ``skipped``)."""
        check_bool("reset_attempts", reset_attempts)
        dead = JobFilter(
            states=frozenset({JobState.DEAD}),
            kinds=as_names("kind", kind),
            tenants=as_names("tenant", tenant),
        )
        if through is None and expected is None:
            return BulkResult(await self._apply(dead, Event.REPLAY, reset_attempts, actor))
        if expected is not None:
            check_int("expected", expected, minimum=0, maximum=MAX_CONFIRMED)
        bound = None if through is None else check_job_id("through", through)
        ids: list[int] = []
        after: int | None = None
        while True:  # dead jobs by kind and tenant: index walks, never cut short
            read = await self._store.list_jobs(dead, Page(limit=MAX_ACTION_IDS, after_id=after))
            ids += [job.id for job in read if bound is None or job.id <= bound]
            after = read.next_after(MAX_ACTION_IDS)
            if after is None or (bound is not None and after >= bound) or len(ids) > MAX_CONFIRMED:
                break
        if len(ids) > MAX_CONFIRMED:
            raise ValidationError(
                f"more than {MAX_CONFIRMED} dead jobs match: narrow the filter or lower `through`"
            )
        if expected is not None and len(ids) != expected:
            raise SelectionChangedError(
                f"{len(ids)} dead jobs match now, not the {expected} confirmed; nothing changed",
                count=len(ids),
                confirmed=expected,
            )
        jobs = dict.fromkeys(ids, JobState.DEAD)
        return await self._act_confirmed(
            "retry", confirmed_jobs(jobs, MAX_CONFIRMED), reset_attempts, actor
        )

    async def cancel_job(self, job_id: int, *, actor: str | None = None) -> Job:
        """Cancel a job. A running one is asked to stop: its worker's next heartbeat
        interrupts the processor (``ctx.cancelled``, :class:`JobCancelledError`), and its
        result is discarded by fencing (R13). Audited as ``job_cancelled``."""
        return await self._apply_one(job_id, Event.CANCEL, actor=actor)

    async def fail_job(self, job_id: int, *, actor: str | None = None) -> Job:
        """Set the manual stop flag: ``failed``, never tried again unless replayed.
        Audited as ``job_failed_manually``."""
        return await self._apply_one(job_id, Event.MARK_FAILED, actor=actor)

    async def delete_job(self, job_id: int, *, actor: str | None = None) -> Job:
        """Delete a job that is not running; returns it as it was. Audited as
        ``job_discard``, with its payload."""
        check_job_id("job_id", job_id)
        audit = self._audit_by(actor)
        job_filter = JobFilter(ids=frozenset({job_id}))
        deleted = await self._store.delete(job_filter, audit=audit)
        if deleted:
            return deleted[0]
        job = await self.get_job(job_id)
        raise InvalidTransitionError(f"cannot delete job {job_id}: it is {job.state.value}")

    async def purge_dead(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        died_before: datetime | None = None,
        error: str | None = None,
        up_to_id: int | None = None,
        dry_run: bool = False,
        actor: str | None = None,
    ) -> DeadPurge:
        """Delete the dead jobs that match every given filter: ``kind`` and ``tenant`` (as
        :meth:`dead_jobs`), ``died_before`` (died before this aware time), ``error`` (text
        in the last error, ignoring case) and ``up_to_id`` (ids up to this one). With
        ``dry_run`` nothing is deleted: the :class:`~skiplock.engine.DeadPurge` says how
        many match and the largest matching id, to pass as ``up_to_id`` to the purge an
        operator then confirms (a job that died since is not deleted).

        Reads the dead-letter view a page at a time and deletes each page's matches in one
        statement, each only if it is still dead then (a job replayed meanwhile stays).
        Audited as ``job_discard`` per job, with its payload (as :meth:`delete_job`).
        """
        check_bool("dry_run", dry_run)
        selection = DeadSelection.checked(died_before, error, up_to_id)
        audit = None if dry_run else self._audit_by(actor)
        dead = frozenset({JobState.DEAD})
        matched = deleted = 0
        last: int | None = None
        after: int | None = None
        while True:
            page = await self.dead_jobs(kind=kind, tenant=tenant, limit=PURGE_BATCH, after_id=after)
            ids = frozenset(job.id for job in page if selection.matches(job))
            if ids:
                matched += len(ids)
                last = max(ids)
            if ids and not dry_run:
                job_filter = JobFilter(ids=ids, states=dead)
                deleted += len(await self._store.delete(job_filter, audit=audit))
            after = page.next_after(PURGE_BATCH)
            if after is None or selection.past_bound(after):
                return DeadPurge(matched=matched, deleted=deleted, up_to_id=last)

    async def act_on_jobs(
        self,
        action: str,
        ids: Iterable[int],
        *,
        states: JobState | str | Iterable[JobState | str] | None = None,
        reset_attempts: bool = True,
        actor: str | None = None,
    ) -> list[int]:
        """Apply an operator action to the jobs ``ids`` (at most
        :data:`MAX_ACTION_IDS`) in one store call; returns the ids it changed, sorted.

        ``action`` is ``retry``, ``cancel``, ``fail`` or ``discard`` (delete), as
        :meth:`retry_job`, :meth:`cancel_job`, :meth:`fail_job` and :meth:`delete_job`
        do and audit them, per job. A job changes only if its state, checked in the same
        statement as the change, allows the action and is one of ``states`` (when
        given): a door that showed a button for a job in a given state passes that
        state, so a job changed since is left alone (a stale Discard never deletes a job
        replayed meanwhile). Jobs that are absent or in another state are skipped.
        """
        job_filter, event = action_filter(action, ids, states, MAX_ACTION_IDS)
        if job_filter is None:
            return []
        audit = self._audit_by(actor)
        if event is None:
            return sorted(job.id for job in await self._store.delete(job_filter, audit=audit))
        check_bool("reset_attempts", reset_attempts)
        reset = reset_attempts and event is Event.REPLAY
        changed = await self._store.apply(job_filter, event, reset_attempts=reset, audit=audit)
        return sorted(changed)

    async def act_as_confirmed(
        self,
        action: str,
        jobs: Mapping[int, JobState | str],
        *,
        reset_attempts: bool = True,
        actor: str | None = None,
    ) -> BulkResult:
        """Apply an operator action to exactly the jobs an operator confirmed: ``jobs``
        maps each id to the state it was shown in (at most
        10,000, ``MAX_CONFIRMED``); ``action`` as :meth:`act_on_jobs`.

        First it reads them: when one no longer exists or is no longer in the state it was
        shown in, it raises :class:`~skiplock.SelectionChangedError` (``count``: how many
        still are) and changes nothing. Then it acts as :meth:`act_on_jobs`, each job only
        in its shown state, checked in the statement that changes it; a job that changes
        between the read and that statement is left alone. Returns a
        :class:`~skiplock.BulkResult`: the ids changed and the jobs skipped, with why.
        """
        confirmed = confirmed_jobs(jobs, MAX_CONFIRMED, action)
        still = 0
        for batch in _batches(list(confirmed)):
            read = await self._store.list_jobs(JobFilter(ids=frozenset(batch)), Page(len(batch)))
            still += sum(1 for job in read if job.state is confirmed[job.id])
        if still != len(confirmed):
            raise SelectionChangedError(
                f"{len(confirmed) - still} of the {len(confirmed)} confirmed jobs changed "
                f"since: {still} still match; nothing changed",
                count=still,
                confirmed=len(confirmed),
            )
        return await self._act_confirmed(action, confirmed, reset_attempts, actor)

    async def _act_confirmed(
        self,
        action: str,
        confirmed: Mapping[int, JobState],
        reset_attempts: bool,
        actor: str | None,
    ) -> BulkResult:
        """Act on ``confirmed`` (checked) per shown state, in batches; then read the jobs
        left alone to say why."""
        by_state: dict[JobState, list[int]] = {}
        for job_id, state in confirmed.items():
            by_state.setdefault(state, []).append(job_id)
        changed: list[int] = []
        for state, ids in by_state.items():
            for batch in _batches(ids):
                changed += await self.act_on_jobs(
                    action, batch, states=[state], reset_attempts=reset_attempts, actor=actor
                )
        left = sorted(set(confirmed) - set(changed))
        now: dict[int, JobState] = {}
        for batch in _batches(left):
            read = await self._store.list_jobs(JobFilter(ids=frozenset(batch)), Page(len(batch)))
            now |= {job.id: job.state for job in read}
        skipped = [skipped_job(i, now.get(i), confirmed[i]) for i in left]
        return BulkResult(changed, skipped)

    async def audit_trail(self, job_id: int) -> list[AuditEvent]:
        """The job's audit events (J10) in the store's audit table, oldest first;
        ``[]`` for a job without any (also an unknown one). A deleted job's events stay
        until retention purges them."""
        return await self._store.audit_trail(check_job_id("job_id", job_id))

    async def _apply(
        self, job_filter: JobFilter, event: Event, reset_attempts: bool, actor: str | None
    ) -> list[int]:
        return await self._store.apply(
            job_filter, event, reset_attempts=reset_attempts, audit=self._audit_by(actor)
        )

    async def _apply_one(
        self,
        job_id: int,
        event: Event,
        *,
        reset_attempts: bool = False,
        actor: str | None = None,
    ) -> Job:
        check_job_id("job_id", job_id)
        check_bool("reset_attempts", reset_attempts)
        changed = await self._store.apply_job(
            job_id, event, reset_attempts=reset_attempts, audit=self._audit_by(actor)
        )
        if changed is not None:
            return changed
        job = await self.get_job(job_id)
        if job.state not in sources(event):
            raise InvalidTransitionError(_refusal(job, event))
        raise InvalidTransitionError(f"job {job_id} changed concurrently; try again")


#: What an operator's event does to a job, in a refusal's words.
_DONE = {Event.REPLAY: "retried", Event.CANCEL: "cancelled", Event.MARK_FAILED: "marked failed"}


def _refusal(job: Job, event: Event) -> str:
    """Why ``event`` cannot change ``job``, naming the states it can change, e.g. "job 5 is
    pending: only failed, dead or cancelled jobs can be retried" (what every door shows)."""
    allowed = [state.value for state in JobState if state in sources(event)]
    states = allowed[0] if len(allowed) == 1 else f"{', '.join(allowed[:-1])} or {allowed[-1]}"
    return (
        f"job {job.id} is {job.state.value}: only {states} jobs can be "
        f"{_DONE.get(event, event.value)}"
    )


def _batches(ids: list[int]) -> list[list[int]]:
    """``ids`` in slices of at most :data:`MAX_ACTION_IDS` (one statement each)."""
    return [ids[i : i + MAX_ACTION_IDS] for i in range(0, len(ids), MAX_ACTION_IDS)]


def _instant(name: str, value: datetime | None) -> datetime | None:
    """``value`` in UTC if it is a time a job may have (else ValidationError naming
    ``name``); None stays None."""
    return None if value is None else check_available_at(value, name)
