"""Rows (dicts) to core types and core types to query parameters, for every PG driver.

Parameters are plain Python values every driver adapts the same way (str, int, bool,
datetime, timedelta and lists of them); JSON travels as text and is cast in SQL, so no
driver-specific JSON codec is involved.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from skiplock.core import (
    MAX_AVAILABLE_AT,
    MAX_ERROR_LENGTH,
    MIN_AVAILABLE_AT,
    STALE_MARK,
    AttemptError,
    AuditAction,
    AuditEvent,
    ClaimRequest,
    Completion,
    EnqueueBatch,
    EnqueueRequest,
    Event,
    FinishedCount,
    Job,
    JobFilter,
    JobPage,
    JobState,
    Lease,
    Page,
    PairCap,
    QueueStats,
    RateLimit,
    StateCount,
    Succeeded,
    UndecodableRowError,
    WorkerInfo,
    WorkerStatus,
    encode_payload,
    operator_action,
    operator_extra,
    pair_order,
    result_json,
    sources,
    transition,
)
from skiplock.core.store import (
    MAX_DELAY,
    PAIR_SCOPE,
    PICKUP_SAMPLE,
    PROVIDER_SCOPE,
    SAMPLE_RETENTION,
    BucketState,
    Controls,
    Limit,
    OrphanedJobs,
    Pause,
    QueueSample,
    TokenBucket,
    concurrency_limit,
    outcome_terms,
    scope_of,
    shown,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

T = TypeVar("T")


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def utc(value: datetime) -> datetime:
    """A timestamptz in UTC (drivers return the session's time zone)."""
    return value.astimezone(UTC)


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


class _BadValue(ValueError):
    """A value of the wrong shape; its message is the whole problem."""


def _problem(exc: Exception) -> str:
    if isinstance(exc, _BadValue):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "nested too deeply to decode (RecursionError)"
    return f"cannot be decoded: {exc} ({type(exc).__name__})"


def _decoded(job_id: int, column: str, decode: Callable[[Any], T], value: Any) -> T:
    """``decode(value)``; any exception becomes an UndecodableRowError naming ``column``."""
    try:
        return decode(value)
    except Exception as exc:
        raise UndecodableRowError(job_id, column, _problem(exc)) from exc


def _trace_context(text: str | None) -> dict[str, str] | None:
    trace = _json(text)
    if trace is None:
        return None
    if not isinstance(trace, dict):
        raise _BadValue(f"not a JSON object: {shown(text)}")
    return {str(k): str(v) for k, v in trace.items()}


_ERROR_KEYS = frozenset({"attempt", "worker_id", "claimed_at", "failed_at", "error"})


def _time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise _BadValue(f"not a timestamp: {shown(value)}")
    return datetime.fromisoformat(value).astimezone(UTC)


def _attempt_error(entry: Any) -> AttemptError:
    # Keys beyond these are ignored: newer code may record more.
    if not isinstance(entry, dict) or not entry.keys() >= _ERROR_KEYS:
        raise _BadValue(f"an entry is not an object with {sorted(_ERROR_KEYS)}: {shown(entry)}")
    attempt, worker, error = entry["attempt"], entry["worker_id"], entry["error"]
    if not (isinstance(attempt, int) and isinstance(worker, str) and isinstance(error, str)):
        raise _BadValue(f"an entry has a value of the wrong type: {shown(entry)}")
    claimed = entry["claimed_at"]
    return AttemptError(
        attempt=attempt,
        worker_id=worker,
        claimed_at=None if claimed is None else _time(claimed),
        failed_at=_time(entry["failed_at"]),
        error=error,
    )


def _errors(text: str | None) -> tuple[AttemptError, ...]:
    """The ``errors`` column (X5): a JSON array of attempt entries, or NULL."""
    entries = _json(text)
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise _BadValue(f"not a JSON array: {shown(text)}")
    return tuple(_attempt_error(entry) for entry in entries)


def _unreadable(job_id: int, text: str) -> UndecodableRowError:
    """The error for the ``unreadable`` column: ``"<column> <value>[; ...]"``."""
    column, _, value = text.partition(";")[0].partition(" ")
    problem = (
        f"{value} is outside the timestamps Python reads back "
        f"({MIN_AVAILABLE_AT.isoformat()} to {MAX_AVAILABLE_AT.isoformat()})"
    )
    if ";" in text:
        problem += f"; also {text.partition('; ')[2]}"
    return UndecodableRowError(job_id, column, problem)


def job_from_row(row: Mapping[str, Any]) -> Job:
    """A job from a row selected with the ``_job_columns`` fragment (JSON as text).

    Raises :class:`~skiplock.core.UndecodableRowError` naming the first column that cannot
    be decoded (a row written around enqueue's validation); nothing else escapes. A claim's
    rows have no ``result`` and ``errors`` columns: the job has none then.
    """
    job_id = int(row["id"])
    unreadable = row.get("unreadable")
    if unreadable is not None:
        raise _unreadable(job_id, unreadable)
    payload = _decoded(job_id, "payload", _json, row["payload"])
    # NULL columns (the common case for these; a claim's rows lack the last two) need no
    # decoding: this runs once per claimed job.
    trace = row["trace_context"]
    trace_context = (
        None if trace is None else _decoded(job_id, "trace_context", _trace_context, trace)
    )
    state = _decoded(job_id, "status", JobState, row["status"])
    # A tenant-scoped key has its own column (migration 0015); a job has one key or none.
    key = row["idempotency_key"]
    tenant_key = row.get("tenant_idempotency_key")
    result_text = row.get("result")
    result = None if result_text is None else _decoded(job_id, "result", _json, result_text)
    errors_text = row.get("errors")
    errors = () if errors_text is None else _decoded(job_id, "errors", _errors, errors_text)
    try:
        return Job(
            id=job_id,
            kind=row["kind"],
            payload=payload,
            state=state,
            priority=int(row["priority"]),
            tenant=row["tenant_id"],
            available_at=utc(row["available_at"]),
            created_at=utc(row["created_at"]),
            attempts=int(row["attempts"]),
            max_attempts=int(row["max_attempts"]),
            claimed_at=_utc_or_none(row["claimed_at"]),
            claimed_by=row["claimed_by"],
            completed_at=_utc_or_none(row["completed_at"]),
            last_error=row["last_error"],
            idempotency_key=key if tenant_key is None else tenant_key,
            idempotency_scope="global" if tenant_key is None else "tenant",
            trace_context=trace_context,
            claims=int(row["claims"]),
            explicit_max_attempts=bool(row["explicit_max_attempts"]),
            suspect=bool(row["suspect"]),
            recovered=bool(row["recovered"]),
            started_at=_utc_or_none(row["started_at"]),
            result=result,
            errors=errors,
            concurrency_key=row.get("concurrency_key"),
            concurrency_limit=row.get("concurrency_limit"),
        )
    except Exception as exc:  # the columns above cannot fail; should one ever, name it
        raise UndecodableRowError(job_id, "row", _problem(exc)) from exc


#: The migration that adds the running totals behind the operator reads.
COUNTS_MIGRATION = 11
#: The migration that added the shared token buckets of cluster-wide rates.
RATES_MIGRATION = 15

#: A read that finds more unfolded count deltas than this folds them (migration 0011)
#: after answering, so reads stay cheap where no worker's counts loop runs.
ROLLUP_BACKLOG = 5000


def backlog_of(rows: Sequence[Mapping[str, Any]]) -> int:
    """The unfolded delta rows a ``counts``/``health_queues`` result reports (every row
    repeats it)."""
    return int(rows[0]["backlog"]) if rows else 0


def state_counts_from_rows(rows: Sequence[Mapping[str, Any]]) -> list[StateCount]:
    """The ``counts`` result (a row of NULLs carries the backlog when there is no job)."""
    return [state_count_from_row(r) for r in rows if r["kind"] is not None]


def state_count_from_row(row: Mapping[str, Any]) -> StateCount:
    return StateCount(
        state=JobState(row["status"]),
        kind=row["kind"],
        tenant=row["tenant_id"],
        count=int(row["count"]),
        oldest_due_age=None if row["oldest_due_age"] is None else float(row["oldest_due_age"]),
    )


def bucket_params(since: datetime, bucket: timedelta) -> dict[str, Any]:
    """The arguments of the per-bucket reads (``finished_counts``, ``queue_samples``)."""
    return {"since": since, "bucket": bucket}


def finished_count_from_row(row: Mapping[str, Any]) -> FinishedCount:
    """One row of the ``finished_counts`` query."""
    return FinishedCount(
        start=utc(row["start"]),
        state=JobState(row["status"]),
        count=int(row["count"]),
        kind=row["kind"],
    )


def roll_up_params(key: int) -> dict[str, Any]:
    """The ``roll_up_counts`` query's arguments: the fold's lock and the sampling rule's
    bounds (``skiplock.core.store``)."""
    return {
        "key": key,
        "bound": QueueStats.SPLIT_BOUND,
        "pickups": PICKUP_SAMPLE,
        "keep": SAMPLE_RETENTION,
    }


def queue_sample_from_row(row: Mapping[str, Any]) -> QueueSample:
    """One row of the ``queue_samples`` query."""
    return QueueSample(
        minute=utc(row["minute"]),
        kind=row["kind"],
        pending=int(row["pending"]),
        due=int(row["due"]),
        running=int(row["running"]),
        due_bounded=bool(row["due_bounded"]),
        claims=int(row["claims"]),
        claim_p50=None if row["claim_p50"] is None else float(row["claim_p50"]),
        claim_p99=None if row["claim_p99"] is None else float(row["claim_p99"]),
    )


def health_queues_params() -> dict[str, Any]:
    return {"bound": QueueStats.SPLIT_BOUND}


def queue_stats_from_row(row: Mapping[str, Any]) -> QueueStats:
    """One row of the ``health_queues`` query: the due/scheduled split from its bounded
    counts (``skiplock.core.QueueStats.split``)."""
    pending = int(row["pending"])
    scheduled_upto = row["scheduled_upto"]
    due_upto = row["due_upto"]
    due, scheduled, bounded = QueueStats.split(
        pending,
        0 if scheduled_upto is None else int(scheduled_upto),
        None if due_upto is None else int(due_upto),
    )
    return QueueStats(
        kind=row["kind"],
        tenant=row["tenant_id"],
        due=due,
        scheduled=scheduled,
        oldest_due_at=_utc_or_none(row["oldest_due_at"]),
        running=int(row["running"]),
        dead=int(row["dead"]),
        bounded=bounded,
    )


def _frozen_or_none(values: Sequence[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


def worker_status_from_row(row: Mapping[str, Any]) -> WorkerStatus:
    """One row of the ``health_workers`` query."""
    return WorkerStatus(
        id=row["id"],
        host=row["host"],
        pid=int(row["pid"]),
        kinds=_frozen_or_none(row["kinds"]),
        tenants=_frozen_or_none(row["tenants"]),
        started_at=utc(row["started_at"]),
        heartbeat_at=utc(row["heartbeat_at"]),
        running=int(row["running"]),
        oldest_claimed_at=_utc_or_none(row["oldest_claimed_at"]),
    )


def orphaned_jobs_from_row(row: Mapping[str, Any]) -> OrphanedJobs:
    """One row of the ``health_orphans`` query."""
    return OrphanedJobs(
        worker_id=row["worker_id"],
        running=int(row["running"]),
        oldest_claimed_at=utc(row["oldest_claimed_at"]),
    )


def _sorted_or_none(values: frozenset[Any] | None) -> list[Any] | None:
    return None if values is None else sorted(values)


def _payload_text(request: EnqueueRequest) -> str:
    text = request.payload_json
    if text is not None:
        return text
    # The engine validated sizes with its own limit; here only the text is needed.
    return encode_payload(request.payload, max_bytes=sys.maxsize)


def enqueue_params(batch: EnqueueBatch) -> dict[str, str]:
    """The parameter of the ``enqueue`` and ``enqueue_new`` queries (jobs already
    validated): the batch as one JSON array of rows, built from its columns.

    One text parameter instead of a typed array per field: the drivers' array adapters
    cost far more per element (psycopg's dumps each element in Python) than one
    ``json.dumps``. Payloads and trace contexts travel as JSON texts; due times as ISO
    8601 texts, delays in whole microseconds.
    """
    n = len(batch)
    nones: list[None] = [None] * n
    if batch.scheduled:
        ats: list[str | None] = [
            None if at is None else at.isoformat() for at in batch.available_ats
        ]
        delays: list[int | None] = [
            None if delay is None else delay // _MICROSECOND for delay in batch.delays
        ]
    else:
        ats = delays = nones  # type: ignore[assignment]
    traces = nones if batch.trace_contexts.count(None) == n else _trace_texts(batch.trace_contexts)
    columns = [
        batch.kinds,
        batch.tenants,
        _payload_texts(batch),
        batch.priorities,
        ats,
        delays,
        batch.max_attempts,
        batch.explicit_max_attempts,
        batch.idempotency_keys,
        traces,
    ]
    keyed = batch.concurrency_keyed
    if batch.keyed or keyed:  # the keys' scopes (none without keys: the rows stay as short)
        columns.append(key_scopes(batch) if batch.keyed else nones)
    if keyed:  # concurrency keys and their limits (11, 12)
        columns.append(batch.concurrency_keys)
        columns.append(concurrency_limits(batch))
    rows = zip(*columns, strict=True)
    return {"batch": json.dumps(list(rows), separators=(",", ":"))}


def concurrency_limits(batch: EnqueueBatch) -> list[int | None]:
    """Each job's concurrency limit as the column holds it: NULL without a key, 1 for a
    key without a limit."""
    columns = zip(batch.concurrency_keys, batch.concurrency_limits, strict=True)
    return [None if k is None else (1 if n is None else n) for k, n in columns]


def key_scopes(batch: EnqueueBatch) -> list[str | None]:
    """The scope of each job's key as the ``idempotency_scope`` column holds it (NULL for
    a job without a key)."""
    columns = zip(batch.idempotency_keys, batch.tenants, batch.idempotency_scopes, strict=True)
    return [None if k is None else scope_of(t, s) for k, t, s in columns]


_MICROSECOND = timedelta(microseconds=1)


def duration_us(value: timedelta) -> int:
    """A duration in whole microseconds, as every statement takes one (``:x_us::bigint *
    interval '1 microsecond'``): an exact length. A timedelta sent as an interval keeps
    its days, which PostgreSQL adds and subtracts as calendar days in the session's time
    zone (23 or 25 hours across a change of clocks). Longer than :data:`MAX_DELAY` (100
    years) counts as that: no job or worker row is older, and ``now()`` minus it stays a
    valid timestamp."""
    return min(value, MAX_DELAY) // _MICROSECOND


def enqueue_one_params(request: EnqueueRequest) -> dict[str, Any]:
    """Parameters of the single-row ``enqueue_one`` query."""
    return {
        "kind": request.kind,
        "tenant": request.tenant,
        "payload": _payload_text(request),
        "priority": request.priority,
        "available_at": request.available_at,
        # Whole microseconds, as batches send them (a delay is within MAX_DELAY).
        "delay_us": None if request.delay is None else duration_us(request.delay),
        "max_attempts": request.max_attempts,
        "explicit_max_attempts": request.explicit_max_attempts,
        "trace_context": _trace_text(request.trace_context),
        "concurrency_key": request.concurrency_key,
        "concurrency_limit": concurrency_limit(request),
    }


def copy_rows(
    ids: Sequence[int], batch: EnqueueBatch, now: datetime
) -> tuple[tuple[str, ...], Iterator[tuple[Any, ...]]]:
    """The columns and rows a COPY-based bulk enqueue writes: each job's reserved id
    first, then its fields; due times relative to the store's ``now``.

    Built column by column (the batch holds columns), not per job. A column whose value
    is its default for every job is left out and filled by the server: no due time (the
    default ``now()`` is the transaction's time, the ``now`` given), no tenant, no
    explicit ``max_attempts``, no trace context. Formatting a timestamp per row was the
    dearest part of writing a row.
    """
    n = len(batch)
    columns = ["id", "kind", "payload", "priority", "max_attempts"]
    values: list[Iterable[Any]] = [
        ids,
        batch.kinds,
        _payload_texts(batch),
        batch.priorities,
        batch.max_attempts,
    ]
    if batch.scheduled:
        columns.append("available_at")
        values.append(
            [
                (now if delay is None else now + delay) if at is None else at
                for at, delay in zip(batch.available_ats, batch.delays, strict=True)
            ]
        )
    if batch.tenants.count(None) != n:
        columns.append("tenant_id")
        values.append(batch.tenants)
    if any(batch.explicit_max_attempts):
        columns.append("explicit_max_attempts")
        values.append(batch.explicit_max_attempts)
    if batch.trace_contexts.count(None) != n:
        columns.append("trace_context")
        values.append(_trace_texts(batch.trace_contexts))
    if batch.concurrency_keyed:
        columns += ["concurrency_key", "concurrency_limit"]
        values += [batch.concurrency_keys, concurrency_limits(batch)]
    return tuple(columns), zip(*values, strict=True)


def _payload_texts(batch: EnqueueBatch) -> list[str]:
    texts = batch.payload_jsons
    if None not in texts:  # the engine's batches: encoded once, while validating
        return texts  # type: ignore[return-value]  # no None left
    return [
        encode_payload(payload, max_bytes=sys.maxsize) if text is None else text
        for text, payload in zip(texts, batch.payloads, strict=True)
    ]


def _trace_text(trace: Mapping[str, str] | None) -> str | None:
    return None if trace is None else json.dumps(dict(trace))


def _trace_texts(traces: Sequence[Mapping[str, str] | None]) -> list[str | None]:
    """Each job's trace context as JSON, encoded once per distinct context (an engine's
    batch shares one)."""
    texts: dict[int, str | None] = {}
    return [
        texts[id(trace)] if id(trace) in texts else texts.setdefault(id(trace), _trace_text(trace))
        for trace in traces
    ]


def claim_params(request: ClaimRequest, pairs: Sequence[PairCap] = ()) -> dict[str, Any]:
    """Parameters shared by ``claim`` and ``claim_capped`` (caps added by the caller).

    The capped ``pairs`` join the excluded pairs: the kind-wide and uncapped branches of
    a claim must not take their jobs (only their own capped branch may).
    """
    excluded = sorted(request.excluded | {(k, t) for k, t, _ in pairs}, key=pair_order)
    policy = sorted(request.max_attempts)
    return {
        "worker_id": request.worker_id,
        "limit": request.limit,
        "kinds": _sorted_or_none(request.kinds),
        "tenants": _sorted_or_none(request.tenants),
        "excluded_kinds": sorted(request.excluded_kinds),
        "excluded_pair_kinds": [k for k, _ in excluded],
        "excluded_pair_tenants": [t for _, t in excluded],
        "excluded_tenants": sorted(request.excluded_tenants),
        "start_now": request.start_now,
        "policy_kinds": policy,
        "policy_max_attempts": [request.max_attempts[k] for k in policy],
    }


def pair_params(pairs: Sequence[PairCap]) -> dict[str, list[Any]]:
    """The ``claim_capped`` arrays of the capped pairs that may take jobs."""
    open_pairs = [p for p in pairs if p[2] > 0]
    return {
        "pair_kinds": [k for k, _, _ in open_pairs],
        "pair_tenants": [t for _, t, _ in open_pairs],
        "pair_caps": [n for _, _, n in open_pairs],
    }


def buckets_from_rows(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[float, dict[tuple[str, str | None], TokenBucket], dict[str, TokenBucket]]:
    """The ``rate_buckets`` query's rows: the database clock (epoch seconds), the pairs'
    buckets and the providers'."""
    now = float(rows[0]["now"])
    pairs: dict[tuple[str, str | None], TokenBucket] = {}
    providers: dict[str, TokenBucket] = {}
    for row in rows:
        if row["scope"] is None:
            continue
        bucket = TokenBucket(
            limit=RateLimit(rps=float(row["rps"]), burst=int(row["burst"])),
            tokens=float(row["tokens"]),
            updated=float(row["updated"]),
        )
        if row["scope"] == PROVIDER_SCOPE:
            providers[row["name"]] = bucket
        else:
            pairs[row["name"], row["tenant_id"]] = bucket
    return now, pairs, providers


def bucket_states(rows: Sequence[Mapping[str, Any]]) -> tuple[BucketState, ...]:
    """The ``rate_buckets`` query's rows for the health snapshot."""
    _, pairs, providers = buckets_from_rows(rows)
    states = [BucketState(PAIR_SCOPE, k, t, b) for (k, t), b in pairs.items()]
    states += [BucketState(PROVIDER_SCOPE, name, None, b) for name, b in providers.items()]
    return tuple(states)


def charge_params(
    pairs: Sequence[tuple[tuple[str, str | None], TokenBucket]],
    providers: Sequence[tuple[str, TokenBucket]],
) -> dict[str, list[Any]]:
    """The ``charge_rate_buckets`` arrays of the buckets a claim drew from."""
    rows = [(PAIR_SCOPE, kind, tenant, b) for (kind, tenant), b in pairs]
    rows += [(PROVIDER_SCOPE, name, None, b) for name, b in providers]
    return {
        "scopes": [r[0] for r in rows],
        "names": [r[1] for r in rows],
        "tenants": [r[2] for r in rows],
        "tokens": [r[3].tokens for r in rows],
        "updated": [r[3].updated for r in rows],
        "rps": [float(r[3].limit.rps) for r in rows],
        "bursts": [r[3].limit.burst for r in rows],
    }


#: A success's terms, for the common case (the core's, looked up once).
_SUCCESS = outcome_terms(Succeeded())
_SUCCEEDED = _SUCCESS.state.value


def lease_params(leases: Sequence[Lease]) -> dict[str, list[Any]]:
    """Column arrays naming leases for the ``_lease_fence`` fragment (``start``)."""
    return {
        "ids": [lease.job_id for lease in leases],
        "workers": [lease.worker_id for lease in leases],
        "claims": [lease.claim for lease in leases],
    }


#: The fields of one outcome in a ``complete`` batch, in the order ``_complete_batch``
#: reads them, and the scalar parameters of ``complete_one``.
COMPLETION_FIELDS = (
    "id", "worker", "claim", "status", "delay_us", "error", "set_error", "refund", "ran",
    "result",
)  # fmt: skip


def _completion_row(c: Completion) -> list[Any]:
    """One outcome as the values of :data:`COMPLETION_FIELDS`: its terms are the core's
    (:func:`~skiplock.core.store.outcome_terms`), which ``_complete_set`` applies."""
    lease, outcome = c.lease, c.outcome
    if isinstance(outcome, Succeeded):  # the common case first
        result = None
        if outcome.result is not None or outcome.result_json is not None:
            result = result_json(outcome.result, outcome.result_json)
        return [lease.job_id, lease.worker_id, lease.claim, _SUCCEEDED, 0, None, False, 0,
                _SUCCESS.ran, result]  # fmt: skip
    terms = outcome_terms(outcome)
    return [
        lease.job_id,
        lease.worker_id,
        lease.claim,
        terms.state.value,
        # Whole microseconds: exact (MAX_DELAY is far below 2**53) and the same interval
        # on every driver.
        0 if terms.delay is None else terms.delay // _MICROSECOND,
        terms.error,
        terms.error is not None,
        1 if terms.refund else 0,
        terms.ran,
        None,
    ]


def complete_params(completions: Sequence[Completion]) -> dict[str, str]:
    """The parameter of the fenced ``complete`` query: the batch as one JSON array of
    rows (:data:`COMPLETION_FIELDS`).

    One text parameter instead of a typed array per field: the drivers' array adapters
    cost far more per element (psycopg's dumps each element in Python) than one
    ``json.dumps``. Error and result texts are storable (``truncate_error``,
    ``result_json``), so JSON carries them unchanged.
    """
    return {"batch": json.dumps([_completion_row(c) for c in completions], separators=(",", ":"))}


def complete_one_params(completion: Completion) -> dict[str, Any]:
    """Scalar parameters of the single-row ``complete_one`` query."""
    return dict(zip(COMPLETION_FIELDS, _completion_row(completion), strict=True))


def filter_params(f: JobFilter) -> dict[str, Any]:
    """Parameters of the ``_job_filter`` fragment."""
    return {
        "ids": _sorted_or_none(f.ids),
        "states": None if f.states is None else sorted(s.value for s in f.states),
        "kinds": _sorted_or_none(f.kinds),
        "tenants": _sorted_or_none(f.tenants),
        "priority_min": f.priority_min,
        "priority_max": f.priority_max,
        "created_since": f.created_since,
        "created_before": f.created_before,
        "available_since": f.available_since,
        "available_before": f.available_before,
    }


#: The largest budget a page's walk is given (a bigint, whatever the limit).
_MAX_BUDGET = 2**62


def page_params(page: Page) -> dict[str, Any]:
    """Parameters of a keyset page (``list_jobs``): the cursor, the limit, the order and
    the walk's budget of rows read (``JobPage.READ_FACTOR`` per job asked for)."""
    return {
        "after_id": page.after_id,
        "limit": page.limit,
        "descending": page.descending,
        "budget": min(page.limit * JobPage.READ_FACTOR, _MAX_BUDGET),
    }


def job_page_from_rows(rows: Sequence[Mapping[str, Any]]) -> JobPage:
    """A page from the rows of ``list_jobs``: its jobs, then possibly one row without a
    job that says where a bounded walk stopped (``resume_after``)."""
    resume = [r["resume_after"] for r in rows if r["id"] is None]
    return JobPage(
        (job_from_row(r) for r in rows if r["id"] is not None),
        resume_after=resume[0] if resume else None,
    )


def apply_params(event: Event, *, reset_attempts: bool) -> dict[str, Any]:
    """The transition table's slice for an operator event, as ``sources``/``targets``."""
    allowed = sorted(sources(event))
    return {
        "sources": [s.value for s in allowed],
        "targets": [transition(s, event).value for s in allowed],
        "reset_attempts": reset_attempts,
    }


def worker_params(info: WorkerInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "kinds": _sorted_or_none(info.kinds),
        "tenants": _sorted_or_none(info.tenants),
    }


def recover_params(default_ttl: timedelta, ttls: Mapping[str, timedelta]) -> dict[str, Any]:
    kinds = sorted(ttls)
    return {
        "default_ttl_us": duration_us(default_ttl),
        "ttl_kinds": kinds,
        "ttls_us": [duration_us(ttls[k]) for k in kinds],
        "mark": STALE_MARK,
        "max_error": MAX_ERROR_LENGTH,
    }


def silent_workers_params(default_ttl: timedelta, ttls: Mapping[str, timedelta]) -> dict[str, Any]:
    """Parameters of ``delete_silent_workers``: silent for longer than every TTL."""
    return {"longest_us": duration_us(max([default_ttl, *ttls.values()]))}


def heartbeat_params(worker_id: str, running: Sequence[int]) -> dict[str, Any]:
    return {"id": worker_id, "running": [int(job_id) for job_id in running]}


def maintenance_params(name: str, every: timedelta) -> dict[str, Any]:
    return {"name": name, "every_us": duration_us(every), "always": every <= timedelta(0)}


# ---- the audit trail (J10) -----------------------------------------------------------


@attrs.define
class AuditNote:
    """How one store call audits (J10): the actor its statements name, whether they
    write the audit table themselves (``table``) or return the events for a sink, and
    the events collected for the sink."""

    actor: str | None
    table: bool
    events: list[AuditEvent] = attrs.Factory(list)

    def params(self) -> dict[str, Any]:
        """The parameters every ``*_audited`` statement takes."""
        return {"actor": self.actor, "audit_table": self.table}

    def collect(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Keep the events among rows of an ``*_audited`` statement (for the sink)."""
        if not self.table:
            self.events.extend(
                audit_event_from_row(row) for row in rows if row["audit_action"] is not None
            )


def _audit_details(text: str | None) -> Mapping[str, Any] | None:
    if text is None:
        return None
    try:
        details: Mapping[str, Any] = json.loads(text)
    except (ValueError, RecursionError):
        # A payload Python cannot decode (written around the API, X4): its JSON text.
        return {"json": text}
    return details


def audit_event_from_row(row: Mapping[str, Any]) -> AuditEvent:
    """An event from a row with the ``audit_*`` columns (``_audit_columns``,
    ``audit_trail``)."""
    job_id = int(row["audit_job_id"])
    return AuditEvent(
        action=_decoded(job_id, "audit.action", AuditAction, row["audit_action"]),
        job_id=job_id,
        kind=row["audit_kind"],
        tenant=row["audit_tenant"],
        actor=row["audit_actor"],
        at=utc(row["audit_at"]),
        details=_audit_details(row["audit_details"]),
    )


def operator_audit_params(event: Event, *, reset_attempts: bool) -> dict[str, Any]:
    """The action and extra details of ``apply_audited``."""
    return {
        "action": operator_action(event).value,
        "details": json.dumps(operator_extra(event, reset_attempts=reset_attempts)),
    }


def enqueued_events(
    ids: Sequence[int], batch: EnqueueBatch, at: datetime, actor: str | None
) -> list[AuditEvent]:
    """The ``job_enqueued`` events of a COPY-based enqueue (every job created)."""
    at = utc(at)
    return [
        AuditEvent(
            action=AuditAction.ENQUEUED,
            job_id=job_id,
            kind=kind,
            tenant=tenant,
            actor=actor,
            at=at,
        )
        for job_id, kind, tenant in zip(ids, batch.kinds, batch.tenants, strict=True)
    ]


def audit_enqueued_params(
    ids: Sequence[int], batch: EnqueueBatch, at: datetime, actor: str | None
) -> dict[str, Any]:
    """Parameters of ``audit_enqueued`` (a COPY-based enqueue's events)."""
    return {
        "at": at,
        "actor": actor,
        "ids": list(ids),
        "kinds": batch.kinds,
        "tenants": batch.tenants,
    }


# ---- run-time controls (issue 30) --------------------------------------------------------


def pause_params(
    kind: str | None, tenant: str | None, reason: str | None, actor: str | None
) -> dict[str, Any]:
    """The parameters of ``pause`` and ``resume``."""
    return {"kind": kind, "tenant": tenant, "reason": reason, "actor": actor}


def limit_params(
    kind: str | None,
    tenant: str | None,
    provider: str | None,
    limit: RateLimit | None,
    actor: str | None,
) -> dict[str, Any]:
    """The parameters of ``set_limit`` and ``clear_limit``."""
    return {
        "kind": kind,
        "tenant": tenant,
        "provider": provider,
        "rps": None if limit is None else float(limit.rps),
        "burst": None if limit is None else limit.burst,
        "actor": actor,
    }


def pause_from_row(row: Mapping[str, Any]) -> Pause:
    """A pause from a row of ``pause``, ``resume`` or ``controls``."""
    since = row.get("since", row.get("at"))
    return Pause(
        kind=row["kind"],
        tenant=row["tenant_id"],
        reason=row["reason"],
        actor=row["actor"],
        since=None if since is None else utc(since),
    )


def limit_from_row(row: Mapping[str, Any]) -> Limit:
    """A limit from a row of ``set_limit``, ``clear_limit`` or ``controls``."""
    updated = row.get("updated_at", row.get("at"))
    return Limit(
        limit=RateLimit(rps=float(row["rps"]), burst=int(row["burst"])),
        kind=row["kind"],
        tenant=row["tenant_id"],
        provider=row["provider"],
        actor=row["actor"],
        updated_at=None if updated is None else utc(updated),
    )


def controls_from_rows(rows: Sequence[Mapping[str, Any]]) -> Controls:
    """The pauses and limits of the ``controls`` query."""
    return Controls(
        pauses=tuple(pause_from_row(r) for r in rows if r["what"] == "pause"),
        limits=tuple(limit_from_row(r) for r in rows if r["what"] == "limit"),
    )
