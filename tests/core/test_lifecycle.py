"""The stores' job rules: claim, start, outcomes, recovery, operator events, selection."""

from __future__ import annotations

from datetime import timedelta

import pytest

from skiplock.core import (
    MAX_ERROR_LENGTH,
    STALE_MARK,
    AttemptError,
    Bury,
    ClaimRequest,
    EnqueueRequest,
    Event,
    InvalidTransitionError,
    Job,
    JobFilter,
    JobState,
    Lease,
    Release,
    Retry,
    Succeeded,
)
from skiplock.core._lifecycle import (
    after_claim,
    after_operator,
    after_outcome,
    after_recovery,
    after_release,
    after_start,
    holds,
    is_stale,
    matches,
    new_job,
    outcome_terms,
    purgeable,
    read_view,
    select_claim,
)
from tests.jobs import AT, make_job

LATER = AT + timedelta(minutes=5)
DONE = AT + timedelta(minutes=9)


def _running(*, started: bool = True, prior: int = 0, **fields: object) -> Job:
    """A job with ``prior`` attempts, claimed at LATER by worker w (its first claim);
    ``started``: the claim paid its start."""
    job = make_job(attempts=prior, **fields)
    return after_claim(job, ClaimRequest(worker_id="w", limit=1), start=started, now=LATER)


def test_new_job_is_due_now_after_a_delay_or_at_its_time() -> None:
    now = AT
    assert new_job(EnqueueRequest("k"), job_id=1, payload="p", now=now).available_at == now
    delayed = new_job(
        EnqueueRequest("k", delay=timedelta(seconds=5)), job_id=1, payload=None, now=now
    )
    assert delayed.available_at == now + timedelta(seconds=5)
    job = new_job(
        EnqueueRequest("k", available_at=DONE, priority=3, tenant="t", max_attempts=2),
        job_id=9,
        payload={"a": 1},
        now=now,
    )
    assert (job.id, job.state, job.available_at, job.created_at) == (9, JobState.PENDING, DONE, now)
    assert (job.priority, job.tenant, job.max_attempts, job.attempts, job.claims) == (
        3,
        "t",
        2,
        0,
        0,
    )


def test_a_claim_that_starts_pays_the_attempt_and_sets_the_mark() -> None:
    job = make_job()
    started = after_claim(job, ClaimRequest(worker_id="w", limit=1), start=True, now=LATER)
    assert (started.state, started.attempts, started.claims) == (JobState.RUNNING, 1, 1)
    assert (started.claimed_by, started.claimed_at, started.started_at) == ("w", LATER, LATER)
    assert started.suspect  # the started mark
    held = after_claim(job, ClaimRequest(worker_id="w", limit=1), start=False, now=LATER)
    assert (held.attempts, held.claims, held.suspect, held.started_at) == (0, 1, False, None)


def test_a_claim_takes_the_workers_max_attempts_unless_explicit() -> None:
    request = ClaimRequest(worker_id="w", limit=1, max_attempts={"k": 9})
    assert after_claim(make_job(), request, start=True, now=LATER).max_attempts == 9
    explicit = make_job(explicit_max_attempts=True)
    assert after_claim(explicit, request, start=True, now=LATER).max_attempts == 5


def test_claiming_a_job_that_is_not_pending_is_illegal() -> None:
    with pytest.raises(InvalidTransitionError):
        after_claim(_running(), ClaimRequest(worker_id="w", limit=1), start=True, now=LATER)


def test_start_pays_once_per_claim() -> None:
    held = _running(started=False)
    started = after_start(held)
    assert (started.attempts, started.suspect, started.started_at) == (1, True, LATER)
    assert after_start(started) == started


def test_holds_checks_worker_and_claim_not_attempt() -> None:
    job = _running()
    assert holds(job, job.lease)
    assert holds(job, Lease(job.id, "w", attempt=99, claim=1))
    assert not holds(job, Lease(job.id, "other", attempt=1, claim=1))
    assert not holds(job, Lease(job.id, "w", attempt=1, claim=2))
    assert not holds(after_outcome(job, Succeeded(), DONE), job.lease)


