"""Ports: the protocols the engine talks to, in core types only.

The store port comes by role (``JobsRole``, ``WorkersRole``, ``ControlsRole``,
``ReadsRole``, ``AdminRole``, ``UpkeepRole`` and their ``Async`` twins): each part of the
engine takes the roles it uses; ``JobStore``/``AsyncJobStore`` is every role at once.
"""

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
from ._store import (
    AdminRole,
    JobsRole,
    JobStore,
    Notifier,
    UpkeepRole,
    WorkersRole,
)
from ._store_async import (
    AsyncAdminRole,
    AsyncJobsRole,
    AsyncJobStore,
    AsyncNotifier,
    AsyncUpkeepRole,
    AsyncWorkersRole,
)
from ._store_controls import ControlsRole
from ._store_controls_async import AsyncControlsRole
from ._store_reads import ReadsRole
from ._store_reads_async import AsyncReadsRole

__all__ = [
    "AdminRole",
    "AsyncAdminRole",
    "AsyncAudit",
    "AsyncAuditSink",
    "AsyncCallbackAuditSink",
    "AsyncControlsRole",
    "AsyncJobStore",
    "AsyncJobsRole",
    "AsyncNotifier",
    "AsyncReadsRole",
    "AsyncUpkeepRole",
    "AsyncWorkersRole",
    "Attempt",
    "Audit",
    "AuditSink",
    "CallbackAuditSink",
    "Clock",
    "ControlsRole",
    "JobStore",
    "JobsRole",
    "Metrics",
    "NoopMetrics",
    "NoopTracer",
    "Notifier",
    "Publication",
    "ReadsRole",
    "SystemClock",
    "Tracer",
    "UpkeepRole",
    "WorkerStatus",
    "WorkersRole",
]
