"""The REST API's response models (re-exported by
:mod:`skiplock.integrations.rest.models`): what the OpenAPI document says responses
hold; the JSON itself comes from the same mappings as the CLI's ``--json``."""

from __future__ import annotations

from pydantic import (
    AwareDatetime,
    Field,
    JsonValue,
)

from skiplock.core import JobState

from ._fields import (
    _Output,
)


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


class WaitReason(_Output):
    """One reason a job waits: its ``code`` (``not_pending``, ``due_later``, ``paused``,
    ``rate_limited``, ``concurrency_full``, ``no_worker``, ``behind`` or ``ready``), a
    sentence, when it ends if known (the due time, the next token) and its details
    (docs/admin.md, "Why is this job waiting?")."""

    code: str
    message: str
    when: AwareDatetime | None
    details: dict[str, JsonValue]


class JobWait(_Output):
    """Why a job has not started, as of ``checked_at``: every reason that holds now."""

    job_id: int
    state: JobState
    checked_at: AwareDatetime
    reasons: list[WaitReason]


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


class WorkerRequest(_Output):
    """What a worker was asked to do (``drain`` or ``stop``), by whom, when."""

    worker_id: str
    action: str
    actor: str | None
    requested_at: AwareDatetime | None


class WorkerJob(_Output):
    """A job a worker runs now, since when (its claim)."""

    id: int
    kind: str
    tenant: str | None
    since: AwareDatetime | None


class Worker(_Output):
    """A registered worker (kinds/tenants null: any): its slots and skiplock version
    (null: a worker of a release before they were registered), what it was asked to do
    (null: nothing) and the jobs it runs now."""

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
    slots: int | None
    version: str | None
    request: WorkerRequest | None
    #: The jobs it runs now (``GET /workers``; not in the health report).
    jobs: list[WorkerJob] = Field(default_factory=list)


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


class ConcurrencyLimit(_Output):
    """A concurrency limit set at run time (over the declared one): of a ``kind`` per
    node or cluster-wide, or of a concurrency ``key``."""

    kind: str | None
    key: str | None
    scope: str
    limit: int
    actor: str | None
    updated_at: AwareDatetime | None


class ConcurrencyLimits(_Output):
    """The concurrency limits set at run time."""

    concurrency: list[ConcurrencyLimit]


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


class PurgeRun(_Output):
    """A retention purge's last run: when it finished, how long it took, what it removed."""

    finished_at: AwareDatetime
    seconds: float
    removed: int


class RetentionWindow(_Output):
    """One retention purge (``jobs``: succeeded jobs, ``audit``: audit events): its window
    in seconds (null: off), the rows older than it now, which its next run removes (null
    when off; ``estimated``: past 10,000 audit events, an estimate), and its last run
    (null: none recorded)."""

    name: str
    window: float | None
    due: int | None
    estimated: bool
    last_run: PurgeRun | None


class Retention(_Output):
    """The retention view at ``now`` (the store's clock)."""

    now: AwareDatetime
    windows: list[RetentionWindow]


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
