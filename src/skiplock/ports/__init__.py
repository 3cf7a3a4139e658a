"""Ports: the protocols the engine talks to, in core types only."""

from __future__ import annotations

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
    "AsyncJobStore",
    "AsyncNotifier",
    "Attempt",
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
