"""The application layer: engines (registry, enqueue, admin), workers, settings."""

from __future__ import annotations

from ._codec import decoder_for, encode
from ._context import JobContext, current_job
from ._declaration import TaskDef, TaskOptions, declare
from ._engine import Engine
from ._engine_async import AsyncEngine
from ._errors import (
    JobCancelledError,
    JobTimeoutError,
    SelectionChangedError,
    UndecodablePayloadError,
)
from ._inputs import Enqueue, EnqueueOptions, JobOptions, WorkerOptions
from ._operator import Operator
from ._operator_async import AsyncOperator
from ._registry import Processor, ProcessorSpec
from .admin._bulk import BulkResult, SkippedJob
from .admin._purge import DeadPurge
from .admin._reads import Reader
from .admin._reads_async import AsyncReader
from .enqueue._task import Task
from .enqueue._task_async import AsyncTask
from .periodic._rules import CatchUp, ScheduleInfo, ScheduleOptions, TickResult
from .settings._settings import Settings
from .worker._scope import default_worker_id
from .worker._worker import Worker
from .worker._worker_async import AsyncWorker

__all__ = [
    "AsyncEngine",
    "AsyncOperator",
    "AsyncReader",
    "AsyncTask",
    "AsyncWorker",
    "BulkResult",
    "CatchUp",
    "DeadPurge",
    "Engine",
    "Enqueue",
    "EnqueueOptions",
    "JobCancelledError",
    "JobContext",
    "JobOptions",
    "JobTimeoutError",
    "Operator",
    "Processor",
    "ProcessorSpec",
    "Reader",
    "ScheduleInfo",
    "ScheduleOptions",
    "SelectionChangedError",
    "Settings",
    "SkippedJob",
    "Task",
    "TaskDef",
    "TaskOptions",
    "TickResult",
    "UndecodablePayloadError",
    "Worker",
    "WorkerOptions",
    "current_job",
    "declare",
    "decoder_for",
    "default_worker_id",
    "encode",
]
