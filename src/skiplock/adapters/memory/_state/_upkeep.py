"""The memory state's ``UpkeepRole`` (:mod:`skiplock.ports`): queue samples
(``roll_up_counts``; there is nothing else to fold), the maintenance lease and retention
of jobs and audit events.

Tested by the maintenance and purge tests of the kit's ``AsyncWorkersContract`` (which
spans ``WorkersRole`` and ``UpkeepRole``), ``AsyncHistoryContract``'s sampling, the
remembered-key tests of ``AsyncIdempotencyContract`` and the retention tests of
``AsyncAuditContract``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from skiplock.core import Job, JobState, ValidationError
from skiplock.core.store import (
    AUDIT_PURGE,
    JOBS_PURGE,
    SAMPLE_RETENTION,
    PurgeRun,
    job_scoped_key,
    purgeable,
    sample_minute,
    take_samples,
)

from ._base import StateBase, public_job

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta


class UpkeepState(StateBase):
    """Roll-ups, the maintenance lease and retention."""

    def take_samples(self) -> None:
        """This minute's queue samples, unless taken; drop those past retention."""
        now = self.now()
        minute = sample_minute(now)
        with self._lock:
            if self._samples and self._samples[-1].minute >= minute:
                return
            horizon = minute - SAMPLE_RETENTION
            kept = [s for s in self._samples if s.minute >= horizon]
            self._samples = kept + take_samples(now, self._jobs.values())

    def try_maintenance(self, name: str, every: timedelta) -> bool:
        """True (and ``name`` counts as run now) if it last ran at or before
        ``now - every`` or never; else False."""
        with self._lock:
            now = self.now()
            last = self._maintenance.get(name)
            if last is not None and last > now - every:
                return False
            self._maintenance[name] = now
            return True

    def purge(
        self,
        *,
        older_than: timedelta,
        archive: bool,
        batch_size: int,
        key_window: timedelta | None = None,
    ) -> int:
        """Delete (or archive) succeeded jobs completed before ``now - older_than``, in
        batches of ``batch_size`` (the lock is released between batches); returns the
        number of jobs. With ``key_window`` their idempotency keys are remembered, and
        keys remembered longer than it ago are forgotten (without: every one is)."""

        def batch() -> int:
            with self._lock:
                now = self.now()
                cutoff = now - older_than
                doomed = sorted(
                    job_id
                    for job_id in self._by_state[JobState.SUCCEEDED]
                    if purgeable(self._jobs[job_id], cutoff)
                )[:batch_size]
                for job_id in doomed:
                    job = self._commit_remove(job_id)
                    if job is None:
                        continue
                    if archive:
                        self._archived[job_id] = job
                    key = job_scoped_key(job)
                    if key is not None and key_window is not None:
                        self._remembered[key] = (job_id, now)
            return len(doomed)

        purged = self._recorded(JOBS_PURGE, lambda: _in_batches(batch, batch_size))
        with self._lock:
            forget = None if key_window is None else self.now() - key_window
            self._remembered = {
                key: (job_id, at)
                for key, (job_id, at) in self._remembered.items()
                if forget is not None and at >= forget
            }
        return purged

    def purge_audit(self, *, older_than: timedelta, batch_size: int) -> int:
        """Delete the audit events recorded before ``now - older_than`` (J10), oldest
        first, in batches of ``batch_size`` (the lock is released between batches);
        returns how many."""

        def batch() -> int:
            with self._lock:
                cutoff = self.now() - older_than
                doomed = set(
                    sorted(
                        (i for i, event in enumerate(self._audit) if event.at < cutoff),
                        key=lambda i: self._audit[i].at,
                    )[:batch_size]
                )
                self._audit = [e for i, e in enumerate(self._audit) if i not in doomed]
            return len(doomed)

        return self._recorded(AUDIT_PURGE, lambda: _in_batches(batch, batch_size))

    def _recorded(self, name: str, run: Callable[[], int]) -> int:
        """``run`` (a purge), recorded as purge ``name``'s last run."""
        started, began = self.now(), time.monotonic()
        removed = run()
        seconds = time.monotonic() - began
        with self._lock:
            self._purge_runs[name] = PurgeRun(max(started, self.now()), seconds, removed)
        return removed

    def archived(self) -> dict[int, Job]:
        """Jobs moved out by ``purge(archive=True)``, by id."""
        with self._lock:
            return {job_id: public_job(job) for job_id, job in sorted(self._archived.items())}


def _in_batches(batch: Callable[[], int], batch_size: int) -> int:
    """Run ``batch`` (one retention batch, returning how many rows it removed) until one
    comes back short; returns the total."""
    if batch_size < 1:
        raise ValidationError(f"batch_size must be >= 1, got {batch_size}")
    total = 0
    while True:
        count = batch()
        total += count
        if count < batch_size:
            return total