@pytest.mark.parametrize(
    ("outcome", "state", "ran", "refund", "failed", "error", "delay"),
    [
        (Succeeded(result=1), JobState.SUCCEEDED, True, False, False, None, None),
        (
            Retry(delay=timedelta(seconds=3), error="e"),
            JobState.PENDING,
            True,
            False,
            True,
            "e",
            timedelta(seconds=3),
        ),
        (Bury(error="e"), JobState.DEAD, True, False, True, "e", None),
        (Release(), JobState.PENDING, True, True, False, None, timedelta(0)),
        (
            Release(error="x", refund=False),
            JobState.PENDING,
            False,
            False,
            False,
            "x",
            timedelta(0),
        ),
    ],
)
def test_outcome_terms(
    outcome: Succeeded | Retry | Bury | Release,
    state: JobState,
    ran: bool,
    refund: bool,
    failed: bool,
    error: str | None,
    delay: timedelta | None,
) -> None:
    terms = outcome_terms(outcome)
    assert (terms.state, terms.ran, terms.refund, terms.failed) == (state, ran, refund, failed)
    assert (terms.error, terms.delay) == (error, delay)


def test_outcome_terms_cap_the_error() -> None:
    terms = outcome_terms(Bury(error="x" * (MAX_ERROR_LENGTH + 10)))
    assert terms.error is not None
    assert len(terms.error) == MAX_ERROR_LENGTH
    assert terms.error.endswith("chars]")


def test_success_keeps_the_claim_clears_the_error_and_stores_the_result() -> None:
    job = _running(last_error="earlier", recovered=True)
    done = after_outcome(job, Succeeded(result={"n": 1}), DONE)
    assert (done.state, done.completed_at, done.claimed_by, done.claimed_at) == (
        JobState.SUCCEEDED,
        DONE,
        "w",
        LATER,
    )
    assert (done.last_error, done.result, done.attempts) == (None, {"n": 1}, 1)
    assert (done.suspect, done.recovered) == (False, False)


def test_an_outcome_pays_for_a_held_run_that_no_start_paid() -> None:
    held = _running(started=False)
    done = after_outcome(held, Succeeded(), DONE)
    assert (done.attempts, done.started_at) == (1, LATER)


def test_retry_records_the_failed_attempt_and_clears_the_claim() -> None:
    job = _running(prior=1)
    retried = after_outcome(job, Retry(delay=timedelta(seconds=30), error="boom"), DONE)
    assert (retried.state, retried.available_at) == (JobState.PENDING, DONE + timedelta(seconds=30))
    assert (retried.claimed_by, retried.claimed_at, retried.completed_at) == (None, None, None)
    assert (retried.attempts, retried.last_error) == (2, "boom")
    assert retried.errors == (AttemptError(2, "w", LATER, DONE, "boom"),)


def test_bury_records_the_failure_and_keeps_the_claim() -> None:
    dead = after_outcome(_running(), Bury(error="bad"), DONE)
    assert (dead.state, dead.completed_at, dead.claimed_by) == (JobState.DEAD, DONE, "w")
    assert dead.errors == (AttemptError(1, "w", LATER, DONE, "bad"),)


def test_release_gives_the_attempt_back_or_keeps_a_held_jobs() -> None:
    started = _running(prior=1, last_error="earlier")
    released = after_outcome(started, Release(delay=timedelta(seconds=5)), DONE)
    assert (released.state, released.attempts, released.last_error) == (
        JobState.PENDING,
        1,
        "earlier",
    )
    assert released.available_at == DONE + timedelta(seconds=5)
    assert released.errors == ()
    held = _running(started=False)
    given_back = after_outcome(held, Release(error="shutdown", refund=False), DONE)
    assert (given_back.attempts, given_back.last_error, given_back.started_at) == (
        0,
        "shutdown",
        None,
    )
    # A held job released with a refund: its run is paid, then given back.
    refunded = after_outcome(held, Release(), DONE)
    assert (refunded.attempts, refunded.started_at) == (0, LATER)


