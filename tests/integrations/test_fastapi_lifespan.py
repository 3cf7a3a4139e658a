"""``skiplock.integrations.fastapi``: the worker lifespan in process (memory store), and
the acceptance test in a real uvicorn process on PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, AsyncWorker, Engine, JobContext, JobState, Worker
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.integrations.fastapi import WorkerLifespan, worker_lifespan
from tests.pgfixtures import create_database, drop_database, fetch

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    import anyio

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await anyio.sleep(0.005)


# ---- in process -------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_worker_lifespan_runs_a_worker_while_the_app_runs(flavour: str) -> None:
    done: list[int] = []
    engine: AsyncEngine | Engine
    if flavour == "async":
        engine = AsyncEngine(AsyncInMemoryJobStore())

        @engine.processor("k")
        async def k(payload: dict[str, int], ctx: JobContext) -> None:
            done.append(payload["n"])

    else:
        engine = Engine(InMemoryJobStore())

        @engine.processor("k")
        def k_sync(payload: dict[str, int], ctx: JobContext) -> None:
            done.append(payload["n"])

    lifespan = worker_lifespan(engine, concurrency=3)
    assert lifespan.worker is None
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    async with lifespan(object()):
        worker = lifespan.worker
        assert isinstance(worker, AsyncWorker if flavour == "async" else Worker)
        assert (worker.state, worker.concurrency) == ("running", 3)
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
        if isinstance(engine, AsyncEngine):
            await engine.enqueue("k", {"n": 1})
        else:
            engine.enqueue("k", {"n": 1})
        await eventually(lambda: done == [1])
    assert lifespan.worker is None
    assert worker.state == "stopped"


@pytest.mark.anyio
async def test_worker_lifespan_composes_inside_the_app_lifespan() -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    events: list[str] = []

    @engine.processor("k")
    async def k(payload: Any) -> None: ...

    jobs = worker_lifespan(engine)

    @asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        events.append("app up")
        async with jobs(app):
            worker = jobs.worker
            assert worker is not None
            events.append(f"worker {worker.state}")
            yield
        events.append(f"worker {worker.state}")
        events.append("app down")

    async with lifespan(object()):
        events.append("serving")
    assert events == ["app up", "worker running", "serving", "worker stopped", "app down"]


@pytest.mark.anyio
async def test_worker_lifespan_fails_startup_when_the_worker_cannot_be_built() -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    lifespan = worker_lifespan(engine, kinds=["nobody.handles.this"])
    with pytest.raises(Exception, match="no processor registered"):
        await lifespan(object()).__aenter__()
    assert lifespan.worker is None


def test_worker_lifespan_rejects_what_is_no_engine() -> None:
    with pytest.raises(TypeError, match="Engine or AsyncEngine"):
        WorkerLifespan(object())  # type: ignore[arg-type]


def test_module_imports_without_fastapi_or_starlette() -> None:
    code = (
        "import sys\n"
        "sys.modules['fastapi'] = sys.modules['starlette'] = None\n"
        "from skiplock.integrations.fastapi import worker_lifespan\n"
        "print(worker_lifespan.__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stdout.strip()) == (0, "worker_lifespan"), result.stderr


# ---- a real uvicorn process ---------------------------------------------------------------

#: Seconds any one condition of the uvicorn test may take.
DEADLINE = 30.0


@pytest.fixture
def scratch_dsn() -> Iterator[str]:
    """A scratch database with skiplock's schema, dropped after the test."""
    name, dsn = create_database(with_schema=True)
    yield dsn
    drop_database(name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(condition: Callable[[], bool], what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"uvicorn exited ({process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {DEADLINE} s")
        time.sleep(0.02)


def http(port: int, method: str, path: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


def answers(port: int, path: str, expected: object) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return bool(http(port, "GET", path) == expected)
        except (urllib.error.URLError, ConnectionError):
            return False  # not listening yet

    return check


@pytest.mark.postgres
def test_uvicorn_sigterm_drains_the_embedded_worker_and_exits(
    scratch_dsn: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "SKIPLOCK_UVICORN_TEST_DSN": scratch_dsn,
        "SKIPLOCK_UVICORN_TEST_MARKERS": os.fspath(markers),
    }
    log_path = tmp_path / "uvicorn.log"
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "tests.integrations.uvicorn_app:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--lifespan",
        "on",  # a failing lifespan fails the start instead of being skipped
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        try:
            # uvicorn serves, with the worker running.
            wait_until(answers(port, "/health", {"worker": "running"}), "answer", process)
            job_id = http(port, "POST", "/jobs")["id"]
            assert isinstance(job_id, int)
            wait_until((markers / "started").exists, "job start", process)
            process.send_signal(signal.SIGTERM)
            # The worker drains with the job still running; uvicorn waits for it.
            wait_until((markers / "draining").exists, "drain", process)
            query = f"SELECT status, attempts FROM skiplock.jobs WHERE id = {job_id:d}"
            assert fetch(scratch_dsn, query) == [("running", 1)]
            assert process.poll() is None
            (markers / "release").touch()
            returncode = process.wait(timeout=DEADLINE)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    output = log_path.read_text(encoding="utf-8", errors="replace")
    assert "Application shutdown complete." in output, output
    assert "Finished server process" in output, output
    # It exited by itself after a complete shutdown. uvicorn >= 0.29 then re-raises the
    # SIGTERM it caught with the default action (exit status -15); older ones exit 0.
    assert returncode in (0, -signal.SIGTERM), output
    assert "Traceback" not in output, output
    # Issue 41: the embedded worker's INFO lines show under uvicorn's default logging
    # config (uvicorn configures only its own loggers), in the CLI's format.
    assert " started: 2 slots, kinds=['hold']" in output, output
    assert "INFO    skiplock.worker: worker " in output, output
    assert " stopped after 1 jobs" in output, output
    assert fetch(scratch_dsn, query) == [(JobState.SUCCEEDED.value, 1)]
    assert fetch(scratch_dsn, "SELECT count(*) FROM skiplock.workers") == [(0,)]
