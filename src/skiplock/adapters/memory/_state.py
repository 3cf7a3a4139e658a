"""The in-memory stores' shared state: every operation written once, sync and thread-safe.

Both flavours (``AsyncInMemoryJobStore`` and its generated twin ``InMemoryJobStore``) wrap
one :class:`MemoryState`. An operation holds a ``threading.Lock`` only for in-memory work
(never across an await), so one state may be used from several threads and event loops.

What an operation does to a job (claim, start, outcomes, recovery, operator events, which
jobs a claim takes) is the core's (:mod:`skiplock.core.store`), applied as it is;
this module keeps the rows, their indexes, transactions, workers and the audit table.

Rows are :class:`~skiplock.core.Job` values whose payload is kept as JSON text: neither the
caller's objects nor the returned ones alias what is stored, and a payload that PostgreSQL
could not store (not JSON, NaN, NUL) is rejected here too. Reads decode a fresh copy.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import attrs

from skiplock.core import (
    FINISHED_STATES,
    JSONB_MAX_BYTES,
    AuditAction,
    AuditEvent,
    ClaimRequest,
    Completion,
    EnqueueRequest,
    EnqueueResult,
    Event,
    FinishedCount,
    HealthSnapshot,
    Job,
    JobFilter,
    JobPage,
    JobState,
    Lease,
    LeaseLostError,
    NextDue,
    Page,
    QueueStats,
    StateCount,
    StoreError,
    Succeeded,
    ValidationError,
    WorkerInfo,
    WorkerStatus,
    charged_positions,
    check_operator_event,
    completion_action,
    discard_details,
    dlq_details,
    encode_payload,
    first_occurrences,
    kind_caps,
    operator_action,
    operator_details,
    result_json,
    sources,
)
from skiplock.core.store import (
    PAIR_SCOPE,
    PROVIDER_SCOPE,
    SAMPLE_RETENTION,
    BucketState,
    ClaimedJobs,
    Controls,
    Limit,
    OrphanedJobs,
    Pause,
    QueueSample,
    ScopedKey,
    ThrottleLimits,
    after_claim,
    after_operator,
    after_outcome,
    after_recovery,
    after_release,
    after_start,
    bucket_start,
    charges,
    control_event,
    fold_samples,
    holds,
    is_stale,
    job_scoped_key,
    matches,
    new_job,
    purgeable,
    rated_kinds,
    refill,
    replaced_details,
    replaced_job,
    sample_minute,
    scoped_key,
    select_claim,
    take_samples,
    throttled_request,
)
from skiplock.core.store import next_due as lifecycle_next_due
from skiplock.ports import Clock, SystemClock

if TYPE_CHECKING:
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


@attrs.frozen
class _Savepoint:
    """A transaction's buffers as they were (see :meth:`MemoryState.savepoint`)."""

    seen: dict[int, Job | None]
    writes: dict[int, Job | None]
    keys: dict[ScopedKey, int]
    fenced: set[int]
    audit: list[AuditEvent]


@attrs.define
class _WorkerRow:
    info: WorkerInfo
    started_at: datetime
    heartbeat_at: datetime


class InMemoryTransaction:
    """Handle yielded by the in-memory stores' ``transaction()`` and ``autocommit()``.

    Pass it as ``connection=``. In a transaction, writes are buffered and applied
    atomically at commit; the transaction's own reads (``get``) see them. Commit is
    optimistic: if a job the transaction wrote was changed by someone else meanwhile,
    nothing is applied and the commit raises :class:`~skiplock.core.LeaseLostError` (when
    a fenced completion is involved) or :class:`~skiplock.core.StoreError`. A job whose
    idempotency key was committed by someone else first is silently not created (the key
    keeps its first job). With ``autocommit``, every write applies at once.
    """

    def __init__(self, state: MemoryState, *, autocommit: bool) -> None:
        self._state = state
        self.autocommit = autocommit
        self.closed = False
        # job id -> the committed row when the transaction first wrote it (None: new job)
        self._seen: dict[int, Job | None] = {}
        # job id -> the row as this transaction left it (None: deleted)
        self._writes: dict[int, Job | None] = {}
        # idempotency key (with its scope) -> id of the job this transaction created with it
        self._keys: dict[ScopedKey, int] = {}
        # ids whose write was fenced by a lease
        self._fenced: set[int] = set()
        # audit events written in this transaction (J10)
        self._audit: list[AuditEvent] = []

    def __repr__(self) -> str:
        kind = "autocommit" if self.autocommit else "transaction"
        status = "closed" if self.closed else f"{len(self._writes)} pending writes"
        return f"<InMemoryTransaction {kind}, {status}>"


