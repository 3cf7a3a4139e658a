"""Core value types: the lease a job hands out, enqueue batches."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import attrs
import pytest

from skiplock.core import (
    AttemptError,
    EnqueueBatch,
    EnqueueRequest,
    JobState,
    Lease,
    Succeeded,
)
from tests.jobs import AT as _AT
from tests.jobs import make_job


def test_job_claims_start_at_zero() -> None:
    assert make_job().claims == 0


def test_job_lease_names_the_claim() -> None:
    job = make_job(state=JobState.RUNNING, claimed_by="w", attempts=1, claims=3)
    assert job.lease == Lease(job_id=7, worker_id="w", attempt=1, claim=3)


def test_job_lease_differs_for_a_later_claim_with_the_same_attempt() -> None:
    first = make_job(state=JobState.RUNNING, claimed_by="w", attempts=1, claims=1)
    later = attrs.evolve(first, claims=2)
    assert first.lease.attempt == later.lease.attempt
    assert first.lease != later.lease


def test_job_lease_of_an_unclaimed_job_raises() -> None:
    with pytest.raises(ValueError, match="job 7 is not claimed"):
        _ = make_job().lease


def test_charged_job_has_one_more_attempt_and_every_other_field_kept() -> None:
    job = make_job(
        state=JobState.RUNNING,
        claimed_by="w",
        attempts=2,
        claims=4,
        trace_context={"traceparent": "x"},
        recovered=True,
        suspect=True,
        explicit_max_attempts=True,
        last_error="boom",
        started_at=_AT,
        errors=(_failed("w0"),),
    )
    charged = job.charged()
    assert charged == attrs.evolve(job, attempts=3)
    assert job.attempts == 2  # the original is untouched (frozen)


def test_a_charged_job_that_never_started_starts_at_its_claim() -> None:
    # As the store's start writes it: started_at is the claim's time the first time.
    job = make_job(state=JobState.RUNNING, claimed_by="w", claimed_at=_AT, claims=1)
    assert job.started_at is None
    assert job.charged() == attrs.evolve(job, attempts=job.attempts + 1, started_at=_AT)


def _failed(worker_id: str) -> AttemptError:
    return AttemptError(attempt=1, worker_id=worker_id, claimed_at=None, failed_at=_AT, error="e")


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (JobState.RUNNING, ("w1", "w2", "w3")),
        (JobState.SUCCEEDED, ("w1", "w2", "w3")),
        # The last failure is the run of the claim that buried it: listed once.
        (JobState.DEAD, ("w1", "w2")),
        (JobState.PENDING, ("w1", "w2")),
        (JobState.CANCELLED, ("w1", "w2")),
    ],
)
def test_worker_ids_are_the_failed_runs_then_the_current_or_successful_one(
    state: JobState, expected: tuple[str, ...]
) -> None:
    job = make_job(state=state, claimed_by="w3", errors=(_failed("w1"), _failed("w2")))
    assert job.worker_ids == expected
    assert make_job(state=state).worker_ids == ()


def test_a_new_job_has_no_history() -> None:
    job = make_job()
    assert (job.started_at, job.result, job.errors, job.worker_ids) == (None, None, (), ())


def test_succeeded_result_json_is_a_cache_outside_equality() -> None:
    assert Succeeded(result=[1], result_json="[1]") == Succeeded(result=[1])
    assert Succeeded() == Succeeded(result=None)
    assert Succeeded(result=1) != Succeeded(result=2)


def test_an_enqueue_batch_is_the_sequence_of_its_requests() -> None:
    requests = [
        EnqueueRequest("a", {"i": 1}, payload_json='{"i":1}'),
        EnqueueRequest("b", priority=3, tenant="t", delay=timedelta(seconds=5), max_attempts=2),
        EnqueueRequest("c", available_at=_AT, idempotency_key="k", trace_context={"x": "y"}),
    ]
    batch = EnqueueBatch.of(requests)
    assert isinstance(batch, Sequence)
    assert len(batch) == 3
    assert list(batch) == requests
    assert [r.payload_json for r in batch] == ['{"i":1}', None, None]
    assert (batch[0], batch[-1], batch[1:]) == (requests[0], requests[2], requests[1:])
    assert batch[0] is batch[0]  # built once
    assert batch.kinds == ["a", "b", "c"]
    assert batch.tenants == [None, "t", None]
    assert (batch.keyed, batch.scheduled) == (True, True)
    assert EnqueueBatch.of(batch) is batch
    assert repr(batch) == "<EnqueueBatch of 3 jobs>"


def test_an_enqueue_batch_says_whether_any_job_has_a_key_or_a_due_time() -> None:
    batch = EnqueueBatch.of([EnqueueRequest("a"), EnqueueRequest("b")])
    assert (batch.keyed, batch.scheduled) == (False, False)
    assert list(batch) == [EnqueueRequest("a"), EnqueueRequest("b")]
    batch.append("c", None, 0, None, None, timedelta(0), 5, None, None, False, "null")
    assert (batch.keyed, batch.scheduled, len(batch)) == (False, True, 3)
    assert batch[2] == EnqueueRequest("c", delay=timedelta(0))  # read again after the append
    assert (EnqueueBatch().keyed, EnqueueBatch().scheduled, list(EnqueueBatch())) == (
        False,
        False,
        [],
    )
