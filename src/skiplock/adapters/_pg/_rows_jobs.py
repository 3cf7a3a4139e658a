"""Rows and parameters of the jobs role (``skiplock.ports.JobsRole``): enqueue (batches,
COPY, its audit events), claims (pairs, rate buckets), starts and completions. See
``_rows.py`` for the shared rules."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from skiplock.core import (
    AuditAction,
    AuditEvent,
    ClaimRequest,
    Completion,
    EnqueueBatch,
    EnqueueRequest,
    Lease,
    PairCap,
    RateLimit,
    Succeeded,
    encode_payload,
    pair_order,
    result_json,
)
from skiplock.core.store import (
    PAIR_SCOPE,
    PROVIDER_SCOPE,
    TokenBucket,
    concurrency_limit,
    outcome_terms,
    scope_of,
)

from ._rows import (
    MICROSECOND,
    duration_us,
    sorted_or_none,
    utc,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence
    from datetime import datetime


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
            None if delay is None else delay // MICROSECOND for delay in batch.delays
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
        "kinds": sorted_or_none(request.kinds),
        "tenants": sorted_or_none(request.tenants),
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
        0 if terms.delay is None else terms.delay // MICROSECOND,
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
