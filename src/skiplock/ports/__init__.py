"""Ports: the protocols the engine talks to, in core types only."""

from __future__ import annotations

from ._audit import Audit, AuditSink, CallbackAuditSink
from ._audit_async import AsyncAudit, AsyncAuditSink, AsyncCallbackAuditSink
from ._clock import Clock, SystemClock
from ._observability import (
    Attempt,
    Metrics,
    NoopMetrics,
    NoopTracer,
    Publication,
    Tracer,
    WorkerStatus,
)
from ._store import JobStore, Notifier
from ._store_async import AsyncJobStore, AsyncNotifier

__all__ = [
    "AsyncAudit",
    "AsyncAuditSink",
    "AsyncCallbackAuditSink",
    "AsyncJobStore",
    "AsyncNotifier",
    "Attempt",
    "Audit",
    "AuditSink",
    "CallbackAuditSink",
    "Clock",
    "JobStore",
    "Metrics",
    "NoopMetrics",
    "NoopTracer",
    "Notifier",
    "Publication",
    "SystemClock",
    "Tracer",
    "WorkerStatus",
]
