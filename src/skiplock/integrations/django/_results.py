"""A skiplock job as Django's ``TaskResult``: the one mapping (docs/django.md, "Results").

A Django task's job stores :class:`TaskCall` as its payload; its kind is the task
function's module path and its tenant the task's queue name.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs
from django.conf import settings
from django.tasks.base import TaskError, TaskResult, TaskResultStatus
from django.utils import timezone

from skiplock.core import JobState
from skiplock.core.rules import exception_traceback
from skiplock.engine import JobTimeoutError

if TYPE_CHECKING:
    from datetime import datetime

    from django.tasks.base import Task

    from skiplock.core import Job

#: A Django task's queue when its job has no tenant (a job enqueued outside Django).
DEFAULT_QUEUE = "default"

#: What a job's state is as a Django task's status. ``dead`` (attempts exhausted),
#: ``failed`` (marked failed by an operator) and ``cancelled`` are all finished and
#: unsuccessful: FAILED.
STATUS: dict[JobState, TaskResultStatus] = {
    JobState.PENDING: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.DEAD: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}
FINISHED_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED}
)

#: The first line of an error text the worker stored for an exception of the task:
#: ``module.Class: message`` (``Class: message`` for builtins), as Python prints it.
_EXCEPTION_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::\s|:?$)")
#: The class named for an attempt that ran past its timeout.
TIMEOUT_CLASS = "skiplock.JobTimeoutError"
#: Stored errors that are not an exception of the task, by the start of their text.
_NOT_AN_EXCEPTION = (("timeout exceeded: ", TIMEOUT_CLASS),)
#: The class named for any other error that was not an exception of the task (a vanished
#: worker, an undecodable payload, an unstorable return value).
OTHER_ERROR_CLASS = "skiplock.SkiplockError"


@attrs.frozen
class TaskCall:
    """A Django task's job payload: the call's arguments (JSON, as Django normalises
    them) and the ``run_after`` it was enqueued with (ISO 8601), if any."""

    args: list[Any] = attrs.field(factory=list)
    kwargs: dict[str, Any] = attrs.field(factory=dict)
    run_after: str | None = None


def error_from_exception(exc: BaseException) -> TaskError:
    """A failed attempt's :class:`TaskError` from the exception itself, as Django's own
    backends make it: the task's frames, a trailing newline (a timeout named as
    :func:`error_from_text` names it)."""
    cls = type(exc)
    path = f"{cls.__module__}.{cls.__qualname__}"
    return TaskError(
        exception_class_path=TIMEOUT_CLASS if isinstance(exc, JobTimeoutError) else path,
        traceback=exception_traceback(exc),
    )


def error_from_text(text: str) -> TaskError:
    """A failed attempt's :class:`TaskError` from the error text skiplock stored.

    For an exception the worker stores its summary line (``module.Class: message``), a
    blank line, then the traceback: the class path comes from the summary
    (``builtins.`` added where Python leaves it out) and the traceback is the rest. A
    timeout is ``skiplock.JobTimeoutError``; any other text that names no exception
    (a vanished worker, an undecodable payload) is :data:`OTHER_ERROR_CLASS`, with the
    whole text as its traceback.
    """
    first = text.split("\n", 1)[0]
    for prefix, path in _NOT_AN_EXCEPTION:
        if first.startswith(prefix):
            return TaskError(exception_class_path=path, traceback=text)
    match = _EXCEPTION_LINE.match(first)
    if match is None:
        return TaskError(exception_class_path=OTHER_ERROR_CLASS, traceback=text)
    name = match["name"]
    path = name if "." in name else f"builtins.{name}"
    _, sep, rest = text.partition("\n\n")
    # Stored without its trailing newline, which Django's backends keep.
    return TaskError(exception_class_path=path, traceback=(rest if sep else text) + "\n")


def stored_time(value: datetime | None) -> datetime | None:
    """A stored (UTC) time as Django shows times: aware, or naive local with USE_TZ off."""
    if value is None or settings.USE_TZ:
        return value
    return timezone.make_naive(value)


def task_result(
    job: Job, task: Task[..., Any], *, backend: str, result_id: str | None = None
) -> TaskResult[..., Any]:
    """``job`` as Django's :class:`TaskResult` of ``task`` (read by ``backend``).

    Relies on skiplock's job results: ``Job.started_at``, ``Job.result``, ``Job.errors``
    (each with ``worker_id``, ``claimed_at`` and ``error``) and ``Job.worker_ids``. Read
    with ``getattr`` so that a job without them maps too (no history: no errors, the
    running or succeeding worker only, no return value).
    """
    errors = tuple(getattr(job, "errors", ()))
    worker_ids = getattr(job, "worker_ids", None)
    if worker_ids is None:  # a skiplock without results
        live = job.state in (JobState.RUNNING, JobState.SUCCEEDED)
        worker_ids = (job.claimed_by,) if live and job.claimed_by is not None else ()
    last_attempted = job.claimed_at
    if last_attempted is None and errors:
        last_attempted = errors[-1].claimed_at
    payload = job.payload if isinstance(job.payload, dict) else {}
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=str(job.id) if result_id is None else result_id,
        status=STATUS[job.state],
        enqueued_at=stored_time(job.created_at),
        started_at=stored_time(getattr(job, "started_at", None)),
        finished_at=stored_time(job.completed_at) if job.state in FINISHED_STATES else None,
        last_attempted_at=stored_time(last_attempted),
        args=list(payload.get("args", [])),
        kwargs=dict(payload.get("kwargs", {})),
        backend=backend,
        errors=[error_from_text(e.error) for e in errors],
        worker_ids=list(worker_ids),
    )
    if job.state is JobState.SUCCEEDED:
        object.__setattr__(result, "_return_value", getattr(job, "result", None))
    return result
