"""The application layer: engines (registry, enqueue, admin), workers, settings."""

from __future__ import annotations

from ._codec import decoder_for, encode
from ._context import JobContext, current_job
from ._engine import Engine
from ._engine_async import AsyncEngine
from ._enqueue import Enqueue
from ._errors import JobCancelledError, JobTimeoutError, UndecodablePayloadError
from ._registry import Processor, ProcessorSpec
from ._scope import default_worker_id
from ._settings import Settings
from ._worker import Worker
from ._worker_async import AsyncWorker

__all__ = [
    "AsyncEngine",
    "AsyncWorker",
    "Engine",
    "Enqueue",
    "JobCancelledError",
    "JobContext",
    "JobTimeoutError",
    "Processor",
    "ProcessorSpec",
    "Settings",
    "UndecodablePayloadError",
    "Worker",
    "current_job",
    "decoder_for",
    "default_worker_id",
    "encode",
]
