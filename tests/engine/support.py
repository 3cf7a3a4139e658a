"""Flavour-neutral test helpers: payload types, recording metrics and tracer."""

from __future__ import annotations

import dataclasses
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

import attrs
import pydantic

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from skiplock import Job


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


class RecordingMetrics:
    """Remembers every metrics call (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.claimed: list[tuple[str, str | None, float]] = []
        self.finished: list[tuple[str, str | None, str]] = []
        self.throttled: list[tuple[str, str | None]] = []

    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        with self._lock:
            self.claimed.append((kind, tenant, latency))

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        with self._lock:
            self.finished.append((kind, tenant, outcome))

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        with self._lock:
            self.throttled.append((kind, tenant))

    def outcomes(self) -> list[str]:
        with self._lock:
            return [outcome for _, _, outcome in self.finished]


class RecordingTracer:
    """Injects a fixed W3C context and records the jobs it opened spans for."""

    CONTEXT: Mapping[str, str] = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    }

    def __init__(self) -> None:
        self.spans: list[int] = []

    def inject(self) -> Mapping[str, str] | None:
        return dict(self.CONTEXT)

    @contextmanager
    def span(self, job: Job) -> Iterator[object]:
        self.spans.append(job.id)
        yield None
