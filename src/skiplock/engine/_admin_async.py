"""Admin operations of an engine (R13 / J8) (async source; ``_admin.py`` is the sync
twin): read, list, replay, cancel, fail and delete jobs through the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skiplock.core import (
    INT8_RANGE,
    Event,
    InvalidTransitionError,
    Job,
    JobFilter,
    JobNotFoundError,
    JobState,
    Page,
    StateCount,
    check_bool,
    check_int,
    check_job_id,
    check_priority,
    transition,
)

from ._enqueue import as_names, as_states

if TYPE_CHECKING:
    from collections.abc import Iterable

    from skiplock.ports import AsyncJobStore


class AsyncAdminOps:
    """The admin API, mixed into :class:`AsyncEngine` (it provides ``_store``).

    Arguments are validated like enqueue arguments: a bad one raises
    :class:`~skiplock.ValidationError` before the store is asked.
    """

    _store: AsyncJobStore

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
        limit: int = 100,
        after_id: int | None = None,
        descending: bool = False,
    ) -> list[Job]:
        """Jobs matching every given filter, ordered by id, one keyset page (each with its
        ``result`` and ``errors``, as :meth:`get_job`).

        Pass the last id of a page as ``after_id`` for the next one (with ``descending``
        the next page holds smaller ids).
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
    ) -> list[Job]:
        """The dead-letter view: dead jobs with their last_error, errors, payload and
        tenant."""
        return await self.list_jobs(
            state=JobState.DEAD, kind=kind, tenant=tenant, limit=limit, after_id=after_id
        )

    async def counts(self) -> list[StateCount]:
        """Number of jobs per (state, kind, tenant)."""
        return await self._store.counts()

    async def retry_job(self, job_id: int, *, reset_attempts: bool = True) -> Job:
        """Replay a dead, failed or cancelled job: pending and due now. It starts over
        (attempts 0) unless ``reset_attempts=False`` keeps its attempts."""
        return await self._apply_one(job_id, Event.REPLAY, reset_attempts=reset_attempts)

    async def retry_dead(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        tenant: str | Iterable[str] | None = None,
        reset_attempts: bool = True,
    ) -> list[int]:
        """Replay every dead job matching the filter; returns the ids. Each starts over
        (attempts 0) unless ``reset_attempts=False`` keeps its attempts (J8)."""
        check_bool("reset_attempts", reset_attempts)
        job_filter = JobFilter(
            states=frozenset({JobState.DEAD}),
            kinds=as_names("kind", kind),
            tenants=as_names("tenant", tenant),
        )
        return await self._store.apply(job_filter, Event.REPLAY, reset_attempts=reset_attempts)

    async def cancel_job(self, job_id: int) -> Job:
        """Cancel a job. A running one is asked to stop: its worker's next heartbeat
        interrupts the processor (``ctx.cancelled``, :class:`JobCancelledError`), and its
        result is discarded by fencing (R13)."""
        return await self._apply_one(job_id, Event.CANCEL)

    async def fail_job(self, job_id: int) -> Job:
        """Set the manual stop flag: ``failed``, never tried again unless replayed."""
        return await self._apply_one(job_id, Event.MARK_FAILED)

    async def delete_job(self, job_id: int) -> Job:
        """Delete a job that is not running; returns it as it was."""
        check_job_id("job_id", job_id)
        deleted = await self._store.delete(JobFilter(ids=frozenset({job_id})))
        if deleted:
            return deleted[0]
        job = await self.get_job(job_id)
        raise InvalidTransitionError(f"cannot delete job {job_id}: it is {job.state.value}")

    async def _apply_one(self, job_id: int, event: Event, *, reset_attempts: bool = False) -> Job:
        check_job_id("job_id", job_id)
        check_bool("reset_attempts", reset_attempts)
        changed = await self._store.apply(
            JobFilter(ids=frozenset({job_id})), event, reset_attempts=reset_attempts
        )
        job = await self.get_job(job_id)
        if not changed:
            transition(job.state, event)  # raises with the allowed events named
            raise InvalidTransitionError(f"job {job_id} changed concurrently; try again")
        return job
