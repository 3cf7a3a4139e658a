"""What every part of the memory state shares: the rows, their indexes, the lock, the
listeners, and how a row is written, removed and handed to a caller.

Not a role of :mod:`skiplock.ports`: the role parts (``_jobs``, ``_workers``, ...) and the
transaction machinery (``_transaction``) build on :class:`StateBase`.

Rows are :class:`~skiplock.core.Job` values whose payload is kept as JSON text: neither the
caller's objects nor the returned ones alias what is stored, and a payload that PostgreSQL
could not store (not JSON, NaN, NUL) is rejected here too. Reads decode a fresh copy.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from skiplock.core import AuditEvent, Job, JobState, WorkerInfo
from skiplock.core.store import (
    ConcurrencyLimit,
    Limit,
    Pause,
    PurgeRun,
    QueueSample,
    ScopedKey,
    WorkerRequest,
    job_scoped_key,
    matches,
)
from skiplock.ports import Clock, SystemClock

if TYPE_CHECKING:
    from skiplock.core import JobFilter
    from skiplock.core.store import TokenBucket


Listener = Callable[[], None]


@attrs.define
class AuditNote:
    """How one store call audits (J10): the actor its events name, and whether they go
    to the state's own audit table (``table``) or are collected in ``events`` for a
    sink."""

    actor: str | None
    table: bool
    events: list[AuditEvent] = attrs.Factory(list)


@attrs.define
class WorkerRow:
    info: WorkerInfo
    started_at: datetime
    heartbeat_at: datetime
    #: What an operator asked the worker to do (drain or stop), if anything.
    request: WorkerRequest | None = None


def public_job(row: Job, *, suspect: bool | None = None, errors: bool = False) -> Job:
    """A caller's copy of a stored row: payload and result decoded, mappings copied.

    A stored row's ``suspect`` holds the claim's ``started`` mark (see
    ``AsyncJobStore.start``); callers see ``suspect`` as defined for :class:`Job`: a
    pending job whose mark survived its worker. A claim passes the value it had before
    (and its jobs come without errors unless it passes ``errors``, as a PostgreSQL claim
    reads them only when asked: ``ClaimRequest.with_errors``).
    """
    return attrs.evolve(
        row,
        payload=json.loads(row.payload),
        trace_context=None if row.trace_context is None else dict(row.trace_context),
        suspect=(row.state is JobState.PENDING and row.suspect) if suspect is None else suspect,
        result=None if row.result is None else json.loads(row.result),
        errors=row.errors if suspect is None or errors else (),
    )


def selected(filter: JobFilter, row: Job) -> bool:
    """Whether the stored ``row`` is selected by ``filter`` (its payload decoded for a
    search by payload)."""
    return matches(filter, row, _stored_payload)


def _stored_payload(row: Job) -> Any:
    return json.loads(row.payload)


def by_kind(key: tuple[str, str | None]) -> tuple[str, bool, str]:
    """Sort key of (kind, tenant): by kind, no tenant first."""
    kind, tenant = key
    return (kind, tenant is not None, tenant or "")


class StateBase:
    """Jobs, the idempotency index, worker rows, maintenance runs and the id sequence,
    behind one lock.

    ``now`` always comes from ``clock``. Listeners registered with :meth:`subscribe` are
    called (outside the lock, from the writing thread) after every write that made a job
    claimable: a due job enqueued, replayed, retried/released/recovered into the past.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._jobs: dict[int, Job] = {}
        self._keys: dict[ScopedKey, int] = {}
        # keys of jobs retention purged -> (the job's id, when it was purged): remembered
        # for Settings.idempotency_retention (the ``idempotency_keys`` table)
        self._remembered: dict[ScopedKey, tuple[int, datetime]] = {}
        self._by_state: dict[JobState, set[int]] = {s: set() for s in JobState}
        self._workers: dict[str, WorkerRow] = {}
        # maintenance task name -> when it last ran (store clock)
        self._maintenance: dict[str, datetime] = {}
        #: The last run of each retention purge (the retention view), by name.
        self._purge_runs: dict[str, PurgeRun] = {}
        # the queue samples (the dashboard's charts), oldest minute first
        self._samples: list[QueueSample] = []
        self._archived: dict[int, Job] = {}
        # the audit table (J10), oldest first
        self._audit: list[AuditEvent] = []
        # Run-time controls (issue 30), in the order they were first set.
        self._pauses: dict[tuple[str | None, str | None], Pause] = {}
        self._limits: dict[tuple[str | None, str | None, str | None], Limit] = {}
        self._concurrency: dict[tuple[str | None, str | None, str], ConcurrencyLimit] = {}
        self._next_id = 1
        # The token buckets of cluster-wide rates (ClaimRequest.rates), store clock.
        self._pair_buckets: dict[tuple[str, str | None], TokenBucket] = {}
        self._provider_buckets: dict[str, TokenBucket] = {}
        self._listeners: list[Listener] = []
        self._wake = False

    def now(self) -> datetime:
        """The store's clock, as aware UTC."""
        return self.clock.now().astimezone(UTC)

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the lock; afterwards, wake the listeners if a job became claimable."""
        with self._lock:
            try:
                yield
            finally:
                wake, self._wake = self._wake, False
                listeners = list(self._listeners) if wake else []
        for listener in listeners:
            listener()

    def _commit_row(self, job: Job, now: datetime) -> None:
        old = self._jobs.get(job.id)
        if old is not None:
            self._by_state[old.state].discard(job.id)
        self._jobs[job.id] = job
        self._by_state[job.state].add(job.id)
        key = job_scoped_key(job)
        if key is not None:
            self._keys[key] = job.id
        # Also for a job due later: a listening worker arms its next-due timer for it.
        if job.state is JobState.PENDING and (
            old is None or old.state is not JobState.PENDING or old.available_at != job.available_at
        ):
            self._wake = True

    def _commit_remove(self, job_id: int) -> Job | None:
        job = self._jobs.pop(job_id, None)
        if job is not None:
            self._by_state[job.state].discard(job_id)
            key = job_scoped_key(job)
            if key is not None and self._keys.get(key) == job_id:
                del self._keys[key]
        return job

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener()`` after each write that makes a job claimable."""
        with self._lock:
            if listener not in self._listeners:
                self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling ``listener``; unknown listeners are ignored."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