def test_recovery_returns_the_job_marked_and_records_a_run_under_way() -> None:
    recovered = after_recovery(_running(last_error="earlier"), DONE)
    assert (recovered.state, recovered.claimed_by, recovered.claimed_at) == (
        JobState.PENDING,
        None,
        None,
    )
    assert recovered.last_error == f"{STALE_MARK} earlier"
    assert (recovered.recovered, recovered.suspect, recovered.attempts) == (True, True, 1)
    assert recovered.errors == (AttemptError(1, "w", LATER, DONE, STALE_MARK),)
    assert read_view(recovered).suspect
    held = after_recovery(_running(started=False), DONE)
    assert (held.errors, held.suspect) == ((), False)


def test_recovery_without_attempts_left_buries_and_keeps_the_claim() -> None:
    dead = after_recovery(_running(max_attempts=1), DONE)
    assert (dead.state, dead.completed_at, dead.claimed_by, dead.claimed_at) == (
        JobState.DEAD,
        DONE,
        "w",
        LATER,
    )
    assert (dead.recovered, dead.last_error) == (True, STALE_MARK)
    assert not read_view(dead).suspect


def test_is_stale() -> None:
    ttl = timedelta(minutes=1)
    assert is_stale(None, ttl, AT)
    assert is_stale(AT - ttl - timedelta(microseconds=1), ttl, AT)
    assert not is_stale(AT - ttl, ttl, AT)


def test_release_by_registration_keeps_attempts_and_mark() -> None:
    released = after_release(_running())
    assert (released.state, released.claimed_by, released.recovered) == (
        JobState.PENDING,
        None,
        True,
    )
    assert (released.attempts, released.claims, released.suspect) == (1, 1, True)


def test_operator_events() -> None:
    dead = after_outcome(_running(), Bury(error="bad"), DONE)
    replayed = after_operator(dead, Event.REPLAY, LATER, reset_attempts=True)
    assert (replayed.state, replayed.available_at, replayed.attempts, replayed.claims) == (
        JobState.PENDING,
        LATER,
        0,
        1,
    )
    assert (replayed.claimed_by, replayed.completed_at, replayed.errors) == (
        None,
        None,
        dead.errors,
    )
    cancelled = after_operator(_running(), Event.CANCEL, DONE, reset_attempts=True)
    assert (cancelled.state, cancelled.completed_at, cancelled.attempts) == (
        JobState.CANCELLED,
        DONE,
        1,  # only a replay resets attempts
    )
    assert (cancelled.suspect, cancelled.claimed_by) == (False, "w")
    with pytest.raises(InvalidTransitionError):
        after_operator(make_job(), Event.REPLAY, DONE, reset_attempts=False)


def test_select_claim_takes_due_jobs_in_order_within_the_limits() -> None:
    jobs = [
        make_job(id=1, priority=0),
        make_job(id=2, priority=5),
        make_job(id=3, priority=5, available_at=LATER),  # not due
        make_job(id=4, kind="other"),
        make_job(id=5, tenant="t"),
    ]
    request = ClaimRequest(worker_id="w", limit=3, kind_limits={"k": 2})
    assert [j.id for j in select_claim(request, jobs, {}, AT)] == [2, 1, 4]
    by_tenant = ClaimRequest(worker_id="w", limit=9, tenants=frozenset({"t"}))
    assert [j.id for j in select_claim(by_tenant, jobs, {}, AT)] == [5]
    full = ClaimRequest(worker_id="w", limit=9, cluster_limits={"k": 3})
    assert [j.id for j in select_claim(full, jobs, {"k": 2}, AT)] == [2, 4]
    assert select_claim(ClaimRequest(worker_id="w", limit=0), jobs, {}, AT) == []


def test_matches_and_purgeable() -> None:
    job = make_job(tenant="t", priority=3)
    assert matches(JobFilter(), job)
    assert matches(JobFilter(tenants=frozenset({"t"}), priority_min=3, created_before=LATER), job)
    assert not matches(JobFilter(tenants=frozenset({"u"})), job)
    assert not matches(JobFilter(created_since=LATER), job)
    done = after_outcome(_running(), Succeeded(), DONE)
    assert purgeable(done, DONE + timedelta(microseconds=1))
    assert not purgeable(done, DONE)
    assert not purgeable(after_outcome(_running(), Bury(error="x"), AT), DONE)