class _Scope:
    """What one operation sees (committed rows, overlaid by a transaction's writes) and
    where its writes go. Used only under the state's lock."""

    def __init__(self, state: MemoryState, tx: InMemoryTransaction | None, now: datetime):
        self.state = state
        self.tx = tx
        self.now = now

    def get(self, job_id: int) -> Job | None:
        if self.tx is not None and job_id in self.tx._writes:
            return self.tx._writes[job_id]
        return self.state._jobs.get(job_id)

    def rows(self) -> Iterator[Job]:
        writes = self.tx._writes if self.tx is not None else {}
        for job_id, job in self.state._jobs.items():
            if job_id not in writes:
                yield job
        for written in writes.values():
            if written is not None:
                yield written

    def key_owner(self, key: ScopedKey) -> int | None:
        if self.tx is not None and key in self.tx._keys:
            job_id = self.tx._keys[key]
            if self.tx._writes.get(job_id) is not None:
                return job_id
        owner = self.state._keys.get(key)
        if owner is not None and self.get(owner) is None:
            return None  # deleted earlier in this transaction
        return owner

    def put(self, job: Job, *, fenced: bool = False) -> None:
        if self.tx is None:
            self.state._commit_row(job, self.now)
            return
        tx = self.tx
        if job.id not in tx._seen:
            tx._seen[job.id] = self.state._jobs.get(job.id)
            key = job_scoped_key(job)
            if tx._seen[job.id] is None and key is not None:
                tx._keys[key] = job.id
        tx._writes[job.id] = job
        if fenced:
            tx._fenced.add(job.id)

    def remove(self, job_id: int) -> None:
        if self.tx is None:
            self.state._commit_remove(job_id)
            return
        if job_id not in self.tx._seen:
            self.tx._seen[job_id] = self.state._jobs.get(job_id)
        self.tx._writes[job_id] = None

    def audit(
        self,
        note: AuditNote | None,
        action: AuditAction,
        job: Job,
        details: Mapping[str, object] | None = None,
    ) -> None:
        """Record ``action`` on ``job`` as ``note`` says: in the audit table (with the
        transaction's writes) or for the sink (J10)."""
        if note is None:
            return
        event = AuditEvent(
            action=action,
            job_id=job.id,
            kind=job.kind,
            tenant=job.tenant,
            actor=note.actor,
            at=self.now,
            details=details,
        )
        if not note.table:
            note.events.append(event)
        elif self.tx is None:
            self.state._audit.append(event)
        else:
            self.tx._audit.append(event)


def _public(row: Job, *, suspect: bool | None = None) -> Job:
    """A caller's copy of a stored row: payload and result decoded, mappings copied.

    A stored row's ``suspect`` holds the claim's ``started`` mark (see
    ``AsyncJobStore.start``); callers see ``suspect`` as defined for :class:`Job`: a
    pending job whose mark survived its worker. A claim passes the value it had before
    (and its jobs come without errors, as a PostgreSQL claim does not read them).
    """
    return attrs.evolve(
        row,
        payload=json.loads(row.payload),
        trace_context=None if row.trace_context is None else dict(row.trace_context),
        suspect=(row.state is JobState.PENDING and row.suspect) if suspect is None else suspect,
        result=None if row.result is None else json.loads(row.result),
        errors=row.errors if suspect is None else (),
    )


