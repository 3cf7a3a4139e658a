"""The REST API's schemas as pydantic models: what requests may hold (validated here for
every binding) and what responses hold (the OpenAPI document; the JSON itself comes from
the same mappings as the CLI's ``--json``).

Input models forbid unknown fields, so a misspelt filter is an error, not a no-op.
Bodies are parsed strictly (JSON types as the schema says); query parameters are text,
so they are converted (``limit=5``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from skiplock.core import JobState
from skiplock.core.rules import (
    INT8_RANGE,
    MAX_SEARCH_TEXT,
    IdempotencyConflict,
    IdempotencyScope,
)
from skiplock.engine.admin._bulk import MAX_CONFIRMED
from skiplock.engine.admin._purge import MAX_ERROR_TEXT

from ._fields import (
    DEFAULT_PAGE,
    MAX_PAGE,
    MAX_SECONDS,
    BodyPriority,
    ConcurrencyKey,
    Cursor,
    Delay,
    IdempotencyKey,
    JobId,
    Kind,
    Limit,
    Payload,
    PositiveInt4,
    PositiveInt8,
    Priority,
    QueryTime,
    Seconds,
    Tenant,
    Time,
    _Body,
    _Input,
    _integral,
)
from ._responses import (
    AbandonedJobs,
    AttemptError,
    AuditEntry,
    BulkResult,
    ConcurrencyLimit,
    ConcurrencyLimits,
    Counts,
    Database,
    FieldError,
    HealthReport,
    Job,
    JobAudit,
    JobDetail,
    JobPage,
    JobWait,
    KindHealth,
    Limits,
    Pause,
    Pauses,
    Problem,
    PurgedJobs,
    PurgeRun,
    RateLimit,
    Replica,
    Retention,
    RetentionWindow,
    RetriedJobs,
    SchemaInfo,
    SkippedJob,
    StateCount,
    Thresholds,
    ThrottledPair,
    WaitReason,
    Worker,
    WorkerJob,
    WorkerRequest,
    Workers,
)

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "MAX_SECONDS",
    "AbandonedJobs",
    "AllowUnknownKind",
    "AttemptError",
    "AuditEntry",
    "BodyPriority",
    "BulkAction",
    "BulkResult",
    "ConcurrencyKey",
    "ConcurrencyLimit",
    "ConcurrencyLimits",
    "ConcurrencySet",
    "ConcurrencyTarget",
    "ConfirmedJob",
    "Counts",
    "Cursor",
    "Database",
    "DeadJobQuery",
    "Delay",
    "FieldError",
    "HealthQuery",
    "HealthReport",
    "IdempotencyKey",
    "Job",
    "JobAudit",
    "JobCreate",
    "JobDetail",
    "JobId",
    "JobPage",
    "JobQuery",
    "JobWait",
    "Kind",
    "KindHealth",
    "Limit",
    "LimitScope",
    "LimitSet",
    "Limits",
    "Name",
    "NoQuery",
    "Pause",
    "PauseCreate",
    "PauseScope",
    "Pauses",
    "Payload",
    "PositiveInt4",
    "PositiveInt8",
    "Priority",
    "Problem",
    "PurgeDead",
    "PurgeRun",
    "PurgedJobs",
    "QueryTime",
    "RateLimit",
    "Replica",
    "Retention",
    "RetentionWindow",
    "RetriedJobs",
    "RetryDead",
    "RetryOptions",
    "SchemaInfo",
    "Seconds",
    "SkippedJob",
    "StateCount",
    "Tenant",
    "Thresholds",
    "ThrottledPair",
    "Time",
    "WaitReason",
    "Worker",
    "WorkerJob",
    "WorkerRequest",
    "WorkerTarget",
    "Workers",
    "WorkersQuery",
]


# ---- query parameters -------------------------------------------------------------------


#: A search text of the job list (a payload term, an error text, an idempotency key).
SearchText = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_SEARCH_TEXT, pattern=r"^[^\x00]+$")
]


class NoQuery(_Input):
    """No query parameters: any one is an error."""


class JobQuery(_Input):
    """Filters of the job list; they combine with AND, a repeated parameter matches any
    of its values. Time ranges are half-open: ``since <= t < before``."""

    state: list[JobState] | None = None
    kind: list[Kind] | None = None
    tenant: list[Tenant] | None = None
    priority_min: Priority | None = None
    priority_max: Priority | None = None
    created_since: QueryTime | None = None
    created_before: QueryTime | None = None
    available_since: QueryTime | None = None
    available_before: QueryTime | None = None
    payload: list[SearchText] | None = Field(
        None,
        description=(
            "Jobs whose payload contains this (JSON containment): `PATH=VALUE`, VALUE read"
            ' as JSON where it is JSON (`user_id=42` is the number, `user_id="42"` the'
            " string, else the text as a string), a dotted PATH nests (`user.id=7`); or a"
            " JSON object. Repeated: every one."
        ),
    )
    error: SearchText | None = Field(
        None,
        description="Jobs whose last error or any recorded attempt's error holds this text"
        " (lower case compared).",
    )
    idempotency_key: SearchText | None = Field(
        None, description="The jobs with this idempotency key (global or tenant-scoped)."
    )
    limit: Limit = DEFAULT_PAGE
    cursor: Cursor | None = None
    order: Literal["asc", "desc"] = Field(
        "asc", description="By id: oldest first (asc) or newest first (desc)."
    )


class DeadJobQuery(_Input):
    """Filters of the dead-letter view."""

    kind: list[Kind] | None = None
    tenant: list[Tenant] | None = None
    limit: Limit = DEFAULT_PAGE
    cursor: Cursor | None = None


class WorkersQuery(_Input):
    """Options of the worker list."""

    worker_timeout: Seconds | None = Field(
        None, description="A worker is live while its last heartbeat is younger (seconds)."
    )


class HealthQuery(WorkersQuery):
    """Thresholds of the health report (see docs/health.md)."""

    max_pending_age: Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)] | None = (
        Field(None, description="Unhealthy if a kind's oldest due job waited longer (seconds).")
    )
    max_dead: Annotated[int, Field(ge=0, le=INT8_RANGE[1])] | None = Field(
        None, description="Unhealthy if a kind has more dead jobs."
    )


# ---- request bodies ---------------------------------------------------------------------


class JobCreate(_Body):
    """A job to enqueue (``engine.enqueue``): its kind, payload and the job options
    (:class:`~skiplock.core.EnqueueFields`, every one). ``available_at`` and ``delay``
    (seconds) are mutually exclusive; without either the job is due now. An
    ``idempotency_key`` is unique among all jobs, or among the tenant's with
    ``idempotency_scope`` ``tenant``; with ``idempotency_conflict`` ``replace_pending``
    an existing pending job of the key takes this payload, due time and priority
    (without them, the kind's policy). At most ``concurrency_limit`` (default 1) jobs
    of a ``concurrency_key`` run at once, across kinds and workers; without a key the
    kind's declared one applies, if any."""

    # The rule in the OpenAPI document: not both (a null one is absent).
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["available_at", "delay"],
                "properties": {"available_at": {"type": "string"}, "delay": {"type": "number"}},
            }
        }
    )

    kind: Kind
    payload: Payload = None
    priority: BodyPriority | None = None
    tenant: Tenant | None = None
    idempotency_key: IdempotencyKey | None = None
    max_attempts: PositiveInt4 | None = None
    available_at: Time | None = None
    delay: Delay | None = None
    concurrency_key: ConcurrencyKey | None = None
    concurrency_limit: PositiveInt4 | None = None
    idempotency_scope: IdempotencyScope | None = None
    idempotency_conflict: IdempotencyConflict | None = None


