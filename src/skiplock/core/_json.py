"""The JSON form of a job and of an audit event: the one shape that ``skiplock jobs
--json``, the REST API and the dashboard share (documented in docs/admin.md, "A job as
JSON"). Keys are stable; times are ISO 8601 strings in UTC, absent ones null."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime

    from ._audit import AuditEvent
    from ._types import AttemptError, Job


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def attempt_error_json(entry: AttemptError) -> dict[str, Any]:
    """One failed attempt (``Job.errors``) as JSON-ready data."""
    return {
        "attempt": entry.attempt,
        "worker_id": entry.worker_id,
        "claimed_at": _iso(entry.claimed_at),
        "failed_at": _iso(entry.failed_at),
        "error": entry.error,
    }


def job_json(job: Job) -> dict[str, Any]:
    """A job as JSON-ready data: every field of :class:`~skiplock.core.Job`, the state
    as its value (``"pending"``...), times ISO 8601 in UTC."""
    return {
        "id": job.id,
        "kind": job.kind,
        "state": job.state.value,
        "tenant": job.tenant,
        "priority": job.priority,
        "payload": job.payload,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "claims": job.claims,
        "available_at": _iso(job.available_at),
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "claimed_at": _iso(job.claimed_at),
        "claimed_by": job.claimed_by,
        "completed_at": _iso(job.completed_at),
        "last_error": job.last_error,
        "result": job.result,
        "errors": [attempt_error_json(entry) for entry in job.errors],
        "worker_ids": list(job.worker_ids),
        "idempotency_key": job.idempotency_key,
        "trace_context": None if job.trace_context is None else dict(job.trace_context),
        "concurrency_key": job.concurrency_key,
        "concurrency_limit": job.concurrency_limit,
    }


def audit_event_json(event: AuditEvent) -> dict[str, Any]:
    """An audit event (J10) as JSON-ready data, as a job's audit trail lists it."""
    details = event.details
    return {
        "action": str(event.action),
        "actor": event.actor,
        "at": event.at.isoformat(),
        "details": None if details is None else dict(details),
    }
