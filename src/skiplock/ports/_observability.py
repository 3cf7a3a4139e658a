"""Metrics and tracing ports, with no-op defaults (R7).

Implementations for Prometheus and OpenTelemetry live in ``skiplock.contrib``; the engine
never imports either library. Every call into these ports is guarded by the engine: a
sink that raises is logged and never fails a worker or an enqueue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from contextlib import AbstractContextManager

    from skiplock.core import EnqueueResult, Job, StateCount


class WorkerStatus(Protocol):
    """What a metrics sink may read from a running worker (any thread, any time)."""

    @property
    def id(self) -> str:
        """The worker's id."""
        ...

    @property
    def concurrency(self) -> int:
        """Job slots."""
        ...

    @property
    def running(self) -> int:
        """Jobs running now (slots busy)."""
        ...

    @property
    def held(self) -> int:
        """Claimed jobs waiting in the prefetch buffer for a slot."""
        ...

    @property
    def unwritten(self) -> int:
        """Finished jobs whose outcome is not written yet."""
        ...

    @property
    def paused(self) -> Sequence[tuple[str | None, str | None]]:
        """The ``(kind, tenant)`` pauses in force as the worker last read them (None:
        any), issue 30."""
        ...


class Metrics(Protocol):
    """Counters and histograms the worker reports (R5).

    The per-job hooks (:meth:`job_claimed`, :meth:`job_finished`, :meth:`rate_limited`,
    :meth:`claim_throttled`)
    run on the worker's hot path: keep them cheap. Queue depths and worker gauges are
    read at scrape time (:meth:`worker_started` hands over what to read), never pushed.
    Subclass :class:`NoopMetrics` to implement only some hooks.
    """

    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        """A job was claimed ``latency`` seconds after it became due."""

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        """A claimed job ended after ``duration`` seconds in its slot (0.0: it never
        started). ``outcome`` is the written result: ``succeeded``, ``retry``, ``dead``,
        ``released`` (back to pending without using an attempt: throttled, shutdown),
        ``lost`` (no longer this worker's) or ``error`` (its outcome could not be
        written)."""

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        """A job was throttled by a token bucket."""

    def claim_throttled(self, kind: str, tenant: str | None, limit: str) -> None:
        """A worker started leaving out of its claims a pair (``tenant``; None: no
        tenant) or a whole kind (``tenant`` None) whose ``limit`` had no room:
        ``rate_limit`` (an empty token bucket), ``provider`` (the provider's cap) or
        ``cluster_limit`` (as many running as allowed). Once per throttling transition
        of each worker, not per claim nor per job: not again while the limit keeps it
        out, however often the worker claims; again after a claim found room for it."""

    def worker_started(
        self, worker: WorkerStatus, counts: Callable[[float], Sequence[StateCount]]
    ) -> None:
        """``worker`` began serving. Read its gauges at scrape time; ``counts(timeout)``
        returns the store's job counts per (state, kind, tenant) (one store query), from
        any thread except an async worker's own event loop, waiting at most ``timeout``
        seconds (TimeoutError after that)."""

    def worker_stopped(self, worker: WorkerStatus) -> None:
        """``worker`` stopped: forget it."""


class Publication(Protocol):
    """One enqueue call as a tracer sees it (see :meth:`Tracer.publish`)."""

    @property
    def context(self) -> Mapping[str, str] | None:
        """The trace context to store with every job of the call (W3C ``traceparent``
        and friends), or None."""
        ...

    def published(self, results: Sequence[EnqueueResult]) -> None:
        """The store wrote the jobs (``results`` in request order)."""


class Attempt(Protocol):
    """One attempt of a job as a tracer sees it (see :meth:`Tracer.span`)."""

    def ended(self, outcome: str, error: BaseException | None) -> None:
        """The attempt ended with ``outcome`` (as for :meth:`Metrics.job_finished`, as far
        as the worker knows before writing it) and the processor's exception, if any."""


class Tracer(Protocol):
    """Trace propagation (R3): a producer span and context capture at enqueue, a consumer
    span per attempt."""

    def publish(self, kinds: Sequence[str]) -> AbstractContextManager[Publication]:
        """Around one enqueue call of jobs of ``kinds`` (one per job, in order): entered
        before the jobs are built, so :attr:`Publication.context` is stored with each."""
        ...

    def span(self, job: Job) -> AbstractContextManager[Attempt]:
        """Around one attempt of ``job`` (a claimed job: ``job.claimed_by`` is the worker,
        ``job.trace_context`` what enqueue stored). Exits after :meth:`Attempt.ended`."""
        ...


class NoopMetrics:
    """Metrics that record nothing; subclass it to implement only some hooks."""

    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        pass

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        pass

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        pass

    def claim_throttled(self, kind: str, tenant: str | None, limit: str) -> None:
        pass

    def worker_started(
        self, worker: WorkerStatus, counts: Callable[[float], Sequence[StateCount]]
    ) -> None:
        pass

    def worker_stopped(self, worker: WorkerStatus) -> None:
        pass


class _Nothing:
    """A publication and an attempt that trace nothing, and their context manager."""

    __slots__ = ()

    context: Mapping[str, str] | None = None

    def published(self, results: Sequence[EnqueueResult]) -> None:
        pass

    def ended(self, outcome: str, error: BaseException | None) -> None:
        pass

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None  # an exception leaving the block propagates, traced by nothing


_NOTHING = _Nothing()


class NoopTracer:
    """A tracer that traces nothing (and allocates nothing per call)."""

    def publish(self, kinds: Sequence[str]) -> AbstractContextManager[Publication]:
        return _NOTHING

    def span(self, job: Job) -> AbstractContextManager[Attempt]:
        return _NOTHING
