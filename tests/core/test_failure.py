"""The failure decision and error truncation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skiplock.core import (
    MAX_ERROR_LENGTH,
    MAX_RECORDED_ERRORS,
    STALE_MARK,
    AttemptError,
    Bury,
    Release,
    Retry,
    RetryPolicy,
    UndecodableRowError,
    ValidationError,
    recorded_errors,
    stale_error,
    truncate_error,
    undecodable_error,
)
from skiplock.core._failure import UNDECODABLE_MARK, FailureKind, decide_failure
from skiplock.core._retry import next_delay
from skiplock.core._validation import MAX_DELAY

_AT = datetime(2024, 1, 1, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=3, base=timedelta(seconds=10), factor=2.0, jitter=0.5)


def _decide(failure: FailureKind, error: str = "boom", **kw: object) -> Retry | Bury | Release:
    args: dict[str, object] = {
        "attempt": 1,
        "max_attempts": 3,
        "retry": POLICY,
        "jitter": 0.5,
    }
    args.update(kw)
    return decide_failure(failure, error, **args)  # type: ignore[arg-type]


def test_decide_failure_error_retries_with_backoff() -> None:
    assert _decide(FailureKind.ERROR, attempt=2) == Retry(
        delay=next_delay(POLICY, 2, 0.5), error="boom"
    )
    assert _decide(FailureKind.ERROR, attempt=2).delay == timedelta(seconds=25)  # type: ignore[union-attr]


def test_decide_failure_error_last_attempt_buries() -> None:
    assert _decide(FailureKind.ERROR, attempt=3) == Bury(error="boom")
    assert _decide(FailureKind.ERROR, attempt=4) == Bury(error="boom")


def test_decide_failure_uses_max_attempts_argument() -> None:
    # The job's own max_attempts wins over the policy's.
    assert isinstance(_decide(FailureKind.ERROR, attempt=3, max_attempts=5), Retry)
    assert isinstance(_decide(FailureKind.ERROR, attempt=1, max_attempts=1), Bury)


def test_decide_failure_timeout_retries_and_mentions_timeout() -> None:
    outcome = _decide(FailureKind.TIMEOUT, "after 5.0s", attempt=1)
    assert isinstance(outcome, Retry)
    assert "timeout" in outcome.error
    assert "after 5.0s" in outcome.error
    assert outcome.delay == next_delay(POLICY, 1, 0.5)


def test_decide_failure_timeout_last_attempt_buries() -> None:
    outcome = _decide(FailureKind.TIMEOUT, "after 5.0s", attempt=3)
    assert isinstance(outcome, Bury)
    assert "timeout" in outcome.error


@pytest.mark.parametrize("attempt", [1, 3])
def test_decide_failure_undecodable_buries_immediately(attempt: int) -> None:
    outcome = _decide(FailureKind.UNDECODABLE, "missing field 'to'", attempt=attempt)
    assert outcome == Bury(error="undecodable payload: missing field 'to'")


@pytest.mark.parametrize("attempt", [1, 3])
def test_decide_failure_unknown_kind_buries_immediately(attempt: int) -> None:
    outcome = _decide(FailureKind.UNKNOWN_KIND, "email.send", attempt=attempt)
    assert outcome == Bury(error="no processor registered for kind 'email.send'")


@pytest.mark.parametrize("attempt", [1, 3])
def test_decide_failure_unstorable_result_buries_immediately(attempt: int) -> None:
    # The same code would return the same kind of value again: no retry (X5).
    outcome = _decide(FailureKind.UNSTORABLE_RESULT, "result too large", attempt=attempt)
    assert outcome == Bury(error="unstorable result: result too large")


def _entry(attempt: int) -> AttemptError:
    return AttemptError(
        attempt=attempt, worker_id="w", claimed_at=None, failed_at=_AT, error=f"e{attempt}"
    )


def test_recorded_errors_append_and_keep_the_latest() -> None:
    errors: tuple[AttemptError, ...] = ()
    for n in range(1, MAX_RECORDED_ERRORS + 4):
        errors = recorded_errors(errors, _entry(n))
        assert len(errors) == min(n, MAX_RECORDED_ERRORS)
        assert errors[-1] == _entry(n)
    assert [e.attempt for e in errors] == list(range(4, MAX_RECORDED_ERRORS + 4))


@pytest.mark.parametrize("attempt", [1, 3, 10])
def test_decide_failure_throttled_releases_without_attempt(attempt: int) -> None:
    # Even on the last attempt a throttle does not bury: no attempt is used.
    outcome = _decide(FailureKind.THROTTLED, "bucket empty", attempt=attempt, retry_after=1.5)
    assert outcome == Release(delay=timedelta(seconds=1.5))


def test_decide_failure_retry_and_throttle_delays_stay_within_the_stores_bounds() -> None:
    # A backoff cap (or a bucket's wait) past what now + delay may reach is clamped.
    huge = RetryPolicy(max_attempts=9, base=timedelta(days=10**6), cap=timedelta.max)
    retry = _decide(FailureKind.ERROR, attempt=8, max_attempts=9, retry=huge)
    assert retry == Retry(delay=MAX_DELAY, error="boom")
    throttled = _decide(FailureKind.THROTTLED, retry_after=1e300)
    assert throttled == Release(delay=MAX_DELAY)


@pytest.mark.parametrize("retry_after", [-1.0, float("nan"), float("inf")])
def test_decide_failure_throttled_rejects_bad_retry_after(retry_after: float) -> None:
    with pytest.raises(ValidationError, match="retry_after"):
        _decide(FailureKind.THROTTLED, retry_after=retry_after)


@pytest.mark.parametrize("failure", [FailureKind.ERROR, FailureKind.TIMEOUT])
@pytest.mark.parametrize("attempt", [1, 3])
def test_decide_failure_truncates_long_errors(failure: FailureKind, attempt: int) -> None:
    outcome = _decide(failure, "x" * 10_000, attempt=attempt)
    assert isinstance(outcome, Retry | Bury)
    assert len(outcome.error) <= MAX_ERROR_LENGTH
    assert "[truncated" in outcome.error


@pytest.mark.parametrize("failure", [FailureKind.UNDECODABLE, FailureKind.UNKNOWN_KIND])
def test_decide_failure_truncates_bury_errors(failure: FailureKind) -> None:
    outcome = _decide(failure, "y" * 10_000)
    assert isinstance(outcome, Bury)
    assert len(outcome.error) <= MAX_ERROR_LENGTH


def test_truncate_error_short_text_unchanged() -> None:
    assert truncate_error("short") == "short"
    assert truncate_error("x" * MAX_ERROR_LENGTH) == "x" * MAX_ERROR_LENGTH


def test_truncate_error_marks_cut() -> None:
    text = "Traceback: " + "z" * 200
    result = truncate_error(text, limit=100)
    assert len(result) == 100
    assert result.startswith("Traceback: zz")
    kept = result.index("…")
    assert result[kept:] == f"… [truncated {len(text) - kept} chars]"


def test_truncate_error_tiny_limit_bare_cut() -> None:
    assert truncate_error("abcdefghijklmnopqrstuvwxyz" * 3, limit=5) == "abcde"
    assert truncate_error("abc", limit=0) == ""


def test_truncate_error_rejects_negative_limit() -> None:
    with pytest.raises(ValidationError, match="limit must be >= 0"):
        truncate_error("abc", limit=-1)


@given(st.text(max_size=500), st.integers(min_value=0, max_value=300))
def test_truncate_error_never_longer_than_limit(text: str, limit: int) -> None:
    result = truncate_error(text, limit)
    assert len(result) <= limit
    # What cannot be stored (NUL, lone surrogates) is replaced before the cut.
    text = truncate_error(text, limit=10**6)
    if len(text) <= limit:
        assert result == text
    elif "[truncated" in result:
        kept = result.rindex("… [truncated ")
        assert text.startswith(result[:kept])
        assert result.endswith(f"[truncated {len(text) - kept} chars]")
    else:
        assert result == text[:limit]


def test_truncate_error_replaces_what_postgres_text_cannot_hold() -> None:
    result = truncate_error("binary \x00 junk \udcff end")
    assert "\x00" not in result
    result.encode("utf-8")  # no lone surrogate left
    assert result == "binary \\x00 junk \\udcff end"


@pytest.mark.parametrize("failure", [FailureKind.ERROR, FailureKind.TIMEOUT])
def test_decide_failure_never_returns_an_unstorable_error(failure: FailureKind) -> None:
    outcome = decide_failure(
        failure, "bad \x00 byte", attempt=1, max_attempts=3, retry=RetryPolicy(), jitter=0.0
    )
    assert isinstance(outcome, Retry)
    assert "\x00" not in outcome.error


def test_undecodable_error_names_the_column_and_is_capped() -> None:
    assert undecodable_error("payload", "nested too deeply") == (
        f"{UNDECODABLE_MARK} payload: nested too deeply"
    )
    long = undecodable_error("trace_context", "x\x00" * MAX_ERROR_LENGTH)
    assert len(long) == MAX_ERROR_LENGTH
    assert long.startswith(f"{UNDECODABLE_MARK} trace_context: x\\x00")
    assert "truncated" in long


def test_undecodable_row_error_names_job_column_and_problem() -> None:
    error = UndecodableRowError(7, "created_at", "-infinity is out of range")
    assert str(error) == "job 7 cannot be read: created_at: -infinity is out of range"
    assert (error.job_id, error.column, error.problem) == (
        7,
        "created_at",
        "-infinity is out of range",
    )


def test_stale_error_puts_the_mark_first_and_cuts_at_the_limit() -> None:
    assert stale_error(None) == STALE_MARK
    assert stale_error("boom") == f"{STALE_MARK} boom"
    long = "e" * MAX_ERROR_LENGTH  # a stored error is at most this long
    cut = stale_error(long)
    assert len(cut) == MAX_ERROR_LENGTH
    assert cut == f"{STALE_MARK} {long}"[:MAX_ERROR_LENGTH]  # no marker: PostgreSQL's left()
