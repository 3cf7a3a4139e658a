"""``skiplock worker``: APP resolution, option errors, and a real run stopped by a signal."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, AsyncWorker, Engine, Worker, cli
from skiplock.core import JobState

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ASYNC_APP = """
from __future__ import annotations

import threading
from typing import Any

from skiplock import AsyncEngine, JobContext
from skiplock.adapters.memory import AsyncInMemoryJobStore

engine = AsyncEngine(AsyncInMemoryJobStore())
processed = threading.Event()
seen: list[str] = []
not_an_engine = 42


def make_engine() -> AsyncEngine:
    return engine


def needs_args(x: int) -> AsyncEngine:
    return engine


class Holder:
    engine = engine


@engine.processor("a")
async def handle_a(payload: Any, ctx: JobContext) -> None:
    seen.append("a")
    processed.set()


@engine.processor("b")
async def handle_b(payload: Any, ctx: JobContext) -> None:
    seen.append("b")
"""

# Jobs that run until the worker interrupts them; a graceful stop would wait a minute.
BLOCKING_APPS = {
    "async": """
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from skiplock import AsyncEngine, JobContext, Settings
from skiplock.adapters.memory import AsyncInMemoryJobStore

engine = AsyncEngine(AsyncInMemoryJobStore(), Settings(shutdown_timeout=60))
started = threading.Event()


@engine.processor("block")
async def block(payload: Any, ctx: JobContext) -> None:
    started.set()
    await asyncio.Event().wait()
""",
    "sync": """
from __future__ import annotations

import threading
import time
from typing import Any

from skiplock import Engine, JobContext, Settings
from skiplock.adapters.memory import InMemoryJobStore

engine = Engine(InMemoryJobStore(), Settings(shutdown_timeout=60))
started = threading.Event()


@engine.processor("block")
def block(payload: Any, ctx: JobContext) -> None:
    started.set()
    while True:  # Python bytecode, so the worker's interruption reaches this thread
        time.sleep(0.01)
""",
}

SYNC_APP = """
from __future__ import annotations

import threading
from typing import Any

from skiplock import Engine, JobContext
from skiplock.adapters.memory import InMemoryJobStore

engine = Engine(InMemoryJobStore())
processed = threading.Event()


@engine.processor("a")
def handle_a(payload: Any, ctx: JobContext) -> None:
    processed.set()
