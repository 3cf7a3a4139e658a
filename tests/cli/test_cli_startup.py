"""``skiplock worker`` start-up failures: one line on stderr, exit status 1, within seconds.

The end-to-end cases run the command in a subprocess against PostgreSQL through psycopg
(closed port, missing schema, older schema); the rest drive the CLI in this process with
stores that fail the way drivers do, so they also run without a driver installed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from importlib.util import find_spec
from typing import TYPE_CHECKING

import pytest

from skiplock import AsyncEngine, JobContext, cli
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.cli import _options, _startup
from skiplock.core import StoreError, ValidationError, WorkerInfo

if TYPE_CHECKING:
    from collections.abc import Callable

HAS_PSYCOPG = find_spec("psycopg") is not None
needs_psycopg = pytest.mark.skipif(not HAS_PSYCOPG, reason="needs the psycopg extra")

#: The acceptance bound: the command must have exited by then (a subprocess timeout).
DEADLINE = 5.0
DSN_VAR = "SKIPLOCK_CLI_TEST_DSN"

PSYCOPG_APPS = {
    "async": f"""
import os
from typing import Any

from skiplock import AsyncEngine, JobContext
from skiplock.adapters.psycopg import AsyncPsycopgJobStore

engine = AsyncEngine(AsyncPsycopgJobStore(os.environ["{DSN_VAR}"]))


@engine.processor("a")
async def handle(payload: Any, ctx: JobContext) -> None:
    pass
""",
    "sync": f"""
import os
from typing import Any

from skiplock import Engine, JobContext
from skiplock.adapters.psycopg import PsycopgJobStore

engine = Engine(PsycopgJobStore(os.environ["{DSN_VAR}"]))


@engine.processor("a")
def handle(payload: Any, ctx: JobContext) -> None:
    pass
""",
}

# Stores that fail to open like the drivers do; FAILURE picks how.
FAKE_APP = """
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from skiplock import AsyncEngine, Engine, JobContext
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.core import SchemaVersionError, StoreError

FAILURE = {failure!r}
never = threading.Event()


def fail() -> None:
    if FAILURE == "refused":  # asyncpg: the OS error's number, not its words
        refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
        raise StoreError(f"cannot get a PostgreSQL connection: {{refused}}") from refused
    if FAILURE == "schema":
        raise SchemaVersionError("schema 'x' is not installed; run `skiplock schema apply`")
    if FAILURE == "pool":  # psycopg's pool: logs the failure, retries, the caller waits
        logging.getLogger("psycopg.pool").warning(
            "error connecting in %r: %s", "p", OSError("connection failed: refused\\n\\tHint")
        )


class AsyncStore(AsyncInMemoryJobStore):
    async def open(self) -> None:
        fail()
        await asyncio.Event().wait()  # no answer


class SyncStore(InMemoryJobStore):
    def open(self) -> None:
        fail()
        never.wait()  # no answer

    def close(self) -> None:
        never.set()  # ends the abandoned open
        super().close()


engine = {engine}({store}())


@engine.processor("a")
{prefix}def handle(payload: Any, ctx: JobContext) -> None:
    pass
