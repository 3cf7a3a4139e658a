"""Structured logs (skiplock.contrib.logging): the job fields a filter adds while a job
runs, the JSON formatter, and ``skiplock worker --log-format json``. Standard library
only: runs in the noextras env too."""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, Engine, JobContext, Settings
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.contrib.logging import JobContextFilter, JsonFormatter, json_handler, trace_id_of
from tests.engine.support import RecordingTracer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"  # RecordingTracer's traceparent

app_logger = logging.getLogger("tests.app")


@pytest.fixture
def job_fields(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog at INFO, its handler carrying the filter (as a user's handler would)."""
    caplog.set_level(logging.INFO)
    job_filter = JobContextFilter()
    caplog.handler.addFilter(job_filter)
    yield caplog
    caplog.handler.removeFilter(job_filter)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    names = ("job_id", "kind", "tenant", "attempt", "worker_id", "trace_id")
    return {name: getattr(record, name) for name in names if hasattr(record, name)}


def _records(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == message]


@pytest.mark.anyio
async def test_the_filter_adds_the_job_fields_in_tasks_and_threads(
    job_fields: pytest.LogCaptureFixture,
) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore(), tracer=RecordingTracer())

    @engine.processor("in_task")
    async def in_task(payload: Any, ctx: JobContext) -> None:
        app_logger.info("from the processor's task")

    @engine.processor("in_thread")
    def in_thread(payload: Any, ctx: JobContext) -> None:
        app_logger.info("from a sync processor's thread")

    task_job = (await engine.enqueue("in_task", tenant="acme")).id
    thread_job = (await engine.enqueue("in_thread")).id
    app_logger.info("before any job")
    worker = engine.worker(worker_id="w-log")
    assert await worker.run_until_idle() == 2

    [outside] = _records(job_fields, "before any job")
    assert _fields(outside) == {}
    [task_record] = _records(job_fields, "from the processor's task")
    assert _fields(task_record) == {
        "job_id": task_job,
        "kind": "in_task",
        "tenant": "acme",
        "attempt": 1,
        "worker_id": "w-log",
        "trace_id": TRACE_ID,
    }
    [thread_record] = _records(job_fields, "from a sync processor's thread")
    assert _fields(thread_record)["job_id"] == thread_job
    assert _fields(thread_record)["tenant"] is None


def test_the_filter_works_in_a_sync_engines_job_threads(
    job_fields: pytest.LogCaptureFixture,
) -> None:
    engine = Engine(InMemoryJobStore(), Settings(concurrency=4))

    @engine.processor("k")
    def k(payload: int, ctx: JobContext) -> None:
        app_logger.info("job %d", payload)

    ids = {i: engine.enqueue("k", i).id for i in range(4)}
    assert engine.worker().run_until_idle() == 4
    for i, job_id in ids.items():
        [record] = _records(job_fields, f"job {i}")
        assert _fields(record)["job_id"] == job_id
        assert "trace_id" not in _fields(record)  # no trace stored, none active


@pytest.mark.anyio
async def test_the_filter_keeps_fields_a_record_already_has(
    job_fields: pytest.LogCaptureFixture,
) -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())

    @engine.processor("k")
    async def k(payload: Any, ctx: JobContext) -> None:
        app_logger.info("explicit", extra={"kind": "mine", "trace_id": "t-1"})
        ctx.logger.info("through ctx.logger")

    job_id = (await engine.enqueue("k")).id
    await engine.worker().run_until_idle()
    [explicit] = _records(job_fields, "explicit")
    kept = _fields(explicit)
    assert (kept["kind"], kept["trace_id"], kept["job_id"]) == ("mine", "t-1", job_id)
    [adapter] = _records(job_fields, "through ctx.logger")
    assert _fields(adapter)["job_id"] == job_id
    assert adapter.name == "skiplock.job"


def test_json_formatter_writes_one_object_per_record() -> None:
    record = logging.LogRecord(
        "app.module", logging.WARNING, __file__, 1, "paid %s (%d)", ("Ada", 3), None
    )
    record.__dict__.update(job_id=7, kind="invoice.pay", tenant=None, attempt=2, trace_id="ab")
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out == {
        "time": out["time"],
        "level": "WARNING",
        "logger": "app.module",
        "message": "paid Ada (3)",
        "job_id": 7,
        "kind": "invoice.pay",
        "attempt": 2,
        "trace_id": "ab",
    }  # tenant None is left out
    when = datetime.fromisoformat(out["time"])
    offset = when.utcoffset()
    assert offset is not None
    assert offset.total_seconds() == 0
    assert abs(when.timestamp() - record.created) < 0.001


