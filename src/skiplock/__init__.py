"""skiplock: a transactional task engine on PostgreSQL.

Enqueue jobs inside your own database transaction; workers on any number of machines
claim them with ``FOR UPDATE SKIP LOCKED``. Build an :class:`AsyncEngine` (or the sync
:class:`Engine`) on a store from :mod:`skiplock.adapters`, register processors, enqueue,
and run ``engine.worker()``.
"""

from __future__ import annotations

from skiplock.core import (
    AttemptError,
    EnqueueResult,
    InvalidTransitionError,
    Job,
    JobNotFoundError,
    JobState,
    KindPolicy,
    LeaseLostError,
    PolicyOverrides,
    RateLimit,
    RetryPolicy,
    SchemaVersionError,
    SkiplockError,
    StateCount,
    StoreError,
    UndecodableRowError,
    UnknownKindError,
    ValidationError,
)
from skiplock.engine import (
    AsyncEngine,
    AsyncWorker,
    Engine,
    Enqueue,
    JobCancelledError,
    JobContext,
    JobTimeoutError,
    Processor,
    ProcessorSpec,
    Settings,
    UndecodablePayloadError,
    Worker,
)
from skiplock.ports import Clock, Metrics, NoopMetrics, NoopTracer, SystemClock, Tracer

__version__ = "0.1.0"

__all__ = [
    "AsyncEngine",
    "AsyncWorker",
    "AttemptError",
    "Clock",
    "Engine",
    "Enqueue",
    "EnqueueResult",
    "InvalidTransitionError",
    "Job",
    "JobCancelledError",
    "JobContext",
    "JobNotFoundError",
    "JobState",
    "JobTimeoutError",
    "KindPolicy",
    "LeaseLostError",
    "Metrics",
    "NoopMetrics",
    "NoopTracer",
    "PolicyOverrides",
    "Processor",
    "ProcessorSpec",
    "RateLimit",
    "RetryPolicy",
    "SchemaVersionError",
    "Settings",
    "SkiplockError",
    "StateCount",
    "StoreError",
    "SystemClock",
    "Tracer",
    "UndecodablePayloadError",
    "UndecodableRowError",
    "UnknownKindError",
    "ValidationError",
    "Worker",
    "__version__",
]