"""


def fake_app(make_app: Callable[[str], str], flavour: str, failure: str) -> str:
    if flavour == "async":
        parts = {"engine": "AsyncEngine", "store": "AsyncStore", "prefix": "async "}
    else:
        parts = {"engine": "Engine", "store": "SyncStore", "prefix": ""}
    return make_app(FAKE_APP.format(failure=failure, **parts))


def run_worker(app: str, dsn: str, *options: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python -m skiplock worker APP:engine`` with the app's DSN; the result and how
    long it took. A command still running at DEADLINE fails the test."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "skiplock", "worker", f"{app}:engine", *options],
        env={**os.environ, DSN_VAR: dsn},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    return result, time.monotonic() - started


def closed_port() -> int:
    """A local port nothing listens on (bound to get a free one, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == 1, result.stderr
    assert 1 <= len(lines) <= 3, result.stderr
    assert lines[-1].startswith("skiplock: error: cannot start the worker: ")
    for word in words:
        assert word in lines[-1]
    assert "Traceback" not in result.stderr
    return lines[-1]


# ---- end to end, against PostgreSQL -------------------------------------------------------


@needs_psycopg
@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_worker_on_a_closed_port_fails_fast(make_app: Callable[[str], str], flavour: str) -> None:
    app = make_app(PSYCOPG_APPS[flavour])
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    result, elapsed = run_worker(app, dsn)
    assert_one_line_failure(result, "cannot connect to PostgreSQL", "Connection refused")
    assert elapsed < DEADLINE


@needs_psycopg
@pytest.mark.postgres
@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_worker_without_schema_says_to_apply_it(
    make_app: Callable[[str], str], pg_dsn: str, flavour: str
) -> None:
    app = make_app(PSYCOPG_APPS[flavour])
    result, elapsed = run_worker(app, pg_dsn)
    assert_one_line_failure(result, "not installed", "skiplock schema apply --dsn ...")
    assert elapsed < DEADLINE


@needs_psycopg
@pytest.mark.postgres
@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_worker_on_an_older_schema_says_to_apply_it(
    make_app: Callable[[str], str], pg_dsn: str, flavour: str
) -> None:
    from skiplock.adapters._pg import migrations
    from skiplock.adapters.psycopg import apply_schema
    from tests.pgfixtures import execute

    apply_schema(pg_dsn)
    latest = migrations()[-1]
    execute(pg_dsn, [f"DELETE FROM skiplock.schema_migrations WHERE version = {latest.version}"])
    app = make_app(PSYCOPG_APPS[flavour])
    result, elapsed = run_worker(app, pg_dsn)
    assert_one_line_failure(
        result, "older than this code", latest.name, "skiplock schema apply --dsn ..."
    )
    assert elapsed < DEADLINE


@needs_psycopg
def test_worker_start_up_failure_shows_the_traceback_at_debug(
    make_app: Callable[[str], str],
) -> None:
    app = make_app(PSYCOPG_APPS["async"])
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    result, _ = run_worker(app, dsn, "--log-level", "DEBUG")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("skiplock: error: cannot start the worker: cannot connect")


# ---- the same rules without a driver (in this process) ------------------------------------


@pytest.mark.parametrize("flavour", ["async", "sync"])
@pytest.mark.parametrize(
    ("failure", "words"),
    [
        # The OS's words are added when the driver only gives the error's number.
        ("refused", ["cannot get a PostgreSQL connection", "(Connection refused)"]),
        ("schema", ["not installed", "skiplock schema apply"]),
        # A pool that retries in the background: its first failure ends the wait.
        ("pool", ["cannot connect to PostgreSQL: connection failed: refused Hint"]),
    ],
)
def test_worker_start_up_failure_is_one_line(
    make_app: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
    flavour: str,
    failure: str,
    words: list[str],
) -> None:
    app = fake_app(make_app, flavour, failure)
    assert cli.main(["worker", f"{app}:engine"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("skiplock: error: cannot start the worker: ")
    for word in words:
        assert word in line


@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_worker_start_up_without_answer_gives_up(
    make_app: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flavour: str,
) -> None:
    monkeypatch.setattr(_startup, "STARTUP_TIMEOUT", 0.2)
    app = fake_app(make_app, flavour, "silent")
    assert cli.main(["worker", f"{app}:engine"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "skiplock: error: cannot start the worker: no answer from PostgreSQL within 0.2 s"
    ]


def test_worker_start_up_failure_traceback_only_at_debug(
    make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    app = fake_app(make_app, "async", "refused")
    assert cli.main(["worker", f"{app}:engine", "--log-level", "DEBUG"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "ConnectionRefusedError" in err
    assert err.splitlines()[-1].startswith("skiplock: error: cannot start the worker: ")


def test_pool_warnings_are_muted_only_during_the_check(
    make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    pool_logger = logging.getLogger(cli.POOL_LOGGER)
    handlers = list(pool_logger.handlers)
    app = fake_app(make_app, "async", "pool")
    assert cli.main(["worker", f"{app}:engine"]) == 1
    assert pool_logger.propagate
    assert pool_logger.handlers == handlers
    assert "WARNING" not in capsys.readouterr().err


# ---- the worker itself: nothing to unregister when registering failed ----------------------


class RegisterFails(AsyncInMemoryJobStore):
    def __init__(self) -> None:
        super().__init__()
        self.unregistered: list[str] = []

    async def register_worker(self, info: WorkerInfo) -> None:
        raise StoreError('relation "skiplock.workers" does not exist')

    async def unregister_worker(self, worker_id: str) -> list[int]:
        self.unregistered.append(worker_id)
        return []


def test_worker_that_never_registered_does_not_unregister(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = RegisterFails()
    engine = AsyncEngine(store)

    @engine.processor("a")
    async def handle(payload: object, ctx: JobContext) -> None:
        pass

    worker = engine.worker(install_signal_handlers=False)
    with pytest.raises(StoreError, match="does not exist"):
        asyncio.run(worker.run())
    assert store.unregistered == []
    assert "unregistering failed" not in caplog.text


# ---- skiplock schema: validation errors are one line ---------------------------------------


def test_schema_name_refused_by_validation_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(name: str) -> str:
        raise ValidationError(f"{name!r} is a PostgreSQL system schema")

    monkeypatch.setattr(_options, "validate_identifier", refuse)
    assert cli.main(["schema", "apply", "--schema", "information_schema"]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    # argparse's usage lines, then the refusal in one line: no traceback, no second error.
    assert lines[0].startswith("usage: ")
    assert [line for line in lines if "error:" in line] == lines[-1:]
    assert "Traceback" not in err
    assert lines[-1].endswith("'information_schema' is a PostgreSQL system schema")
