"""The audit trail's events (J10): what each lifecycle change records. Pure data.

Stores build the events of the changes they make; the rule of which change records which
action, and with which details, is here once (a SQL store repeats it in its statements,
and the contract kit holds both to the same events).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from ._types import JSON, Event, JobState


class AuditAction(enum.StrEnum):
    """What an audit event records."""

    #: A job was created (an idempotency-key hit creates nothing and records nothing).
    ENQUEUED = "job_enqueued"
    #: An enqueue with ``idempotency_conflict="replace_pending"`` hit the key of a pending
    #: job, which took the enqueue's payload, due time and priority; the details keep
    #: what it had before (:func:`replaced_details`).
    REPLACED = "job_replaced"
    #: A worker recorded the job's success.
    DONE = "job_done"
    #: The job moved to ``dead``: its worker buried it (attempts used up, unknown kind,
    #: undecodable payload), a claim buried a row that cannot become a job (X4), or
    #: stale-claim recovery found no attempt left.
    DLQ = "job_dlq"
    #: An operator replayed a dead, failed or cancelled job (``retry_job``, ``retry_dead``).
    REPLAY = "job_replay"
    #: An operator deleted the job; the details keep its payload.
    DISCARD = "job_discard"
    #: An operator cancelled the job.
    CANCELLED = "job_cancelled"
    #: An operator marked the job failed.
    FAILED_MANUALLY = "job_failed_manually"
    #: An operator paused a kind, a tenant or a pair (no job: ``job_id`` None; ``kind`` or
    #: ``tenant`` None means "any"); details: the reason.
    PAUSED = "paused"
    #: An operator lifted a pause (as :attr:`PAUSED`).
    RESUMED = "resumed"
    #: An operator set a rate limit or a provider cap at run time (no job); details: the
    #: provider (for a cap), ``rps`` and ``burst``.
    LIMIT_SET = "limit_set"
    #: An operator cleared a rate limit or a provider cap (as :attr:`LIMIT_SET`).
    LIMIT_CLEARED = "limit_cleared"
    #: An operator set a concurrency limit at run time (no job; ``kind`` the kind, None
    #: for a concurrency key's); details: ``key``, ``scope`` and ``limit``.
    CONCURRENCY_SET = "concurrency_set"
    #: An operator cleared a concurrency limit (as :attr:`CONCURRENCY_SET`).
    CONCURRENCY_CLEARED = "concurrency_cleared"
    #: An operator asked a worker to drain (no job, kind or tenant); details: its id.
    WORKER_DRAIN = "worker_drain"
    #: An operator asked a worker to stop (as :attr:`WORKER_DRAIN`).
    WORKER_STOP = "worker_stop"


@attrs.frozen
class AuditEvent:
    """One audited change of one job, or of a run-time control (a pause, a limit: then
    ``job_id`` is None, and ``kind`` or ``tenant`` None means "any").

    ``actor`` is who made it: the operator handle's actor (``engine.operator(actor)``; on
    the engine itself ``Settings.audit_actor``) for enqueues and admin calls, the worker's
    id for a worker's transitions. ``at`` is the store's time of the change. ``details``
    depend on the action (see :func:`dlq_details`, :func:`operator_details`,
    :func:`discard_details`); None for ``job_enqueued`` and ``job_done``.
    """

    action: AuditAction
    job_id: int | None
    kind: str | None
    tenant: str | None
    actor: str | None
    at: datetime
    details: Mapping[str, JSON] | None = None


#: The action an operator event records.
OPERATOR_ACTIONS: Mapping[Event, AuditAction] = {
    Event.REPLAY: AuditAction.REPLAY,
    Event.CANCEL: AuditAction.CANCELLED,
    Event.MARK_FAILED: AuditAction.FAILED_MANUALLY,
}


def operator_action(event: Event) -> AuditAction:
    """The action of an operator transition (``CANCEL``, ``MARK_FAILED``, ``REPLAY``)."""
    return OPERATOR_ACTIONS[event]


def operator_details(source: JobState, event: Event, *, reset_attempts: bool) -> dict[str, Any]:
    """Details of an operator transition: the state it left (``from``), and for a replay
    whether the attempts were reset."""
    details: dict[str, Any] = {"from": source.value}
    return details | operator_extra(event, reset_attempts=reset_attempts)


def operator_extra(event: Event, *, reset_attempts: bool) -> dict[str, Any]:
    """The details of an operator transition besides ``from``."""
    return {"reset_attempts": reset_attempts} if event is Event.REPLAY else {}


def dlq_details(error: str | None, attempts: int) -> dict[str, Any]:
    """Details of a move to ``dead``: the stored error and the attempts used."""
    return {"error": error, "attempts": attempts}


def discard_details(state: JobState, payload: JSON) -> dict[str, Any]:
    """Details of a delete: the state the job was in and its payload."""
    return {"from": state.value, "payload": payload}


def replaced_details(payload: JSON, priority: int) -> dict[str, Any]:
    """Details of a replacement by an enqueue (``job_replaced``): the payload and priority
    the pending job had before (its due time is in the events' order already)."""
    return {"payload": payload, "priority": priority}


def completion_action(state: JobState) -> AuditAction | None:
    """The action of a worker's outcome by the state it leaves the job in: success and
    ``dead`` are audited, a retry or release (back to ``pending``) is not."""
    if state is JobState.SUCCEEDED:
        return AuditAction.DONE
    if state is JobState.DEAD:
        return AuditAction.DLQ
    return None
