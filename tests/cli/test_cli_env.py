"""``skiplock worker`` applies ``SKIPLOCK_*``: engine settings < environment < options."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import Engine, Worker, cli
from skiplock.core import JobState

if TYPE_CHECKING:
    from collections.abc import Callable

APP = """
from __future__ import annotations

from typing import Any

from skiplock import Engine, Settings
from skiplock.adapters.memory import InMemoryJobStore

# Retries 30 s apart by default: a failed job waits in pending unless max_attempts is 1.
engine = Engine(InMemoryJobStore(), Settings(concurrency=2, max_attempts=5))


@engine.processor("fails", timeout=60)
def fails(payload: Any) -> None:
    raise RuntimeError("boom")
"""


def recorded_workers(
    app: Engine, monkeypatch: pytest.MonkeyPatch, *, stopped: bool
) -> list[Worker]:
    """Record the workers the command builds; ``stopped``: stop each before it runs (its
    run() returns at once)."""
    workers: list[Worker] = []
    make_worker = app.worker

    def recording_worker(**options: Any) -> Worker:
        worker = make_worker(**options)
        if stopped:
            worker.stop()
        workers.append(worker)
        return worker

    monkeypatch.setattr(app, "worker", recording_worker)
    return workers


def load(make_app: Callable[[str], str]) -> tuple[str, Engine]:
    name = make_app(APP)
    app = cli.resolve_app(f"{name}:engine")
    assert isinstance(app, Engine)
    return name, app


def test_cli_worker_applies_environment_on_top_of_engine_settings(
    make_app: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, app = load(make_app)
    workers = recorded_workers(app, monkeypatch, stopped=True)
    monkeypatch.setenv("SKIPLOCK_CONCURRENCY", "3")
    monkeypatch.setenv("SKIPLOCK_TIMEOUTS", "fails=5s")
    assert cli.main(["worker", f"{name}:engine"]) == 0
    assert [worker.concurrency for worker in workers] == [3]
    policy = app.policy("fails")
    assert policy.timeout == 5.0  # the per-kind variable beats the processor's 60 s
    assert policy.retry.max_attempts == 5  # the engine's own value, no variable for it


def test_cli_worker_options_win_over_environment(
    make_app: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, app = load(make_app)
    workers = recorded_workers(app, monkeypatch, stopped=True)
    monkeypatch.setenv("SKIPLOCK_CONCURRENCY", "3")
    assert cli.main(["worker", f"{name}:engine", "--concurrency", "6"]) == 0
    assert [worker.concurrency for worker in workers] == [6]


def test_cli_worker_runs_jobs_with_the_environment_policy(
    make_app: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # SKIPLOCK_MAX_ATTEMPTS=1: the failing job is dead after one attempt, where the
    # engine's own settings (5 attempts) would have scheduled a retry.
    name, app = load(make_app)
    workers = recorded_workers(app, monkeypatch, stopped=False)
    monkeypatch.setenv("SKIPLOCK_MAX_ATTEMPTS", "1")
    job_id = app.enqueue("fails", {}).id
    problems: list[str] = []

    def stop_when_dead() -> None:
        deadline = time.monotonic() + 15
        while app.get_job(job_id).state is not JobState.DEAD:
            if time.monotonic() > deadline:
                problems.append("the job did not die")
                break
            time.sleep(0.01)
        workers[0].stop()  # built before the job could run

    helper = threading.Thread(target=stop_when_dead, daemon=True)
    helper.start()
    assert cli.main(["worker", f"{name}:engine"]) == 0
    helper.join(timeout=20)
    assert problems == []
    job = app.get_job(job_id)
    assert (job.state, job.attempts) == (JobState.DEAD, 1)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SKIPLOCK_CONCURRENCY", "many", "SKIPLOCK_CONCURRENCY='many'"),
        ("SKIPLOCK_NODE_LIMITS", "fails", "SKIPLOCK_NODE_LIMITS='fails'"),
        ("SKIPLOCK_HEARTBEAT_INTERVAL", "1h", "SKIPLOCK_HEARTBEAT_INTERVAL"),
    ],
)
def test_cli_worker_rejects_invalid_environment_with_exit_2(
    make_app: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    message: str,
) -> None:
    name, app = load(make_app)
    recorded_workers(app, monkeypatch, stopped=True)  # if it ran anyway: not forever
    settings = app.settings
    monkeypatch.setenv(variable, value)
    assert cli.main(["worker", f"{name}:engine"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("skiplock: error: invalid environment: ")
    assert message in err
    assert err.count("\n") == 1  # one line
    assert app.settings is settings  # nothing applied


FACTORY_APP = """
from skiplock import Engine, Settings
from skiplock.adapters.memory import InMemoryJobStore


def make_engine() -> Engine:
    return Engine(InMemoryJobStore(), Settings.from_env())


def make_bad_engine() -> Engine:
    return Engine(InMemoryJobStore(), Settings(concurrency=0))
"""


def test_a_factory_reading_a_bad_variable_is_one_line_and_exit_2(
    make_app: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The factory pattern of docs/deployment.md: the factory reads the environment itself.
    name = make_app(FACTORY_APP)
    monkeypatch.setenv("SKIPLOCK_CONCURRENCY", "many")
    assert cli.main(["worker", f"{name}:make_engine"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("skiplock: error: invalid environment: SKIPLOCK_CONCURRENCY='many': ")
    # Another value the engine refuses while the app loads: one line too, naming APP.
    monkeypatch.delenv("SKIPLOCK_CONCURRENCY")
    assert cli.main(["worker", f"{name}:make_bad_engine"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"skiplock: error: cannot load '{name}:make_bad_engine': ")
    assert "concurrency" in line