class RetryOptions(_Body):
    """How a job is replayed: from attempt 0 (the default) or keeping its attempts."""

    reset_attempts: bool = True


class RetryDead(_Body):
    """Which dead jobs to replay (every one when no filter is given). `through` and
    `expected` bind the replay to what was confirmed: only dead jobs with an id up to
    `through`, and only if `expected` of them match (else a 409 `selection-changed`
    problem with the `count` now, and nothing changes)."""

    kind: Annotated[list[Kind], Field(min_length=1)] | None = None
    tenant: Annotated[list[Tenant], Field(min_length=1)] | None = None
    reset_attempts: bool = True
    through: PositiveInt8 | None = None
    expected: Annotated[int, Field(ge=0, le=MAX_CONFIRMED), BeforeValidator(_integral)] | None = (
        None
    )


class ConfirmedJob(_Body):
    """A job as the operator confirmed it: its id and the state it was shown in."""

    id: PositiveInt8
    state: JobState


class BulkAction(_Body):
    """An action on the jobs an operator confirmed, each only in the state it was shown
    in: if one no longer is, a 409 `selection-changed` problem (`count`: how many still
    are) and nothing changes."""

    action: Literal["retry", "cancel", "fail", "discard"]
    jobs: Annotated[list[ConfirmedJob], Field(min_length=1, max_length=MAX_CONFIRMED)]
    reset_attempts: bool = True


