"""The memory state's ``WorkersRole`` (:mod:`skiplock.ports`): worker rows and heartbeats,
the next-due time, and the recovery of jobs whose worker vanished (the notifier's
listeners are the base's).

Tested by the kit's ``AsyncWorkersContract`` (which spans ``WorkersRole`` and
``UpkeepRole``: maintenance and retention), ``AsyncNotifierContract``, the ``next_due``
tests of ``AsyncClaimContract`` and the worker tests of ``AsyncLifecycleContract``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skiplock.core import JobState, NextDue, WorkerInfo
from skiplock.core.store import after_recovery, after_release, is_stale
from skiplock.core.store import next_due as lifecycle_next_due

from ._base import AuditNote, StateBase, WorkerRow
from ._transaction import Scope, audit_end

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import timedelta


class WorkersState(StateBase):
    """Worker registration, heartbeats, next due time and stale-claim recovery."""

    def next_due(
        self, kinds: frozenset[str] | None, tenants: frozenset[str] | None
    ) -> NextDue | None:
        """When the next pending job of ``kinds`` and ``tenants`` falls due (core's
        :func:`~skiplock.core.store.next_due`), at the store's now."""
        with self._lock:
            pending = [self._jobs[i] for i in self._by_state[JobState.PENDING]]
            now = self.now()
        return lifecycle_next_due(kinds, tenants, pending, now)

    def register_worker(self, info: WorkerInfo) -> None:
        """Insert or refresh a worker row; heartbeat = now. Jobs still running under
        ``info.id`` (an earlier life of the worker) go back to pending, due as before,
        attempts and claims unchanged."""
        with self._writing():
            now = self.now()
            for job_id in sorted(self._by_state[JobState.RUNNING]):
                job = self._jobs[job_id]
                if job.claimed_by == info.id:
                    self._commit_row(after_release(job), now)
            row = self._workers.get(info.id)
            started = now if row is None else row.started_at
            request = None if row is None else row.request  # kept, as the row is
            self._workers[info.id] = WorkerRow(info, started, now, request)

    def heartbeat(
        self, worker_id: str, running: Sequence[int] = (), *, release_unheld: bool = False
    ) -> list[int] | None:
        """Refresh a registered worker's heartbeat; None if the worker row is gone, else
        the ids among ``running`` no longer running under ``worker_id`` (ascending). With
        ``release_unheld``, jobs running under it, not in ``running``, claimed before the
        heartbeat this replaces, go back to pending as :meth:`register_worker` releases
        them."""
        with self._writing():
            row = self._workers.get(worker_id)
            if row is None:
                return None
            now, cutoff = self.now(), row.heartbeat_at
            held = set(running)
            for job_id in sorted(self._by_state[JobState.RUNNING]) if release_unheld else ():
                lost = self._jobs[job_id]
                if (
                    lost.claimed_by == worker_id
                    and job_id not in held
                    and lost.claimed_at is not None
                    and lost.claimed_at < cutoff
                ):
                    self._commit_row(after_release(lost), now)
            row.heartbeat_at = now
            return sorted(
                {
                    job_id
                    for job_id in held
                    if (job := self._jobs.get(job_id)) is None
                    or job.state is not JobState.RUNNING
                    or job.claimed_by != worker_id
                }
            )

    def unregister_worker(self, worker_id: str) -> list[int]:
        """Remove the worker row (no error if it is gone); jobs still running under its
        id go back to pending as :meth:`register_worker` releases them. Returns their ids
        (ascending)."""
        with self._writing():
            now = self.now()
            released = []
            for job_id in sorted(self._by_state[JobState.RUNNING]):
                job = self._jobs[job_id]
                if job.claimed_by == worker_id:
                    self._commit_row(after_release(job), now)
                    released.append(job_id)
            self._workers.pop(worker_id, None)
            return released

    def workers(self) -> list[WorkerInfo]:
        """Registered workers (for tests and health views)."""
        with self._lock:
            return [row.info for row in self._workers.values()]

    def recover_stale(
        self,
        *,
        default_ttl: timedelta,
        ttls: Mapping[str, timedelta],
        audit: AuditNote | None = None,
    ) -> list[int]:
        """Running jobs of vanished or silent workers: back to pending, or dead when no
        attempt is left (audited with ``audit``, J10). Returns the ids of both. Then
        removes the rows of workers silent for longer than every TTL."""
        recovered: list[int] = []
        with self._writing():
            now = self.now()
            scope = Scope(self, None, now)
            # Every job of such a worker is recovered below (its TTL is at most this one).
            longest = max([default_ttl, *ttls.values()])
            silent = [
                worker_id
                for worker_id, row in self._workers.items()
                if row.heartbeat_at < now - longest
            ]
            for job_id in sorted(self._by_state[JobState.RUNNING]):
                job = self._jobs[job_id]
                worker = None if job.claimed_by is None else self._workers.get(job.claimed_by)
                heartbeat_at = None if worker is None else worker.heartbeat_at
                if not is_stale(heartbeat_at, ttls.get(job.kind, default_ttl), now):
                    continue
                row = after_recovery(job, now)
                self._commit_row(row, now)
                audit_end(scope, audit, row)
                recovered.append(job_id)
            for worker_id in silent:
                del self._workers[worker_id]
        return recovered
