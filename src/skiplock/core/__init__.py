"""Pure domain core: no I/O, no asyncio or threads, no clock or random reads.

Time enters as ``now``, randomness as a ``jitter`` value, so every rule is testable
without sleeping. Imports only the standard library and attrs.
"""

from __future__ import annotations

from ._bucket import RateLimit, TokenBucket, new_bucket, refill, take
from ._capacity import plan_claim
from ._errors import (
    InvalidTransitionError,
    JobNotFoundError,
    LeaseLostError,
    SchemaVersionError,
    SkiplockError,
    StoreError,
    UnknownKindError,
    ValidationError,
)
from ._failure import MAX_ERROR_LENGTH, FailureKind, decide_failure, truncate_error
from ._idempotency import first_occurrences
from ._policy import KindPolicy, PolicyOverrides, resolve_policy
from ._retry import RetryPolicy, base_delay, next_delay
from ._states import (
    OPERATOR_EVENTS,
    TERMINAL_STATES,
    TRANSITIONS,
    check_operator_event,
    legal_events,
    sources,
    transition,
)
from ._types import (
    JSON,
    Bury,
    ClaimRequest,
    Completion,
    EnqueueRequest,
    EnqueueResult,
    Event,
    Job,
    JobFilter,
    JobState,
    Lease,
    Outcome,
    Page,
    Release,
    Retry,
    StateCount,
    Succeeded,
    WorkerInfo,
)
from ._validation import (
    IDENTIFIER_RE,
    KIND_RE,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_PAYLOAD_BYTES,
    MAX_TENANT_LENGTH,
    PRIORITY_RANGE,
    encode_payload,
    validate_identifier,
    validate_request,
)

__all__ = [
    "IDENTIFIER_RE",
    "JSON",
    "KIND_RE",
    "MAX_ERROR_LENGTH",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_TENANT_LENGTH",
    "OPERATOR_EVENTS",
    "PRIORITY_RANGE",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Bury",
    "ClaimRequest",
    "Completion",
    "EnqueueRequest",
    "EnqueueResult",
    "Event",
    "FailureKind",
    "InvalidTransitionError",
    "Job",
    "JobFilter",
    "JobNotFoundError",
    "JobState",
    "KindPolicy",
    "Lease",
    "LeaseLostError",
    "Outcome",
    "Page",
    "PolicyOverrides",
    "RateLimit",
    "Release",
    "Retry",
    "RetryPolicy",
    "SchemaVersionError",
    "SkiplockError",
    "StateCount",
    "StoreError",
    "Succeeded",
    "TokenBucket",
    "UnknownKindError",
    "ValidationError",
    "WorkerInfo",
    "base_delay",
    "check_operator_event",
    "decide_failure",
    "encode_payload",
    "first_occurrences",
    "legal_events",
    "new_bucket",
    "next_delay",
    "plan_claim",
    "refill",
    "resolve_policy",
    "sources",
    "take",
    "transition",
    "truncate_error",
    "validate_identifier",
    "validate_request",
]
