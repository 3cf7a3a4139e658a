"""The rules the engine and its doors share (validation and its bounds, the settings'
field descriptors, policy resolution, retry delays, failure decisions, the operator's
actions, the health, throughput and history views): public so that every layer above
the core imports them from here, never from the core's private modules. Applications
use :mod:`skiplock.core` and the engine instead; store authors :mod:`skiplock.core.store`.
"""

from __future__ import annotations

from ._bucket import (
    Pair,
    take,
)
from ._capacity import (
    plan_claim,
    throttle_limits,
)
from ._concurrency import (
    check_concurrency_limit,
    concurrency_scope,
    kind_limits,
)
from ._controls import (
    EffectiveLimits,
    check_reason,
    describe,
    limit_scope,
    pause_scope,
)
from ._failure import (
    FailureKind,
    decide_failure,
    exception_traceback,
)
from ._fields import (
    ACTOR,
    FLAG,
    NON_NEGATIVE_DURATION,
    NON_NEGATIVE_INT,
    POLICY_FIELD_NAMES,
    POLICY_FIELDS,
    POSITIVE_DURATION,
    POSITIVE_INT,
    RATE,
    SecondsView,
    Setting,
    choice,
    field_defaults,
    parse_duration,
)
from ._health import (
    LIVE_HEARTBEATS,
    HealthThresholds,
    ThrottledPair,
    assess_health,
    format_duration,
    unreachable_report,
)
from ._history import (
    History,
    HistoryBucket,
    history_from,
)
from ._idempotency import (
    IdempotencyConflict,
    IdempotencyScope,
)
from ._options import (
    check_available_at,
    check_concurrency,
    check_idempotency_policy,
    check_job_fields,
    check_known_kind,
    check_max_attempts,
    check_priority,
    check_trace_context,
)
from ._policy import (
    check_connection_mode,
    overrides_from,
    policy_from,
    resolve_policy,
)
from ._rates import (
    table_limits,
)
from ._retry import (
    next_delay,
)
from ._search import (
    MAX_SEARCH_TEXT,
    check_payload_filter,
    check_search_text,
    payload_filter,
)
from ._states import (
    OPERATOR_ACTIONS,
    action_states,
)
from ._throughput import (
    MAX_BUCKETS,
    Throughput,
    throughput_from,
    throughput_window,
)
from ._validation import (
    INT8_RANGE,
    KIND_RE,
    MAX_CONCURRENCY_KEY_LENGTH,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_PAYLOAD_BYTES,
    MAX_RESULT_BYTES,
    MAX_TENANT_LENGTH,
    PRIORITY_RANGE,
    check_actor,
    check_bool,
    check_duration,
    check_int,
    check_job_id,
    check_kind,
    check_rate_limit,
    check_tenant,
    check_text,
    encode_result,
    optional_duration,
    optional_rate_limit,
    to_duration,
    to_rate_limit,
    unknown_kind_message,
)
from ._why import WAIT_CODES, WAIT_COUNT_BOUND, explain_wait
from ._worker_requests import check_worker_action, check_worker_id, running_jobs_json

__all__ = [
    "ACTOR",
    "FLAG",
    "INT8_RANGE",
    "KIND_RE",
    "LIVE_HEARTBEATS",
    "MAX_BUCKETS",
    "MAX_CONCURRENCY_KEY_LENGTH",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_SEARCH_TEXT",
    "MAX_TENANT_LENGTH",
    "NON_NEGATIVE_DURATION",
    "NON_NEGATIVE_INT",
    "OPERATOR_ACTIONS",
    "POLICY_FIELDS",
    "POLICY_FIELD_NAMES",
    "POSITIVE_DURATION",
    "POSITIVE_INT",
    "PRIORITY_RANGE",
    "RATE",
    "WAIT_CODES",
    "WAIT_COUNT_BOUND",
    "EffectiveLimits",
    "FailureKind",
    "HealthThresholds",
    "History",
    "HistoryBucket",
    "IdempotencyConflict",
    "IdempotencyScope",
    "Pair",
    "SecondsView",
    "Setting",
    "ThrottledPair",
    "Throughput",
    "action_states",
    "assess_health",
    "check_actor",
    "check_available_at",
    "check_bool",
    "check_concurrency",
    "check_concurrency_limit",
    "check_connection_mode",
    "check_duration",
    "check_idempotency_policy",
    "check_int",
    "check_job_fields",
    "check_job_id",
    "check_kind",
    "check_known_kind",
    "check_max_attempts",
    "check_payload_filter",
    "check_priority",
    "check_rate_limit",
    "check_reason",
    "check_search_text",
    "check_tenant",
    "check_text",
    "check_trace_context",
    "check_worker_action",
    "check_worker_id",
    "choice",
    "concurrency_scope",
    "decide_failure",
    "describe",
    "encode_result",
    "exception_traceback",
    "explain_wait",
    "field_defaults",
    "format_duration",
    "history_from",
    "kind_limits",
    "limit_scope",
    "next_delay",
    "optional_duration",
    "optional_rate_limit",
    "overrides_from",
    "parse_duration",
    "pause_scope",
    "payload_filter",
    "plan_claim",
    "policy_from",
    "resolve_policy",
    "running_jobs_json",
    "table_limits",
    "take",
    "throttle_limits",
    "throughput_from",
    "throughput_window",
    "to_duration",
    "to_rate_limit",
    "unknown_kind_message",
    "unreachable_report",
]