def _encoded(completion: Completion) -> Completion:
    """``completion`` with a success's result as the JSON text a row keeps (the core's
    :func:`after_outcome` stores ``Succeeded.result``); encoding checks it."""
    outcome = completion.outcome
    if not isinstance(outcome, Succeeded) or (
        outcome.result is None and outcome.result_json is None
    ):
        return completion
    text = result_json(outcome.result, outcome.result_json)
    return attrs.evolve(completion, outcome=Succeeded(result=text, result_json=text))


def _by_kind(key: tuple[str, str | None]) -> tuple[str, bool, str]:
    """Sort key of (kind, tenant): by kind, no tenant first."""
    kind, tenant = key
    return (kind, tenant is not None, tenant or "")


class MemoryState:
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
        self._workers: dict[str, _WorkerRow] = {}
        # maintenance task name -> when it last ran (store clock)
        self._maintenance: dict[str, datetime] = {}
        # the queue samples (the dashboard's charts), oldest minute first
        self._samples: list[QueueSample] = []
        self._archived: dict[int, Job] = {}
        # the audit table (J10), oldest first
        self._audit: list[AuditEvent] = []
        # Run-time controls (issue 30), in the order they were first set.
        self._pauses: dict[tuple[str | None, str | None], Pause] = {}
        self._limits: dict[tuple[str | None, str | None, str | None], Limit] = {}
        self._next_id = 1
        # The token buckets of cluster-wide rates (ClaimRequest.rates), store clock.
        self._pair_buckets: dict[tuple[str, str | None], TokenBucket] = {}
        self._provider_buckets: dict[str, TokenBucket] = {}
        self._listeners: list[Listener] = []
        self._wake = False

    # ---- plumbing -----------------------------------------------------------------

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

    def _scope(self, connection: object) -> _Scope:
        """Resolve ``connection=`` (call under the lock)."""
        now = self.now()
        if connection is None:
            return _Scope(self, None, now)
        tx = self._check_handle(connection)
        return _Scope(self, None if tx.autocommit else tx, now)

    def _check_handle(self, connection: object) -> InMemoryTransaction:
        if not isinstance(connection, InMemoryTransaction):
            raise TypeError(
                "connection= must be a handle from this in-memory store's transaction() or "
                f"autocommit(), got {type(connection).__name__}"
            )
        if connection._state is not self:
            raise ValidationError(
                "connection= is a transaction of another in-memory store; "
                "use a handle from this store's transaction()"
            )
        if connection.closed:
            raise ValidationError(
                "connection= is a transaction that was already committed or rolled back"
            )
        return connection

    # ---- listeners (notifiers) ------------------------------------------------------

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

    # ---- transactions ---------------------------------------------------------------

    def begin(self, *, autocommit: bool = False) -> InMemoryTransaction:
        """A new handle (see :class:`InMemoryTransaction`)."""
        return InMemoryTransaction(self, autocommit=autocommit)

    def commit(self, tx: InMemoryTransaction) -> None:
        """Apply a transaction's writes atomically, or raise and apply nothing."""
        with self._writing():
            self._check_handle(tx)
            try:
                self._apply_transaction(tx)
            finally:
                tx.closed = True

    def rollback(self, tx: InMemoryTransaction) -> None:
        """Discard a transaction's writes. Idempotent."""
        with self._lock:
            if tx._state is not self:
                raise ValidationError("rollback() of a transaction of another in-memory store")
            tx.closed = True

    def savepoint(self, tx: InMemoryTransaction) -> _Savepoint:
        """The transaction's writes so far, for :meth:`rollback_to`."""
        with self._lock:
            self._check_handle(tx)
            return _Savepoint(
                seen=dict(tx._seen),
                writes=dict(tx._writes),
                keys=dict(tx._keys),
                fenced=set(tx._fenced),
                audit=list(tx._audit),
            )

    def rollback_to(self, tx: InMemoryTransaction, savepoint: _Savepoint) -> None:
        """Undo what the transaction wrote since ``savepoint``; it stays open."""
        with self._lock:
            tx._seen = dict(savepoint.seen)
            tx._writes = dict(savepoint.writes)
            tx._keys = dict(savepoint.keys)
            tx._fenced = set(savepoint.fenced)
            tx._audit = list(savepoint.audit)

    def handle(self, connection: object) -> InMemoryTransaction | None:
        """The transaction handle ``connection=`` names (checked), or None."""
        if connection is None:
            return None
        with self._lock:
            return self._check_handle(connection)

    def _apply_transaction(self, tx: InMemoryTransaction) -> None:
        changed = [
            job_id
            for job_id, seen in tx._seen.items()
            if seen is not None and self._jobs.get(job_id) is not seen
        ]
        lost = [job_id for job_id in changed if job_id in tx._fenced]
        if lost:
            raise LeaseLostError(
                f"job(s) {sorted(lost)} changed since this transaction completed them "
                "(the claim was lost); the transaction was rolled back"
            )
        if changed:
            raise StoreError(
                f"job(s) {sorted(changed)} changed concurrently since this transaction wrote "
                "them; the transaction was rolled back"
            )
        now = self.now()
        created: list[Job] = []
        for job_id, job in tx._writes.items():
            if tx._seen[job_id] is None:
                if job is not None:
                    created.append(job)
            elif job is None:
                self._commit_remove(job_id)
            else:
                self._commit_row(job, now)
        # After the removals, so a key freed by this transaction may be reused by it.
        dropped: set[int] = set()
        for job in created:
            key = job_scoped_key(job)
            if key is not None and key in self._keys:
                dropped.add(job.id)  # committed first by someone else: the key keeps that job
                continue
            self._commit_row(job, now)
        self._audit.extend(event for event in tx._audit if event.job_id not in dropped)

    # ---- jobs -----------------------------------------------------------------------

    def enqueue(
        self,
        requests: Sequence[EnqueueRequest],
        connection: object = None,
        audit: AuditNote | None = None,
    ) -> list[EnqueueResult]:
        """Create jobs, all or none; idempotency keys dedupe in their scope (also within
        the batch). A hit with ``replace_pending`` on a pending job replaces its payload,
        due time and priority; a key retention purged and remembered returns the purged
        job's id. With ``audit`` each job created or replaced is audited (J10)."""
        # Encode everything first: a bad payload raises before anything is written.
        payloads = [encode_payload(r.payload, max_bytes=JSONB_MAX_BYTES) for r in requests]
        firsts = first_occurrences(requests)
        results: list[EnqueueResult] = []
        with self._writing():
            scope = self._scope(connection)
            now = scope.now
            for i, (request, payload) in enumerate(zip(requests, payloads, strict=True)):
                if firsts[i] != i:
                    results.append(EnqueueResult(id=results[firsts[i]].id, created=False))
                    continue
                key = scoped_key(request)
                owner = None if key is None else scope.key_owner(key)
                if owner is not None:
                    results.append(self._hit(scope, owner, request, payload, audit))
                    continue
                remembered = None if key is None else self._remembered.get(key)
                if remembered is not None:
                    results.append(EnqueueResult(id=remembered[0], created=False, purged=True))
                    continue
                job_id = self._next_id
                self._next_id += 1
                job = new_job(request, job_id=job_id, payload=payload, now=now)
                scope.put(job)
                scope.audit(audit, AuditAction.ENQUEUED, job)
                results.append(EnqueueResult(id=job_id, created=True, created_at=job.created_at))
        return results

    def _hit(
        self,
        scope: _Scope,
        owner: int,
        request: EnqueueRequest,
        payload: str,
        audit: AuditNote | None,
    ) -> EnqueueResult:
        """The result of an enqueue whose key ``owner``'s job holds; with
        ``replace_pending`` a pending job takes the request's values first."""
        job = scope.get(owner)
        if (
            request.idempotency_conflict != "replace_pending"
            or job is None
            or job.state is not JobState.PENDING
        ):
            return EnqueueResult(id=owner, created=False)
        scope.put(replaced_job(job, request, payload=payload, now=scope.now))
        details = replaced_details(json.loads(job.payload), job.priority)
        scope.audit(audit, AuditAction.REPLACED, job, details)
        return EnqueueResult(id=owner, created=False, replaced=True)

    def claim(self, request: ClaimRequest) -> ClaimedJobs:
        """Move due pending jobs to running, in claim order, within every limit.

        The first ``request.start_now`` start (attempts += 1), the rest are held; a claim
        that takes jobs refreshes its worker's heartbeat (if registered).
        """
        if request.limit <= 0:
            return ClaimedJobs()
        claimed: list[Job] = []
        with self._writing():
            now = self.now()
            # The buckets of cluster-wide rates: this state is the whole cluster.
            clock = now.timestamp()
            throttle = ThrottleLimits()
            if rated_kinds(request):
                request, throttle = throttled_request(
                    request,
                    now=clock,
                    pair_buckets=self._pair_buckets.items(),
                    provider_buckets=self._provider_buckets,
                )
            running: Counter[str] = Counter()
            if request.cluster_limits:
                running.update(self._jobs[i].kind for i in self._by_state[JobState.RUNNING])
            # Every running job of a concurrency key holds one of its places (any kind).
            running_keys = Counter(
                key
                for i in self._by_state[JobState.RUNNING]
                if (key := self._jobs[i].concurrency_key) is not None
            )
            pending = (self._jobs[i] for i in self._by_state[JobState.PENDING])
            chosen = select_claim(request, pending, running, now, running_keys)
            charged = set(charged_positions([job.suspect for job in chosen], request.start_now))
            for position, job in enumerate(chosen):
                row = after_claim(job, request, start=position in charged, now=now)
                self._commit_row(row, now)
                claimed.append(_public(row, suspect=job.suspect))
            if request.rates and claimed:
                pair_rows, provider_rows = charges(
                    request,
                    claimed,
                    now=clock,
                    pair_buckets=self._pair_buckets,
                    provider_buckets=self._provider_buckets,
                )
                self._pair_buckets.update(pair_rows)
                self._provider_buckets.update(provider_rows)
            worker = self._workers.get(request.worker_id)
            if claimed and worker is not None:
                worker.heartbeat_at = now
        caps = kind_caps(request, running)
        full = {
            k: "cluster_limit" for k, n in caps.items() if n <= 0 and k in request.cluster_limits
        }
        return ClaimedJobs(
            claimed,
            charged=(chosen[i].id for i in charged),
            throttled=throttle.excluded,
            throttled_kinds={k: "provider" for k in throttle.excluded_kinds} | full,
            retry_in=throttle.retry_in,
        )

    def next_due(
        self, kinds: frozenset[str] | None, tenants: frozenset[str] | None
    ) -> NextDue | None:
        """When the next pending job of ``kinds`` and ``tenants`` falls due (core's
        :func:`~skiplock.core.store.next_due`), at the store's now."""
        with self._lock:
            pending = [self._jobs[i] for i in self._by_state[JobState.PENDING]]
            now = self.now()
        return lifecycle_next_due(kinds, tenants, pending, now)

    def start(self, leases: Sequence[Lease]) -> list[bool]:
        """Begin held jobs: attempts += 1 where the lease still holds (running, same
        worker, same claim); a lease given twice starts its job once."""
        started: list[bool] = []
        with self._writing():
            now = self.now()
            seen: set[int] = set()
            for lease in leases:
                job = self._jobs.get(lease.job_id)
                if lease.job_id in seen or job is None or not holds(job, lease):
                    started.append(False)
                    continue
                seen.add(lease.job_id)
                self._commit_row(after_start(job), now)
                started.append(True)
        return started

    def complete(
        self,
        completions: Sequence[Completion],
        connection: object = None,
        audit: AuditNote | None = None,
    ) -> list[bool]:
        """Apply each outcome if its lease still holds (running, same worker, same claim).
        With ``audit`` successes and moves to dead are audited (J10)."""
        # Encode results first: a bad one raises before anything is written.
        completions = [_encoded(c) for c in completions]
        applied: list[bool] = []
        with self._writing():
            scope = self._scope(connection)
            for completion in completions:
                job = scope.get(completion.lease.job_id)
                if job is None or not holds(job, completion.lease):
                    applied.append(False)
                    continue
                row = after_outcome(job, completion.outcome, scope.now)
                scope.put(row, fenced=True)
                _audit_end(scope, audit, row)
                applied.append(True)
        return applied

    def get(self, job_id: int, connection: object = None) -> Job | None:
        """One job (as the given transaction sees it), or None."""
        with self._lock:
            job = self._scope(connection).get(job_id)
        return None if job is None else _public(job)

    def list_jobs(self, filter: JobFilter, page: Page) -> JobPage:
        """Matching jobs ordered by id, one keyset page (never stopped early: the
        search costs no database reads)."""
        if page.limit <= 0:
            return JobPage()
        with self._lock:
            rows = [job for job in self._jobs.values() if matches(filter, job)]
        if page.after_id is not None:
            cursor = page.after_id
            rows = [j for j in rows if (j.id < cursor if page.descending else j.id > cursor)]
        rows.sort(key=lambda j: j.id, reverse=page.descending)
        return JobPage(_public(j) for j in rows[: page.limit])

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

    def apply(
        self,
        filter: JobFilter,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: object = None,
        audit: AuditNote | None = None,
    ) -> list[Job]:
        """Operator transition of every matching job whose state allows ``event``
        (each audited with ``audit``, J10); returns the changed jobs as :meth:`get`
        then reads them, by id."""
        check_operator_event(event)
        allowed = sources(event)
        changed: list[Job] = []
        with self._writing():
            scope = self._scope(connection)
            now = scope.now
            targets = sorted(
                (j for j in scope.rows() if j.state in allowed and matches(filter, j)),
                key=lambda j: j.id,
            )
            for job in targets:
                row = after_operator(job, event, now, reset_attempts=reset_attempts)
                scope.put(row)
                details = operator_details(job.state, event, reset_attempts=reset_attempts)
                scope.audit(audit, operator_action(event), row, details)
                changed.append(row)
        return [_public(row) for row in changed]

    def delete(
        self, filter: JobFilter, connection: object = None, audit: AuditNote | None = None
    ) -> list[Job]:
        """Delete matching jobs that are not running; returns them. With ``audit`` each
        is audited with its payload (J10)."""
        with self._writing():
            scope = self._scope(connection)
            doomed = sorted(
                (j for j in scope.rows() if j.state is not JobState.RUNNING),
                key=lambda j: j.id,
            )
            doomed = [j for j in doomed if matches(filter, j)]
            for job in doomed:
                scope.remove(job.id)
                details = discard_details(job.state, json.loads(job.payload))
                scope.audit(audit, AuditAction.DISCARD, job, details)
        return [_public(j) for j in doomed]

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

    # ---- run-time controls (issue 30) -----------------------------------------------

    def controls(self) -> Controls:
        """Every pause and limit, in the order they were first set."""
        with self._lock:
            pauses, limits = tuple(self._pauses.values()), tuple(self._limits.values())
        return Controls(pauses=pauses, limits=limits)

    def pause(self, pause: Pause, note: AuditNote | None = None) -> Pause:
        """Set the pause (pausing again keeps the first ``since``); audited as ``note``
        says."""
        with self._lock:
            now = self.now()
            key = (pause.kind, pause.tenant)
            before = self._pauses.get(key)
            stored = attrs.evolve(pause, since=now if before is None else before.since)
            self._pauses[key] = stored
            self._control_audit(note, AuditAction.PAUSED, stored, now)
        return stored

    def resume(
        self, kind: str | None, tenant: str | None, note: AuditNote | None = None
    ) -> Pause | None:
        """Lift the pause of exactly ``(kind, tenant)``; the pause lifted, or None."""
        with self._lock:
            lifted = self._pauses.pop((kind, tenant), None)
            if lifted is not None:
                self._control_audit(note, AuditAction.RESUMED, lifted, self.now())
        return lifted

    def set_limit(self, limit: Limit, note: AuditNote | None = None) -> Limit:
        """Set the limit, replacing the one there was; audited as ``note`` says."""
        with self._lock:
            now = self.now()
            stored = attrs.evolve(limit, updated_at=now)
            self._limits[(limit.kind, limit.tenant, limit.provider)] = stored
            self._control_audit(note, AuditAction.LIMIT_SET, stored, now)
        return stored

    def clear_limit(
        self,
        kind: str | None,
        tenant: str | None,
        provider: str | None,
        note: AuditNote | None = None,
    ) -> Limit | None:
        """Remove the limit of exactly ``(kind, tenant)`` or ``provider``; it, or None."""
        with self._lock:
            cleared = self._limits.pop((kind, tenant, provider), None)
            if cleared is not None:
                self._control_audit(note, AuditAction.LIMIT_CLEARED, cleared, self.now())
        return cleared

    def restore_controls(self, controls: Controls) -> None:
        """Put the controls back as they were (a change whose audit sink raised)."""
        with self._lock:
            self._pauses = {(p.kind, p.tenant): p for p in controls.pauses}
            self._limits = {(x.kind, x.tenant, x.provider): x for x in controls.limits}

    def _control_audit(
        self, note: AuditNote | None, action: AuditAction, control: Pause | Limit, now: datetime
    ) -> None:
        # Under the lock: the event goes to the audit table, or to the sink's note.
        if note is None:
            return
        event = control_event(action, control, note.actor, now)
        (self._audit if note.table else note.events).append(event)

    # ---- workers and maintenance ----------------------------------------------------

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
            self._workers[info.id] = _WorkerRow(info=info, started_at=started, heartbeat_at=now)

    def heartbeat(self, worker_id: str, running: Sequence[int] = ()) -> list[int] | None:
        """Refresh a registered worker's heartbeat; None if the worker row is gone, else
        the ids among ``running`` no longer running under ``worker_id`` (ascending)."""
        with self._lock:
            row = self._workers.get(worker_id)
            if row is None:
                return None
            row.heartbeat_at = self.now()
            return sorted(
                {
                    job_id
                    for job_id in running
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
                )
                for worker_id, row in sorted(self._workers.items())
            )
            orphaned = tuple(
                OrphanedJobs(owner, count, oldest_claim.get(owner, now))
                for owner, count in sorted(per_worker.items())
                if owner not in self._workers
            )
        keys = sorted(due.keys() | scheduled.keys() | running.keys() | dead.keys(), key=_by_kind)
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
                    self._pair_buckets.items(), key=lambda kv: _by_kind(kv[0])
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
            scope = _Scope(self, None, now)
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
                _audit_end(scope, audit, row)
                recovered.append(job_id)
            for worker_id in silent:
                del self._workers[worker_id]
        return recovered

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

        purged = _in_batches(batch, batch_size)
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

        return _in_batches(batch, batch_size)

    def archived(self) -> dict[int, Job]:
        """Jobs moved out by ``purge(archive=True)``, by id."""
        with self._lock:
            return {job_id: _public(job) for job_id, job in sorted(self._archived.items())}


def _audit_end(scope: _Scope, note: AuditNote | None, row: Job) -> None:
    """Audit a job a worker or maintenance moved out of ``running``: success and dead
    are audited, a return to pending is not (J10)."""
    action = completion_action(row.state)
    if action is AuditAction.DLQ:
        scope.audit(note, action, row, dlq_details(row.last_error, row.attempts))
    elif action is not None:
        scope.audit(note, action, row)


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
