"""Core value types: jobs, enqueue requests and their results. Pure data, no I/O.

The outcomes a worker reports and what it claims are in :mod:`._claims`, the admin
reads' filters, pages and counts in :mod:`._admin`."""

from __future__ import annotations

import enum
import operator
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, TypeAlias, overload

import attrs

#: A JSON value as stored in a job's payload.
JSON: TypeAlias = Any

#: Where an idempotency key is unique: ``global`` (every job, the default) or ``tenant``
#: (the jobs of the request's tenant; a job without a tenant is in the global scope).
IdempotencyScope: TypeAlias = Literal["global", "tenant"]
#: What an enqueue whose key exists does: ``ignore`` returns the existing job unchanged
#: (the default); ``replace_pending`` gives a still-pending existing job the request's
#: payload, due time and priority (a running or finished job is left as it is).
IdempotencyConflict: TypeAlias = Literal["ignore", "replace_pending"]
IDEMPOTENCY_SCOPES: tuple[str, ...] = typing.get_args(IdempotencyScope)
IDEMPOTENCY_CONFLICTS: tuple[str, ...] = typing.get_args(IdempotencyConflict)


class JobState(enum.StrEnum):
    """Lifecycle state of a job (docs/requirements.md, "States")."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"


class Event(enum.StrEnum):
    """Everything that can happen to a job; the transition table maps (state, event)."""

    CLAIM = "claim"  # pending -> running (claims += 1; attempts += 1 once the job starts)
    SUCCEED = "succeed"  # running -> succeeded
    RETRY = "retry"  # running -> pending, later (attempt used)
    BURY = "bury"  # running -> dead (attempts exhausted, undecodable, unknown kind)
    RELEASE = "release"  # running -> pending without using an attempt (throttle, shutdown)
    RECOVER = "recover"  # running -> pending: stale claim of a dead worker, attempts unchanged
    CANCEL = "cancel"  # operator: pending/running -> cancelled
    MARK_FAILED = "mark_failed"  # operator: manual stop flag
    REPLAY = "replay"  # operator: dead/failed/cancelled -> pending (claims kept)


@attrs.frozen
class AttemptError:
    """One failed attempt of a job, as a store records it in :attr:`Job.errors`.

    ``attempt`` is the attempt's number (1-based, as ``Job.attempts`` counted it),
    ``worker_id`` the worker that ran it, ``claimed_at`` when that worker's claim was
    taken and ``failed_at`` when the failure was written (store clock, UTC). ``error`` is
    the stored error text, capped like ``last_error``
    (:data:`~skiplock.core.MAX_ERROR_LENGTH`).
    """

    attempt: int
    worker_id: str
    claimed_at: datetime | None
    failed_at: datetime
    error: str


@attrs.frozen
class Job:
    """A job as read from a store.

    ``result`` and ``errors`` are read by ``get``/``list_jobs``/``delete``; a claim
    returns them empty (the worker that runs a job needs neither), ``errors`` included
    only when it asks (:attr:`ClaimRequest.with_errors`).
    """

    id: int
    kind: str
    payload: JSON
    state: JobState
    priority: int
    tenant: str | None
    available_at: datetime
    created_at: datetime
    attempts: int
    max_attempts: int
    claimed_at: datetime | None = None
    claimed_by: str | None = None
    completed_at: datetime | None = None
    last_error: str | None = None
    idempotency_key: str | None = None
    trace_context: Mapping[str, str] | None = None
    #: How often the job was ever claimed: +1 at every claim, never reset (not by a
    #: release, not by ``REPLAY`` with ``reset_attempts``), so it names one claim.
    claims: int = 0
    #: True when the enqueue set ``max_attempts`` itself; otherwise the policy of the
    #: worker that claims the job decides (a claim rewrites ``max_attempts`` from
    #: :attr:`ClaimRequest.max_attempts`).
    explicit_max_attempts: bool = False
    #: True for a pending job whose last claim had started it when its worker vanished
    #: (stale recovery): it may have killed that worker, so the next worker starts it
    #: alone (see :func:`~skiplock.core.charged_positions`). Stores keep a ``started``
    #: mark per claim for it; claims return the value it had before the claim.
    suspect: bool = False
    #: True from a stale recovery (or a worker's re-registration) until the job's next
    #: outcome or operator event: the worker that claims it pays its attempt before
    #: running it, even when it only prefetched it. (A recovery that buries the job sets
    #: it too.)
    recovered: bool = False
    #: When the job first started: the time of the first claim that ran it (a
    #: prefetched job may start a little after its claim). Kept through retries,
    #: releases and replays; None until a run started.
    started_at: datetime | None = None
    #: The processor's return value, JSON-normalised, once the job succeeded (None
    #: before, and when it returned None).
    result: JSON = None
    #: The failed attempts, oldest first: the latest :data:`~skiplock.core.MAX_RECORDED_ERRORS`
    #: (a failure of the processor, a timeout, a vanished worker, an undecodable row...).
    #: Kept through replays.
    errors: tuple[AttemptError, ...] = ()
    #: Where :attr:`idempotency_key` is unique: ``tenant`` (among the jobs of
    #: :attr:`tenant`) or ``global`` (also for a job without a key or a tenant).
    idempotency_scope: IdempotencyScope = "global"
    #: The job's concurrency key: at most :attr:`concurrency_limit` jobs holding the
    #: same key run at once, across kinds and the whole cluster (None: no key). A claim
    #: leaves a job whose key is full pending, in its place, without using an attempt.
    concurrency_key: str | None = None
    #: How many jobs of :attr:`concurrency_key` may run at once (None without a key).
    concurrency_limit: int | None = None

    @property
    def worker_ids(self) -> tuple[str, ...]:
        """The workers of the recorded attempts, oldest first: one per entry of
        :attr:`errors`, then the worker running the job or that ran it to success.

        An attempt dropped from ``errors`` (more failures than it keeps) is not listed,
        nor the worker of a run cancelled or marked failed by an operator.
        """
        failed = tuple(e.worker_id for e in self.errors)
        if self.claimed_by is not None and self.state in (JobState.RUNNING, JobState.SUCCEEDED):
            return (*failed, self.claimed_by)
        return failed

    @property
    def lease(self) -> Lease:
        """The fencing token of the current claim (only meaningful while running)."""
        if self.claimed_by is None:
            raise ValueError(f"job {self.id} is not claimed")
        return Lease(
            job_id=self.id, worker_id=self.claimed_by, attempt=self.attempts, claim=self.claims
        )

    def charged(self) -> Job:
        """This job with one more attempt: how a held (prefetched) job runs once started.

        ``started_at`` becomes the claim's time if the job never started before, as the
        store's ``start`` writes it. On the worker's hot path (once per job), so it
        copies by position instead of ``attrs.evolve``, which costs several times more.
        """
        values = list(_job_values(self))
        values[_ATTEMPTS] += 1
        if values[_STARTED_AT] is None:
            values[_STARTED_AT] = self.claimed_at
        return Job(*values)


# Every field of Job in __init__ order (attrs keeps declaration order).
_JOB_FIELDS = tuple(a.name for a in attrs.fields(Job))
_job_values = operator.attrgetter(*_JOB_FIELDS)
_ATTEMPTS = _JOB_FIELDS.index("attempts")
_STARTED_AT = _JOB_FIELDS.index("started_at")


@attrs.frozen
class Lease:
    """Fencing token of one claim: a state change after the claim is valid only while the
    job is running under ``worker_id`` with ``claims == claim``.

    ``claim`` never repeats for a job, so a stale run cannot pass for a later claim by the
    same worker (ABA), even where ``attempt`` repeats (after a release, or a replay that
    reset attempts). ``attempt`` is informational (messages, logs) and not checked.
    """

    job_id: int
    worker_id: str
    attempt: int
    claim: int


@attrs.frozen
class EnqueueRequest:
    """One job to create. Validated by :func:`~._validation.validate_request` before writing.

    ``available_at`` (absolute) and ``delay`` (relative to the *store's* clock) are
    mutually exclusive; neither means "due now".
    """

    kind: str
    payload: JSON = None
    priority: int = 0
    tenant: str | None = None
    available_at: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int = 5
    idempotency_key: str | None = None
    trace_context: Mapping[str, str] | None = None
    #: Whether ``max_attempts`` was chosen by the caller (stored with the job, see
    #: :attr:`Job.explicit_max_attempts`) or is only the enqueuing node's default.
    explicit_max_attempts: bool = False
    #: ``payload`` as :func:`~skiplock.core.encode_payload` encoded it, when the caller
    #: already did (the engine does, to validate): stores then write this text instead
    #: of encoding again. Derived from ``payload``, so not part of equality.
    payload_json: str | None = attrs.field(default=None, eq=False, repr=False)
    #: Where ``idempotency_key`` is unique: ``global`` (among all jobs) or ``tenant``.
    idempotency_scope: IdempotencyScope = "global"
    #: What an enqueue whose key exists does: ``ignore`` or ``replace_pending``.
    idempotency_conflict: IdempotencyConflict = "ignore"
    #: At most ``concurrency_limit`` jobs of ``concurrency_key`` run at once, across
    #: kinds and workers (see :attr:`Job.concurrency_key`); None: no key. The limit is
    #: None without a key, else at least 1.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None


class EnqueueBatch(Sequence[EnqueueRequest]):
    """Jobs to create, held as columns: what the engine builds for a bulk enqueue, so a
    store can write the rows (PostgreSQL: COPY) without an :class:`EnqueueRequest` per
    job.

    It is a Sequence of :class:`EnqueueRequest` like any other: the requests are built
    the first time an item is read (once), for stores that read it that way. Each
    column holds one value per job, in :meth:`append` order; append only while building
    it, before handing it to a store.
    """

    __slots__ = (
        "_requests",
        "available_ats",
        "concurrency_keys",
        "concurrency_limits",
        "delays",
        "explicit_max_attempts",
        "idempotency_conflicts",
        "idempotency_keys",
        "idempotency_scopes",
        "kinds",
        "max_attempts",
        "payload_jsons",
        "payloads",
        "priorities",
        "tenants",
        "trace_contexts",
    )

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.payloads: list[JSON] = []
        self.priorities: list[int] = []
        self.tenants: list[str | None] = []
        self.available_ats: list[datetime | None] = []
        self.delays: list[timedelta | None] = []
        self.max_attempts: list[int] = []
        self.idempotency_keys: list[str | None] = []
        self.trace_contexts: list[Mapping[str, str] | None] = []
        self.explicit_max_attempts: list[bool] = []
        self.payload_jsons: list[str | None] = []
        self.idempotency_scopes: list[IdempotencyScope] = []
        self.idempotency_conflicts: list[IdempotencyConflict] = []
        self.concurrency_keys: list[str | None] = []
        self.concurrency_limits: list[int | None] = []
        self._requests: list[EnqueueRequest] | None = None

    @classmethod
    def of(cls, requests: Iterable[EnqueueRequest]) -> EnqueueBatch:
        """``requests`` as a batch (a batch is returned as it is)."""
        if isinstance(requests, EnqueueBatch):
            return requests
        batch = cls()
        for r in requests:
            batch.append(*_request_values(r))
        return batch

    def append(
        self,
        kind: str,
        payload: JSON,
        priority: int,
        tenant: str | None,
        available_at: datetime | None,
        delay: timedelta | None,
        max_attempts: int,
        idempotency_key: str | None,
        trace_context: Mapping[str, str] | None,
        explicit_max_attempts: bool,
        payload_json: str | None,
        idempotency_scope: IdempotencyScope = "global",
        idempotency_conflict: IdempotencyConflict = "ignore",
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
    ) -> None:
        """Add one job: the fields of :class:`EnqueueRequest`, positionally in its order."""
        self.kinds.append(kind)
        self.payloads.append(payload)
        self.priorities.append(priority)
        self.tenants.append(tenant)
        self.available_ats.append(available_at)
        self.delays.append(delay)
        self.max_attempts.append(max_attempts)
        self.idempotency_keys.append(idempotency_key)
        self.trace_contexts.append(trace_context)
        self.explicit_max_attempts.append(explicit_max_attempts)
        self.payload_jsons.append(payload_json)
        self.idempotency_scopes.append(idempotency_scope)
        self.idempotency_conflicts.append(idempotency_conflict)
        self.concurrency_keys.append(concurrency_key)
        self.concurrency_limits.append(concurrency_limit)
        self._requests = None

    @property
    def keyed(self) -> bool:
        """Whether any job has an idempotency key."""
        keys = self.idempotency_keys
        return keys.count(None) != len(keys)

    @property
    def concurrency_keyed(self) -> bool:
        """Whether any job has a concurrency key."""
        keys = self.concurrency_keys
        return keys.count(None) != len(keys)

    @property
    def scheduled(self) -> bool:
        """Whether any job has an ``available_at`` or a ``delay`` (else all are due now)."""
        n = len(self.kinds)
        return self.available_ats.count(None) != n or self.delays.count(None) != n

    def _built(self) -> list[EnqueueRequest]:
        requests = self._requests
        if requests is None:
            columns = (
                self.kinds,
                self.payloads,
                self.priorities,
                self.tenants,
                self.available_ats,
                self.delays,
                self.max_attempts,
                self.idempotency_keys,
                self.trace_contexts,
                self.explicit_max_attempts,
                self.payload_jsons,
                self.idempotency_scopes,
                self.idempotency_conflicts,
                self.concurrency_keys,
                self.concurrency_limits,
            )
            requests = self._requests = [
                EnqueueRequest(*values) for values in zip(*columns, strict=True)
            ]
        return requests

    def __len__(self) -> int:
        return len(self.kinds)

    @overload
    def __getitem__(self, index: int) -> EnqueueRequest: ...
    @overload
    def __getitem__(self, index: slice) -> list[EnqueueRequest]: ...
    def __getitem__(self, index: int | slice) -> EnqueueRequest | list[EnqueueRequest]:
        return self._built()[index]

    def __iter__(self) -> Iterator[EnqueueRequest]:
        return iter(self._built())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self)} jobs>"


# Every field of EnqueueRequest in __init__ order, which EnqueueBatch.append shares.
_request_values = operator.attrgetter(*(a.name for a in attrs.fields(EnqueueRequest)))


@attrs.frozen
class EnqueueResult:
    """Result of one enqueue: the job id, and whether it was created (False: idempotent hit).

    On a hit, ``replaced`` says the existing pending job took the request's payload, due
    time and priority (``idempotency_conflict="replace_pending"``), and ``purged`` that
    the key belongs to a job retention purged within ``Settings.idempotency_retention``:
    ``id`` is that job's, which no longer exists.

    ``created_at`` is the new job's ``created_at`` as the store wrote it, where the store
    reports it (the PostgreSQL stores: a single job enqueued without an idempotency key;
    the memory store: every job created); None otherwise. It takes no part in comparisons.
    """

    id: int
    created: bool
    replaced: bool = False
    purged: bool = False
    created_at: datetime | None = attrs.field(default=None, eq=False)
