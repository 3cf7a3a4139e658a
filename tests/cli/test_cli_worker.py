"""``skiplock worker``: APP resolution, option errors, and a real run stopped by a signal."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from skiplock import AsyncEngine, Engine, cli
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
    with pytest.raises(cli.CliError, match=message):
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
def signal_when(event: threading.Event, signum: int) -> Iterator[list[str]]:
    """Send ``signum`` to this process once ``event`` is set (or after a deadline).

    Yields a list that receives "timeout" if the event never came. A second signal follows
    if the worker ignores the first, so a broken shutdown fails instead of hanging.
    """
    problems: list[str] = []
    done = threading.Event()

    def run() -> None:
        if not event.wait(timeout=15):
            problems.append("timeout")
        os.kill(os.getpid(), signum)
        if not done.wait(timeout=15):
            problems.append("ignored the first signal")
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
