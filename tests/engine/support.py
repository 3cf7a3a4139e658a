"""Flavour-neutral test helpers: payload types, recording metrics and tracer."""

from __future__ import annotations

import dataclasses
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

import attrs
import pydantic

from skiplock.ports import NoopMetrics

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from skiplock import EnqueueResult, Job, StateCount
    from skiplock.ports import Attempt, Publication, WorkerStatus


@attrs.frozen
class Email:
    to: str
    subject: str = ""


@dataclasses.dataclass(frozen=True)
class Report:
    name: str
    pages: int


class Invoice(pydantic.BaseModel):
    number: int
    customer: str


class RecordingMetrics(NoopMetrics):
    """Remembers every metrics call (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.claimed: list[tuple[str, str | None, float]] = []
        self.finished: list[tuple[str, str | None, str]] = []
        self.throttled: list[tuple[str, str | None]] = []
        self.decisions: list[tuple[str, str | None, str]] = []
        self.workers: list[WorkerStatus] = []
        self.counts: list[Callable[[float], Sequence[StateCount]]] = []
        self.stopped: list[str] = []

    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        with self._lock:
            self.claimed.append((kind, tenant, latency))

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        with self._lock:
            self.finished.append((kind, tenant, outcome))

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        with self._lock:
            self.throttled.append((kind, tenant))

    def claim_throttled(self, kind: str, tenant: str | None, limit: str) -> None:
        with self._lock:
            self.decisions.append((kind, tenant, limit))

    def worker_started(
        self, worker: WorkerStatus, counts: Callable[[float], Sequence[StateCount]]
    ) -> None:
        with self._lock:
            self.workers.append(worker)
            self.counts.append(counts)

    def worker_stopped(self, worker: WorkerStatus) -> None:
        with self._lock:
            self.stopped.append(worker.id)

    def outcomes(self) -> list[str]:
        with self._lock:
            return [outcome for _, _, outcome in self.finished]


class RecordingTracer:
    """Stores a fixed W3C context at enqueue and records what it was told (thread-safe)."""

    CONTEXT: Mapping[str, str] = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Per enqueue call: its kinds, and the ids it published (None: not published).
        self.publications: list[tuple[list[str], list[int] | None]] = []
        #: Job ids whose attempt opened a span, in order.
        self.spans: list[int] = []
        #: Per attempt that ended: job id, outcome, the error's type name.
        self.ended: list[tuple[int, str, str | None]] = []

    @contextmanager
    def publish(self, kinds: Sequence[str]) -> Iterator[Publication]:
        with self._lock:
            index = len(self.publications)
            self.publications.append((list(kinds), None))
        yield _Publication(self, index)

    @contextmanager
    def span(self, job: Job) -> Iterator[Attempt]:
        with self._lock:
            self.spans.append(job.id)
        yield _Attempt(self, job.id)


class _Publication:
    def __init__(self, tracer: RecordingTracer, index: int) -> None:
        self._tracer = tracer
        self._index = index
        self.context = RecordingTracer.CONTEXT

    def published(self, results: Sequence[EnqueueResult]) -> None:
        with self._tracer._lock:
            kinds, _ = self._tracer.publications[self._index]
            self._tracer.publications[self._index] = (kinds, [r.id for r in results])


class _Attempt:
    def __init__(self, tracer: RecordingTracer, job_id: int) -> None:
        self._tracer = tracer
        self._job_id = job_id

    def ended(self, outcome: str, error: BaseException | None) -> None:
        with self._tracer._lock:
            name = None if error is None else type(error).__name__
            self._tracer.ended.append((self._job_id, outcome, name))
