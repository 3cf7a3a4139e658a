"""OpenTelemetry tracing (skiplock.contrib.otel, R3): the producer span at enqueue and its
stored context, a consumer span per attempt linked to it, the messaging attributes, error
status; the same across processes through PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from skiplock import AsyncEngine, Engine, Enqueue, JobContext, Settings, ValidationError
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.contrib.logging import JobContextFilter
from skiplock.contrib.otel import OtelTracer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.anyio


class PaymentDeclinedError(Exception):
    """An application's own error."""


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def _spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _traceparent(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


async def test_enqueue_sends_in_a_producer_span_whose_context_is_stored(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore(), tracer=OtelTracer(tracer_provider=provider))
    engine.declare_kind("email.send")
    app = provider.get_tracer("app")
    with app.start_as_current_span("POST /signup") as request:
        result = await engine.enqueue("email.send", {"to": "a@example.com"})
    [send] = _spans(exporter, "send email.send")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "skiplock",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "email.send",
        "messaging.message.id": str(result.id),
    }
    assert send.status.status_code is StatusCode.UNSET
    job = await engine.get_job(result.id)
    assert job.trace_context is not None
    assert job.trace_context["traceparent"] == _traceparent(send)


async def test_a_batch_is_one_send_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore(), tracer=OtelTracer(tracer_provider=provider))
    for kind in ("a", "b"):
        engine.declare_kind(kind)
    same = await engine.enqueue_many([Enqueue("a", 1), Enqueue("a", 2)])
    mixed = await engine.enqueue_many([Enqueue("a", 3), Enqueue("b", 4), Enqueue("b", 5)])
    [one_kind] = _spans(exporter, "send a")
    assert one_kind.attributes is not None
    assert one_kind.attributes["messaging.destination.name"] == "a"
    assert one_kind.attributes["messaging.batch.message_count"] == 2
    assert "messaging.message.id" not in one_kind.attributes
    [kinds] = _spans(exporter, "send")
    assert kinds.attributes is not None
    assert "messaging.destination.name" not in kinds.attributes
    assert kinds.attributes["messaging.batch.message_count"] == 3
    for results, span in ((same, one_kind), (mixed, kinds)):
        for r in results:
            stored = (await engine.get_job(r.id)).trace_context
            assert stored is not None
            assert stored["traceparent"] == _traceparent(span)


async def test_a_refused_enqueue_records_the_error(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore(), tracer=OtelTracer(tracer_provider=provider))
    engine.declare_kind("a")
    with pytest.raises(ValidationError):
        await engine.enqueue("a", priority=10**6)
    [send] = _spans(exporter, "send a")
    assert send.status.status_code is StatusCode.ERROR
    assert send.attributes is not None
    assert send.attributes["error.type"] == "skiplock.core._errors.ValidationError"
    assert [e.name for e in send.events] == ["exception"]


@pytest.mark.parametrize("parent", [True, False])
async def test_every_attempt_is_a_consumer_span_linked_to_the_send(
    provider: TracerProvider, exporter: InMemorySpanExporter, parent: bool
) -> None:
    tracer = OtelTracer(tracer_provider=provider, parent=parent)
    engine = AsyncEngine(AsyncInMemoryJobStore(), Settings(backoff_base=0.0), tracer=tracer)
    calls = 0

    @engine.processor("invoice.pay", max_attempts=2)
    async def pay(payload: Any, ctx: JobContext) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise PaymentDeclinedError("card declined")

    @engine.processor("invoice.void", max_attempts=1)
    async def void_invoice(payload: Any, ctx: JobContext) -> None:
        raise ValueError("already paid")

    pay_id = (await engine.enqueue("invoice.pay", tenant="acme", priority=3)).id
    void_id = (await engine.enqueue("invoice.void")).id
    worker = engine.worker(worker_id="w-otel")
    assert await worker.run_until_idle() == 3

    [send] = _spans(exporter, "send invoice.pay")
    send_ctx = send.get_span_context()
    assert send_ctx is not None
    first, second = _spans(exporter, "process invoice.pay")
    for attempt, span in enumerate((first, second), start=1):
        assert span.kind is SpanKind.CONSUMER
        assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
            (send_ctx.trace_id, send_ctx.span_id)
        ]
        ctx = span.get_span_context()
        assert ctx is not None
        if parent:  # one trace from the request to every attempt
            assert span.parent is not None
            assert span.parent.span_id == send_ctx.span_id
            assert ctx.trace_id == send_ctx.trace_id
        else:  # a trace per attempt, linked to the send
            assert span.parent is None
            assert ctx.trace_id != send_ctx.trace_id
        assert span.attributes is not None
        assert {k: v for k, v in span.attributes.items() if k != "error.type"} == {
            "messaging.system": "skiplock",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": "invoice.pay",
            "messaging.message.id": str(pay_id),
            "messaging.client.id": "w-otel",
            "skiplock.job.attempt": attempt,
            "skiplock.job.tenant": "acme",
            "skiplock.job.priority": 3,
            "skiplock.job.outcome": "retry" if attempt == 1 else "succeeded",
        }
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "PaymentDeclinedError: card declined"
    assert first.attributes is not None
    assert str(first.attributes["error.type"]).endswith("test_otel.PaymentDeclinedError")
    [event] = first.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "card declined"
    assert second.status.status_code is StatusCode.UNSET
    assert second.events == ()

    [voided] = _spans(exporter, "process invoice.void")
    assert voided.attributes is not None
    assert voided.attributes["skiplock.job.outcome"] == "dead"
    assert voided.attributes["error.type"] == "ValueError"
    assert voided.attributes["messaging.message.id"] == str(void_id)
    assert voided.status.status_code is StatusCode.ERROR


