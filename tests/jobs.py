"""A job as a store would return it, for tests that need one without a store."""

from __future__ import annotations

from datetime import UTC, datetime

from skiplock.core import Job, JobState

#: The default ``available_at`` and ``created_at`` of :func:`make_job`.
AT = datetime(2024, 1, 1, tzinfo=UTC)


def make_job(**fields: object) -> Job:
    """A pending job (id 7, kind ``k``, no attempts yet) with ``fields`` set on top."""
    defaults: dict[str, object] = {
        "id": 7,
        "kind": "k",
        "payload": None,
        "state": JobState.PENDING,
        "priority": 0,
        "tenant": None,
        "available_at": AT,
        "created_at": AT,
        "attempts": 0,
        "max_attempts": 5,
    }
    return Job(**(defaults | fields))  # type: ignore[arg-type]
