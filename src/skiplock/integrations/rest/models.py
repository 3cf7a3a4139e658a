"""The REST API's schemas as pydantic models: what requests may hold (validated here for
every binding) and what responses hold (the OpenAPI document; the JSON itself comes from
the same mappings as the CLI's ``--json``).

Input models forbid unknown fields, so a misspelt filter is an error, not a no-op.
Bodies are parsed strictly (JSON types as the schema says); query parameters are text,
so they are converted (``limit=5``).
"""

from __future__ import annotations

import math
import re
import sys
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
)

from skiplock.core import JobState
from skiplock.core.rules import (
    INT8_RANGE,
    KIND_RE,
    MAX_CONCURRENCY_KEY_LENGTH,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_TENANT_LENGTH,
    PRIORITY_RANGE,
    IdempotencyConflict,
    IdempotencyScope,
)
from skiplock.core.store import INT4_RANGE, MAX_DELAY
from skiplock.engine.admin._bulk import MAX_CONFIRMED
from skiplock.engine.admin._purge import MAX_ERROR_TEXT

#: The most jobs one page may hold.
MAX_PAGE = 1000
#: The default page size.
DEFAULT_PAGE = 50
#: The longest duration a query parameter takes (seconds): ten years.
MAX_SECONDS = 10 * 365 * 86400


def _integral(value: object) -> object:
    """A float with no fraction as the int it is (JSON Schema's ``integer`` allows 5.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: An integer of a JSON body (parsed strictly: a string is no integer), with its bounds.
#: The bounds come before the validator: after it, pydantic cannot express them in JSON
#: Schema and writes ``ge``/``le`` where the OpenAPI document needs ``minimum``/``maximum``.
BodyPriority = Annotated[
    int, Field(ge=PRIORITY_RANGE[0], le=PRIORITY_RANGE[1]), BeforeValidator(_integral)
]
PositiveInt4 = Annotated[int, Field(ge=1, le=INT4_RANGE[1]), BeforeValidator(_integral)]
PositiveInt8 = Annotated[int, Field(ge=1, le=INT8_RANGE[1]), BeforeValidator(_integral)]


def _finite_numbers(value: JsonValue) -> JsonValue:
    """``value`` unless it holds a number beyond a double's range: valid JSON (``1e400``),
    but it would be read as infinity, which JSON cannot store."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(
                "a number is out of range: JSON numbers here must be within "
                f"±{sys.float_info.max!r} (a double)"
            )
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


#: A payload: any JSON whose numbers are doubles (or integers of any size).
Payload = Annotated[JsonValue, AfterValidator(_finite_numbers)]
Kind = Annotated[str, StringConstraints(pattern=KIND_RE.pattern)]
#: Tenant names: no control characters (the engine's rule, Unicode category Cc).
Tenant = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=MAX_TENANT_LENGTH, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$"
    ),
]
Priority = Annotated[int, Field(ge=PRIORITY_RANGE[0], le=PRIORITY_RANGE[1])]
#: A job's keys: an idempotency key (no NUL), a concurrency key (no control characters).
IdempotencyKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_LENGTH, pattern=r"^[^\x00]+$"),
]
ConcurrencyKey = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=MAX_CONCURRENCY_KEY_LENGTH, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$"
    ),
]
#: A job's delay in seconds.
Delay = Annotated[float, Field(ge=0, le=MAX_DELAY.total_seconds(), allow_inf_nan=False)]


