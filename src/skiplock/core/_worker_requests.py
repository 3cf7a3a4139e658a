"""Requests to a worker (issue 45): an operator asks a registered worker, through the
store, to drain or stop (docs/workers.md, "Drain or stop a worker"). Pure values; the
worker reads them with the run-time controls, every ``controls_refresh``.

- ``drain``: stop claiming, give the held (prefetched, not started) jobs back, let every
  running job finish however long it takes, then unregister and exit.
- ``stop``: the worker's graceful stop (as on SIGTERM): stop claiming, give the held jobs
  back, let running jobs finish for up to ``shutdown_timeout``, then interrupt the rest
  and release them to ``pending`` without using an attempt; unregister and exit. A stop
  after a drain began gives the running jobs ``shutdown_timeout`` from then.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ._audit import AuditAction, AuditEvent
from ._errors import ValidationError
from ._validation import check_actor

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._types import Job

WorkerAction = Literal["drain", "stop"]

#: What a worker may be asked to do.
WORKER_ACTIONS: tuple[WorkerAction, ...] = ("drain", "stop")


def check_worker_action(action: object) -> WorkerAction:
    """``drain`` or ``stop``, else ValidationError."""
    if action not in WORKER_ACTIONS:
        raise ValidationError(f"a worker is asked to 'drain' or 'stop', got {action!r}")
    return action


def check_worker_id(worker_id: object) -> str:
    """A worker id: a non-blank string of at most 255 characters."""
    if not isinstance(worker_id, str) or not worker_id.strip() or len(worker_id) > 255:
        raise ValidationError(f"worker_id must be a non-blank string, got {worker_id!r}")
    return worker_id


@attrs.frozen
class WorkerRequest:
    """Worker ``worker_id`` is asked to ``action`` (``drain`` or ``stop``) by ``actor``
    since ``requested_at`` (the store's time)."""

    worker_id: str
    action: WorkerAction
    actor: str | None = None
    requested_at: datetime | None = None

    def __attrs_post_init__(self) -> None:
        check_worker_id(self.worker_id)
        check_worker_action(self.action)
        if self.actor is not None:
            check_actor("actor", self.actor)

    def to_json(self) -> dict[str, Any]:
        """A JSON object (the CLI's ``--json``, the REST API)."""
        at = None if self.requested_at is None else self.requested_at.isoformat()
        return {
            "worker_id": self.worker_id,
            "action": self.action,
            "actor": self.actor,
            "requested_at": at,
        }


def worker_request_event(request: WorkerRequest, at: datetime) -> AuditEvent:
    """The audit event (J10) of ``request``: ``worker_drain`` or ``worker_stop``, no job,
    the worker's id in the details."""
    action = AuditAction.WORKER_DRAIN if request.action == "drain" else AuditAction.WORKER_STOP
    details = {"worker_id": request.worker_id}
    return AuditEvent(action, None, None, None, request.actor, at, details)


def running_jobs_json(jobs: Sequence[Job]) -> list[dict[str, Any]]:
    """The jobs a worker runs now as JSON (the CLI's ``workers --json``, ``GET
    /workers``): ``id``, ``kind``, ``tenant`` and ``since`` (its claim, ISO 8601)."""
    return [
        {
            "id": job.id,
            "kind": job.kind,
            "tenant": job.tenant,
            "since": None if job.claimed_at is None else job.claimed_at.isoformat(),
        }
        for job in jobs
    ]