async def test_a_job_enqueued_without_tracing_starts_a_trace_of_its_own(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = AsyncInMemoryJobStore()
    await AsyncEngine(store).enqueue("k")  # an untraced producer
    engine = AsyncEngine(store, tracer=OtelTracer(tracer_provider=provider))

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None:
        pass

    app = provider.get_tracer("app")
    with app.start_as_current_span("worker main"):  # never the attempt's parent
        await engine.worker().run_until_idle()
    [span] = _spans(exporter, "process k")
    assert span.parent is None
    assert span.links == ()


async def test_logs_in_an_attempt_carry_its_trace_id(
    provider: TracerProvider, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    # With parent=False the attempt's trace is not the stored one: the active span wins.
    engine = AsyncEngine(
        AsyncInMemoryJobStore(), tracer=OtelTracer(tracer_provider=provider, parent=False)
    )

    @engine.processor("k")
    def k(payload: Any, ctx: JobContext) -> None:  # in a thread: the span is current there
        logging.getLogger("tests.app").warning("inside")

    await engine.enqueue("k")
    job_filter = JobContextFilter()
    caplog.handler.addFilter(job_filter)
    try:
        await engine.worker().run_until_idle()
    finally:
        caplog.handler.removeFilter(job_filter)
    [span] = _spans(exporter, "process k")
    ctx = span.get_span_context()
    assert ctx is not None
    [record] = [r for r in caplog.records if r.getMessage() == "inside"]
    assert record.trace_id == f"{ctx.trace_id:032x}"  # type: ignore[attr-defined]


def test_the_api_alone_traces_nothing_and_stores_nothing() -> None:
    # No SDK configured (the global no-op provider): enqueue stores no context.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)

    async def main() -> Any:
        engine = AsyncEngine(AsyncInMemoryJobStore(), tracer=OtelTracer())
        engine.declare_kind("k")
        job_id = (await engine.enqueue("k")).id
        return (await engine.get_job(job_id)).trace_context

    assert asyncio.run(main()) is None


# ---- across processes -------------------------------------------------------------------

_APP = """
import json
import logging
import os

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from skiplock import AsyncEngine, JobContext, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.contrib.otel import OtelTracer


class JsonLines(SpanExporter):
    def export(self, spans):
        with open(os.environ["SPANS_FILE"], "a", encoding="utf-8") as out:
            for s in spans:
                out.write(json.dumps({
                    "name": s.name,
                    "kind": s.kind.name,
                    "trace_id": f"{s.context.trace_id:032x}",
                    "span_id": f"{s.context.span_id:016x}",
                    "parent": None if s.parent is None else f"{s.parent.span_id:016x}",
                    "links": [f"{l.context.span_id:016x}" for l in s.links],
                    "attributes": dict(s.attributes),
                    "status": s.status.status_code.name,
                }) + "\\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JsonLines()))
store = AsyncPsycopgJobStore(os.environ["SKIPLOCK_TEST_APP_DSN"])
engine = AsyncEngine(
    store, Settings(poll_interval=0.05), tracer=OtelTracer(tracer_provider=provider)
)


@engine.processor("greet")
async def greet(payload, ctx: JobContext) -> None:
    logging.getLogger("app").info("greeting %s", payload["name"])
"""


@pytest.mark.postgres
def test_a_trace_crosses_from_the_enqueuing_process_to_a_worker_process(
    provider: TracerProvider, exporter: InMemorySpanExporter, pg_dsn: str, tmp_path: Path
) -> None:
    with PsycopgJobStore(pg_dsn) as store:
        engine = Engine(store, tracer=OtelTracer(tracer_provider=provider))
        engine.declare_kind("greet")
        with provider.get_tracer("app").start_as_current_span("POST /hello"):
            job_id = engine.enqueue("greet", {"name": "Ada"}).id
    [send] = _spans(exporter, "send greet")
    send_ctx = send.get_span_context()
    assert send_ctx is not None
    trace_id, send_id = f"{send_ctx.trace_id:032x}", f"{send_ctx.span_id:016x}"

    (tmp_path / "otel_app.py").write_text(textwrap.dedent(_APP), encoding="utf-8")
    spans_file = tmp_path / "spans.jsonl"
    log = tmp_path / "worker.log"
    env = os.environ | {
        "SKIPLOCK_TEST_APP_DSN": pg_dsn,
        "SPANS_FILE": str(spans_file),
    }
    command = [sys.executable, "-m", "skiplock", "worker", "otel_app:engine"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*command, "--log-format", "json"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while not spans_file.exists() or "process greet" not in spans_file.read_text():
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    [process] = [json.loads(line) for line in spans_file.read_text().splitlines()]
    assert process["name"] == "process greet"
    assert process["kind"] == "CONSUMER"
    assert (process["trace_id"], process["parent"], process["links"]) == (
        trace_id,
        send_id,
        [send_id],
    )
    assert process["attributes"]["messaging.message.id"] == str(job_id)
    assert process["attributes"]["skiplock.job.outcome"] == "succeeded"
    assert process["status"] == "UNSET"
    # The worker's JSON log line of the job carries the same trace.
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    [greeting] = [line for line in lines if line["message"] == "greeting Ada"]
    assert (greeting["trace_id"], greeting["job_id"]) == (trace_id, job_id)