def _digits(value: object) -> object:
    """A job id given as text (a path, a query) is digits only: Python's ``int()`` would
    read ``2_0`` as 20 and ``\u0661`` as 1."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("expected a job id (digits only)")
    return value


def _within_ids(value: str) -> str:
    if int(value) > INT8_RANGE[1]:
        raise ValueError("beyond the largest job id: pass a next_cursor back as it came")
    return value


_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _date_time(value: object) -> object:
    """A date-time given as text must be one (RFC 3339): pydantic would take ``0.5`` as
    seconds since 1970."""
    if isinstance(value, str) and not _DATE_TIME.match(value):
        raise ValueError("expected an RFC 3339 date-time with a UTC offset")
    return value


JobId = Annotated[int, BeforeValidator(_digits), Field(ge=1, le=INT8_RANGE[1])]
Limit = Annotated[int, Field(ge=1, le=MAX_PAGE, description="Jobs per page.")]
Cursor = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]{1,19}$"),
    AfterValidator(_within_ids),
    Field(description="The `next_cursor` of the previous page (opaque: pass it back as is)."),
]
#: A duration in seconds, at least a millisecond (a shorter one would round to zero).
Seconds = Annotated[float, Field(ge=0.001, le=MAX_SECONDS, allow_inf_nan=False)]
Time = Annotated[AwareDatetime, Field(description="RFC 3339 date-time with a UTC offset.")]
#: A date-time of a query (text, converted: so a number is refused here).
QueryTime = Annotated[Time, BeforeValidator(_date_time)]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- query parameters -------------------------------------------------------------------


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


class AttemptError(_Output):
    """One failed attempt of the job (the latest ten are kept)."""

    attempt: int
    worker_id: str | None
    claimed_at: AwareDatetime | None
    failed_at: AwareDatetime
    error: str


class Job(_Output):
    """A job (times RFC 3339 in UTC)."""

    id: int
    kind: str
    state: JobState
    tenant: str | None
    priority: int
    payload: JsonValue
    attempts: int
    max_attempts: int
    claims: int
    available_at: AwareDatetime
    created_at: AwareDatetime
    started_at: AwareDatetime | None
    claimed_at: AwareDatetime | None
    claimed_by: str | None
    completed_at: AwareDatetime | None
    last_error: str | None
    result: JsonValue
    errors: list[AttemptError]
    worker_ids: list[str]
    idempotency_key: str | None
    trace_context: dict[str, str] | None
    concurrency_key: str | None
    concurrency_limit: int | None


class AuditEntry(_Output):
    """One audited change of the job (J10)."""

    action: str
    actor: str | None
    at: AwareDatetime
    details: dict[str, JsonValue] | None


class JobDetail(Job):
    """A job with its audit trail, oldest first (empty unless the engine records one)."""

    audit_trail: list[AuditEntry]


class JobAudit(_Output):
    """A job's audit trail, oldest first: also of a job deleted since (its discard is the
    last entry, with the payload it had)."""

    job_id: int
    audit_trail: list[AuditEntry]


class JobPage(_Output):
    """One page of jobs; ``next_cursor`` is null on the last page. ``partial`` is true
    when the server stopped searching at its read budget (a filter no index serves in id
    order, such as pending jobs of a kind: docs/admin.md, "Lists at any size"): the page
    may hold fewer jobs than ``limit``, even none, and ``next_cursor`` continues the
    search."""

    jobs: list[Job]
    next_cursor: str | None
    partial: bool


class SkippedJob(_Output):
    """A confirmed job a bulk action left alone: its state now (null: it no longer
    exists) and why."""

    id: int
    state: JobState | None
    reason: str


class RetriedJobs(_Output):
    """The ids of the replayed jobs, and the confirmed ones left alone (with `through`
    or `expected`: those replayed or deleted by someone else meanwhile)."""

    retried: list[int]
    skipped: list[SkippedJob]


class BulkResult(_Output):
    """The ids a bulk action changed, and the confirmed jobs it left alone because
    they changed meanwhile, each with why."""

    changed: list[int]
    skipped: list[SkippedJob]


class PurgedJobs(_Output):
    """What a purge of dead jobs matched and deleted (``deleted`` is smaller than
    ``matched`` when counted jobs were replayed meanwhile; 0 for a dry run), and the
    largest matching id (null: none matched)."""

    matched: int
    deleted: int
    up_to_id: int | None


class StateCount(_Output):
    """How many jobs of a kind and tenant are in a state."""

    state: JobState
    kind: str
    tenant: str | None
    count: int


class Counts(_Output):
    """Job counts per (state, kind, tenant), for combinations that have jobs."""

    counts: list[StateCount]


class Worker(_Output):
    """A registered worker (kinds/tenants null: any)."""

    id: str
    host: str
    pid: int
    kinds: list[str] | None
    tenants: list[str] | None
    started_at: AwareDatetime
    last_heartbeat: AwareDatetime
    heartbeat_age_seconds: float
    running: int
    live: bool


class Workers(_Output):
    """The registered workers as the store saw them at ``checked_at``."""

    checked_at: AwareDatetime | None
    workers: list[Worker]


class Database(_Output):
    reachable: bool
    error: str | None


class SchemaInfo(_Output):
    name: str
    installed: bool
    version: int
    expected: int
    pending: list[str]
    up_to_date: bool


class KindHealth(_Output):
    kind: str
    pending_due: int
    scheduled: int
    oldest_due_age_seconds: float | None
    running: int
    dead: int
    uncovered: int
    covered: bool
    #: True when pending_due, scheduled and uncovered are lower bounds: a tenant of the
    #: kind has more than 10,000 jobs both due and scheduled (the split is not counted
    #: further; skiplock.core.QueueStats.SPLIT_BOUND).
    bounded: bool


class Pause(_Output):
    """A pause in force: its jobs are not claimed (``kind`` or ``tenant`` null: any)."""

    kind: str | None
    tenant: str | None
    reason: str | None
    actor: str | None
    since: AwareDatetime | None


class Pauses(_Output):
    """The pauses in force."""

    pauses: list[Pause]


class RateLimit(_Output):
    """A rate limit set at run time (over the code's and the settings')."""

    kind: str | None
    tenant: str | None
    provider: str | None
    rps: float
    burst: int
    actor: str | None
    updated_at: AwareDatetime | None


class Limits(_Output):
    """The limits set at run time."""

    limits: list[RateLimit]


class ThrottledPair(_Output):
    """Due jobs of one (kind, tenant) a limit holds back now: ``limit`` is ``paused``,
    ``rate_limit``, ``provider`` or ``cluster_limit`` (``due`` is a lower bound when
    ``bounded``)."""

    kind: str
    tenant: str | None
    due: int
    limit: str
    bounded: bool


class AbandonedJobs(_Output):
    """Running jobs whose worker is gone, per worker id: it has no row (``registered``
    false) or stopped sending heartbeats. ``age_seconds``: how long ago the oldest was
    claimed."""

    worker_id: str
    registered: bool
    running: int
    oldest_claimed_at: AwareDatetime | None
    age_seconds: float | None
    heartbeat_age_seconds: float | None


class Thresholds(_Output):
    worker_timeout_seconds: float
    max_pending_age_seconds: float | None
    max_dead: int | None


class Replica(_Output):
    """The hot standby the report was read from (docs/replicas.md): ``lag_seconds`` behind
    the primary (0: it replayed all it received; null: nothing replayed yet) and the
    primary's commit time of the last change it replayed."""

    lag_seconds: float | None
    replayed_at: AwareDatetime | None


class HealthReport(_Output):
    """The health report (R9): ``healthy`` with one line per problem otherwise. Served
    with status 200 either way: read ``healthy``."""

    healthy: bool
    problems: list[str]
    checked_at: AwareDatetime | None
    database: Database
    schema_: SchemaInfo | None = Field(alias="schema")
    workers: list[Worker]
    kinds: list[KindHealth]
    uncovered_kinds: list[str]
    throttled: list[ThrottledPair]
    thresholds: Thresholds
    paused: list[Pause]
    abandoned: list[AbandonedJobs]
    #: null: read from the primary.
    replica: Replica | None


class FieldError(_Output):
    """Where a request is invalid (``loc``: query/body/path, then the field) and why."""

    loc: list[str | int]
    msg: str


class Problem(_Output):
    """An RFC 9457 problem details object."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None
    errors: list[FieldError] | None = None
    #: A `selection-changed` problem (409): how many jobs match now, how many were confirmed.
    count: int | None = None
    confirmed: int | None = None
