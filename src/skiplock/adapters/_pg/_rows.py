"""Rows (dicts) to core types and core types to query parameters, for every PG driver:
what every role shares (a job's row, times, durations, the job filter, the audit trail).
The rest is per role of the store port, as the store's mixins are: ``_rows_jobs.py``,
``_rows_workers.py``, ``_rows_controls.py``, ``_rows_reads.py``, ``_rows_admin.py`` and
``_rows_upkeep.py``.

Parameters are plain Python values every driver adapts the same way (str, int, bool,
datetime, timedelta and lists of them); JSON travels as text and is cast in SQL, so no
driver-specific JSON codec is involved.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from skiplock.core import (
    MAX_AVAILABLE_AT,
    MIN_AVAILABLE_AT,
    AttemptError,
    AuditAction,
    AuditEvent,
    Job,
    JobFilter,
    JobState,
    UndecodableRowError,
)
from skiplock.core.store import (
    MAX_DELAY,
    shown,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

T = TypeVar("T")


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def utc(value: datetime) -> datetime:
    """A timestamptz in UTC (drivers return the session's time zone)."""
    return value.astimezone(UTC)


def utc_or_none(value: datetime | None) -> datetime | None:
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
    rows have no ``result`` column, nor ``errors`` unless it asked (``claim_errors``):
    the job has none then.
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
            claimed_at=utc_or_none(row["claimed_at"]),
            claimed_by=row["claimed_by"],
            completed_at=utc_or_none(row["completed_at"]),
            last_error=row["last_error"],
            idempotency_key=key if tenant_key is None else tenant_key,
            idempotency_scope="global" if tenant_key is None else "tenant",
            trace_context=trace_context,
            claims=int(row["claims"]),
            explicit_max_attempts=bool(row["explicit_max_attempts"]),
            suspect=bool(row["suspect"]),
            recovered=bool(row["recovered"]),
            started_at=utc_or_none(row["started_at"]),
            result=result,
            errors=errors,
            concurrency_key=row.get("concurrency_key"),
            concurrency_limit=row.get("concurrency_limit"),
        )
    except Exception as exc:  # the columns above cannot fail; should one ever, name it
        raise UndecodableRowError(job_id, "row", _problem(exc)) from exc


def sorted_or_none(values: frozenset[Any] | None) -> list[Any] | None:
    return None if values is None else sorted(values)


MICROSECOND = timedelta(microseconds=1)


def duration_us(value: timedelta) -> int:
    """A duration in whole microseconds, as every statement takes one (``:x_us::bigint *
    interval '1 microsecond'``): an exact length. A timedelta sent as an interval keeps
    its days, which PostgreSQL adds and subtracts as calendar days in the session's time
    zone (23 or 25 hours across a change of clocks). Longer than :data:`MAX_DELAY` (100
    years) counts as that: no job or worker row is older, and ``now()`` minus it stays a
    valid timestamp."""
    return min(value, MAX_DELAY) // MICROSECOND


def filter_params(f: JobFilter) -> dict[str, Any]:
    """Parameters of the ``_job_filter`` fragment."""
    return {
        "ids": sorted_or_none(f.ids),
        "states": None if f.states is None else sorted(s.value for s in f.states),
        "kinds": sorted_or_none(f.kinds),
        "tenants": sorted_or_none(f.tenants),
        "priority_min": f.priority_min,
        "priority_max": f.priority_max,
        "created_since": f.created_since,
        "created_before": f.created_before,
        "available_since": f.available_since,
        "available_before": f.available_before,
        # The search (migration 0022): a JSON text for ``@>``, texts compared as they are.
        "payload": None if f.payload is None else json.dumps(f.payload, separators=(",", ":")),
        "error": f.error,
        "idempotency_key": f.idempotency_key,
    }


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
