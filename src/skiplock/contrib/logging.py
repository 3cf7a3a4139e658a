"""Structured logs: the running job's fields on log records, and JSON lines.

- :class:`JobContextFilter` adds ``job_id``, ``kind``, ``tenant``, ``attempt``,
  ``worker_id`` and ``trace_id`` to every record logged while a job runs, from any logger
  (yours, your libraries', skiplock's): the worker sets a context variable for the whole
  attempt (:func:`skiplock.current_job`), so it works in asyncio tasks and threads alike.
- :class:`JsonFormatter` writes one JSON object per record (``skiplock worker
  --log-format json``).
- :func:`json_handler` is a stream handler with both.

Standard library only (R7); see docs/workers.md, "Logging".
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from skiplock.engine import current_job

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["JOB_FIELDS", "JobContextFilter", "JsonFormatter", "json_handler", "trace_id_of"]

#: The record attributes :class:`JobContextFilter` sets and :class:`JsonFormatter` writes.
JOB_FIELDS = ("job_id", "kind", "tenant", "attempt", "worker_id", "trace_id")

_HEX = frozenset("0123456789abcdef")


def trace_id_of(trace_context: Mapping[str, str] | None) -> str | None:
    """The trace id (32 hex digits) of a stored W3C ``traceparent``, or None."""
    if not trace_context:
        return None
    parts = trace_context.get("traceparent", "").split("-")
    if len(parts) < 4 or len(parts[1]) != 32:
        return None
    trace_id = parts[1].lower()
    if not set(trace_id) <= _HEX or trace_id == "0" * 32:
        return None
    return trace_id


def _active_trace_id() -> str | None:
    # The current OpenTelemetry span's trace id, when the application uses OpenTelemetry
    # (then an attempt runs in its consumer span). Never imported here: only read if the
    # application already did (R7).
    otel = sys.modules.get("opentelemetry.trace")
    if otel is None:
        return None
    span_context = otel.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return f"{span_context.trace_id:032x}"


class JobContextFilter(logging.Filter):
    """Adds the running job's fields to the records it sees; never drops one.

    Attach it to a *handler* (a logger's filter sees only records logged on that very
    logger). Outside a job it changes nothing; attributes a record already has (from
    ``extra=``, or ``ctx.logger``) are kept. ``trace_id`` is the active OpenTelemetry
    span's trace when there is one, else the trace stored with the job at enqueue.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current_job()
        if ctx is None:
            return True
        job = ctx.job
        fields = record.__dict__
        fields.setdefault("job_id", job.id)
        fields.setdefault("kind", job.kind)
        fields.setdefault("tenant", job.tenant)
        fields.setdefault("attempt", job.attempts)
        fields.setdefault("worker_id", ctx.worker_id)
        if fields.get("trace_id") is None:
            trace_id = _active_trace_id() or trace_id_of(job.trace_context)
            if trace_id is not None:
                fields["trace_id"] = trace_id
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line.

    Keys: ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message``; the
    job fields (:data:`JOB_FIELDS`) a record carries and that are not None; ``exception``
    (the formatted traceback) and ``stack`` when present. Values JSON cannot hold are
    written as their ``str()``.
    """

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = record.__dict__
        for name in JOB_FIELDS:
            value = fields.get(name)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def json_handler(stream: TextIO | None = None) -> logging.Handler:
    """A handler writing JSON lines (:class:`JsonFormatter`) with the job fields
    (:class:`JobContextFilter`) to ``stream`` (default: ``sys.stderr``)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(JobContextFilter())
    return handler
