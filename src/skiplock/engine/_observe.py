"""Calling the metrics and tracing ports safely (R7): a sink that raises is logged and
never fails a worker or an enqueue, and the default no-ops cost (almost) nothing.

One module for both flavours: the ports are synchronous.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from skiplock.ports import NoopTracer

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from contextlib import AbstractContextManager

    from skiplock.core import EnqueueResult, Job, StateCount
    from skiplock.ports import Attempt, Metrics, Publication, Tracer, WorkerStatus

logger = logging.getLogger("skiplock.observability")


def traces(tracer: Tracer) -> bool:
    """False for the default no-op tracer: callers skip it outright."""
    return type(tracer) is not NoopTracer


class _Guarded:
    """A sink's context manager entered and left with its errors logged, never raised.

    If entering fails, the block runs untraced; the block's own exception reaches the
    sink's ``__exit__`` and then passes on unchanged (a sink cannot swallow it).
    """

    __slots__ = ("_cm", "_value")

    def __init__(self, what: str, open_cm: Callable[[Any], AbstractContextManager[Any]], arg: Any):
        self._cm: AbstractContextManager[Any] | None = None
        self._value: Any = None
        try:
            cm = open_cm(arg)
            self._value = cm.__enter__()
            self._cm = cm
        except Exception:
            logger.exception("the tracer failed to open %s; going on without it", what)

    def close(self, exc: BaseException | None) -> None:
        cm, self._cm = self._cm, None
        if cm is None:
            return
        try:
            if exc is None:
                cm.__exit__(None, None, None)
            else:
                cm.__exit__(type(exc), exc, exc.__traceback__)
        except Exception:
            logger.exception("the tracer failed to close a span")


class PublishSpan(_Guarded):
    """:meth:`Tracer.publish` around one enqueue call, guarded."""

    __slots__ = ()

    def __init__(self, tracer: Tracer, kinds: Sequence[str]) -> None:
        super().__init__("an enqueue span", tracer.publish, kinds)

    @property
    def context(self) -> Mapping[str, str] | None:
        """The trace context to store, or None (also when the tracer failed)."""
        publication: Publication | None = self._value
        if publication is None:
            return None
        try:
            context = publication.context
        except Exception:
            logger.exception("the tracer failed to give the trace context of an enqueue")
            return None
        return context or None

    def published(self, results: Sequence[EnqueueResult]) -> None:
        publication: Publication | None = self._value
        if publication is None:
            return
        try:
            publication.published(results)
        except Exception:
            logger.exception("the tracer failed to record an enqueue")


class AttemptSpan(_Guarded):
    """:meth:`Tracer.span` around one attempt, guarded."""

    __slots__ = ()

    def __init__(self, tracer: Tracer, job: Job) -> None:
        super().__init__(f"the span of job {job.id}", tracer.span, job)

    def ended(self, outcome: str, error: BaseException | None) -> None:
        attempt: Attempt | None = self._value
        if attempt is None:
            return
        try:
            attempt.ended(outcome, error)
        except Exception:
            logger.exception("the tracer failed to record an attempt's outcome")


def worker_started(
    metrics: Metrics, worker: WorkerStatus, counts: Callable[[float], Sequence[StateCount]]
) -> None:
    """:meth:`Metrics.worker_started`, guarded."""
    try:
        metrics.worker_started(worker, counts)
    except Exception:
        logger.exception("worker %s: metrics failed at start", worker.id)


def worker_stopped(metrics: Metrics, worker: WorkerStatus) -> None:
    """:meth:`Metrics.worker_stopped`, guarded."""
    try:
        metrics.worker_stopped(worker)
    except Exception:
        logger.exception("worker %s: metrics failed at stop", worker.id)
