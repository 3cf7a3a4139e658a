"""The application layer: engines (registry, enqueue, admin), workers, settings."""

from __future__ import annotations

from ._codec import decoder_for, encode
from ._context import JobContext, current_job
from ._declaration import TaskDef, TaskOptions, declare
from ._engine import Engine
from ._engine_async import AsyncEngine
from ._enqueue import Enqueue, EnqueueOptions, JobOptions
from ._errors import JobCancelledError, JobTimeoutError, UndecodablePayloadError
from ._operator import Operator
from ._operator_async import AsyncOperator
from ._periodic import CatchUp, ScheduleInfo, TickResult
from ._registry import Processor, ProcessorSpec
from ._scope import default_worker_id
from ._settings import Settings
from ._task import Task
from ._task_async import AsyncTask
from ._worker import Worker
from ._worker_async import AsyncWorker

__all__ = [
    "AsyncEngine",
    "AsyncOperator",
    "AsyncTask",
    "AsyncWorker",
    "CatchUp",
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
    "ScheduleInfo",
    "Settings",
    "Task",
    "TaskDef",
    "TaskOptions",
    "TickResult",
    "UndecodablePayloadError",
    "Worker",
    "current_job",
    "declare",
    "decoder_for",
    "default_worker_id",
    "encode",
]
