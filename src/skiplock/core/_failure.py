"""The failure decision: what happens to a job whose attempt did not succeed."""

from __future__ import annotations

import enum
import math
import traceback
from datetime import timedelta
from typing import TYPE_CHECKING

from ._claims import Bury, Release, Retry
from ._errors import ValidationError
from ._retry import RetryPolicy, next_delay
from ._validation import MAX_DELAY

if TYPE_CHECKING:
    from types import TracebackType

    from ._types import AttemptError

#: last_error is capped before it is stored (R6 in docs/requirements.md).
MAX_ERROR_LENGTH = 4096

#: How many failed attempts a job records in ``Job.errors`` (X5): the latest ones. With
#: errors capped at :data:`MAX_ERROR_LENGTH`, a job's record stays below ~40 KiB.
MAX_RECORDED_ERRORS = 10

#: Prefix of ``last_error`` of a job whose worker stopped heart-beating (R12).
STALE_MARK = "[stale-claim recovered]"

#: Prefix of ``last_error`` of a job moved to ``dead`` by its claim because its stored row
#: cannot become a Job (a value written around enqueue's validation).
UNDECODABLE_MARK = "[undecodable row]"


#: Modules whose frames lead to a processor without being its own: skiplock's (the worker,
#: a framework integration's runner) and the standard library's executors.
_RUNNER_MODULES = ("skiplock.", "asyncio.", "concurrent.futures.", "threading", "contextlib")


def _processor_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from the first frame of the processor's own code: the leading frames of
    :data:`_RUNNER_MODULES` left out (all of them if nothing else is left)."""
    first = tb
    while first is not None:
        module = str(first.tb_frame.f_globals.get("__name__", ""))
        if not module.startswith(_RUNNER_MODULES):
            return first
        first = first.tb_next
    return tb


def exception_traceback(exc: BaseException) -> str:
    """``exc`` formatted as Python prints it (trailing newline, chained exceptions too),
    from the processor's own frames: the worker's frames that called it are left out."""
    return "".join(traceback.format_exception(type(exc), exc, _processor_frames(exc.__traceback__)))


class FailureKind(enum.Enum):
    """Why an attempt did not succeed."""

    ERROR = "error"  # the processor raised
    TIMEOUT = "timeout"  # the processor ran past its timeout
    UNDECODABLE = "undecodable"  # the payload does not decode to the processor's type: no retry
    UNKNOWN_KIND = "unknown_kind"  # no processor registered: no retry
    THROTTLED = "throttled"  # rate limited: wait without using an attempt
    #: The processor's return value cannot be stored (not JSON, too large): no retry, as
    #: the same code would return the same kind of value again.
    UNSTORABLE_RESULT = "unstorable_result"


def truncate_error(text: str, limit: int = MAX_ERROR_LENGTH) -> str:
    """Cap an error text, marking the cut.

    The start is kept (it usually names the exception) and the marker
    ``… [truncated N chars]`` says how many characters were dropped; the result is never
    longer than ``limit``. Characters PostgreSQL text cannot hold (NUL, lone surrogates)
    are replaced first: an error message must never make its own outcome unstorable.
    """
    if limit < 0:
        raise ValidationError(f"limit must be >= 0, got {limit!r}")
    text = _storable(text)
    if len(text) <= limit:
        return text
    # The marker's length depends on N, which depends on how much room the marker takes.
    keep = limit
    while keep >= 0:
        marker = f"… [truncated {len(text) - keep} chars]"
        if keep + len(marker) <= limit:
            return text[:keep] + marker
        keep = limit - len(marker)
    # Not even the marker fits: a bare cut is the best we can do.
    return text[:limit]


def stale_error(previous: str | None) -> str:
    """``last_error`` of a recovered stale claim: :data:`STALE_MARK`, then the previous
    error (if any), cut at :data:`MAX_ERROR_LENGTH` characters without a marker. The
    previous error was capped when it was stored; the mark only pushes its end out (the
    PostgreSQL store's ``left()`` says the same)."""
    text = STALE_MARK if previous is None else f"{STALE_MARK} {previous}"
    return text[:MAX_ERROR_LENGTH]


def undecodable_error(column: str, problem: str) -> str:
    """``last_error`` of a job whose row cannot become a Job: :data:`UNDECODABLE_MARK`,
    the column and the problem, capped like every stored error."""
    return truncate_error(f"{UNDECODABLE_MARK} {column}: {problem}")


def recorded_errors(
    errors: tuple[AttemptError, ...], entry: AttemptError
) -> tuple[AttemptError, ...]:
    """``errors`` with ``entry`` appended, keeping the latest :data:`MAX_RECORDED_ERRORS`
    (the rule of ``Job.errors``; the PostgreSQL store applies it in SQL)."""
    return (*errors, entry)[-MAX_RECORDED_ERRORS:]


def _storable(text: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from undecodable OS data
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def decide_failure(
    failure: FailureKind,
    error: str,
    *,
    attempt: int,
    max_attempts: int,
    retry: RetryPolicy,
    jitter: float,
    retry_after: float = 0.0,
) -> Retry | Bury | Release:
    """Retry with backoff, bury in dead, or release (throttled: ``retry_after`` seconds).

    ``attempt`` is the attempt that just failed (1-based, counted at claim); ``error`` is
    the raw error text (for ``UNKNOWN_KIND``: the kind). Every error text is truncated.
    """
    if failure is FailureKind.UNKNOWN_KIND:
        return Bury(error=truncate_error(f"no processor registered for kind {error!r}"))
    if failure is FailureKind.UNDECODABLE:
        return Bury(error=truncate_error(f"undecodable payload: {error}"))
    if failure is FailureKind.UNSTORABLE_RESULT:
        return Bury(error=truncate_error(f"unstorable result: {error}"))
    if failure is FailureKind.THROTTLED:
        if not (math.isfinite(retry_after) and retry_after >= 0):
            raise ValidationError(f"retry_after must be >= 0 seconds, got {retry_after!r}")
        # No error text: a throttle is not a failure, and the job's last real error stays.
        # Clamped like a retry's delay, so the job stays due within the store's bounds.
        return Release(delay=timedelta(seconds=min(retry_after, MAX_DELAY.total_seconds())))
    text = f"timeout exceeded: {error}" if failure is FailureKind.TIMEOUT else error
    text = truncate_error(text)
    if attempt >= max_attempts:
        return Bury(error=text)
    return Retry(delay=next_delay(retry, attempt, jitter), error=text)
