"""The values callers hand the engine: an enqueue's items (:class:`Enqueue`), its
``delay``, a worker's options, and the state/kind/tenant filters of the admin API.
``enqueue/_intake.py`` turns items into requests."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict

import attrs

from skiplock.core import EnqueueFields, Event, JobFilter, JobState, ValidationError
from skiplock.core.rules import (
    OPERATOR_ACTIONS,
    IdempotencyConflict,
    IdempotencyScope,
    action_states,
    check_job_id,
    check_text,
)
from skiplock.core.store import shown

if TYPE_CHECKING:
    from collections.abc import Iterable


@attrs.frozen(repr=False)
class Enqueue(EnqueueFields):
    """One job for :meth:`AsyncEngine.enqueue_many`: its kind and payload, and the job
    options (:class:`~skiplock.core.EnqueueFields`, keywords only, as for ``enqueue``).

    ``available_at`` (an aware datetime) and ``delay`` (a timedelta or seconds, counted
    from the store's clock) are mutually exclusive; neither means "due now".
    ``priority`` ``None`` takes the kind's declared default priority (0 if it has none).
    ``max_attempts`` ``None`` leaves it to the policy of the processor that runs the job
    (the enqueuing engine's resolved policy is stored until a worker claims it).
    ``idempotency_scope`` and ``idempotency_conflict`` ``None`` take the kind's policy
    (``global`` and ``ignore`` unless configured; docs/keys.md, "Idempotency keys").
    ``concurrency_key`` ``None`` takes the kind's declared key, if any;
    ``concurrency_limit`` (default 1) caps the running jobs of the key (docs/keys.md,
    "Concurrency keys").
    """

    kind: str
    payload: Any = None

    def __repr__(self) -> str:
        # The kind and payload first (attrs would list the inherited options first), and
        # only the options set.
        options = "".join(
            f", {name}={value!r}"
            for name in EnqueueFields.names()
            if (value := getattr(self, name)) is not None
        )
        return f"Enqueue({self.kind!r}, {self.payload!r}{options})"


class JobOptions(TypedDict, total=False):
    """A job's own keywords besides its kind, payload and due time, as for
    :meth:`AsyncEngine.enqueue` and :class:`Enqueue` (``task.item(payload, **options)``).
    Leaving one out means ``None``."""

    priority: int | None
    tenant: str | None
    idempotency_key: str | None
    max_attempts: int | None
    idempotency_scope: IdempotencyScope | None
    idempotency_conflict: IdempotencyConflict | None
    concurrency_key: str | None
    concurrency_limit: int | None


class EnqueueOptions(JobOptions, total=False):
    """The keywords of the enqueue methods besides the kind, payload and due time
    (``engine.enqueue_at(when, kind, payload, **options)``, ``task.enqueue_after(...)``):
    :class:`JobOptions` and the caller's ``connection`` (R0)."""

    connection: Any


class WorkerOptions(TypedDict, total=False):
    """What a worker claims and its id, as :meth:`AsyncEngine.worker` takes them (see
    :class:`AsyncWorker`): ``concurrency`` (job slots; default ``Settings.concurrency``),
    ``kinds`` (only these kinds), ``tenants`` (only these tenants' jobs), ``all_kinds``
    (also kinds without a processor, buried in ``dead``), ``worker_id`` (default
    :func:`~skiplock.engine.default_worker_id`). FastAPI's ``worker_lifespan(engine,
    **options)`` takes them too."""

    concurrency: int | None
    kinds: Iterable[str] | None
    tenants: Iterable[str] | None
    all_kinds: bool
    worker_id: str | None


def as_delay(value: object) -> timedelta | None:
    """``delay`` as a timedelta (numbers are seconds); validation of the sign comes later."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"delay must be a timedelta or seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValidationError(f"delay must be a finite number of seconds, got {value!r}")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise ValidationError(f"delay out of range: {value!r}") from None


def as_states(
    value: JobState | str | Iterable[JobState | str] | None,
) -> frozenset[JobState] | None:
    """A state filter from one state, a state name, or several."""
    if value is None:
        return None
    items = [value] if isinstance(value, JobState | str) else list(value)
    try:
        return frozenset(JobState(v) for v in items)
    except ValueError:
        known = ", ".join(state.value for state in JobState)
        bad = next(v for v in items if v not in JobState.__members__.values())
        raise ValidationError(f"unknown job state {shown(bad)}: one of {known}") from None


def as_names(name: str, value: str | Iterable[str] | None) -> frozenset[str] | None:
    """A kind/tenant filter from one name or several (each text a store can compare)."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    for item in items:
        if not isinstance(item, str):
            raise ValidationError(f"{name} filter must hold str, got {shown(item)}")
        check_text(f"{name} filter", item)
    return frozenset(items)


def action_filter(
    action: str,
    ids: Iterable[int],
    states: JobState | str | Iterable[JobState | str] | None,
    max_ids: int,
) -> tuple[JobFilter | None, Event | None]:
    """The filter and event of an operator action (``act_on_jobs``) on ``ids`` (at most
    ``max_ids``), limited to ``states``: the jobs among ``ids`` whose state allows the
    action and is one of ``states``. The filter is None when no job can match; the event
    None for ``discard`` (a delete). Bad arguments raise ValidationError."""
    allowed = action_states(action)
    wanted = as_states(states)
    if wanted is not None:
        allowed &= wanted
    job_ids = frozenset(check_job_id("ids", i) for i in ids)
    if len(job_ids) > max_ids:
        raise ValidationError(f"at most {max_ids} ids per call, got {len(job_ids)}")
    event = OPERATOR_ACTIONS[action]
    if not job_ids or not allowed:
        return None, event
    return JobFilter(ids=job_ids, states=allowed), event


def confirmed_jobs(
    jobs: Mapping[int, JobState | str], max_jobs: int, action: str | None = None
) -> dict[int, JobState]:
    """The jobs an operator confirmed (``act_as_confirmed``): id -> the state each was
    shown in, checked (at most ``max_jobs``; with ``action``, each state one it applies
    to). Bad arguments raise ValidationError."""
    if not isinstance(jobs, Mapping):
        raise ValidationError(f"jobs must map each id to its shown state, got {shown(jobs)}")
    if len(jobs) > max_jobs:
        raise ValidationError(f"at most {max_jobs} jobs per confirmed action, got {len(jobs)}")
    allowed = None if action is None else action_states(action)
    confirmed: dict[int, JobState] = {}
    for job_id, state in jobs.items():
        try:
            seen = JobState(state)
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise ValidationError(f"unknown job state {shown(state)}: one of {known}") from None
        if allowed is not None and seen not in allowed:
            raise ValidationError(f"{action} does not apply to {seen.value} jobs (job {job_id})")
        confirmed[check_job_id("jobs", job_id)] = seen
    return confirmed
