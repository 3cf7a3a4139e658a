"""Core value types: the lease a job hands out."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest

from skiplock.core import Job, JobState, Lease

_AT = datetime(2024, 1, 1, tzinfo=UTC)


def _job(**fields: object) -> Job:
    defaults: dict[str, object] = {
        "id": 7,
        "kind": "k",
        "payload": None,
        "state": JobState.PENDING,
        "priority": 0,
        "tenant": None,
        "available_at": _AT,
        "created_at": _AT,
        "attempts": 0,
        "max_attempts": 5,
    }
    return Job(**(defaults | fields))  # type: ignore[arg-type]


def test_job_claims_start_at_zero() -> None:
    assert _job().claims == 0


def test_job_lease_names_the_claim() -> None:
    job = _job(state=JobState.RUNNING, claimed_by="w", attempts=1, claims=3)
    assert job.lease == Lease(job_id=7, worker_id="w", attempt=1, claim=3)


def test_job_lease_differs_for_a_later_claim_with_the_same_attempt() -> None:
    first = _job(state=JobState.RUNNING, claimed_by="w", attempts=1, claims=1)
    later = attrs.evolve(first, claims=2)
    assert first.lease.attempt == later.lease.attempt
    assert first.lease != later.lease


def test_job_lease_of_an_unclaimed_job_raises() -> None:
    with pytest.raises(ValueError, match="job 7 is not claimed"):
        _ = _job().lease


def test_charged_job_has_one_more_attempt_and_every_other_field_kept() -> None:
    job = _job(
        state=JobState.RUNNING,
        claimed_by="w",
        attempts=2,
        claims=4,
        trace_context={"traceparent": "x"},
        recovered=True,
        suspect=True,
        explicit_max_attempts=True,
        last_error="boom",
    )
    charged = job.charged()
    assert charged == attrs.evolve(job, attempts=3)
    assert job.attempts == 2  # the original is untouched (frozen)
