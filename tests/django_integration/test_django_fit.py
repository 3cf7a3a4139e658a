"""What Django users expect of a task backend: a task's SystemExit never stops the worker,
the backend's SQL goes through Django's cursor layer, enqueue's result equals a later
get_result(), and tracebacks look like Django's backends'."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from django.db import connection, transaction
from django.tasks import TaskResultStatus
from django.test.utils import CaptureQueriesContext

from tests.django_integration.helpers import (
    backend,
    finished,
    run_worker,
    settings_module,
    stop,
    worker_process,
)
from tests.django_integration.testapp import tasks
from tests.pghelpers import wait_for

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]


# ---- SystemExit and KeyboardInterrupt of a task --------------------------------------------


def test_a_task_calling_sys_exit_fails_and_the_worker_process_keeps_serving(
    tmp_path: Path,
) -> None:
    exiting = tasks.exits.enqueue(3)
    with worker_process(tmp_path) as proc:
        wait_for(finished(exiting), 30, "the exiting task to finish")
        after = tasks.add.enqueue(2, 3)
        wait_for(finished(after), 30, "the next task on the same worker")
        assert proc.poll() is None  # still serving
        assert stop(proc) == 0  # and a real SIGTERM still stops it gracefully
    assert exiting.status == TaskResultStatus.FAILED
    [error] = exiting.errors
    assert error.exception_class_path == "builtins.SystemExit"
    assert after.status == TaskResultStatus.SUCCESSFUL
    assert after.return_value == 5
    assert after.worker_ids == exiting.worker_ids  # the same worker process


def test_a_task_raising_keyboard_interrupt_is_a_failed_attempt() -> None:
    result = tasks.interrupted.enqueue()
    after = tasks.add.enqueue(1, 1)
    run_worker(finished(result, after), "both tasks")
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["builtins.KeyboardInterrupt"]
    assert after.status == TaskResultStatus.SUCCESSFUL


# ---- Django's cursor layer ---------------------------------------------------------------


def test_assert_num_queries_counts_the_backends_enqueue_and_get_result(
    django_assert_num_queries: Callable[..., Any],
) -> None:
    tasks.add.enqueue(0, 0)  # the store checks the schema on its first use
    with django_assert_num_queries(1):
        result = tasks.add.enqueue(1, 2)
    with django_assert_num_queries(1):
        tasks.add.get_result(result.id)


def test_execute_wrapper_and_captured_queries_see_the_backends_sql() -> None:
    tasks.add.enqueue(0, 0)
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper), CaptureQueriesContext(connection) as captured:
        result = tasks.add.enqueue(1, 2)
        tasks.add.get_result(result.id)
    assert len(seen) == 2
    assert "INSERT INTO" in seen[0]
    assert len(captured.captured_queries) == 2
    assert "INSERT INTO" in captured.captured_queries[0]["sql"]


# ---- results --------------------------------------------------------------------------------


def test_the_result_enqueue_returns_equals_a_later_get_result() -> None:
    result = tasks.record.enqueue("eq", note="x")
    assert result == tasks.record.get_result(result.id)
    with transaction.atomic():
        inside = tasks.add.using(priority=5).enqueue(1, 2)
        assert inside == backend().get_result(inside.id)


def test_a_failed_attempts_traceback_holds_the_tasks_frames_and_ends_with_a_newline() -> None:
    result = tasks.always_fails.enqueue("tb")
    run_worker(finished(result), "the failing task")
    tracebacks = [error.traceback for error in result.errors]
    assert tracebacks
    for text in tracebacks:
        assert text.startswith("Traceback (most recent call last):\n")
        assert text.endswith("KeyError: 'tb'\n")
        assert "skiplock" not in text.split("tasks.py", 1)[0]  # no runner frames first
        assert "in always_fails" in text


# ---- the worker's log ----------------------------------------------------------------------


def test_under_debug_each_event_of_the_worker_is_logged_once(tmp_path: Path) -> None:
    env = settings_module(tmp_path, "debug_settings", "DEBUG = True")
    result = tasks.add.enqueue(20, 22)
    with worker_process(tmp_path, env=env) as proc:
        wait_for(finished(result), 30, "the task")
        assert stop(proc) == 0
    log = (tmp_path / "worker.log").read_text()
    finished_line = f"Task id={result.id} path={tasks.add.module_path} state=SUCCESSFUL"
    assert log.count(finished_line) == 1, log
    assert log.count(" started: ") == 1, log


def test_verbosity_0_silences_the_start_up_line(tmp_path: Path) -> None:
    result = tasks.add.enqueue(1, 1)
    with worker_process(tmp_path, "--verbosity", "0") as proc:
        wait_for(finished(result), 30, "the task")
        assert stop(proc) == 0
    log = (tmp_path / "worker.log").read_text()
    assert " started: " not in log
    assert "state=SUCCESSFUL" not in log  # INFO records are below WARNING


def test_log_level_wins_over_verbosity(tmp_path: Path) -> None:
    result = tasks.add.enqueue(1, 1)
    with worker_process(tmp_path, "--verbosity", "0", "--log-level", "INFO") as proc:
        wait_for(finished(result), 30, "the task")
        assert stop(proc) == 0
    assert " started: " in (tmp_path / "worker.log").read_text()
