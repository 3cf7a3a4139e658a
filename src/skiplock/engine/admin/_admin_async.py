"""Admin operations of an engine (R13 / J8) (async source; ``_admin.py`` is the sync
twin): read, list, replay, cancel, fail and delete jobs through the store, the health
report (R9) and a job's audit trail (J10)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from skiplock.core import (
    Event,
    InvalidTransitionError,
    Job,
    JobFilter,
    JobState,
    Page,
    ValidationError,
    sources,
)
from skiplock.core.rules import check_bool, check_int, check_job_id
from skiplock.ports import AsyncAdminRole, AsyncReadsRole

from .._errors import SelectionChangedError
from .._inputs import action_filter, as_names, confirmed_jobs
from ._bulk import MAX_CONFIRMED, BulkResult, skipped_job
from ._purge import PURGE_BATCH, DeadPurge, DeadSelection
from ._reads_async import AsyncReadOps

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import datetime

    from skiplock.ports import AsyncAudit

    from ..settings._settings import Settings


class AsyncAdminStore(AsyncReadsRole, AsyncAdminRole, Protocol):
    """The roles the admin changes use: reads and admin changes."""


#: At most this many jobs per :meth:`AsyncAdminOps.act_on_jobs` call (one statement).
MAX_ACTION_IDS = 1000


class AsyncAdminOps(AsyncReadOps):
    """The admin API, mixed into :class:`AsyncEngine` and the operator handle (they
    provide ``_store``, ``_settings`` and ``_audit``: the audit of their changes, bound to
    their actor, None while the audit trail is off).

    Arguments are validated like enqueue arguments: a bad one raises
    :class:`~skiplock.ValidationError` before the store is asked. The audit trail (J10)
    names the handle's actor for every change: the engine's are made as
    ``Settings.audit_actor``; to name someone, call through
    ``engine.operator(actor)`` (no method takes ``actor=``).
    """

    _store: AsyncAdminStore
    _settings: Settings
    _audit: AsyncAudit | None

    async def retry_job(self, job_id: int, *, reset_attempts: bool = True) -> Job:
        """Replay a dead, failed or cancelled job: pending and due now. It starts over
        (attempts 0) unless ``reset_attempts=False`` keeps its attempts. Audited as
        ``job_replay``."""
        return await self._apply_one(job_id, Event.REPLAY, reset_attempts=reset_attempts)

    async def retry_dead(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        reset_attempts: bool = True,
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
            return BulkResult(await self._apply(dead, Event.REPLAY, reset_attempts))
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
            "retry", confirmed_jobs(jobs, MAX_CONFIRMED), reset_attempts
        )

    async def cancel_job(self, job_id: int) -> Job:
        """Cancel a job. A running one is asked to stop: its worker's next heartbeat
        interrupts the processor (``ctx.cancelled``, :class:`JobCancelledError`), and its
        result is discarded by fencing (R13). Audited as ``job_cancelled``."""
        return await self._apply_one(job_id, Event.CANCEL)

    async def fail_job(self, job_id: int) -> Job:
        """Set the manual stop flag: ``failed``, never tried again unless replayed.
        Audited as ``job_failed_manually``."""
        return await self._apply_one(job_id, Event.MARK_FAILED)

    async def delete_job(self, job_id: int) -> Job:
        """Delete a job that is not running; returns it as it was. Audited as
        ``job_discard``, with its payload."""
        check_job_id("job_id", job_id)
        job_filter = JobFilter(ids=frozenset({job_id}))
        deleted = await self._store.delete(job_filter, audit=self._audit)
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
        audit = None if dry_run else self._audit
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
        audit = self._audit
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
        return await self._act_confirmed(action, confirmed, reset_attempts)

    async def _act_confirmed(
        self,
        action: str,
        confirmed: Mapping[int, JobState],
        reset_attempts: bool,
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
                    action, batch, states=[state], reset_attempts=reset_attempts
                )
        left = sorted(set(confirmed) - set(changed))
        now: dict[int, JobState] = {}
        for batch in _batches(left):
            read = await self._store.list_jobs(JobFilter(ids=frozenset(batch)), Page(len(batch)))
            now |= {job.id: job.state for job in read}
        skipped = [skipped_job(i, now.get(i), confirmed[i]) for i in left]
        return BulkResult(changed, skipped)

    async def _apply(self, job_filter: JobFilter, event: Event, reset_attempts: bool) -> list[int]:
        return await self._store.apply(
            job_filter, event, reset_attempts=reset_attempts, audit=self._audit
        )

    async def _apply_one(
        self,
        job_id: int,
        event: Event,
        *,
        reset_attempts: bool = False,
    ) -> Job:
        check_job_id("job_id", job_id)
        check_bool("reset_attempts", reset_attempts)
        changed = await self._store.apply_job(
            job_id, event, reset_attempts=reset_attempts, audit=self._audit
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
