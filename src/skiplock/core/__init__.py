"""Pure domain core: no I/O, no asyncio or threads, no clock or random reads.

Time enters as ``now``, randomness as a ``jitter`` value, so every rule is testable
without sleeping. Imports only the standard library and attrs.

The names exported here are what a store or adapter author needs: the job and port types,
the errors, the state machine, and the rules a store applies so that every store behaves
alike (claim order and caps, what a job records, audit events, payload bounds). The rest
of the core (validation helpers, setting fields, health and throughput rules, token
buckets, claim planning) is internal to skiplock: import it from its private module
(``skiplock.core._validation`` ...) inside the package only.
"""

from __future__ import annotations

from ._admin import JobFilter, JobPage, Page, StateCount, WorkerInfo
from ._audit import (
    AuditAction,
    AuditEvent,
    completion_action,
    discard_details,
    dlq_details,
    operator_action,
    operator_details,
    operator_extra,
)
from ._bucket import RateLimit
from ._capacity import (
    PairCap,
    capped_kinds,
    charged_positions,
    claim_order,
    kind_caps,
    pair_caps,
    pair_order,
)
from ._claims import Bury, ClaimRequest, Completion, NextDue, Outcome, Release, Retry, Succeeded
from ._errors import (
    DatabaseUnavailableError,
    InvalidTransitionError,
    JobNotFoundError,
    LeaseLostError,
    SchemaVersionError,
    SkiplockError,
    StoreError,
    UndecodableRowError,
    UnknownKindError,
    ValidationError,
)
from ._failure import (
    MAX_ERROR_LENGTH,
    MAX_RECORDED_ERRORS,
    STALE_MARK,
    recorded_errors,
    stale_error,
    truncate_error,
    undecodable_error,
)
from ._health import (
    HealthReport,
    HealthSnapshot,
    KindHealth,
    QueueStats,
    SchemaInfo,
    WorkerHealth,
    WorkerStatus,
)
from ._idempotency import first_occurrences
from ._json import audit_event_json, job_json
from ._options import EnqueueFields
from ._policy import KindPolicy, PolicyOverrides
from ._retry import RetryPolicy
from ._states import TERMINAL_STATES, check_operator_event, sources, transition
from ._throughput import FINISHED_STATES, FinishedCount
from ._types import (
    JSON,
    AttemptError,
    EnqueueBatch,
    EnqueueRequest,
    EnqueueResult,
    Event,
    Job,
    JobState,
    Lease,
)
from ._validation import (
    JSONB_MAX_BYTES,
    MAX_AVAILABLE_AT,
    MIN_AVAILABLE_AT,
    encode_payload,
    result_json,
    validate_identifier,
)
from ._why import JobWait, WaitReason

__all__ = [
    "FINISHED_STATES",
    "JSON",
    "JSONB_MAX_BYTES",
    "MAX_AVAILABLE_AT",
    "MAX_ERROR_LENGTH",
    "MAX_RECORDED_ERRORS",
    "MIN_AVAILABLE_AT",
    "STALE_MARK",
    "TERMINAL_STATES",
    "AttemptError",
    "AuditAction",
    "AuditEvent",
    "Bury",
    "ClaimRequest",
    "Completion",
    "DatabaseUnavailableError",
    "EnqueueBatch",
    "EnqueueFields",
    "EnqueueRequest",
    "EnqueueResult",
    "Event",
    "FinishedCount",
    "HealthReport",
    "HealthSnapshot",
    "InvalidTransitionError",
    "Job",
    "JobFilter",
    "JobNotFoundError",
    "JobPage",
    "JobState",
    "JobWait",
    "KindHealth",
    "KindPolicy",
    "Lease",
    "LeaseLostError",
    "NextDue",
    "Outcome",
    "Page",
    "PairCap",
    "PolicyOverrides",
    "QueueStats",
    "RateLimit",
    "Release",
    "Retry",
    "RetryPolicy",
    "SchemaInfo",
    "SchemaVersionError",
    "SkiplockError",
    "StateCount",
    "StoreError",
    "Succeeded",
    "UndecodableRowError",
    "UnknownKindError",
    "ValidationError",
    "WaitReason",
    "WorkerHealth",
    "WorkerInfo",
    "WorkerStatus",
    "audit_event_json",
    "capped_kinds",
    "charged_positions",
    "check_operator_event",
    "claim_order",
    "completion_action",
    "discard_details",
    "dlq_details",
    "encode_payload",
    "first_occurrences",
    "job_json",
    "kind_caps",
    "operator_action",
    "operator_details",
    "operator_extra",
    "pair_caps",
    "pair_order",
    "recorded_errors",
    "result_json",
    "sources",
    "stale_error",
    "transition",
    "truncate_error",
    "undecodable_error",
    "validate_identifier",
]
