"""The job context handed to processors (X3)."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.core import Job, Outcome

job_logger = logging.getLogger("skiplock.job")


class _CancelSource(Protocol):
    @property
    def error(self) -> BaseException | None: ...


class JobContext:
    """What a processor knows about the attempt it runs.

    ``connection`` depends on the processor's connection mode (R10), which it opts into:

    - ``transactional=True``: the job's transaction. Write through it — e.g.
      ``engine.enqueue(..., connection=ctx.connection)`` — and the writes commit
      atomically with the job's completion, or roll back with a failed attempt.
    - ``autocommit=True``: a connection outside any transaction, for work that cannot
      run in one (``CREATE INDEX CONCURRENTLY``, ``VACUUM``); each statement commits.
    - neither (the default): ``None``; no connection is taken from the pool for the job,
      so a processor busy with an HTTP call holds none.

    ``session`` is the same object under the name SQLAlchemy users expect: with a
    SQLAlchemy store it is the job's ``Session`` / ``AsyncSession``. ``logger`` adds
    ``job_id``, ``kind``, ``attempt``, ``tenant`` and ``worker_id`` to every record.

    A job is cancelled when it ran past its timeout or the worker is shutting down: async
    processors are cancelled outright; sync processors get an exception raised into their
    thread, and long loops should also poll :attr:`cancelled` or call
    :meth:`check_cancelled` (a blocking C call delays the raised exception).
    """

    __slots__ = ("_cancel", "_decide", "connection", "job", "logger", "worker_id")

    def __init__(
        self,
        job: Job,
        worker_id: str,
        *,
        cancel: _CancelSource,
        connection: Any = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.job = job
        self.worker_id = worker_id
        self.connection = connection
        self._cancel = cancel
        self._decide: Callable[[BaseException], Outcome] | None = None
        extra = {
            "job_id": job.id,
            "kind": job.kind,
            "attempt": job.attempts,
            "tenant": job.tenant,
            "worker_id": worker_id,
        }
        if job.trace_context and "traceparent" in job.trace_context:
            extra["traceparent"] = job.trace_context["traceparent"]
        self.logger: logging.LoggerAdapter[logging.Logger] = logging.LoggerAdapter(
            logger or job_logger, extra
        )

    @property
    def session(self) -> Any:
        """Alias of :attr:`connection` (a SQLAlchemy ``Session`` with a SQLAlchemy store)."""
        return self.connection

    @property
    def job_id(self) -> int:
        """The job's id."""
        return self.job.id

    @property
    def kind(self) -> str:
        """The job's kind."""
        return self.job.kind

    @property
    def attempt(self) -> int:
        """This attempt's number, 1-based (attempts count at claim)."""
        return self.job.attempts

    @property
    def tenant(self) -> str | None:
        """The job's tenant, if any."""
        return self.job.tenant

    @property
    def payload(self) -> Any:
        """The stored (raw JSON) payload."""
        return self.job.payload

    @property
    def cancelled(self) -> bool:
        """True once the job timed out or the worker asked it to stop."""
        return self._cancel.error is not None

    def check_cancelled(self) -> None:
        """Raise :class:`JobTimeoutError` / :class:`JobCancelledError` if cancelled."""
        error = self._cancel.error
        if error is not None:
            raise error

    def failure_outcome(self, exc: BaseException) -> Outcome:
        """What the worker writes if this attempt ends with ``exc`` raised from the
        processor: a :class:`~skiplock.core.Retry`, a :class:`~skiplock.core.Bury`, or a
        :class:`~skiplock.core.Release` when the worker itself stopped the attempt
        (shutdown). Its ``final`` says whether no retry follows.

        Decided once, by the worker's failure rule (attempts, the kind's retry policy):
        asked here first, the worker writes this very outcome when ``exc`` reaches it.
        For code that reports an attempt's end from inside the processor (the Django
        integration's ``task_finished``). RuntimeError outside a worker's attempt.
        """
        if self._decide is None:
            raise RuntimeError(f"job {self.job_id} is not run by a worker here")
        return self._decide(exc)

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self.job_id}, kind={self.kind!r}, attempt={self.attempt}, "
            f"tenant={self.tenant!r}, worker_id={self.worker_id!r})"
        )


#: The job running in this task (async) or thread (sync, and a sync processor's thread
#: under an AsyncEngine): set by the worker for the whole attempt.
running_job: ContextVar[JobContext | None] = ContextVar("skiplock_running_job", default=None)


def current_job() -> JobContext | None:
    """The :class:`JobContext` of the job whose processor runs in the current asyncio task
    or thread (and the tasks and threads it starts with the context copied), else None.

    Lets code far from the processor (a logging filter, a client library) tell which job
    it works for without passing ``ctx`` down.
    """
    return running_job.get()
