"""OpenTelemetry tracing for skiplock (R3): ``pip install 'skiplock[otel]'``.

:class:`OtelTracer` is a :class:`skiplock.ports.Tracer` on the OpenTelemetry *API* only:
the application configures the SDK (provider, exporter, propagators) as usual. Spans
follow the messaging semantic conventions (docs/metrics.md, "Tracing"):

- enqueue: a ``PRODUCER`` span ``send <kind>`` around the store call; its context (W3C
  ``traceparent``, through the globally configured propagator) is stored with each job as
  ``trace_context``, the creation context of the job;
- every attempt: a ``CONSUMER`` span ``process <kind>``, linked to the creation context
  and, by default, its child; failed attempts record the exception and an error status.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextvars import Token
    from types import TracebackType

    from opentelemetry.trace import Span, TracerProvider
    from opentelemetry.util.types import AttributeValue

    from skiplock.core import EnqueueResult, Job

__all__ = ["OtelTracer"]

# Attribute names of the messaging semantic conventions (development status; the names
# since semantic-conventions 1.27: operation type ``send`` replaced ``publish``).
SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
BATCH_COUNT = "messaging.batch.message_count"
CLIENT_ID = "messaging.client.id"
ERROR_TYPE = "error.type"
# skiplock's own, in its namespace.
ATTEMPT = "skiplock.job.attempt"
TENANT = "skiplock.job.tenant"
PRIORITY = "skiplock.job.priority"
OUTCOME = "skiplock.job.outcome"

#: Attempt outcomes that are failures of the attempt: the span's status is ERROR.
FAILED = frozenset({"retry", "dead", "error"})


def _version() -> str | None:
    try:
        return importlib.metadata.version("skiplock")
    except importlib.metadata.PackageNotFoundError:
        return None


def error_type(exc: BaseException) -> str:
    """``error.type`` of an exception: its class, qualified by its module unless builtin."""
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


class OtelTracer:
    """A :class:`skiplock.ports.Tracer` that creates OpenTelemetry spans.

    ``tracer_provider`` defaults to the global one. With ``parent=True`` (the default) an
    attempt's span is a child of the enqueue's span, so a request and the jobs it
    enqueued form one trace; with ``parent=False`` every attempt starts a trace of its
    own. Either way it links to the enqueue's span, as the conventions ask.
    """

    def __init__(self, *, tracer_provider: TracerProvider | None = None, parent: bool = True):
        self._tracer = trace.get_tracer("skiplock", _version(), tracer_provider=tracer_provider)
        self._parent = bool(parent)

    def publish(self, kinds: Sequence[str]) -> _Send:
        """A ``send`` span around one enqueue call (see :class:`skiplock.ports.Tracer`)."""
        return _Send(self._tracer, kinds)

    def span(self, job: Job) -> _Process:
        """A ``process`` span around one attempt of ``job``."""
        return _Process(self._tracer, job, parent=self._parent)


class _Current:
    """A started span made current while the block runs, ended on exit; an exception
    leaving the block is recorded with an error status."""

    _span: Span
    _token: Token[otel_context.Context] | None = None
    _failed = False

    def _enter(self) -> None:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def _fail(self, error: BaseException | None, outcome: str | None = None) -> None:
        self._failed = True
        span = self._span
        if error is not None:
            span.record_exception(error)
            span.set_attribute(ERROR_TYPE, error_type(error))
            description = f"{type(error).__name__}: {error}"
        else:
            span.set_attribute(ERROR_TYPE, "_OTHER")
            description = f"attempt failed: {outcome}"
        span.set_status(Status(StatusCode.ERROR, description))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None and not self._failed:
                self._fail(exc)
        finally:
            if self._token is not None:
                otel_context.detach(self._token)
            self._span.end()


class _Send(_Current):
    """One enqueue call: a ``PRODUCER`` span whose context is each job's creation context
    (one span for a batch: the conventions' "publish" span used as creation context)."""

    def __init__(self, tracer: trace.Tracer, kinds: Sequence[str]) -> None:
        first = kinds[0] if kinds else ""
        single = first if first and all(kind == first for kind in kinds) else None
        attributes: dict[str, AttributeValue] = {
            SYSTEM: "skiplock",
            OPERATION_TYPE: "send",
            OPERATION_NAME: "send",
        }
        if single is not None:
            attributes[DESTINATION] = single
        if len(kinds) != 1:
            attributes[BATCH_COUNT] = len(kinds)
        name = "send" if single is None else f"send {single}"
        self._span = tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
        self.context: dict[str, str] | None = None

    def __enter__(self) -> _Send:
        self._enter()
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the current context: this span's
        self.context = carrier or None
        return self

    def published(self, results: Sequence[EnqueueResult]) -> None:
        if len(results) == 1:
            self._span.set_attribute(MESSAGE_ID, str(results[0].id))


class _Process(_Current):
    """One attempt: a ``CONSUMER`` span linked to the job's creation context."""

    def __init__(self, tracer: trace.Tracer, job: Job, *, parent: bool) -> None:
        creation = None
        extracted = None
        if job.trace_context:
            extracted = propagate.extract(dict(job.trace_context))
            span_context = trace.get_current_span(extracted).get_span_context()
            if span_context.is_valid:
                creation = span_context
        attributes: dict[str, AttributeValue] = {
            SYSTEM: "skiplock",
            OPERATION_TYPE: "process",
            OPERATION_NAME: "process",
            DESTINATION: job.kind,
            MESSAGE_ID: str(job.id),
            ATTEMPT: job.attempts,
            PRIORITY: job.priority,
        }
        if job.claimed_by is not None:
            attributes[CLIENT_ID] = job.claimed_by
        if job.tenant is not None:
            attributes[TENANT] = job.tenant
        # The parent: the creation context, or none at all (never whatever context the
        # worker happens to run in).
        parent_context = (
            extracted
            if parent and extracted is not None and creation is not None
            else otel_context.Context()
        )
        self._span = tracer.start_span(
            f"process {job.kind}",
            context=parent_context,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=[] if creation is None else [Link(creation)],
        )

    def __enter__(self) -> _Process:
        self._enter()
        return self

    def ended(self, outcome: str, error: BaseException | None) -> None:
        self._span.set_attribute(OUTCOME, outcome)
        if outcome in FAILED:
            self._fail(error, outcome)
