"""Metrics and tracing ports, with no-op defaults (R7)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from skiplock.core import Job


class Metrics(Protocol):
    """Counters and histograms the worker reports (R5). Queue depths are scraped, not pushed."""

    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        """A job was claimed ``latency`` seconds after it became due."""

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        """An attempt ended: outcome is succeeded/retry/dead/released/lost."""

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        """A job was throttled by a token bucket."""


class Tracer(Protocol):
    """Trace propagation (R3): capture at enqueue, a consumer span per attempt."""

    def inject(self) -> Mapping[str, str] | None:
        """The current trace context to store with a new job, or None."""
        ...

    def span(self, job: Job) -> AbstractContextManager[object]:
        """A consumer span around one attempt of ``job``, linked to its stored context."""
        ...


class NoopMetrics:
    """Metrics that record nothing."""

    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        pass

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        pass

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        pass


class NoopTracer:
    """A tracer that traces nothing."""

    def inject(self) -> Mapping[str, str] | None:
        return None

    def span(self, job: Job) -> AbstractContextManager[object]:
        return nullcontext()
