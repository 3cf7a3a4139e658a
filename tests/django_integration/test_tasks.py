"""Django tasks on skiplock: retries and their errors, priority, run_after, aenqueue,
async task functions, TaskContext, the ON_COMMIT mode; an in-process worker."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from skiplock.integrations.django.models import Job
from tests.django_integration.helpers import (
    backend,
    finished,
    requires_results,
    run_worker,
)
from tests.django_integration.settings import TASKS
from tests.django_integration.testapp import tasks
from tests.django_integration.testapp.models import Attempt

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]


def job_of(result: Any) -> Job:
    return Job.objects.using("default").get(id=int(result.id))


# ---- enqueue and results -----------------------------------------------------------------


def test_enqueue_writes_a_ready_job_with_the_task_as_kind_and_queue_as_tenant() -> None:
    result = tasks.record.enqueue("k", note="hello")
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs) == (["k"], {"note": "hello"})
    assert result.backend == "default"
    job = job_of(result)
    assert (job.kind, job.tenant, job.priority, job.state) == (
        "tests.django_integration.testapp.tasks.record",
        "emails",
        0,
        "pending",
    )
    assert job.payload == {"args": ["k"], "kwargs": {"note": "hello"}, "run_after": None}
    read = tasks.record.get_result(result.id)
    assert (read.status, read.args, read.kwargs) == (result.status, ["k"], {"note": "hello"})
    assert read.task.func is tasks.record.func
    assert read.task.queue_name == "emails"


def test_arguments_are_json_normalised_and_non_json_is_refused() -> None:
    result = tasks.echo.enqueue((1, 2), b=(3,))
    assert (result.args, result.kwargs) == ([[1, 2]], {"b": [3]})
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.echo.enqueue(object())
    assert Job.objects.using("default").count() == 1


def test_get_result_of_an_unknown_id_raises() -> None:
    for result_id in ("123456", "not-an-id", "0" * 32, str(2**70)):
        with pytest.raises(TaskResultDoesNotExist):
            backend().get_result(result_id)


def test_a_task_failing_twice_then_succeeding_ends_successful_after_three_attempts() -> None:
    result = tasks.flaky.enqueue("f", failures=2)
    run_worker(finished(result), "the flaky task to finish")
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert Attempt.objects.filter(key="f").count() == 3
    assert job_of(result).attempts == 3


@requires_results
def test_the_result_of_a_task_that_succeeded_on_its_third_attempt() -> None:
    result = tasks.flaky.enqueue("g", failures=2)
    run_worker(finished(result), "the flaky task to finish")
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "ok after 3 runs"
    assert result.attempts == 3
    assert len(result.worker_ids) == 3
    assert len(result.errors) == 2
    for number, error in enumerate(result.errors, start=1):
        assert error.exception_class_path == "builtins.ValueError"
        assert error.exception_class is ValueError
        assert f"ValueError: run {number} of g fails" in error.traceback
        assert "Traceback (most recent call last)" in error.traceback
    assert result.started_at is not None
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.started_at <= result.last_attempted_at <= result.finished_at


def test_a_task_always_failing_ends_failed_and_dead() -> None:
    result = tasks.always_fails.enqueue("d")
    run_worker(finished(result), "the failing task to be given up")
    assert result.status == TaskResultStatus.FAILED
    assert job_of(result).state == "dead"
    assert Attempt.objects.filter(key="d").count() == 2  # its max_attempts (OPTIONS)
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018 - the property raises


@requires_results
def test_a_dead_task_has_the_error_of_each_attempt() -> None:
    result = tasks.always_fails.enqueue("e")
    run_worker(finished(result), "the failing task to be given up")
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2
    assert [e.exception_class_path for e in result.errors] == ["builtins.KeyError"] * 2
    assert all("KeyError: 'e'" in e.traceback for e in result.errors)
    assert result.finished_at is not None


@requires_results
def test_a_timeout_is_a_job_timeout_error() -> None:
    result = tasks.slow.using(queue_name="reports").enqueue("t", 30)
    with override_settings(TASKS=_with_task_options("slow", {"max_attempts": 1, "timeout": 0.2})):
        run_worker(finished(result), "the slow task to time out")
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "skiplock.JobTimeoutError"


def test_a_return_value_django_cannot_normalise_fails_the_attempt() -> None:
    result = tasks.returns_object.enqueue()
    run_worker(finished(result), "the task returning an object")
    assert result.status == TaskResultStatus.FAILED
    assert Attempt.objects.filter(key="returns_object").count() == 1


@requires_results
def test_the_error_of_a_return_value_django_cannot_normalise() -> None:
    result = tasks.returns_object.enqueue()
    run_worker(finished(result), "the task returning an object")
    [error] = result.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert "Unsupported type" in error.traceback


def test_cancelled_and_marked_failed_jobs_are_failed() -> None:
    cancelled = tasks.add.enqueue(1, 1)
    marked = tasks.add.enqueue(2, 2)
    engine = backend().engine
    engine.cancel_job(int(cancelled.id))
    engine.fail_job(int(marked.id))
    for result in (cancelled, marked):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        assert result.is_finished
        assert result.errors == []


# ---- priority, run_after, queues ---------------------------------------------------------


def test_higher_priority_runs_first_and_is_stored() -> None:
    low = tasks.record.using(priority=-50).enqueue("p", "low")
    high = tasks.record.using(priority=100).enqueue("p", "high")
    middle = tasks.record.enqueue("p", "middle")
    assert (job_of(low).priority, job_of(high).priority) == (-50, 100)
    run_worker(finished(low, high, middle), "the three tasks", concurrency=1)
    notes = list(Attempt.objects.filter(key="p").order_by("id").values_list("note", flat=True))
    assert notes == ["high", "middle", "low"]
    assert tasks.record.get_result(high.id).task.priority == 100


def test_a_task_does_not_run_before_run_after() -> None:
    run_after = timezone.now() + timedelta(seconds=1)
    later = tasks.record.using(run_after=run_after).enqueue("r", "later")
    now = tasks.record.enqueue("r", "now")
    assert backend().worker().run_until_idle() == 1
    later.refresh()
    now.refresh()
    assert (now.status, later.status) == (TaskResultStatus.SUCCESSFUL, TaskResultStatus.READY)
    assert later.task.run_after == run_after
    run_worker(finished(later), "the deferred task")
    job = job_of(later)
    assert job.available_at == run_after
    assert job.completed_at is not None
    assert job.completed_at >= run_after
    assert list(Attempt.objects.filter(key="r").values_list("note", flat=True)) == ["now", "later"]


def test_a_naive_run_after_is_refused_with_use_tz() -> None:
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=timezone.now().replace(tzinfo=None))


def test_a_worker_for_some_queues_runs_only_their_tasks() -> None:
    email = tasks.record.enqueue("q", "email")
    report = tasks.record.using(queue_name="reports").enqueue("q", "report")
    run_worker(finished(report), "the reports task", queues=["reports"])
    email.refresh()
    assert email.status == TaskResultStatus.READY
    assert job_of(report).tenant == "reports"


def test_queue_names_outside_queues_are_refused() -> None:
    with pytest.raises(InvalidTask, match="Queue 'elsewhere' is not valid"):
        tasks.add.using(queue_name="elsewhere")


# ---- async -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_aenqueue_and_aget_result() -> None:
    try:
        result = await tasks.add.aenqueue(20, 22)
        assert result.status == TaskResultStatus.READY
        read = await tasks.add.aget_result(result.id)
        assert (read.id, read.args) == (result.id, [20, 22])
    finally:
        # aenqueue ran in asgiref's thread for sync code, on that thread's connection.
        await sync_to_async(connections.close_all)()


def test_aenqueue_writes_a_job_a_worker_runs() -> None:
    from asgiref.sync import async_to_sync

    result = async_to_sync(tasks.add.aenqueue)(1, 2)
    run_worker(finished(result), "the task enqueued by aenqueue")
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_an_async_task_function_runs() -> None:
    result = tasks.async_add.enqueue(4, 5)
    run_worker(finished(result), "the async task")
    assert result.status == TaskResultStatus.SUCCESSFUL


@requires_results
def test_an_async_task_function_returns_its_value() -> None:
    result = tasks.async_add.enqueue(4, 5)
    run_worker(finished(result), "the async task")
    value: Any = result.return_value  # the awaited value, not a coroutine
    assert value == 9


# ---- TaskContext -------------------------------------------------------------------------


def test_a_task_taking_context_gets_its_running_result() -> None:
    result = tasks.with_context.using(queue_name="reports").enqueue("c")
    run_worker(finished(result), "the task with context")
    [seen] = Attempt.objects.filter(key="c").values_list("note", flat=True)
    assert eval(seen) == {
        "id": result.id,
        "attempt": 1,
        "status": "RUNNING",
        "args": ["c"],
        "queue": "reports",
        "workers": 1,
    }


# ---- ON_COMMIT mode ----------------------------------------------------------------------


def _with_options(**options: Any) -> dict[str, Any]:
    default = TASKS["default"]
    return {"default": {**default, "OPTIONS": {**default["OPTIONS"], **options}}}


def _with_task_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    path = f"tests.django_integration.testapp.tasks.{name}"
    return _with_options(TASKS={**TASKS["default"]["OPTIONS"]["TASKS"], path: options})


@override_settings(TASKS=_with_options(ON_COMMIT="default"))
def test_on_commit_mode_writes_the_job_when_the_transaction_commits() -> None:
    sent: list[str] = []

    def enqueued(sender: Any, task_result: Any, **kwargs: Any) -> None:
        sent.append(task_result.id)

    from django.tasks.signals import task_enqueued

    task_enqueued.connect(enqueued)
    try:
        with transaction.atomic():
            result = tasks.add.enqueue(1, 2)
            assert len(result.id) == 32
            assert not Job.objects.using("default").exists()
            assert sent == []
        assert sent == [result.id]
        # The on-commit hook knew the id its write returned: no lookup by key.
        with CaptureQueriesContext(connections["default"]) as queries:
            read = tasks.add.get_result(result.id)
        assert not [q for q in queries.captured_queries if "idempotency_key =" in q["sql"]]
        assert (read.id, read.status, read.args) == (result.id, TaskResultStatus.READY, [1, 2])
        with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012
            tasks.add.enqueue(3, 4)
            raise RuntimeError
        assert Job.objects.using("default").count() == 1
        run_worker(finished(read), "the task enqueued on commit")
    finally:
        task_enqueued.disconnect(enqueued)
    assert task_backends["default"].alias == "default"