def test_json_formatter_writes_the_traceback_and_odd_values() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = logging.LogRecord(
            "app", logging.ERROR, __file__, 1, "failed: %r", (object,), sys.exc_info()
        )
    record.__dict__["job_id"] = b"not json"  # written as its str()
    out = json.loads(JsonFormatter().format(record))
    assert out["message"] == "failed: <class 'object'>"
    assert out["exception"].startswith("Traceback (most recent call last):")
    assert out["exception"].endswith("ValueError: bad\nthing")
    assert out["job_id"] == "b'not json'"


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"}, TRACE_ID),
        ({"traceparent": f"00-{TRACE_ID.upper()}-b7ad6b7169203331-01"}, TRACE_ID),
        ({"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"}, None),  # invalid id
        ({"traceparent": "00-xyz-b7ad6b7169203331-01"}, None),
        ({"traceparent": "garbage"}, None),
        ({"tracestate": "a=b"}, None),
        (None, None),
    ],
)
def test_trace_id_of_a_stored_context(context: dict[str, str] | None, expected: str | None) -> None:
    assert trace_id_of(context) == expected


@pytest.mark.anyio
async def test_json_handler_end_to_end() -> None:
    stream = io.StringIO()
    handler = json_handler(stream)
    logger = logging.getLogger("skiplock")
    logger.addHandler(handler)
    app_logger.addHandler(handler)
    previous = logger.level, app_logger.level
    logger.setLevel(logging.INFO)
    app_logger.setLevel(logging.INFO)
    try:
        engine = AsyncEngine(AsyncInMemoryJobStore(), tracer=RecordingTracer())

        @engine.processor("k")
        async def k(payload: Any, ctx: JobContext) -> None:
            app_logger.info("working")

        job_id = (await engine.enqueue("k")).id
        await engine.worker(worker_id="w-json").run_until_idle()
    finally:
        logger.removeHandler(handler)
        app_logger.removeHandler(handler)
        logger.setLevel(previous[0])
        app_logger.setLevel(previous[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    started, working, stopped = lines
    assert started["message"].startswith("worker w-json started")
    assert "job_id" not in started
    assert working["message"] == "working"
    assert (working["job_id"], working["kind"], working["attempt"]) == (job_id, "k", 1)
    assert (working["worker_id"], working["trace_id"]) == ("w-json", TRACE_ID)
    assert stopped["message"] == "worker w-json stopped after 1 jobs"


_APP = """
import logging
import threading

from skiplock import Engine, JobContext, Settings
from skiplock.adapters.memory import InMemoryJobStore

engine = Engine(InMemoryJobStore(), Settings(poll_interval=0.05))

@engine.processor("greet", max_attempts=1)
def greet(payload, ctx: JobContext) -> None:
    logging.getLogger("app").info("hello %s", payload["name"])
    if payload["name"] == "Bob":
        raise RuntimeError("Bob is not home")

engine.enqueue("greet", {"name": "Ada"}, tenant="acme")
engine.enqueue("greet", {"name": "Bob"})
"""


def test_worker_command_writes_json_lines(tmp_path: Path) -> None:
    (tmp_path / "json_log_app.py").write_text(textwrap.dedent(_APP), encoding="utf-8")
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "skiplock",
                "worker",
                "json_log_app:engine",
                "--log-format",
                "json",
                "--log-level",
                "DEBUG",
            ],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "attempt 1: dead" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # every line is JSON
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    by_message = {line["message"]: line for line in lines}
    ada = by_message["hello Ada"]
    assert (ada["logger"], ada["level"], ada["kind"], ada["tenant"]) == (
        "app",
        "INFO",
        "greet",
        "acme",
    )
    assert ada["attempt"] == 1
    assert isinstance(ada["job_id"], int)
    assert ada["worker_id"]
    [failed] = [line for line in lines if line["level"] == "ERROR"]
    assert failed["message"].endswith("failed (dead): RuntimeError: Bob is not home")
    assert failed["job_id"] != ada["job_id"]
    assert "tenant" not in failed
    [started] = [line for line in lines if " started: " in line["message"]]
    assert "store=InMemoryJobStore()" in started["message"]
    assert "job_id" not in started
    assert any(line["message"].endswith("stopped after 2 jobs") for line in lines)