"""


# ---- APP resolution ---------------------------------------------------------------------


def test_resolve_app_finds_engine_in_current_directory(make_app: Callable[[str], str]) -> None:
    name = make_app(ASYNC_APP)
    engine = cli.resolve_app(f"{name}:engine")
    assert isinstance(engine, AsyncEngine)
    assert engine is sys.modules[name].engine


def test_resolve_app_calls_zero_argument_factory(make_app: Callable[[str], str]) -> None:
    name = make_app(ASYNC_APP)
    assert cli.resolve_app(f"{name}:make_engine") is sys.modules[name].engine


def test_resolve_app_follows_dotted_attribute(make_app: Callable[[str], str]) -> None:
    name = make_app(ASYNC_APP)
    assert cli.resolve_app(f"{name}:Holder.engine") is sys.modules[name].engine


def test_resolve_app_accepts_sync_engine(make_app: Callable[[str], str]) -> None:
    name = make_app(SYNC_APP)
    assert isinstance(cli.resolve_app(f"{name}:engine"), Engine)


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        (":not_an_engine", "is int, not an Engine or AsyncEngine"),
        (":missing", "has no attribute 'missing'"),
        (":needs_args", "needs arguments"),
        (":AsyncEngine", "not an Engine or AsyncEngine"),
    ],
)
def test_resolve_app_rejects_non_engines(
    make_app: Callable[[str], str], suffix: str, message: str
) -> None:
    name = make_app(ASYNC_APP)
    with pytest.raises(cli.UsageError, match=message):
        cli.resolve_app(name + suffix)


def test_resolve_app_reraises_import_errors_inside_the_app(make_app: Callable[[str], str]) -> None:
    # A dependency missing inside the user's module is their bug: keep the traceback.
    name = make_app("import skiplock_no_such_dependency\n")
    with pytest.raises(ModuleNotFoundError, match="skiplock_no_such_dependency"):
        cli.resolve_app(f"{name}:engine")


# ---- usage errors: exit status 2 and a message ------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["worker", "no_colon_here"], "APP must look like 'module:attribute'"),
        (["worker", "skiplock_no_such_module:engine"], "cannot import 'skiplock_no_such_module'"),
        (["worker", ":engine"], "APP must look like 'module:attribute'"),
        (["worker", "x:e", "--concurrency", "0"], "expected a positive integer, got 0"),
        (["worker", "x:e", "--concurrency", "many"], "expected a positive integer"),
        (["worker", "x:e", "--concurrency", "-1"], "expected a positive integer, got -1"),
        (["worker", "x:e", "--kinds", "a,,b"], "expected a comma-separated list"),
        (["worker", "x:e", "--kinds", "bad kind"], "invalid kind 'bad kind'"),
        (["worker", "x:e", "--tenants", ""], "expected a comma-separated list"),
        (["worker", "x:e", "--log-level", "LOUD"], "unknown log level"),
        (["worker"], "the following arguments are required: APP"),
        ([], "usage: skiplock"),
    ],
)
def test_cli_usage_errors_exit_2(
    make_app: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_worker_rejects_non_engine_with_exit_2(
    make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = make_app(ASYNC_APP)
    assert cli.main(["worker", f"{name}:not_an_engine"]) == 2
    assert "not an Engine or AsyncEngine" in capsys.readouterr().err


def test_cli_worker_rejects_unknown_kind(
    make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = make_app(ASYNC_APP)
    assert cli.main(["worker", f"{name}:engine", "--kinds", "a,zzz,yyy"]) == 2
    assert "no processor for kind(s) yyy, zzz" in capsys.readouterr().err


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("skiplock ")


# ---- a real run in this process, stopped like a service manager would -------------------


@contextmanager
def signal_when(
    event: threading.Event, signum: int, *, again_when: Callable[[], bool] | None = None
) -> Iterator[list[str]]:
    """Send ``signum`` to this process once ``event`` is set (or after a deadline); with
    ``again_when``, send it a second time once that holds.

    Yields a list that receives a note for each wait that ran into its deadline. One more
    signal follows if the worker ignores them, so a broken shutdown fails instead of
    hanging.
    """
    problems: list[str] = []
    done = threading.Event()

    def run() -> None:
        if not event.wait(timeout=15):
            problems.append("timeout")
        os.kill(os.getpid(), signum)
        if again_when is not None:
            # Not at once: a signal sent while the same one is still pending is merged
            # into it.
            deadline = time.monotonic() + 15
            while not again_when() and not done.is_set():
                if time.monotonic() > deadline:
                    problems.append("the first signal was not handled")
                    break
                done.wait(0.01)
            os.kill(os.getpid(), signum)
        if not done.wait(timeout=15):
            problems.append("ignored the signal")
            os.kill(os.getpid(), signum)

    sender = threading.Thread(target=run, daemon=True)
    sender.start()
    try:
        yield problems
    finally:
        done.set()
        sender.join(timeout=20)


def test_cli_worker_async_runs_jobs_until_sigterm(make_app: Callable[[str], str]) -> None:
    name = make_app(ASYNC_APP)
    app = cli.resolve_app(f"{name}:engine")
    assert isinstance(app, AsyncEngine)

    async def enqueue() -> tuple[int, int]:
        a = await app.enqueue("a", {"n": 1})
        b = await app.enqueue("b", {"n": 2})
        return a.id, b.id

    a_id, b_id = asyncio.run(enqueue())
    module = sys.modules[name]
    handler_before = signal.getsignal(signal.SIGTERM)
    with signal_when(module.processed, signal.SIGTERM) as problems:
        status = cli.main(["worker", f"{name}:engine", "--kinds", "a", "--concurrency", "2"])
    assert problems == []
    assert status == 0
    assert signal.getsignal(signal.SIGTERM) is handler_before

    async def states() -> tuple[JobState, JobState]:
        a, b = await app.get_job(a_id), await app.get_job(b_id)
        assert a is not None
        assert b is not None
        return a.state, b.state

    # --kinds a: the worker never touched "b".
    assert asyncio.run(states()) == (JobState.SUCCEEDED, JobState.PENDING)
    assert module.seen == ["a"]


def test_cli_worker_sync_engine_runs_until_sigint(make_app: Callable[[str], str]) -> None:
    name = make_app(SYNC_APP)
    app = cli.resolve_app(f"{name}:engine")
    assert isinstance(app, Engine)
    mine = app.enqueue("a", {"n": 1}, tenant="t1").id
    other = app.enqueue("a", {"n": 2}, tenant="t3").id
    with signal_when(sys.modules[name].processed, signal.SIGINT) as problems:
        status = cli.main(["worker", f"{name}:engine", "--tenants", "t1,t2", "--all-kinds"])
    assert problems == []
    assert status == 0
    states = {}
    for job_id in (mine, other):
        job = app.get_job(job_id)
        assert job is not None
        states[job_id] = job.state
    # --tenants t1,t2: the t3 job was never claimed.
    assert states == {mine: JobState.SUCCEEDED, other: JobState.PENDING}


def run_forced(
    make_app: Callable[[str], str], monkeypatch: pytest.MonkeyPatch, flavour: str
) -> tuple[int, JobState, float]:
    """Run ``skiplock worker`` on a blocking job and send SIGTERM once it started, again
    once the worker drains; returns the exit status, the job's state afterwards and how
    long the run took."""
    name = make_app(BLOCKING_APPS[flavour])
    app = cli.resolve_app(f"{name}:engine")
    workers: list[AsyncWorker | Worker] = []
    make_worker = app.worker

    def recording_worker(**options: Any) -> AsyncWorker | Worker:
        workers.append(make_worker(**options))
        return workers[-1]

    monkeypatch.setattr(app, "worker", recording_worker)
    if isinstance(app, AsyncEngine):
        job_id = asyncio.run(app.enqueue("block", {})).id
    else:
        job_id = app.enqueue("block", {}).id

    def draining() -> bool:
        return bool(workers) and workers[0].state == "draining"

    started = time.monotonic()
    module = sys.modules[name]
    with signal_when(module.started, signal.SIGTERM, again_when=draining) as problems:
        status = cli.main(["worker", f"{name}:engine"])
    elapsed = time.monotonic() - started
    assert problems == []
    job = asyncio.run(app.get_job(job_id)) if isinstance(app, AsyncEngine) else app.get_job(job_id)
    assert job is not None
    return status, job.state, elapsed


@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_cli_worker_second_signal_forces_the_stop(
    make_app: Callable[[str], str], monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    # The worker's own policy: the second signal interrupts the job instead of waiting for
    # it (shutdown_timeout is 60 s) and releases it to pending.
    status, state, elapsed = run_forced(make_app, monkeypatch, flavour)
    assert state is JobState.PENDING
    assert elapsed < 30
    assert status == 130


@pytest.mark.parametrize("flavour", ["async", "sync"])
def test_cli_worker_exits_130_after_a_forced_stop(
    make_app: Callable[[str], str], monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    status, _, _ = run_forced(make_app, monkeypatch, flavour)
    assert status == 130


# ---- what a worker leaves alone (issue 41) ------------------------------------------------

UNSERVED_APP = """
from __future__ import annotations

