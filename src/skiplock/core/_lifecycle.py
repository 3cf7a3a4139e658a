"""What each store operation does to one job: the stores' executable spec.

Every function here takes a job *row* and ``now`` (the store's clock) and returns the row
after the operation; none reads a clock or writes anything. The in-memory store applies
them as they are; the PostgreSQL store says the same in SQL (its Python takes the
outcome's terms from :func:`outcome_terms`), and the contract kit's state machine
(``skiplock.testing.contract``) checks every store against a model built from them.

A row is a :class:`~skiplock.core.Job` whose ``suspect`` holds the *started mark* of
the job's latest claim: set when the claim's start paid the attempt (at claim, by
``start``, or by the outcome of a run), kept when the job is recovered from a vanished
worker, cleared by every other way out of ``running``. A reader sees it as
:attr:`Job.suspect` only on a pending job (:func:`read_view`): a recovered job whose run
was under way.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from ._capacity import claim_order, kind_caps, pair_caps
from ._claims import Bury, ClaimRequest, NextDue, Release, Retry, Succeeded
from ._failure import STALE_MARK, recorded_errors, stale_error, truncate_error
from ._idempotency import key_scope
from ._search import contains, error_matches, key_matches
from ._states import transition
from ._types import AttemptError, Event, Job, JobState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from datetime import datetime

    from ._admin import JobFilter
    from ._claims import Outcome
    from ._idempotency import IdempotencyScope
    from ._types import JSON, EnqueueRequest, Lease


# ---- enqueue and reads -----------------------------------------------------------------


def new_job(request: EnqueueRequest, *, job_id: int, payload: JSON, now: datetime) -> Job:
    """The pending row ``request`` creates: due at ``available_at``, else ``now + delay``,
    else now. ``payload`` is what the store keeps of ``request.payload``."""
    available_at = due_at(request, now)
    tc = request.trace_context
    return Job(
        id=job_id,
        kind=request.kind,
        payload=payload,
        state=JobState.PENDING,
        priority=request.priority,
        tenant=request.tenant,
        available_at=available_at,
        created_at=now,
        attempts=0,
        max_attempts=request.max_attempts,
        explicit_max_attempts=request.explicit_max_attempts,
        idempotency_key=request.idempotency_key,
        trace_context=None if tc is None else dict(tc),
        idempotency_scope=job_key_scope(request),
        concurrency_key=request.concurrency_key,
        concurrency_limit=concurrency_limit(request),
    )


def concurrency_limit(request: EnqueueRequest) -> int | None:
    """The :attr:`Job.concurrency_limit` of the job ``request`` creates: its own, 1 for a
    key without one, None without a key."""
    if request.concurrency_key is None:
        return None
    return 1 if request.concurrency_limit is None else request.concurrency_limit


def job_key_scope(request: EnqueueRequest) -> IdempotencyScope:
    """The :attr:`Job.idempotency_scope` of the job ``request`` creates: ``tenant`` only
    for a tenant-scoped key of a job with a tenant (a job without a key has none)."""
    keyed = request.idempotency_key is not None
    return "tenant" if keyed and key_scope(request) is not None else "global"


def due_at(request: EnqueueRequest, now: datetime) -> datetime:
    """When the job of ``request`` is due: ``available_at``, else ``now + delay``, else now."""
    if request.available_at is not None:
        return request.available_at.astimezone(UTC)
    if request.delay is not None:
        return now + request.delay
    return now


def replaced_job(job: Job, request: EnqueueRequest, *, payload: JSON, now: datetime) -> Job:
    """A pending ``job`` as ``request`` (an enqueue of its key with
    ``idempotency_conflict="replace_pending"``) leaves it: its payload, due time and
    priority."""
    return attrs.evolve(
        job, payload=payload, available_at=due_at(request, now), priority=request.priority
    )


def read_view(row: Job) -> Job:
    """``row`` as a reader sees it: ``suspect`` only on a pending job."""
    suspect = row.state is JobState.PENDING and row.suspect
    return row if suspect == row.suspect else attrs.evolve(row, suspect=suspect)


def matches(f: JobFilter, job: Job, payload_of: Callable[[Job], Any] | None = None) -> bool:
    """Whether ``job`` is selected by the admin filter ``f``; ``payload_of`` reads the
    job's payload for a search by payload (a store that keeps payloads encoded passes
    its decoder; default: ``job.payload``)."""
    return (
        (f.ids is None or job.id in f.ids)
        and (f.states is None or job.state in f.states)
        and (f.kinds is None or job.kind in f.kinds)
        and (f.tenants is None or (job.tenant is not None and job.tenant in f.tenants))
        and (f.priority_min is None or job.priority >= f.priority_min)
        and (f.priority_max is None or job.priority <= f.priority_max)
        and (f.created_since is None or job.created_at >= f.created_since)
        and (f.created_before is None or job.created_at < f.created_before)
        and (f.available_since is None or job.available_at >= f.available_since)
        and (f.available_before is None or job.available_at < f.available_before)
        and (
            f.payload is None
            or contains(job.payload if payload_of is None else payload_of(job), f.payload)
        )
        and (f.error is None or error_matches(job, f.error))
        and (f.idempotency_key is None or key_matches(job, f.idempotency_key))
    )


# ---- claim and start -------------------------------------------------------------------


def claimable(request: ClaimRequest, job: Job, now: datetime) -> bool:
    """Whether the pending ``job`` is due and within ``request``'s kinds, tenants and
    exclusions (the limits are :func:`select_claim`'s)."""
    return (
        job.available_at <= now
        and (request.kinds is None or job.kind in request.kinds)
        and (request.tenants is None or (job.tenant is not None and job.tenant in request.tenants))
        and job.kind not in request.excluded_kinds
        and (job.tenant is None or job.tenant not in request.excluded_tenants)
        and (job.kind, job.tenant) not in request.excluded
    )


def next_due(
    kinds: frozenset[str] | None,
    tenants: frozenset[str] | None,
    pending: Iterable[Job],
    now: datetime,
) -> NextDue | None:
    """When the first of the ``pending`` jobs of ``kinds`` and ``tenants`` (None: any)
    that is not due at ``now`` falls due; None if there is none (the worker's next-due
    timer; the PostgreSQL stores answer with SQL, bounded)."""
    scope = ClaimRequest(worker_id="", limit=1, kinds=kinds, tenants=tenants)
    times = [
        job.available_at
        for job in pending
        if job.available_at > now and claimable(scope, job, job.available_at)
    ]
    return NextDue(at=min(times), now=now) if times else None


def select_claim(
    request: ClaimRequest,
    pending: Iterable[Job],
    running: Mapping[str, int],
    now: datetime,
    running_keys: Mapping[str, int] | None = None,
    key_limits: Mapping[str, int] | None = None,
) -> list[Job]:
    """The pending jobs ``request`` takes, in claim order: at most ``limit``, each kind
    within its per-claim and cluster cap, each capped pair within its limit, each job
    with a concurrency key only while fewer than its ``concurrency_limit`` jobs of its
    key run (those running and those taken before it by this claim).

    ``running`` counts the running jobs of the cluster-limited kinds (cluster-wide),
    ``running_keys`` the running jobs of each concurrency key (cluster-wide, any kind),
    ``key_limits`` the keys' limits set at run time (over the jobs' own).
    """
    if request.limit <= 0:
        return []
    candidates = sorted((job for job in pending if claimable(request, job, now)), key=claim_order)
    caps = kind_caps(request, running)
    pairs = {(kind, tenant): n for kind, tenant, n in pair_caps(request, caps)}
    taken: Counter[str] = Counter()
    pairs_taken: Counter[tuple[str, str | None]] = Counter()
    keys_held: Counter[str] = Counter(running_keys or {})
    overrides = key_limits or {}
    chosen: list[Job] = []
    for job in candidates:
        if len(chosen) >= request.limit:
            break
        kind, pair, key = job.kind, (job.kind, job.tenant), job.concurrency_key
        if kind in caps and taken[kind] >= caps[kind]:
            continue
        if pair in pairs and pairs_taken[pair] >= pairs[pair]:
            continue
        if key is not None and keys_held[key] >= (overrides.get(key) or job.concurrency_limit or 1):
            continue
        if key is not None:
            keys_held[key] += 1
        taken[kind] += 1
        pairs_taken[pair] += 1
        chosen.append(job)
    return chosen


def after_claim(job: Job, request: ClaimRequest, *, start: bool, now: datetime) -> Job:
    """The row of a pending job claimed by ``request``: running under its worker,
    ``claims + 1``; a job that starts at once (``start``, see
    :func:`~skiplock.core.charged_positions`) pays its attempt and gets the started mark,
    a held one gets neither. A job whose ``max_attempts`` was not explicit takes the
    claiming worker's value for its kind, if given."""
    max_attempts = job.max_attempts
    if not job.explicit_max_attempts:
        max_attempts = request.max_attempts.get(job.kind, max_attempts)
    return attrs.evolve(
        job,
        state=transition(job.state, Event.CLAIM),
        attempts=job.attempts + (1 if start else 0),
        max_attempts=max_attempts,
        claims=job.claims + 1,
        claimed_by=request.worker_id,
        claimed_at=now,
        suspect=start,
        started_at=now if start and job.started_at is None else job.started_at,
    )


def holds(job: Job, lease: Lease) -> bool:
    """Whether ``lease`` still names ``job``'s claim: running under the same worker and
    claim count (the fence of ``start`` and ``complete``; the attempt is not checked)."""
    return (
        job.state is JobState.RUNNING
        and job.claimed_by == lease.worker_id
        and job.claims == lease.claim
    )


def after_start(job: Job) -> Job:
    """The row of a held job whose start is paid (``start``): ``attempts + 1`` once per
    claim (a start already paid keeps its attempts), the started mark set, and
    ``started_at`` the claim's time if the job never started before."""
    if job.suspect:
        return job
    started_at = job.claimed_at if job.started_at is None else job.started_at
    return attrs.evolve(job, attempts=job.attempts + 1, suspect=True, started_at=started_at)


# ---- outcomes ----------------------------------------------------------------------------


@attrs.frozen
class OutcomeTerms:
    """What an outcome does to a running job, whatever the job.

    - ``state``: where it moves the job (the transition table's).
    - ``ran``: it ends a run, which pays the job's attempt if nothing paid it yet (a held
      job started without a round trip). Every outcome but ``Release(refund=False)``.
    - ``refund``: it gives the run's attempt back (``Release(refund=True)``).
    - ``failed``: it records a failed attempt in ``Job.errors`` (``Retry``, ``Bury``).
    - ``error``: the error text it stores in ``last_error``, capped; None keeps the
      previous one (a success clears it).
    - ``delay``: back to pending, due after this delay (None: a final state).
    """

    state: JobState
    ran: bool
    refund: bool
    failed: bool
    error: str | None
    delay: timedelta | None


_SUCCEED = OutcomeTerms(
    state=transition(JobState.RUNNING, Event.SUCCEED),
    ran=True,
    refund=False,
    failed=False,
    error=None,
    delay=None,
)
_RETRY = transition(JobState.RUNNING, Event.RETRY)
_BURY = transition(JobState.RUNNING, Event.BURY)
_RELEASE = transition(JobState.RUNNING, Event.RELEASE)


def outcome_terms(outcome: Outcome) -> OutcomeTerms:
    """The terms of ``outcome`` (see :class:`OutcomeTerms`)."""
    match outcome:
        case Succeeded():
            return _SUCCEED
        case Retry(delay=delay, error=error):
            return OutcomeTerms(_RETRY, True, False, True, truncate_error(error), delay)
        case Bury(error=error):
            return OutcomeTerms(_BURY, True, False, True, truncate_error(error), None)
        case Release(delay=delay, error=error, refund=refund):
            text = None if error is None else truncate_error(error)
            return OutcomeTerms(_RELEASE, refund, refund, False, text, delay)
    raise TypeError(f"unknown outcome {outcome!r}")  # pragma: no cover - exhaustive match


def after_outcome(job: Job, outcome: Outcome, now: datetime) -> Job:
    """The row of a running job after ``outcome`` (its lease held, see :func:`holds`).

    A run's outcome pays the attempt if its start did not, and a refund gives it back; a
    held job whose run is paid here started under this claim (``started_at``). A failed
    attempt is appended to ``errors`` (the worker and claim that ran it). Back to pending
    clears the claim; a final state keeps it and sets ``completed_at``. The started mark
    and ``recovered`` end; ``result`` is a success's value (None otherwise).
    """
    terms = outcome_terms(outcome)
    paid = job.attempts + (1 if terms.ran and not job.suspect else 0)
    started_at = job.started_at
    if started_at is None and terms.ran:
        started_at = job.claimed_at
    errors = job.errors
    if terms.failed:
        assert terms.error is not None  # a failure's
        assert job.claimed_by is not None  # a running job's
        entry = AttemptError(
            attempt=paid,
            worker_id=job.claimed_by,
            claimed_at=job.claimed_at,
            failed_at=now,
            error=terms.error,
        )
        errors = recorded_errors(errors, entry)
    pending = terms.delay is not None
    last_error = job.last_error if terms.error is None else terms.error
    return attrs.evolve(
        job,
        state=terms.state,
        attempts=max(paid - 1, 0) if terms.refund else paid,
        suspect=False,
        recovered=False,
        started_at=started_at,
        available_at=now + terms.delay if terms.delay is not None else job.available_at,
        completed_at=None if pending else now,
        claimed_by=None if pending else job.claimed_by,
        claimed_at=None if pending else job.claimed_at,
        last_error=None if terms.state is JobState.SUCCEEDED else last_error,
        result=outcome.result if isinstance(outcome, Succeeded) else None,
        errors=errors,
    )


# ---- recovery and operators ----------------------------------------------------------------


def is_stale(heartbeat_at: datetime | None, ttl: timedelta, now: datetime) -> bool:
    """Whether a running job's worker counts as vanished: no worker row
    (``heartbeat_at`` None) or a heartbeat older than ``ttl``."""
    return heartbeat_at is None or heartbeat_at < now - ttl


def after_recovery(job: Job, now: datetime) -> Job:
    """The row of a running job taken back from a vanished worker (stale recovery).

    Back to pending with the claim cleared, or to ``dead`` when no attempt is left (the
    claim kept: the worker it died with, as after a ``Bury``); either way ``recovered``
    set and :data:`~skiplock.core.STALE_MARK` before ``last_error``. The started mark is
    kept (a run under way makes the job a suspect), and such a run is recorded in
    ``errors`` as failed.
    """
    errors = job.errors
    if job.suspect:
        assert job.claimed_by is not None  # a running job's
        entry = AttemptError(
            attempt=job.attempts,
            worker_id=job.claimed_by,
            claimed_at=job.claimed_at,
            failed_at=now,
            error=STALE_MARK,
        )
        errors = recorded_errors(errors, entry)
    if job.attempts >= job.max_attempts:
        return attrs.evolve(
            job,
            state=transition(job.state, Event.BURY),
            completed_at=now,
            last_error=stale_error(job.last_error),
            recovered=True,
            errors=errors,
        )
    return attrs.evolve(
        job,
        state=transition(job.state, Event.RECOVER),
        claimed_by=None,
        claimed_at=None,
        last_error=stale_error(job.last_error),
        recovered=True,
        errors=errors,
    )


def after_release(job: Job) -> Job:
    """The row of a job still running under a worker id that registers again (an
    earlier life of the worker): pending, due as before, claim cleared, ``recovered``
    set; attempts, claims and the started mark unchanged."""
    return attrs.evolve(
        job,
        state=transition(job.state, Event.RECOVER),
        claimed_by=None,
        claimed_at=None,
        recovered=True,
    )


def after_operator(job: Job, event: Event, now: datetime, *, reset_attempts: bool) -> Job:
    """The row after an operator ``event`` (cancel, mark failed, replay) that its state
    allows. A replay makes the job due now with its claim cleared (attempts reset to 0
    with ``reset_attempts``; ``claims`` never); the others set ``completed_at``. The
    started mark and ``recovered`` end."""
    state = transition(job.state, event)
    if state is JobState.PENDING:
        return attrs.evolve(
            job,
            state=state,
            suspect=False,
            recovered=False,
            available_at=now,
            claimed_by=None,
            claimed_at=None,
            completed_at=None,
            attempts=0 if reset_attempts else job.attempts,
        )
    return attrs.evolve(job, state=state, suspect=False, recovered=False, completed_at=now)


def purgeable(job: Job, cutoff: datetime) -> bool:
    """Whether retention deletes ``job``: succeeded before ``cutoff``."""
    return (
        job.state is JobState.SUCCEEDED
        and job.completed_at is not None
        and job.completed_at < cutoff
    )
