"""What a store needs, for store authors (docs/internals.md, "Writing a custom store
with the contract kit"): the types the store port speaks beyond :mod:`skiplock.core`
(:class:`Controls`, :class:`Limit`, :class:`Pause`, :class:`QueueSample`,
:class:`Retention`,
:class:`ClaimedJobs`, ...), the lifecycle rules that are every
store's executable spec (``after_claim``, ``after_outcome``, ``select_claim``, ...: the
in-memory store applies them as they are), and the claim's charge rule (``charges``,
``throttled_request``; :func:`skiplock.core.charged_positions` is the start rule).

The application's values stay in :mod:`skiplock.core`; the store protocols, by role, are
in :mod:`skiplock.ports`. Nothing here does I/O.
"""

from __future__ import annotations

# Audit details a store writes.
from ._audit import (
    replaced_details,
)

# Token buckets of rate limits.
from ._bucket import (
    RateTable,
    TokenBucket,
    refill,
)

# Concurrency caps of a claim.
from ._capacity import (
    ThrottleLimits,
)

# What a claim returns.
from ._claims import ClaimedJobs

# Concurrency limits set at run time.
from ._concurrency import (
    CONCURRENCY_SCOPES,
    ConcurrencyLimit,
    key_limit,
)

# Run-time controls (pauses, limits): the types the port speaks.
from ._controls import (
    Controls,
    Limit,
    Pause,
    control_event,
)

# What a health snapshot's buckets carry.
from ._health import (
    PAIR_SCOPE,
    PROVIDER_SCOPE,
    BucketState,
    OrphanedJobs,
    ReplicaStatus,
)

# Queue samples: the type the port speaks and the rules for taking and folding them.
from ._history import (
    ALL_KINDS,
    PICKUP_SAMPLE,
    SAMPLE_RETENTION,
    QueueSample,
    fold_samples,
    sample_minute,
    take_samples,
)

# Idempotency keys in their scope.
from ._idempotency import (
    ScopedKey,
    job_scoped_key,
    scope_of,
    scoped_key,
)

# The lifecycle rules: the executable spec every store applies (the memory store as it
# is, SQL stores in their statements).
from ._lifecycle import (
    OutcomeTerms,
    after_claim,
    after_operator,
    after_outcome,  # over outcome_terms
    after_recovery,
    after_release,
    after_start,
    claimable,
    concurrency_limit,
    due_at,
    holds,
    is_stale,
    job_key_scope,
    matches,
    new_job,
    next_due,
    outcome_terms,
    purgeable,
    read_view,
    replaced_job,
    select_claim,
)

# The claim's charge rule: which jobs a claim takes under rate limits and what it charges.
from ._rates import (
    charges,
    claim_is_serialized,
    outlived_buckets,
    rated_kinds,
    rated_providers,
    throttled_request,
)

# The retention view: what each purge will remove next and how its last run went.
from ._retention import (
    AUDIT_PURGE,
    DUE_COUNT_BOUND,
    JOBS_PURGE,
    PurgeRun,
    Retention,
    RetentionWindow,
)

# Buckets of finished counts.
from ._throughput import (
    bucket_start,
)

# Bounds and messages a store shares with the engine.
from ._validation import (
    INT4_RANGE,
    MAX_DELAY,
    counter_problem,
    shown,
)

# Requests to a worker (drain, stop).
from ._worker_requests import (
    WORKER_ACTIONS,
    WorkerRequest,
    worker_request_event,
)

__all__ = [
    "ALL_KINDS",
    "AUDIT_PURGE",
    "CONCURRENCY_SCOPES",
    "DUE_COUNT_BOUND",
    "INT4_RANGE",
    "JOBS_PURGE",
    "MAX_DELAY",
    "PAIR_SCOPE",
    "PICKUP_SAMPLE",
    "PROVIDER_SCOPE",
    "SAMPLE_RETENTION",
    "WORKER_ACTIONS",
    "BucketState",
    "ClaimedJobs",
    "ConcurrencyLimit",
    "Controls",
    "Limit",
    "OrphanedJobs",
    "OutcomeTerms",
    "Pause",
    "PurgeRun",
    "QueueSample",
    "RateTable",
    "ReplicaStatus",
    "Retention",
    "RetentionWindow",
    "ScopedKey",
    "ThrottleLimits",
    "TokenBucket",
    "WorkerRequest",
    "after_claim",
    "after_operator",
    "after_outcome",
    "after_recovery",
    "after_release",
    "after_start",
    "bucket_start",
    "charges",
    "claim_is_serialized",
    "claimable",
    "concurrency_limit",
    "control_event",
    "counter_problem",
    "due_at",
    "fold_samples",
    "holds",
    "is_stale",
    "job_key_scope",
    "job_scoped_key",
    "key_limit",
    "matches",
    "new_job",
    "next_due",
    "outcome_terms",
    "outlived_buckets",
    "purgeable",
    "rated_kinds",
    "rated_providers",
    "read_view",
    "refill",
    "replaced_details",
    "replaced_job",
    "sample_minute",
    "scope_of",
    "scoped_key",
    "select_claim",
    "shown",
    "take_samples",
    "throttled_request",
    "worker_request_event",
]