from typing import Any

from skiplock import Engine, JobContext
from skiplock.adapters.memory import InMemoryJobStore

engine = Engine(InMemoryJobStore())
engine.declare_kind("report.build")  # processed by another service


@engine.processor("a")
def handle_a(payload: Any, ctx: JobContext) -> None:
    pass


@engine.processor("b")
def handle_b(payload: Any, ctx: JobContext) -> None:
    pass
"""


def test_worker_names_the_declared_kinds_it_does_not_serve_and_the_due_jobs_it_left(
    make_app: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A kind no running worker serves used to wait in silence: "handled 1 job(s)".
    name = make_app(UNSERVED_APP)
    engine = cli.resolve_app(f"{name}:engine")
    assert isinstance(engine, Engine)
    for kind in ("report.build", "report.build", "a", "b"):
        engine.enqueue(kind, {})
    with caplog.at_level(logging.INFO, logger="skiplock.worker"):
        status = cli.main(["worker", f"{name}:engine", "--until-idle", "--kinds", "a"])
    assert status == 0
    assert capsys.readouterr().out.splitlines() == [
        "handled 1 job(s)",
        "left 3 due job(s): 'b' 1 (not claimed by this worker), 'report.build' 2 (not "
        "claimed by this worker)",
    ]
    [line] = [r.getMessage() for r in caplog.records if "does not serve" in r.getMessage()]
    assert line.endswith(
        "does not serve 2 declared kind(s) (no processor here: report.build; left out by "
        "its kinds: b); their jobs wait for a worker that does"
    )


def test_worker_until_idle_says_nothing_more_when_nothing_is_left(
    make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = make_app(UNSERVED_APP)
    engine = cli.resolve_app(f"{name}:engine")
    assert isinstance(engine, Engine)
    engine.enqueue("a", {})
    engine.enqueue("b", {}, delay=3600)  # not due: not "left"
    assert cli.main(["worker", f"{name}:engine", "--until-idle"]) == 0
    assert capsys.readouterr().out == "handled 1 job(s)\n"


# ---- the event loop ---------------------------------------------------------------------

LOOP_APP = """
from __future__ import annotations

