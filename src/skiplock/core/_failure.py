"""The failure decision: what happens to a job whose attempt did not succeed."""

from __future__ import annotations

import enum

from ._retry import RetryPolicy
from ._types import Bury, Release, Retry

#: last_error is capped before it is stored (ARCHITECTURE §5).
MAX_ERROR_LENGTH = 4096


class FailureKind(enum.Enum):
    """Why an attempt did not succeed."""

    ERROR = "error"  # the processor raised
    TIMEOUT = "timeout"  # the processor ran past its timeout
    UNDECODABLE = "undecodable"  # the payload does not decode to the processor's type: no retry
    UNKNOWN_KIND = "unknown_kind"  # no processor registered: no retry
    THROTTLED = "throttled"  # rate limited: wait without using an attempt


def truncate_error(text: str, limit: int = MAX_ERROR_LENGTH) -> str:
    """Cap an error text, marking the cut."""
    raise NotImplementedError


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
    """Retry with backoff, bury in dead, or release (throttled: ``retry_after`` seconds)."""
    raise NotImplementedError