class PurgeDead(_Body):
    """Which dead jobs to delete: those matching every filter given (every dead job
    without one). With ``dry_run`` nothing is deleted: the answer counts them and gives
    the largest id, to pass as ``up_to_id`` to the purge that follows, so that a job that
    dies after the count is not deleted."""

    kind: Annotated[list[Kind], Field(min_length=1)] | None = None
    tenant: Annotated[list[Tenant], Field(min_length=1)] | None = None
    died_before: Time | None = None
    error: (
        Annotated[
            str,
            StringConstraints(
                min_length=1, max_length=MAX_ERROR_TEXT, pattern=r"^[^\x00]*\S[^\x00]*$"
            ),
        ]
        | None
    ) = Field(default=None, description="Text in the last error, ignoring case.")
    up_to_id: PositiveInt8 | None = None
    dry_run: bool = False


# ---- responses --------------------------------------------------------------------------


#: A name of the run-time controls: a provider (any printable text).
Name = Annotated[
    str, StringConstraints(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")
]


class PauseScope(_Body):
    """What a pause covers: a kind (every tenant), a tenant (every kind) or both (that
    pair); at least one."""

    # The rule in the OpenAPI document: a kind or a tenant (a null one is absent).
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["kind"], "properties": {"kind": {"type": "string"}}},
                {"required": ["tenant"], "properties": {"tenant": {"type": "string"}}},
            ]
        }
    )

    kind: Kind | None = None
    tenant: Tenant | None = None


#: The opt-in for a pause or limit of a kind the engine does not know (another
#: service declares it): without it such a kind is a 422 naming the known kinds.
AllowUnknownKind = Annotated[
    bool,
    Field(
        description="Accept a kind this service does not declare (one another service "
        "declares); without it an unknown kind is refused (422, naming the known kinds)."
    ),
]


class PauseCreate(PauseScope):
    """A pause and why."""

    reason: Annotated[str, StringConstraints(max_length=1000)] | None = None
    allow_unknown_kind: AllowUnknownKind = False


class LimitScope(_Body):
    """What a limit applies to: a kind for a tenant, a kind's default for every tenant
    without its own (no tenant), or a provider's cap across its kinds (alone)."""

    kind: Kind | None = None
    tenant: Tenant | None = None
    provider: Name | None = None


class LimitSet(LimitScope):
    """A rate limit: ``rps`` tokens per second, at most ``burst`` stored."""

    rps: Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]
    burst: PositiveInt4
    allow_unknown_kind: AllowUnknownKind = False


class ConcurrencyTarget(_Body):
    """What a concurrency limit applies to: a ``kind`` (``scope`` ``cluster``: its
    running jobs across the cluster; ``node``: per worker process) or a concurrency
    ``key`` (cluster-wide); one of them."""

    kind: Kind | None = None
    key: ConcurrencyKey | None = None
    scope: Literal["node", "cluster"] = "cluster"


class ConcurrencySet(ConcurrencyTarget):
    """A concurrency limit: at most ``limit`` jobs at once."""

    limit: PositiveInt4
    allow_unknown_kind: AllowUnknownKind = False


class WorkerTarget(_Body):
    """The worker a request is for: its id (as ``GET /workers`` lists it)."""

    worker_id: Annotated[str, StringConstraints(min_length=1, max_length=255)]