import asyncio
from typing import Any

from skiplock import AsyncEngine, JobContext
from skiplock.adapters.memory import AsyncInMemoryJobStore

engine = AsyncEngine(AsyncInMemoryJobStore())
loops: list[str] = []


@engine.processor("a")
async def handle_a(payload: Any, ctx: JobContext) -> None:
    loops.append(type(asyncio.get_running_loop()).__module__)
"""


def _run_loop_app(make_app: Callable[[str], str], caplog: pytest.LogCaptureFixture) -> list[str]:
    """Run LOOP_APP's worker until idle on one job: the modules of the loops it ran on,
    checked against the worker's start line."""
    name = make_app(LOOP_APP)
    engine = cli.resolve_app(f"{name}:engine")
    assert isinstance(engine, AsyncEngine)
    asyncio.run(engine.enqueue("a", {}))
    with caplog.at_level(logging.INFO, logger="skiplock.worker"):
        assert cli.main(["worker", f"{name}:engine", "--until-idle"]) == 0
    loops: list[str] = sys.modules[name].loops
    [line] = [r.getMessage() for r in caplog.records if "event loop" in r.getMessage()]
    assert line.endswith(" runs on the asyncio event loop"), line
    return loops


def test_worker_runs_on_asyncio_when_the_setting_says_so(
    make_app: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Whether uvloop is installed or not (tests/psycopg/test_event_loop.py: the default
    # takes it where it is).
    monkeypatch.setenv("SKIPLOCK_EVENT_LOOP", "asyncio")
    assert _run_loop_app(make_app, caplog) == ["asyncio.unix_events"]


def test_worker_runs_on_asyncio_where_uvloop_is_not_installed(
    make_app: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("SKIPLOCK_EVENT_LOOP", raising=False)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` fails as if missing
    assert _run_loop_app(make_app, caplog) == ["asyncio.unix_events"]
